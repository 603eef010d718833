"""The session graph as one self-contained HTML page (agctl/pages): the layout computed here
into inline SVG, so the picture shows with scripts off; the page's script adds a click on a
slot or checkpoint to see its messages, the diff of two checkpoints, search and collapse.

`render` draws the model's JSON form (`Graph.to_json`); what a click shows comes from
`details`, read from the store beside it: every message once (by content hash), each
slot's live zones, and each drawn checkpoint's slots as chains of the checkpoint log's
message nodes, given only where they changed since the session's previous drawn checkpoint.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from agctl.base.vocab import ZONES
from agctl.pages import asset, message_entry, page, text

if TYPE_CHECKING:
    from agctl.store import Store
    from agctl.store.checkpoints.pack import Log

SLOT_WIDTH, SLOT_HEIGHT, SLOT_STEP = 132, 38, 50
CHECKPOINT_RADIUS, CHECKPOINT_STEP = 7, 24
SESSION_WIDTH, SESSION_HEIGHT = 150, 44
COLUMN = 196  # a layer of slots
CHECKPOINT_COLUMN = 120
BAND_GAP = 24
TOP = 24
LABEL_CHARS = 17


def _cut(label: str, limit: int = LABEL_CHARS) -> str:
    return label if len(label) <= limit else label[: limit - 1] + "…"


class _Layout:
    """Where each node is drawn: time runs down the page across the whole graph (so a fork
    lines up with what it forked from); each session is a band of columns, its node, then a
    layer of slots per derivation depth, then its checkpoints."""

    def __init__(self, graph: dict[str, Any]) -> None:
        nodes = graph["nodes"]
        self.at: dict[str, tuple[float, float]] = {}
        self.band_of: dict[str, str] = {}  # node id -> its session's node id
        self.bands: list[tuple[str, float, float]] = []  # (session node id, left, width)
        owners = {n["session"]: n["id"] for n in nodes if n["kind"] == "session"}
        members: dict[str, list[dict[str, Any]]] = {owner: [] for owner in owners.values()}
        for node in nodes:
            if node["kind"] != "session" and node["session"] in owners:
                members[owners[node["session"]]].append(node)
        y: dict[str, float] = {}
        cursor = float(TOP)
        steps = {"session": SESSION_HEIGHT + 12, "slot": SLOT_STEP, "checkpoint": CHECKPOINT_STEP}
        for node in sorted(nodes, key=lambda n: (n.get("created_at") or "", int(n["id"][1:]))):
            step = steps.get(node["kind"], SLOT_STEP)
            y[node["id"]] = cursor + step / 2
            cursor += step
        self.height = cursor + TOP
        left = 16.0
        for session in (n for n in nodes if n["kind"] == "session"):
            own = members[session["id"]] if owners[session["session"]] == session["id"] else []
            layers = 1 + max(
                (int(n.get("depth", 0)) for n in own if n["kind"] == "slot"), default=0
            )
            self.at[session["id"]] = (left + 8 + SESSION_WIDTH / 2, y[session["id"]])
            self.band_of[session["id"]] = session["id"]
            first = left + 16 + SESSION_WIDTH
            for node in own:
                if node["kind"] == "slot":
                    column = first + int(node.get("depth", 0)) * COLUMN + SLOT_WIDTH / 2
                else:
                    column = first + layers * COLUMN + CHECKPOINT_RADIUS + 4
                self.at[node["id"]] = (column, y[node["id"]])
                self.band_of[node["id"]] = session["id"]
            has_checkpoints = any(n["kind"] == "checkpoint" for n in own)
            width = first - left + layers * COLUMN + CHECKPOINT_COLUMN * has_checkpoints
            self.bands.append((session["id"], left, width))
            left += width + BAND_GAP
        self.width = left


def _half_width(kind: str) -> float:
    return {"slot": SLOT_WIDTH / 2, "session": SESSION_WIDTH / 2}.get(kind, CHECKPOINT_RADIUS)


def _half_height(kind: str) -> float:
    return {"slot": SLOT_HEIGHT / 2, "session": SESSION_HEIGHT / 2}.get(kind, CHECKPOINT_RADIUS)


def _edge_path(
    start: tuple[float, float], end: tuple[float, float], kinds: tuple[str, str], kind: str
) -> str:
    """A curve from the border of one node to the border of the other."""
    (x1, y1), (x2, y2) = start, end
    if abs(x2 - x1) < _half_width(kinds[0]) + _half_width(kinds[1]):  # one column: around
        x1, x2 = x1 + _half_width(kinds[0]), x2 + _half_width(kinds[1])
        bulge = max(x1, x2) + 18 + min(abs(y2 - y1) / 8, 40)
        return f"M{x1:.0f},{y1:.0f} C{bulge:.0f},{y1:.0f} {bulge:.0f},{y2:.0f} {x2:.0f},{y2:.0f}"
    sign = 1 if x2 >= x1 else -1
    x1, x2 = x1 + sign * _half_width(kinds[0]), x2 - sign * _half_width(kinds[1])
    middle = (x1 + x2) / 2
    return f"M{x1:.0f},{y1:.0f} C{middle:.0f},{y1:.0f} {middle:.0f},{y2:.0f} {x2:.0f},{y2:.0f}"


def _svg(graph: dict[str, Any], layout: _Layout) -> str:
    parts = [
        f'<svg id="graph" xmlns="http://www.w3.org/2000/svg" width="{layout.width:.0f}" '
        f'height="{layout.height:.0f}" viewBox="0 0 {layout.width:.0f} {layout.height:.0f}" '
        'role="img" aria-label="session graph">',
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" '
        'markerHeight="7" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" '
        'class="arrowhead"/></marker></defs>',
    ]
    for session_id, left, width in layout.bands:
        parts.append(
            f'<rect class="band" data-band="{text(session_id)}" x="{left:.0f}" y="8" '
            f'width="{width:.0f}" height="{layout.height - 16:.0f}" rx="8"/>'
        )
    kinds = {n["id"]: n["kind"] for n in graph["nodes"]}
    for edge in graph["edges"]:
        if edge["from"] not in layout.at or edge["to"] not in layout.at:
            continue
        start, end = layout.at[edge["from"]], layout.at[edge["to"]]
        dashed = " dashed" if edge.get("dashed") else ""
        label = edge["kind"] + (f" ({edge['strategy']})" if edge.get("strategy") else "")
        path = _edge_path(start, end, (kinds[edge["from"]], kinds[edge["to"]]), edge["kind"])
        parts.append(
            f'<path class="edge edge-{text(edge["kind"])}{dashed}" '
            f'data-from="{text(edge["from"])}" data-to="{text(edge["to"])}" d="{path}" '
            f'marker-end="url(#arrow)"><title>{text(label)}</title></path>'
        )
    for node in graph["nodes"]:
        if node["id"] not in layout.at:
            continue
        parts.append(_node_svg(node, layout.at[node["id"]], layout.band_of[node["id"]]))
    parts.append("</svg>")
    return "".join(parts)


def _node_svg(node: dict[str, Any], at: tuple[float, float], band: str) -> str:
    x, y = at
    classes = ["node", f"node-{node['kind']}"]
    if node.get("current"):
        classes.append("current")
    if node.get("missing") or node.get("orphan"):
        classes.append("dashed")
    label = str(node["label"])
    attributes = (
        f'class="{" ".join(classes)}" data-node="{text(node["id"])}" '
        f'data-band="{text(band)}" tabindex="0" role="button"'
    )
    if node["kind"] == "checkpoint":
        tip = f"checkpoint {node.get('checkpoint')} · turn {node.get('turn')}"
        if node.get("checkpoint_label"):
            tip += f" · {node['checkpoint_label']}"
        shown = (
            f'<text class="checkpoint-label" x="{x + 12:.0f}" y="{y + 4:.0f}">'
            f"{text(_cut(str(node['checkpoint_label']), 12))}</text>"
            if node.get("checkpoint_label") and not node.get("auto")
            else ""
        )
        shape = "auto" if node.get("auto") else "manual"
        return (
            f"<g {attributes}><title>{text(tip)}</title>"
            f'<circle class="{shape}" cx="{x:.0f}" cy="{y:.0f}" r="{CHECKPOINT_RADIUS}"/>'
            f"{shown}</g>"
        )
    if node["kind"] == "slot":
        width, height = SLOT_WIDTH, SLOT_HEIGHT
        star = "* " if node.get("current") else ""
        line = f"{node.get('mode')} · {node.get('messages')} msg · {node.get('tokens')} tok"
        tip = f"slot {label} · {line}"
    else:
        width, height = SESSION_WIDTH, SESSION_HEIGHT
        star = "* " if node.get("current") else ""
        title = node.get("title")
        line = _cut(str(title), 22) if title else ("(gone)" if node.get("missing") else "session")
        tip = f"session {label}" + (f" · {title}" if title else "")
    left, top = x - width / 2, y - height / 2
    return (
        f"<g {attributes}><title>{text(tip)}</title>"
        f'<rect x="{left:.0f}" y="{top:.0f}" width="{width}" height="{height}" rx="6"/>'
        f'<text class="name" x="{x:.0f}" y="{y - 3:.0f}">{text(star + _cut(label))}</text>'
        f'<text class="facts" x="{x:.0f}" y="{y + 12:.0f}">{text(line)}</text></g>'
    )


def render(graph: dict[str, Any], *, redact: bool, details: dict[str, Any] | None = None) -> str:
    """The page of `graph` (the model's JSON form). With `details` (from `details()`) a
    click shows messages and diffs; with `redact` no message text is embedded."""
    layout = _Layout(graph)
    drawn = dict(graph)
    if redact:  # the model's own `turns` (session graph --turns) hold message text too
        drawn["nodes"] = [
            {**n, "turns": [{**t, "text": None} for t in n["turns"]]} if "turns" in n else n
            for n in graph["nodes"]
        ]
    counts = {kind: sum(n["kind"] == kind for n in graph["nodes"]) for kind in _KINDS}
    summary = ", ".join(f"{count} {kind}s" for kind, count in counts.items())
    body = "\n".join(
        [
            "<header><h1>agctl session graph</h1>"
            f'<p class="meta">{text(summary)}{" · message text redacted" * redact}'
            " · click a slot or checkpoint</p>",
            '<div class="bar"><input type="search" id="search" placeholder="Search the graph"'
            ' aria-label="Search the graph"><span id="match-count" class="muted"></span>'
            '<button type="button" id="collapse">Collapse all</button>'
            '<button type="button" id="expand">Expand all</button></div></header>',
            '<div id="layout"><div id="canvas">',
            _svg(drawn, layout),
            '</div><aside id="panel" aria-live="polite"><p class="muted">Click a slot or a '
            "checkpoint to see its messages; click two checkpoints of a session to diff "
            "them.</p></aside></div>",
        ]
    )
    data = {
        "kind": "agctl.graph",
        "version": 1,
        "redacted": redact,
        "graph": drawn,
        "details": details or {},
    }
    return page(
        title="agctl session graph",
        body=body,
        data=data,
        scripts=[asset("graph.js")],
        style=asset("page.css") + asset("graph.css"),
    )


_KINDS = ("session", "slot", "checkpoint")


def details(store: Store, graph: dict[str, Any], *, redact: bool) -> dict[str, Any]:
    """What the page shows on a click, read from the store: `messages` (each message once),
    `slots` (node id -> its live zones as message indices), `logs` (session node id -> the
    log's message nodes, offset -> [parent offset, message index]) and `checkpoints` (node
    id -> turn, current slot, and each slot's zones as [tip, count] chains, given where
    they changed since the session's previous drawn checkpoint)."""
    table = _MessageTable(redact)
    sessions = {
        n["session"]: n["id"]
        for n in graph["nodes"]
        if n["kind"] == "session" and not n.get("missing")
    }
    slots: dict[str, Any] = {}
    for node in graph["nodes"]:
        if node["kind"] == "slot" and node["session"] in sessions:
            slot = store.load_slot(node["session"], node["slot"])
            slots[node["id"]] = [table.add_messages(getattr(slot, zone)) for zone in ZONES]
    logs: dict[str, dict[str, list[int]]] = {}
    checkpoints: dict[str, Any] = {}
    for session_id, session_node in sessions.items():
        drawn = [
            n for n in graph["nodes"] if n["kind"] == "checkpoint" and n["session"] == session_id
        ]
        if drawn:
            nodes = logs[session_node] = {}
            chains = _checkpoint_chains(store, session_id, session_node, drawn, nodes, table)
            checkpoints.update(chains)
    return {"messages": table.entries, "slots": slots, "logs": logs, "checkpoints": checkpoints}


class _MessageTable:
    """Every message once, by its content hash (the checkpoint log's node hash)."""

    def __init__(self, redact: bool) -> None:
        self.redact = redact
        self.entries: list[dict[str, Any]] = []
        self.index: dict[str, int] = {}

    def add(self, digest: str, data: dict[str, Any]) -> int:
        from agctl.context.models import Message

        if digest not in self.index:
            self.index[digest] = len(self.entries)
            self.entries.append(message_entry(Message.model_validate(data), redact=self.redact))
        return self.index[digest]

    def add_messages(self, messages: Iterable[Any]) -> list[int]:
        from agctl.base.hashing import content_hash
        from agctl.store.checkpoints.records import messages_to_json

        return [self.add(content_hash(data), data) for data in messages_to_json(list(messages))]


def _checkpoint_chains(
    store: Store,
    session_id: str,
    session_node: str,
    drawn: list[dict[str, Any]],
    nodes: dict[str, list[int]],
    table: _MessageTable,
) -> dict[str, Any]:
    from agctl.store.checkpoints.files import open_log
    from agctl.store.checkpoints.reader import zones_at
    from agctl.store.checkpoints.records import checkpoint_offset

    store.settle(session_id)
    history = open_log(store.backend, session_id)
    ordered = sorted(drawn, key=lambda n: checkpoint_offset(n["checkpoint"]))
    # Each drawn checkpoint's zones, from the index's deltas (no record is read).
    wanted = [checkpoint_offset(n["checkpoint"]) for n in ordered]
    states = zones_at(store.backend, session_id, wanted)
    found: dict[str, Any] = {}
    previous: dict[str, list[tuple[int, int]]] = {}
    for node in ordered:
        zones = states[checkpoint_offset(node["checkpoint"])]
        # A slot a delta left alone holds the very zones of the checkpoint before.
        changed = [
            (slot_id, slot_zones)
            for slot_id, slot_zones in zones.items()
            if (before := previous.get(slot_id)) is not slot_zones and before != slot_zones
        ]
        for _, slot_zones in changed:
            for tip, count in slot_zones:
                _add_chain(history, tip, count, nodes, table)
        found[node["id"]] = {
            "turn": node.get("turn"),
            "current_slot": node["slot"],
            "log": session_node,
            "changed": changed,
            "deleted": sorted(previous.keys() - zones.keys()),
        }
        previous = zones
    return found


def _add_chain(
    history: Log, tip: int, count: int, nodes: dict[str, list[int]], table: _MessageTable
) -> None:
    """The log's message nodes of one zone's chain, walked back from its tip to the first
    node another chain already brought (nodes are immutable: the rest is there too)."""
    from agctl.base.errors import CorruptDocument
    from agctl.base.hashing import content_hash

    offset = tip
    for _ in range(count):
        if str(offset) in nodes:
            return
        record = history.read(offset)
        digest, parent, data = record.get("h"), record.get("p"), record.get("m")
        if not isinstance(data, dict) or not isinstance(parent, int):
            raise CorruptDocument(history.path, f"no message node at byte {offset}")
        if content_hash(data) != digest:
            raise CorruptDocument(history.path, f"node at byte {offset} does not match its hash")
        nodes[str(offset)] = [parent, table.add(str(digest), data)]
        offset = parent
