"""The session graph as text lanes, as `git log --graph` draws history: one row a node, a
lane from each node down to the nodes that came from it (a session to its slots and first
checkpoint, a slot to those derived from it, a checkpoint to the next and to the sessions
forked from it). Merges and rollbacks point back up, so they are notes on their rows.

Every line fits `width` columns: at most MAX_LANES lanes are drawn (a node whose lane
would not fit names where it came from instead) and names are cut with an ellipsis.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass
from typing import Any

from agctl.graph.labels import clean, edge_text, is_current, node_details, node_title

WIDTH = 80
MAX_LANES = 16
# The kinds of edge that are lanes (from a row above to a row below).
_LANE_EDGES = ("derived", "forked", "parent")


@dataclass(frozen=True)
class Glyphs:
    vertical: str
    horizontal: str
    corner: str  # a lane opening to the right of its node
    corner_left: str  # a lane opening to the left of its node
    tee: str  # a lane opening under a horizontal run
    cross: str  # a horizontal run over a passing lane
    session: str
    slot: str
    checkpoint: str
    missing: str
    current: str
    back: str  # a note's arrow back up (merged from, rolled back to)
    ellipsis: str
    dot: str


UNICODE = Glyphs("│", "─", "╮", "╭", "┬", "┼", "●", "○", "◆", "◌", "*", "↖", "…", "·")
ASCII = Glyphs("|", "-", ".", ".", "+", "+", "@", "o", "+", "?", "*", "^", "...", "-")


def display_width(text: str) -> int:
    """Columns `text` takes on a terminal: wide (CJK) characters two, combining marks none."""
    if text.isascii():
        return len(text)
    total = 0
    for char in text:
        if unicodedata.combining(char):
            continue
        total += 2 if unicodedata.east_asian_width(char) in ("W", "F") else 1
    return total


def cut(text: str, width: int, ellipsis: str) -> str:
    """`text` cut to `width` columns, ending with `ellipsis` when it was cut."""
    if display_width(text) <= width:
        return text
    room = width - display_width(ellipsis)
    if room <= 0:
        return ellipsis[: max(width, 0)]
    kept: list[str] = []
    used = 0
    for char in text:
        step = display_width(char)
        if used + step > room:
            break
        kept.append(char)
        used += step
    return "".join(kept) + ellipsis


def render(graph: dict[str, Any], *, unicode: bool = True, width: int = WIDTH) -> str:
    """The graph drawn as lanes, one line a row, no line wider than `width` columns."""
    glyphs = UNICODE if unicode else ASCII
    nodes: list[dict[str, Any]] = graph["nodes"]
    row_of = {node["id"]: row for row, node in enumerate(nodes)}
    tree_parent = _tree_parents(graph, row_of)
    children: dict[str, list[str]] = {}
    for node in nodes:
        parent = tree_parent.get(node["id"])
        if parent is not None:
            children.setdefault(parent, []).append(node["id"])
    notes = _notes(graph, glyphs)
    lanes: list[str | None] = []  # column -> the node its lane leads down to
    lines: list[str] = []
    for node in nodes:
        ident = node["id"]
        column = lanes.index(ident) if ident in lanes else _free(lanes)
        if column < len(lanes):
            lanes[column] = None
        else:
            lanes.append(None)
        opened: list[int] = []
        for kid in children.get(ident, []):
            if lanes[column] is None:
                lanes[column] = kid  # the first one goes straight on down
                continue
            free = _free(lanes)
            if free >= MAX_LANES:
                continue  # no room: the row names where it came from (see _notes)
            if free == len(lanes):
                lanes.append(None)
            lanes[free] = kid
            opened.append(free)
        unlaned = [kid for kid in children.get(ident, []) if kid not in lanes]
        for kid in unlaned:
            notes.setdefault(kid, []).insert(0, f"{glyphs.back} {clean(node_title(node))}")
        marker = _marker(node, graph["current"], glyphs)
        prefix = _row_prefix(lanes, column, marker, opened, glyphs)
        text = _row_text(node, notes.get(ident, []), glyphs)
        lines.append(_fit(prefix, text, width, glyphs))
        for turn in node.get("turns") or ():
            said = clean(str(turn.get("text", ""))).replace("\n", " ")
            line = f"  {turn.get('role', '')}: {said}"
            lines.append(_fit(_row_prefix(lanes, None, "", [], glyphs), line, width, glyphs))
        while lanes and lanes[-1] is None:
            lanes.pop()
    return "\n".join(lines)


def _tree_parents(graph: dict[str, Any], row_of: dict[str, int]) -> dict[str, str]:
    """Each node's lane parent: the node above it that it came from (an edge of a lane
    kind, else its session for a slot or a first checkpoint, else the checkpoint before)."""
    parents: dict[str, str] = {}
    for edge in graph["edges"]:
        source, target = edge["from"], edge["to"]
        if edge["kind"] in _LANE_EDGES and row_of[source] < row_of[target]:
            parents.setdefault(target, source)
    session_node: dict[str, str] = {}
    last_checkpoint: dict[str, str] = {}
    for node in graph["nodes"]:
        session = node["session"]
        if node["kind"] == "session":
            if not node.get("missing"):
                session_node[session] = node["id"]
            continue
        above = session_node.get(session)
        if node["kind"] == "checkpoint":
            above = last_checkpoint.get(session, above)
            last_checkpoint[session] = node["id"]
        if above is not None:
            parents.setdefault(node["id"], above)
    return parents


def _notes(graph: dict[str, Any], glyphs: Glyphs) -> dict[str, list[str]]:
    """What each row says beyond its name: how it was derived or forked, and the edges
    that point back up (merged from, rolled back to)."""
    by_id = {node["id"]: node for node in graph["nodes"]}
    notes: dict[str, list[str]] = {}
    for edge in graph["edges"]:
        source = by_id[edge["from"]]
        kind = edge["kind"]
        if kind == "derived":
            notes.setdefault(edge["to"], []).append(f"derived {edge['strategy'] or 'full'}")
        elif kind == "forked":
            name = clean(node_title(source))
            notes.setdefault(edge["to"], []).append(f"forked from {name}")
        elif kind in ("merged", "rolled_back"):
            target = edge["to"] if kind == "merged" else edge["from"]
            other = source if kind == "merged" else by_id[edge["to"]]
            word = (
                edge_text(edge)
                .replace("merged", "merged from")
                .replace("rolled back", "rolled back to")
            )
            notes.setdefault(target, []).append(
                f"{glyphs.back} {word.split(':')[0]} {clean(node_title(other))}"
                + (f" ({edge['strategy']})" if edge.get("strategy") else "")
            )
    return notes


def _free(lanes: list[str | None]) -> int:
    """The first free column (one past the last when none is)."""
    for column, target in enumerate(lanes):
        if target is None:
            return column
    return len(lanes)


def _marker(node: dict[str, Any], current: dict[str, Any], glyphs: Glyphs) -> str:
    if is_current(node, current):
        return glyphs.current
    if node["kind"] == "session":
        return glyphs.missing if node.get("missing") else glyphs.session
    return glyphs.slot if node["kind"] == "slot" else glyphs.checkpoint


def _row_prefix(
    lanes: list[str | None], column: int | None, marker: str, opened: list[int], glyphs: Glyphs
) -> str:
    """The lanes part of a row: passing lanes, the node's marker at `column`, and a
    horizontal run out to each lane it opens."""
    count = max(len(lanes), (column or 0) + 1)
    reach = (min([column, *opened]), max([column, *opened])) if column is not None else (0, -1)
    cells: list[str] = []
    for index in range(count):
        passing = index < len(lanes) and lanes[index] is not None
        inside = reach[0] <= index <= reach[1]
        if index == column:
            char = marker
        elif index in opened:
            edge_right = index == reach[1] and index > (column or 0)
            edge_left = index == reach[0] and index < (column or 0)
            char = glyphs.corner if edge_right else glyphs.corner_left if edge_left else glyphs.tee
        elif inside:
            char = glyphs.cross if passing else glyphs.horizontal
        else:
            char = glyphs.vertical if passing else " "
        fill = glyphs.horizontal if reach[0] <= index < reach[1] else " "
        cells.append(char + fill)
    return "".join(cells)


def _row_text(node: dict[str, Any], notes: list[str], glyphs: Glyphs) -> str:
    details = node_details(node)
    parts = [clean(node_title(node))]
    if details:
        parts.append(f"({clean(details)})" if node["kind"] == "session" else clean(details))
    parts.extend(notes)
    text = "  ".join(parts)
    if glyphs is ASCII:
        text = text.replace("·", "-").encode("ascii", "replace").decode("ascii")
    return text


def _fit(prefix: str, text: str, width: int, glyphs: Glyphs) -> str:
    """One row: the lanes, then the text cut to what is left of `width`."""
    line = prefix + cut(text, max(width - display_width(prefix), 0), glyphs.ellipsis)
    return line.rstrip()
