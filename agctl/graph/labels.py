"""What every renderer says about a node or an edge, from the graph's JSON form: one place,
so the text lanes, Mermaid and DOT describe a node alike. User text (titles, checkpoint
labels) comes out with no control or direction-changing characters left in it."""

from __future__ import annotations

import unicodedata
from typing import Any

# Control, format (bidi overrides, zero-width joiners), line and paragraph separators and
# lone surrogates: each could hide, reorder or break what follows it in any renderer.
_HIDDEN = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs"})
REPLACEMENT = "\ufffd"


def clean(text: str, replacement: str = REPLACEMENT) -> str:
    """`text` with every character that is not shown as itself replaced."""
    if text.isprintable():
        return text
    return "".join(
        replacement if unicodedata.category(char) in _HIDDEN else char
        for char in text.replace("\t", " ")
    )


def _count(number: int, word: str) -> str:
    return f"{number:,} {word}{'' if number == 1 else 's'}"


def node_title(node: dict[str, Any]) -> str:
    """The node's name: a session's id (and title), a slot's id, a checkpoint's id."""
    kind = node["kind"]
    if kind == "session":
        title = node.get("title")
        return f"{node['session']} {title}" if title else str(node["session"])
    if kind == "slot":
        return str(node["slot"])
    return str(node["checkpoint"])


def node_details(node: dict[str, Any]) -> str:
    """What else is known of the node, in one short line."""
    kind = node["kind"]
    if kind == "session":
        notes = []
        if node.get("missing"):
            notes.append("gone")
        elif node.get("orphan"):
            notes.append("orphan")
        return ", ".join(notes)
    if kind == "slot":
        return " · ".join(
            (
                str(node["mode"]),
                _count(int(node["messages"]), "message"),
                _count(int(node["tokens"]), "token"),
            )
        )
    parts = [f"turn {node['turn']}"]
    if node.get("checkpoint_label"):
        parts.append(str(node["checkpoint_label"]))
    if node.get("auto"):
        parts.append("auto")
    return " · ".join(parts)


def edge_text(edge: dict[str, Any]) -> str:
    """An edge's caption: its kind, and its strategy when it has one."""
    kind = str(edge["kind"]).replace("_", " ")
    return f"{kind}: {edge['strategy']}" if edge.get("strategy") else kind


def is_current(node: dict[str, Any], current: dict[str, Any]) -> bool:
    """Whether the node is the current session, or the current session's current slot
    (the one `*`, as git marks its one HEAD)."""
    if node["kind"] == "session":
        return not node.get("missing") and node["session"] == current.get("session")
    if node["kind"] == "slot":
        return bool(
            node["session"] == current.get("session") and node["slot"] == current.get("slot")
        )
    return False
