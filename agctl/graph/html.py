"""The session graph as one self-contained HTML page (agctl/pages): the layout computed here
into inline SVG, so the picture shows with scripts off; the page's script adds a click on a
slot or checkpoint to see its messages, the diff of two checkpoints, search and collapse.

The picture is `git log --graph` turned sideways: each session is a block, its box above
one lane per slot, time running right along the lanes, each checkpoint a mark with its turn
number on the lane of the slot it was taken on, its label beside it. A derived slot's lane
starts where it was derived; merges, forks and rollbacks are drawn at their time, a forked
or child session's block starts under the point it came from.

`render` draws the model's JSON form (`Graph.to_json`); what a click shows comes from
`details`, read from the store beside it: every message once (by content hash), each
slot's live zones, and each drawn checkpoint's slots as chains of the checkpoint log's
message nodes, given only where they changed since the session's previous drawn checkpoint.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agctl.base.vocab import ZONES
from agctl.pages import asset, message_entry, page, text

if TYPE_CHECKING:
    from agctl.store import Store
    from agctl.store.checkpoints.pack import Log

SESSION_WIDTH, SESSION_HEIGHT = 150, 34
SLOT_WIDTH, SLOT_HEIGHT = 150, 30
INDENT = 18  # a slot's box under its session's
HEADER = INDENT + SLOT_WIDTH + 14  # a block's left edge to its first event
SESSION_ROW = 46  # the session's box, above its lanes
LANE_STEP = 54  # a lane, with a row of labels above and below it
BLOCK_GAP = 12
MARK_RADIUS = 10
STEP = 26  # the least room between two events of a session
LABEL_ABOVE, LABEL_BELOW = -15, 24  # a label's baseline from its lane
LABEL_SIZE, NAME_SIZE = 10, 12  # font sizes (graph.css)
LABEL_ROOM = 108  # the widest a checkpoint's label is drawn
GAP = 6
MARGIN = 12
EDGE_ORDER = ("derived", "merged", "forked", "rolled_back", "parent")


def _width(label: str, size: float) -> float:
    """A guess of the label's width in the page's sans-serif (the page's script measures
    and shortens what the guess got wrong)."""
    return sum(_char_width(char, size) for char in label)


def _char_width(char: str, size: float) -> float:
    return size * (1.05 if unicodedata.east_asian_width(char) in "WF" else 0.56)


def _fit(label: str, room: float, size: float) -> str:
    """`label`, cut with an ellipsis to its guessed width within `room`."""
    if _width(label, size) <= room:
        return label
    used = _char_width("…", size)
    for end, char in enumerate(label):
        used += _char_width(char, size)
        if used > room:
            return label[:end] + "…"
    return label


@dataclass
class _Block:
    """One session drawn: its box at (left, top), each lane's y by slot name (a slot gone
    since its checkpoints were taken is a ghost lane), and where a derived slot's lane
    starts and every lane ends."""

    node: dict[str, Any]
    left: float = 0.0
    top: float = 0.0
    right: float = 0.0
    height: float = float(SESSION_ROW)
    slots: list[dict[str, Any]] = field(default_factory=list)
    checkpoints: list[dict[str, Any]] = field(default_factory=list)
    lanes: dict[str | None, float] = field(default_factory=dict)  # slot name -> y
    ghosts: list[str | None] = field(default_factory=list)  # lanes of slots no longer here
    starts: dict[str, float] = field(default_factory=dict)  # a derived slot's lane: its x
    end: float = 0.0  # where the lanes end


class _Layout:
    """Where everything is drawn: blocks one under another, a session's children right
    under it (the latest fork point first, so no edge down to a child passes a box), each
    block's events placed left to right in time with room for their labels."""

    def __init__(self, graph: dict[str, Any]) -> None:
        nodes = graph["nodes"]
        self.by_id = {n["id"]: n for n in nodes}
        self.at: dict[str, tuple[float, float]] = {}  # node id -> centre
        self.band_of: dict[str, str] = {}  # node id -> its session's node id
        self.side: dict[str, int] = {}  # checkpoint node id -> its label's baseline offset
        self.edge_x: dict[int, float] = {}  # derived/merged edge index -> its x
        self.blocks: dict[str, _Block] = {}
        owners: dict[str, str] = {}
        for node in nodes:
            if node["kind"] == "session":
                self.blocks[node["id"]] = _Block(node)
                owners.setdefault(node["session"], node["id"])
        self.owner: dict[str, str] = {block: block for block in self.blocks}
        for node in nodes:
            block = self.blocks.get(owners.get(node["session"], ""))
            if block is None or node["kind"] == "session":
                continue
            self.owner[node["id"]] = block.node["id"]
            (block.slots if node["kind"] == "slot" else block.checkpoints).append(node)
        self.edges = graph["edges"]
        self.origin: dict[str, dict[str, Any]] = {}  # session node id -> the edge into it
        for edge in self.edges:
            source, target = edge["from"], edge["to"]
            into_block = edge["kind"] in ("forked", "parent") and target in self.blocks
            if into_block and self.owner.get(source, target) != target:
                self.origin.setdefault(target, edge)
        self.width = self.height = 0.0
        self._place()

    def _place(self) -> None:
        """Blocks depth first from each root, a block's children right under it."""
        children: dict[str, list[str]] = {}
        for child, edge in self.origin.items():
            children.setdefault(self.owner[edge["from"]], []).append(child)
        placed: set[str] = set()
        cursor = float(MARGIN)
        roots = [b for b in self.blocks if b not in self.origin]
        roots += [b for b in self.blocks if b in self.origin]  # in a loop, none is a root
        for root in roots:
            stack = [(root, float(MARGIN))]
            while stack:
                block_id, left = stack.pop()
                if block_id in placed:
                    continue
                placed.add(block_id)
                block = self.blocks[block_id]
                self._lay_out(block, left, cursor)
                cursor += block.height + BLOCK_GAP
                self.width = max(self.width, block.right + MARGIN)
                kids = children.get(block_id, [])
                starts = {kid: self._child_left(block, kid) for kid in kids}
                # the rightmost start popped first, then the oldest
                order = sorted(range(len(kids)), key=lambda k: (starts[kids[k]], -k))
                stack += [(kids[k], starts[kids[k]]) for k in order]
        self.height = cursor + MARGIN - BLOCK_GAP

    def _child_left(self, parent: _Block, child: str) -> float:
        """A child's block starts just right of the point it came from: the checkpoint it
        was forked from, or its parent session's box."""
        source = self.origin[child]["from"]
        if self.by_id[source]["kind"] == "checkpoint" and source in self.at:
            return self.at[source][0] + MARK_RADIUS + 4
        return parent.left + INDENT + 6

    def _lay_out(self, block: _Block, left: float, top: float) -> None:
        block.left, block.top = left, top
        session_id = block.node["id"]
        self.at[session_id] = (left + SESSION_WIDTH / 2, top + 6 + SESSION_HEIGHT / 2)
        self.band_of[session_id] = session_id
        names = [slot["slot"] for slot in block.slots]
        known = set(names)
        ghosts = dict.fromkeys(c["slot"] for c in block.checkpoints if c["slot"] not in known)
        block.ghosts = list(ghosts)
        for index, name in enumerate([*names, *block.ghosts]):
            block.lanes.setdefault(name, top + SESSION_ROW + index * LANE_STEP + LANE_STEP / 2)
        block.height = SESSION_ROW + len(block.lanes) * LANE_STEP + 4
        for slot in block.slots:
            self.at[slot["id"]] = (left + INDENT + SLOT_WIDTH / 2, block.lanes[slot["slot"]])
            self.band_of[slot["id"]] = session_id
        self._events(block)
        block.right = max(block.end, left + SESSION_WIDTH) + 6

    def _events(self, block: _Block) -> None:
        """Each checkpoint, derive and merge of the block at an x of its own, in time order;
        a label goes above or below its lane where that row has room, and no vertical edge
        passes through a label drawn before it."""
        session_id = block.node["id"]
        slot_ids = {slot["id"]: slot["slot"] for slot in block.slots}
        events: list[tuple[str, int, int, dict[str, Any]]] = []
        for index, edge in enumerate(self.edges):
            kind, source, target = edge["kind"], edge["from"], edge["to"]
            if kind in ("derived", "merged") and source in slot_ids and target in slot_ids:
                # a merge of unknown time goes last
                at = edge.get("at") or ("" if kind == "derived" else "\uffff")
                events.append((str(at), 0, index, edge))
        for order, node in enumerate(block.checkpoints):
            events.append((str(node.get("created_at") or ""), 1, order, node))
        events.sort(key=lambda event: event[:3])
        forks = {edge["from"] for edge in self.origin.values()}
        arcs = self._arcs(block, [item["id"] for *_, item in events if "id" in item])
        lanes = list(block.lanes)
        place = {lane: index for index, lane in enumerate(lanes)}
        rows: dict[tuple[str | None, int], float] = {}  # (lane, side) -> where its labels end
        x = block.left + HEADER - STEP
        for _, is_checkpoint, index, item in events:
            x += STEP
            if not is_checkpoint:
                upper, lower = sorted(place[slot_ids[item[key]]] for key in ("from", "to"))
                crossed = _crossed(lanes, upper, lower)
                x = max([x, *(rows.get(row, 0.0) + GAP for row in crossed)])
                self.edge_x[index] = x
                if item["kind"] == "derived":
                    block.starts.setdefault(slot_ids[item["to"]], x)
                continue
            lane = item["slot"]
            sides = [LABEL_ABOVE, LABEL_BELOW]
            if item["id"] in forks:  # its edge goes down through every lane below it
                crossed = _crossed(lanes, place[lane], len(lanes))
                x = max([x, *(rows.get(row, 0.0) + GAP for row in crossed)])
                sides = [LABEL_ABOVE]
            if item["id"] in arcs:  # a rollback's arc runs under the lane here
                sides = [LABEL_ABOVE]
                if arcs[item["id"]]:  # where it starts, clear of the labels under the lane
                    x = max(x, rows.get((lane, LABEL_BELOW), 0.0) + GAP + MARK_RADIUS)
            ends = {side: rows.get((lane, side), 0.0) for side in sides}
            # above where it has room, else below where it has, else where room comes first
            busy = {side: end + GAP > x - MARK_RADIUS for side, end in ends.items()}
            side = min(ends, key=lambda s: (busy[s], ends[s] if busy[s] else 0.0, s))
            x = max(x, ends[side] + GAP + MARK_RADIUS)
            rows[(lane, side)] = x - MARK_RADIUS + min(_width(_label(item), LABEL_SIZE), LABEL_ROOM)
            self.side[item["id"]] = side
            self.at[item["id"]] = (x, block.lanes[lane])
            self.band_of[item["id"]] = session_id
        block.end = max([x + STEP, *rows.values(), block.left + HEADER + STEP])

    def _arcs(self, block: _Block, order: list[str]) -> dict[str, bool]:
        """The checkpoints a rollback's arc passes under, from the one restored (True: the
        arc starts there) to the one it replaced, on one lane."""
        place = {node_id: index for index, node_id in enumerate(order)}
        lane_of = {node["id"]: node["slot"] for node in block.checkpoints}
        under: dict[str, bool] = {}
        for edge in self.edges:
            replaced, restored = edge["from"], edge["to"]
            if edge["kind"] != "rolled_back" or replaced not in place or restored not in place:
                continue
            if lane_of[replaced] != lane_of[restored]:
                continue
            first, last = sorted((place[restored], place[replaced]))
            for node_id in order[first : last + 1]:
                if lane_of[node_id] == lane_of[restored]:
                    under.setdefault(node_id, False)
            under[order[first]] = True
        return under


def _crossed(lanes: list[str | None], upper: int, lower: int) -> list[tuple[str | None, int]]:
    """The rows of labels a vertical line from lane `upper` down to lane `lower` passes
    (`lower` past the last lane: on down out of the block)."""
    if upper == lower:
        return []
    rows = [(lanes[upper], LABEL_BELOW)]
    for lane in lanes[upper + 1 : min(lower, len(lanes))]:
        rows += [(lane, LABEL_ABOVE), (lane, LABEL_BELOW)]
    if lower < len(lanes):
        rows.append((lanes[lower], LABEL_ABOVE))
    return rows


def _label(node: dict[str, Any]) -> str:
    """What a checkpoint's mark says beside it: its label, or its id when it has none."""
    return str(node.get("checkpoint_label") or node["checkpoint"])


def _edge_path(layout: _Layout, index: int, edge: dict[str, Any]) -> str | None:
    """Derives and merges straight down or up between two lanes at their time, a fork
    from its checkpoint down and into the child's box, a session's child from under its
    box, a rollback as an arc under the lane back to the checkpoint restored."""
    at = layout.at
    if edge["from"] not in at or edge["to"] not in at:
        return None
    (x1, y1), (x2, y2) = at[edge["from"]], at[edge["to"]]
    kind = edge["kind"]
    if index in layout.edge_x:
        x = layout.edge_x[index]
        end = y2 - 4 if y2 > y1 else y2 + 4
        return f"M{x:.0f},{y1:.0f} V{end:.0f}"
    if kind in ("forked", "parent") and edge["to"] in layout.blocks:
        child = layout.blocks[edge["to"]]
        if layout.by_id[edge["from"]]["kind"] == "checkpoint":
            top = y1 + MARK_RADIUS
        else:
            parent = layout.blocks[edge["from"]]
            x1, top = parent.left + INDENT / 2, parent.top + 6 + SESSION_HEIGHT
        turn = min(8.0, max(0.0, child.left - x1 - 2))
        return (
            f"M{x1:.0f},{top:.0f} V{y2 - turn:.0f} Q{x1:.0f},{y2:.0f} {x1 + turn:.0f},{y2:.0f} "
            f"H{child.left - 2:.0f}"
        )
    if kind == "rolled_back":
        dip = max(y1, y2) + MARK_RADIUS + 18
        return (
            f"M{x1:.0f},{y1 + MARK_RADIUS:.0f} C{x1:.0f},{dip:.0f} {x2:.0f},{dip:.0f} "
            f"{x2:.0f},{y2 + MARK_RADIUS + 3:.0f}"
        )
    return f"M{x1:.0f},{y1:.0f} L{x2:.0f},{y2:.0f}"


def _svg(graph: dict[str, Any], layout: _Layout) -> str:
    parts = [
        f'<svg id="graph" xmlns="http://www.w3.org/2000/svg" width="{layout.width:.0f}" '
        f'height="{layout.height:.0f}" viewBox="0 0 {layout.width:.0f} {layout.height:.0f}" '
        'role="img" aria-label="session graph"><defs>',
        *(
            f'<marker id="arrow-{kind}" viewBox="0 0 10 10" refX="8" refY="5" markerWidth="6" '
            f'markerHeight="6" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" '
            f'class="arrowhead edge-{kind}"/></marker>'
            for kind in EDGE_ORDER
        ),
        "</defs>",
    ]
    for block in layout.blocks.values():
        parts.append(_lanes(block))
    for index, edge in enumerate(graph["edges"]):
        path = _edge_path(layout, index, edge)
        if path is None:
            continue
        kind = edge["kind"] if edge["kind"] in EDGE_ORDER else "parent"
        dashed = " dashed" if edge.get("dashed") else ""
        label = edge["kind"] + (f" ({edge['strategy']})" if edge.get("strategy") else "")
        parts.append(
            f'<path class="edge edge-{kind}{dashed}" data-kind="{text(edge["kind"])}" '
            f'data-from="{text(edge["from"])}" data-to="{text(edge["to"])}" d="{path}" '
            f'marker-end="url(#arrow-{kind})"><title>{text(label)}</title></path>'
        )
    for node in graph["nodes"]:
        if node["id"] in layout.at:
            parts.append(_node_svg(node, layout))
    parts.append("</svg>")
    return "".join(parts)


def _lanes(block: _Block) -> str:
    """The block's band, and each lane: dotted before a derived slot's start, solid after;
    a slot gone since its checkpoints were taken is named in its box's place."""
    band = text(block.node["id"])
    parts = [
        f'<rect class="band" data-band="{band}" x="{block.left - 6:.0f}" y="{block.top:.0f}" '
        f'width="{block.right - block.left + 6:.0f}" height="{block.height:.0f}" rx="8"/>'
    ]
    box_right = block.left + INDENT + SLOT_WIDTH
    for name, y in block.lanes.items():
        ghost = name in block.ghosts
        start = block.starts.get(name, box_right) if name is not None else box_right
        if start > box_right:
            parts.append(
                f'<line class="lane lane-before" data-band="{band}" x1="{box_right:.0f}" '
                f'y1="{y:.0f}" x2="{start:.0f}" y2="{y:.0f}"/>'
            )
        lane = " ghost" if ghost else ""
        parts.append(
            f'<line class="lane{lane}" data-band="{band}" data-lane="{text(name or "")}" '
            f'x1="{start:.0f}" y1="{y:.0f}" x2="{block.end:.0f}" y2="{y:.0f}"/>'
        )
        if ghost:
            shown = f"{name} (gone)" if name is not None else "(no slot)"
            parts.append(
                f'<text class="lane lane-name" data-band="{band}" x="{block.left + INDENT:.0f}" '
                f'y="{y + 4:.0f}" data-room="{SLOT_WIDTH}">'
                f"{text(_fit(shown, SLOT_WIDTH, NAME_SIZE))}</text>"
            )
    return "".join(parts)


def _node_svg(node: dict[str, Any], layout: _Layout) -> str:
    x, y = layout.at[node["id"]]
    classes = ["node", f"node-{node['kind']}"]
    if node.get("current"):
        classes.append("current")
    if node.get("missing") or node.get("orphan"):
        classes.append("dashed")
    label = str(node["label"])
    attributes = (
        f'class="{" ".join(classes)}" data-node="{text(node["id"])}" '
        f'data-band="{text(layout.band_of[node["id"]])}" tabindex="0" role="button"'
    )
    if node["kind"] == "checkpoint":
        return _checkpoint_svg(node, x, y, layout.side[node["id"]], attributes)
    star = "* " if node.get("current") else ""
    if node["kind"] == "slot":
        width, height = SLOT_WIDTH, SLOT_HEIGHT
        line = f"{node.get('mode')} · {node.get('messages')} msg · {node.get('tokens')} tok"
        tip = f"slot {label} · {line}"
    else:
        width, height = SESSION_WIDTH, SESSION_HEIGHT
        title = node.get("title")
        line = str(title) if title else ("(gone)" if node.get("missing") else "session")
        tip = f"session {label}" + (f" · {title}" if title else "")
    room = width - 12
    left, top = x - width / 2, y - height / 2
    return (
        f"<g {attributes}><title>{text(tip)}</title>"
        f'<rect x="{left:.0f}" y="{top:.0f}" width="{width}" height="{height}" rx="6"/>'
        f'<text class="name" x="{x:.0f}" y="{y - 2:.0f}" data-room="{room}">'
        f"{text(_fit(star + label, room, NAME_SIZE))}</text>"
        f'<text class="facts" x="{x:.0f}" y="{y + 11:.0f}" data-room="{room}">'
        f"{text(_fit(line, room, LABEL_SIZE))}</text></g>"
    )


def _checkpoint_svg(node: dict[str, Any], x: float, y: float, side: int, attributes: str) -> str:
    """A checkpoint: a mark with its turn number, its label beside it, its id on hover."""
    tip = f"checkpoint {node.get('checkpoint')} · turn {node.get('turn')}"
    if node.get("checkpoint_label"):
        tip += f" · {node['checkpoint_label']}"
    if node.get("auto"):
        tip += " · automatic"
    shape = "auto" if node.get("auto") else "manual"
    turn = str(node.get("turn"))
    return (
        f"<g {attributes}><title>{text(tip)}</title>"
        f'<circle class="{shape}" cx="{x:.0f}" cy="{y:.0f}" r="{MARK_RADIUS}"/>'
        f'<text class="turn" x="{x:.0f}" y="{y + 3.5:.1f}">{text(turn)}</text>'
        f'<text class="checkpoint-label {shape}" x="{x - MARK_RADIUS:.0f}" y="{y + side:.0f}" '
        f'data-room="{LABEL_ROOM}">{text(_fit(_label(node), LABEL_ROOM, LABEL_SIZE))}</text></g>'
    )


def _legend(graph: dict[str, Any]) -> str:
    """What each kind of edge drawn looks like, and the two kinds of checkpoint mark."""
    kinds = {edge["kind"] for edge in graph["edges"]}
    items = [
        f'<li data-kind="{kind}"><svg width="30" height="10" aria-hidden="true">'
        f'<path class="edge edge-{kind}{" dashed" * (kind == "rolled_back")}" d="M1,5 H24" '
        f'marker-end="url(#arrow-{kind})"/></svg>{kind.replace("_", " ")}</li>'
        for kind in EDGE_ORDER
        if kind in kinds
    ]
    if any(node["kind"] == "checkpoint" for node in graph["nodes"]):
        items += [
            '<li><svg width="14" height="14" aria-hidden="true"><circle class="mark manual" '
            'cx="7" cy="7" r="6"/></svg>checkpoint (turn inside)</li>',
            '<li><svg width="14" height="14" aria-hidden="true"><circle class="mark auto" '
            'cx="7" cy="7" r="6"/></svg>automatic checkpoint</li>',
        ]
    return f'<ul id="legend" aria-label="legend">{"".join(items)}</ul>'


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
            '<button type="button" id="expand">Expand all</button>'
            f"{_legend(graph)}</div></header>",
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
            "slot": node["slot"],
            "current_slot": node.get("current_slot"),
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
