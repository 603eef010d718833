"""The session graph as a Mermaid flowchart (`flowchart LR`; never gitGraph, which breaks
past eight branches and on some names): one subgraph a session, synthetic ids, every
label quoted with Mermaid's entity codes for anything its parser or HTML could read."""

from __future__ import annotations

from typing import Any

from agctl.graph.labels import clean, edge_text, is_current, node_details, node_title

HEADER = "%% agctl session graph v1"
# Mermaid's default maxTextSize and maxEdges: past them a page shows an error instead.
MAX_TEXT = 45_000
MAX_EDGES = 500
_LABEL_LIMIT = 200
_ENTITIES = {
    "#": "#35;",
    '"': "#quot;",
    "&": "#amp;",
    "<": "#lt;",
    ">": "#gt;",
    "`": "#96;",
    "%": "#37;",
    "|": "#124;",
    "\\": "#92;",
}


def label(text: str) -> str:
    """`text` as a quoted Mermaid label: one line, cut long, entity-coded."""
    text = clean(text).replace("\n", " ")
    if len(text) > _LABEL_LIMIT:
        text = text[: _LABEL_LIMIT - 1] + "…"
    return '"' + "".join(_ENTITIES.get(char, char) for char in text) + '"'


def _shape(node: dict[str, Any], text: str) -> str:
    if node["kind"] == "session":
        return f"([{text}])"
    if node["kind"] == "checkpoint":
        return "{{" + text + "}}"
    return f"[{text}]"


def too_big(document: str, graph: dict[str, Any]) -> str | None:
    """Why Mermaid would refuse to draw `document` with its default limits, if it would."""
    if len(document) > MAX_TEXT:
        return f"{len(document):,} characters, past Mermaid's default limit of {MAX_TEXT:,}"
    if len(graph["edges"]) > MAX_EDGES:
        return f"{len(graph['edges']):,} edges, past Mermaid's default limit of {MAX_EDGES}"
    return None


def render(graph: dict[str, Any]) -> str:
    current = graph["current"]
    lines = [HEADER, "flowchart LR"]
    groups: dict[str, list[dict[str, Any]]] = {}
    for node in graph["nodes"]:
        groups.setdefault(node["session"], []).append(node)
    for index, (session, members) in enumerate(groups.items()):
        lines.append(f"  subgraph s{index}[{label(session)}]")
        for node in members:
            name = node_title(node)
            details = node_details(node)
            mark = "* " if is_current(node, current) else ""
            text = label(f"{mark}{name}" + (f" · {details}" if details else ""))
            lines.append(f"    {node['id']}{_shape(node, text)}")
        lines.append("  end")
    for edge in graph["edges"]:
        arrow = "-.->" if edge["dashed"] else "-->"
        lines.append(f"  {edge['from']} {arrow}|{label(edge_text(edge))}| {edge['to']}")
    styles = {
        "current": [n["id"] for n in graph["nodes"] if is_current(n, current)],
        "gone": [n["id"] for n in graph["nodes"] if n.get("missing") or n.get("orphan")],
    }
    lines.append("  classDef current stroke-width:3px")
    lines.append("  classDef gone stroke-dasharray:5 5")
    for name, styled in styles.items():
        if styled:
            lines.append(f"  class {','.join(styled)} {name}")
    return "\n".join(lines) + "\n"
