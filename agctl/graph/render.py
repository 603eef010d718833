"""One entry point to every renderer of the session graph, each a pure function of the
graph's JSON form (the HTML page's module is imported only when asked for)."""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any, NamedTuple

from agctl.base.errors import UsageError
from agctl.base.vocab import GRAPH_FORMATS

if TYPE_CHECKING:
    from agctl.store import Store


def redacted(graph: dict[str, Any]) -> dict[str, Any]:
    """The graph without message text (roles and token counts kept), to share."""
    if not any("turns" in node for node in graph["nodes"]):
        return graph
    graph = copy.deepcopy(graph)
    for node in graph["nodes"]:
        for turn in node.get("turns") or ():
            turn.pop("text", None)
    return graph


def render(
    graph: dict[str, Any],
    fmt: str,
    *,
    unicode: bool = True,
    redact: bool = False,
    details: dict[str, Any] | None = None,
) -> str:
    """The graph in `fmt` (one of GRAPH_FORMATS); `unicode=False` draws text lanes in ASCII;
    `details` (agctl.graph.html.details) is what the HTML page shows on a click."""
    if fmt == "html":
        from agctl.graph import html

        return html.render(graph, redact=redact, details=details)
    if redact:
        graph = redacted(graph)
    if fmt == "text":
        from agctl.graph import text

        return text.render(graph, unicode=unicode) + "\n"
    if fmt == "mermaid":
        from agctl.graph import mermaid

        return mermaid.render(graph)
    if fmt == "dot":
        from agctl.graph import dot

        return dot.render(graph)
    if fmt == "json":
        import json

        return json.dumps(graph, indent=2, ensure_ascii=False) + "\n"
    raise UsageError(f"unknown graph format {fmt!r}", hint=f"one of {', '.join(GRAPH_FORMATS)}")


class Drawing(NamedTuple):
    """A session graph drawn: the text, the size of the graph, and why Mermaid would
    refuse to draw it with its default limits (None: it would not, or not Mermaid)."""

    text: str
    nodes: int
    edges: int
    too_big: str | None


def draw(
    store: Store,
    session_id: str | None,
    fmt: str,
    *,
    all_sessions: bool = False,
    checkpoints: bool = False,
    turns: bool = False,
    unicode: bool = True,
    redact: bool = False,
) -> Drawing:
    """`session graph`: the graph of `session_id` (None with `all_sessions`) in `fmt`,
    with what a click on the HTML page shows."""
    from agctl.graph.model import build_graph

    graph = build_graph(
        store, session_id, all_sessions=all_sessions, checkpoints=checkpoints, turns=turns
    ).to_json()
    details = None
    if fmt == "html":
        from agctl.graph import html

        details = html.details(store, graph, redact=redact)
    text = render(graph, fmt, unicode=unicode, redact=redact, details=details)
    too_big = None
    if fmt == "mermaid":
        from agctl.graph import mermaid

        too_big = mermaid.too_big(text, graph)
    return Drawing(text, len(graph["nodes"]), len(graph["edges"]), too_big)
