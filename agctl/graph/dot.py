"""The session graph in Graphviz's DOT: a digraph with one cluster a session, every id
and label a quoted string (agctl never runs `dot`; `dot -Tsvg` draws it)."""

from __future__ import annotations

from typing import Any

from agctl.graph.labels import clean, edge_text, is_current, node_details, node_title

_SHAPES = {"session": "box", "slot": "box", "checkpoint": "hexagon"}
_STYLES = {"session": "bold", "slot": "rounded", "checkpoint": "solid"}


def quoted(text: str) -> str:
    """`text` as a DOT quoted string that shows as itself: backslashes doubled (DOT reads
    `\\n`, `\\N`, `\\G` in labels), quotes escaped, hidden characters replaced."""
    text = clean(text).replace("\n", " ")
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def render(graph: dict[str, Any]) -> str:
    current = graph["current"]
    lines = [
        'digraph "agctl session graph v1" {',
        '  graph [rankdir="LR", fontname="Helvetica"];',
        '  node [fontname="Helvetica", fontsize="10"];',
        '  edge [fontname="Helvetica", fontsize="9"];',
    ]
    groups: dict[str, list[dict[str, Any]]] = {}
    for node in graph["nodes"]:
        groups.setdefault(node["session"], []).append(node)
    for index, (session, members) in enumerate(groups.items()):
        lines.append(f'  subgraph "cluster_{index}" {{')
        lines.append(f'    label={quoted(session)}; style="rounded";')
        for node in members:
            details = node_details(node)
            mark = "* " if is_current(node, current) else ""
            text = f"{mark}{node_title(node)}" + (f"\n{details}" if details else "")
            style = _STYLES[node["kind"]]
            if node.get("missing") or node.get("orphan"):
                style += ",dashed"
            if is_current(node, current):
                style += ",filled"
            attributes = (
                f"label={_label(text)}, shape={quoted(_SHAPES[node['kind']])}, "
                f"style={quoted(style)}"
            )
            lines.append(f'    "{node["id"]}" [{attributes}];')
        lines.append("  }")
    for edge in graph["edges"]:
        style = "dashed" if edge["dashed"] else "solid"
        lines.append(
            f'  "{edge["from"]}" -> "{edge["to"]}" '
            f"[label={quoted(edge_text(edge))}, style={quoted(style)}];"
        )
    lines.append("}")
    return "\n".join(lines) + "\n"


def _label(text: str) -> str:
    """A label of several lines: each quoted as itself, joined by DOT's centred newline."""
    return "\\n".join(quoted(part)[1:-1] for part in text.split("\n")).join('""')
