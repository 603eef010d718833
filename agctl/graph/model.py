"""The session graph: one model of sessions, slots and checkpoints and how they came from
one another, which every renderer (text, Mermaid, DOT, JSON, HTML) draws as it is.

Node ids are synthetic (`n0`, `n1`, …) so that no renderer ever puts user text where an
id goes; what a user wrote (titles, checkpoint labels, messages) is only ever a label.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agctl.base.errors import UsageError
from agctl.base.vocab import ZONES
from agctl.context.models import Session, Slot, isoformat

if TYPE_CHECKING:
    from agctl.store import Store
    from agctl.store.checkpoints.records import CheckpointSummary
    from agctl.store.sessions import SessionInfo

GRAPH_VERSION = 1
NODE_KINDS = ("session", "slot", "checkpoint")
EDGE_KINDS = ("derived", "forked", "parent", "merged", "rolled_back")
# The label `ckpt rollback` gives the checkpoint of the state it replaces (and `store gc`
# keeps up to date); the rollback record itself follows that checkpoint in the log.
_BEFORE_ROLLBACK = re.compile(r"before rollback to [0-9a-z]+")


@dataclass
class Node:
    id: str
    kind: str
    session: str
    slot: str | None
    label: str
    fields: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "kind": self.kind,
            "session": self.session,
            "slot": self.slot,
            "label": self.label,
            **self.fields,
        }


@dataclass
class Edge:
    source: str
    target: str
    kind: str
    strategy: str | None = None
    dashed: bool = False
    at: str | None = None  # when what the edge records happened (the HTML page's time axis)

    def to_json(self) -> dict[str, Any]:
        return {
            "from": self.source,
            "to": self.target,
            "kind": self.kind,
            "strategy": self.strategy,
            "dashed": self.dashed,
            "at": self.at,
        }


@dataclass
class Graph:
    """Nodes in drawing order (each session, then its slots by derivation, then its
    checkpoints oldest first) and the edges between them."""

    current_session: str | None = None
    current_slot: str | None = None
    nodes: list[Node] = field(default_factory=list)
    edges: list[Edge] = field(default_factory=list)

    def add(self, kind: str, session: str, slot: str | None, label: str, **fields: Any) -> Node:
        node = Node(f"n{len(self.nodes)}", kind, session, slot, label, fields)
        self.nodes.append(node)
        return node

    def to_json(self) -> dict[str, Any]:
        return {
            "version": GRAPH_VERSION,
            "current": {"session": self.current_session, "slot": self.current_slot},
            "nodes": [node.to_json() for node in self.nodes],
            "edges": [edge.to_json() for edge in self.edges],
        }


def build_graph(
    store: Store,
    session_id: str | None = None,
    *,
    all_sessions: bool = False,
    checkpoints: bool = False,
    turns: bool = False,
) -> Graph:
    """The graph of one session and its descendants (a prefix, or the current session),
    or of every session with `all_sessions`.

    Checkpoints are nodes with `checkpoints`; without it only those a fork or a rollback
    starts or ends at are. `turns` adds each slot's messages (role, text, tokens) to its
    node, for the renderers that show them.
    """
    from agctl.store.sessions import is_root, list_sessions

    infos = {info.session.id: info for info in list_sessions(store.backend, problems=[])}
    current = store.current_session_id()
    if all_sessions:
        chosen = []
        for sid, info in infos.items():
            if is_root(info):
                chosen += _descendants(infos, sid)
        chosen += [sid for sid in infos if sid not in chosen]  # parent loops: none is a root
    else:
        root = session_id if session_id is not None else current
        if root is None:
            raise UsageError("no session chosen", hint="give SESSION, or --all")
        root = store.resolve_session(root)
        if root not in infos:
            store.load_session(root)  # raises why it cannot be read
        chosen = _descendants(infos, root)
    graph = Graph(current_session=current if current in infos else None)
    if graph.current_session is not None:
        graph.current_slot = infos[graph.current_session].session.current_slot
    shown = set(chosen)
    builders = [_SessionGraph(store, infos[sid], graph, checkpoints, turns) for sid in chosen]
    ghosts: dict[str, Node] = {}
    for builder in builders:
        missing = _missing_parent(infos[builder.session.id], shown)
        builder.add_nodes(missing_parent=missing, ghosts=ghosts)
    by_session = {builder.session.id: builder for builder in builders}
    for builder in builders:
        builder.add_edges()
        builder.add_origin(by_session)
    return graph


def _descendants(infos: dict[str, SessionInfo], root: str) -> list[str]:
    """`root` and every session below it, parents before children (oldest first)."""
    found: list[str] = []
    stack = [root]
    while stack:
        sid = stack.pop()
        if sid in found:
            continue
        found.append(sid)
        kids = sorted(
            (infos[kid] for kid in infos[sid].children if kid in infos),
            key=lambda kid: (kid.session.created_at, kid.session.id),
        )
        stack.extend(kid.session.id for kid in reversed(kids))
    return found


def _missing_parent(info: SessionInfo, shown: set[str]) -> str | None:
    """The parent a session names that is gone (an orphan's), to draw as a dashed stand-in;
    None when it has none, or it is drawn, or it is only outside the chosen tree."""
    parent = info.session.parent_id
    if parent is None or not (info.orphan or info.looped) or parent in shown:
        return None
    return parent


class _SessionGraph:
    """One session's nodes and edges in the graph."""

    def __init__(
        self, store: Store, info: SessionInfo, graph: Graph, checkpoints: bool, turns: bool
    ) -> None:
        self.store = store
        self.info = info
        self.session: Session = info.session
        self.graph = graph
        self.all_checkpoints = checkpoints
        self.turns = turns
        self.node: Node | None = None
        self.slot_nodes: dict[str, Node] = {}
        self.checkpoint_nodes: dict[str, Node] = {}
        self.slots: list[Slot] = []
        self.summaries: list[CheckpointSummary] = []
        # (the checkpoint of the state replaced, the checkpoint rolled back to)
        self.rollbacks: list[tuple[str, str]] = []

    def add_nodes(self, *, missing_parent: str | None, ghosts: dict[str, Node]) -> None:
        """The session's node (after a dashed stand-in for a parent that is gone, shared
        by its orphans), its slots', and its checkpoints'."""
        session = self.session
        graph = self.graph
        ghost = ghosts.get(missing_parent or "")
        if missing_parent is not None and ghost is None:
            ghost = ghosts[missing_parent] = graph.add(
                "session",
                missing_parent,
                None,
                missing_parent,
                title=None,
                parent=None,
                current=False,
                orphan=False,
                missing=True,
                created_at=None,
            )
        self.node = graph.add(
            "session",
            session.id,
            None,
            session.id,
            title=session.title,
            parent=session.parent_id,
            current=session.id == graph.current_session,
            orphan=self.info.orphan or self.info.looped,
            missing=False,
            created_at=isoformat(session.created_at),
        )
        if ghost is not None:
            edge = Edge(
                ghost.id, self.node.id, "parent", dashed=True, at=self.node.fields["created_at"]
            )
            graph.edges.append(edge)
        slots = (
            self.store.list_slots(session.id) if self.turns else _headers(self.store, session.id)
        )
        ordered = _by_derivation(slots)
        self.slots = [slot for slot, _ in ordered]
        for slot, depth in ordered:
            fields: dict[str, Any] = {
                "mode": slot.config.mode,
                "messages": slot.meta.message_count,
                "tokens": slot.meta.total_tokens,
                "current": slot.id == session.current_slot,
                "depth": depth,
                "source": slot.config.source.kind,
                "created_at": isoformat(slot.meta.created_at),
            }
            if self.turns:
                fields["turns"] = _messages(slot)
            self.slot_nodes[slot.id] = graph.add("slot", session.id, slot.id, slot.id, **fields)
        self._add_checkpoints()

    def _add_checkpoints(self) -> None:
        from agctl.store.checkpoints.files import open_log
        from agctl.store.checkpoints.reader import summaries

        self.store.settle(self.session.id)
        self.summaries = summaries(self.store.backend, self.session.id)[::-1]
        known = {s.id for s in self.summaries}
        history = None
        for summary in self.summaries:
            if not (summary.auto and summary.label and _BEFORE_ROLLBACK.fullmatch(summary.label)):
                continue
            if history is None:
                history = open_log(self.store.backend, self.session.id)
            target = _rollback_target(history, summary.end)
            if target in known:
                self.rollbacks.append((summary.id, target))
        wanted = {ckpt for pair in self.rollbacks for ckpt in pair}
        wanted |= self.fork_points()
        for summary in self.summaries:
            if self.all_checkpoints or summary.id in wanted:
                self.checkpoint_nodes[summary.id] = self.graph.add(
                    "checkpoint",
                    self.session.id,
                    # The slot its turn wrote, else the session's current slot then.
                    summary.slot or summary.current_slot or None,
                    summary.label or summary.id,
                    checkpoint=summary.id,
                    turn=summary.turn_index,
                    checkpoint_label=summary.label,
                    auto=summary.auto,
                    current_slot=summary.current_slot or None,
                    created_at=isoformat(summary.created_at),
                )

    def fork_points(self) -> set[str]:
        """The checkpoints of this session that sessions were forked from."""
        found = set()
        for kid in self.info.children:
            origin = self.find_fork_origin(self.store.load_session(kid))
            if origin is not None:
                found.add(origin)
        return found

    def find_fork_origin(self, child: Session) -> str | None:
        """The id of the checkpoint `child` was forked from, if it is still here: found by
        its turn and time, which `store gc` keeps, else by the id it had."""
        origin = child.forked_from
        if origin is None:
            return None
        for summary in self.summaries:
            at = isoformat(summary.created_at)
            if summary.turn_index == origin.get("turn") and at == origin.get("created_at"):
                return summary.id
        ids = {s.id for s in self.summaries}
        return origin.get("checkpoint") if origin.get("checkpoint") in ids else None

    def add_edges(self) -> None:
        edges = self.graph.edges
        for slot in self.slots:
            source = slot.config.source
            parent = self.slot_nodes.get(source.parent_id or "")
            if source.kind == "derived" and parent is not None:
                node = self.slot_nodes[slot.id]
                at = isoformat(slot.meta.created_at)
                edges.append(Edge(parent.id, node.id, "derived", source.strategy, at=at))
        for slot in self.slots:
            seen: set[tuple[str, str]] = set()
            for record in slot.meta.merges:
                merged_from = self.slot_nodes.get(record.source)
                if merged_from is None or (record.source, record.strategy) in seen:
                    continue
                seen.add((record.source, record.strategy))
                target = self.slot_nodes[slot.id]
                at = isoformat(record.at)
                edges.append(Edge(merged_from.id, target.id, "merged", record.strategy, at=at))
        for replaced, restored in self.rollbacks:
            before = self.checkpoint_nodes[replaced]
            edges.append(
                Edge(
                    before.id,
                    self.checkpoint_nodes[restored].id,
                    "rolled_back",
                    dashed=True,
                    at=before.fields["created_at"],
                )
            )

    def add_origin(self, by_session: dict[str, _SessionGraph]) -> None:
        """The edge into this session: forked from a checkpoint of its parent, or else its
        parent in the session tree."""
        parent = by_session.get(self.session.parent_id or "")
        if parent is None or parent.node is None or self.node is None:
            return
        origin = parent.find_fork_origin(self.session)
        at = isoformat(self.session.created_at)
        if origin is not None:
            start = parent.checkpoint_nodes[origin].id
            self.graph.edges.append(Edge(start, self.node.id, "forked", at=at))
        else:
            self.graph.edges.append(Edge(parent.node.id, self.node.id, "parent", at=at))


def _rollback_target(history: Any, offset: int) -> str | None:
    """The checkpoint a rollback record at `offset` of the log went back to, if one is there."""
    from agctl.base.errors import AgctlError
    from agctl.store.checkpoints.records import checkpoint_id

    try:
        record = history.read(offset)
    except AgctlError:
        return None
    target = record.get("r")
    return checkpoint_id(target) if isinstance(target, int) else None


def _headers(store: Store, session_id: str) -> list[Slot]:
    """Every slot of the session, in id order, without its messages (its meta keeps their
    counts): read as stored where the backend can (validating every message of 200 slots
    cost more than the rest of the graph), else loaded whole."""
    found = []
    for slot_id in store.slot_ids(session_id):
        header = Slot.header(store.slot_document(session_id, slot_id))
        found.append(header if header is not None else store.load_slot(session_id, slot_id))
    return found


def _by_derivation(slots: list[Slot]) -> list[tuple[Slot, int]]:
    """Slots with their derivation depth, each after the slot it was derived from (roots
    and siblings oldest first)."""
    by_id = {slot.id: slot for slot in slots}
    children: dict[str | None, list[Slot]] = {}
    for slot in slots:
        parent = slot.config.source.parent_id
        key = parent if parent in by_id and parent != slot.id else None
        children.setdefault(key, []).append(slot)
    for kids in children.values():
        kids.sort(key=lambda s: (s.meta.created_at, s.id))
    ordered: list[tuple[Slot, int]] = []
    seen: set[str] = set()
    stack = [(slot, 0) for slot in reversed(children.get(None, []))]
    while stack:
        slot, depth = stack.pop()
        if slot.id in seen:
            continue
        seen.add(slot.id)
        ordered.append((slot, depth))
        stack.extend((kid, depth + 1) for kid in reversed(children.get(slot.id, [])))
    # A derivation loop (hand-edited documents) leaves slots no root reaches: last, at 0.
    ordered.extend((slot, 0) for slot in slots if slot.id not in seen)
    return ordered


def _messages(slot: Slot) -> list[dict[str, Any]]:
    """The slot's messages as the graph carries them: zone, role, text and tokens."""
    return [
        {
            "zone": zone,
            "role": message.role,
            "text": message.text(),
            "tokens": message.token_count(),
            **({"name": message.name} if message.name else {}),
            **(
                {"tool_calls": [call.function.name for call in message.tool_calls]}
                if message.tool_calls
                else {}
            ),
        }
        for zone in ZONES
        for message in getattr(slot, zone)
    ]
