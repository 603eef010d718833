"""The graph's HTML page (agctl.graph.html): it parses, its embedded model round-trips
whatever the names hold, every node is drawn in the SVG, and --redact embeds no text."""

from __future__ import annotations

from typing import Any

from graph_scenario import build_scenario
from helpers import TEXT
from hypothesis import given, settings
from hypothesis import strategies as st
from pagesparse import parse_page

from agctl.graph.html import EDGE_ORDER, details, render
from agctl.graph.model import build_graph
from agctl.store import Store


def hostile_graph(names: list[str]) -> dict[str, Any]:
    """A graph of the model's v1 shape whose every piece of user text is hostile."""
    session, slot, other, checkpoint = names
    nodes = [
        {
            "id": "n0",
            "kind": "session",
            "session": session,
            "slot": None,
            "label": session,
            "title": other,
            "current": True,
            "orphan": False,
            "created_at": "2024-01-01T00:00:00Z",
        },
        {
            "id": "n1",
            "kind": "slot",
            "session": session,
            "slot": slot,
            "label": slot,
            "mode": "full",
            "messages": 2,
            "tokens": 9,
            "current": True,
            "depth": 0,
            "created_at": "2024-01-01T00:00:01Z",
        },
        {
            "id": "n2",
            "kind": "slot",
            "session": session,
            "slot": other,
            "label": other,
            "mode": "focused",
            "messages": 0,
            "tokens": 0,
            "current": False,
            "depth": 1,
            "created_at": "2024-01-01T00:00:02Z",
        },
        {
            "id": "n3",
            "kind": "checkpoint",
            "session": session,
            "slot": slot,
            "label": checkpoint,
            "checkpoint": "0abc",
            "turn": 1,
            "checkpoint_label": checkpoint,
            "auto": False,
            "created_at": "2024-01-01T00:00:03Z",
        },
    ]
    edges = [{"from": "n1", "to": "n2", "kind": "derived", "strategy": "full", "dashed": False}]
    return {
        "version": 1,
        "current": {"session": session, "slot": slot},
        "nodes": nodes,
        "edges": edges,
    }


@settings(max_examples=60)
@given(names=st.lists(TEXT, min_size=4, max_size=4))
def test_hostile_names_stay_data(names: list[str]) -> None:
    graph = hostile_graph(names)
    parsed = parse_page(render(graph, redact=False))
    assert parsed.data()["graph"] == graph
    assert parsed.tags.count("script") == 2
    assert parsed.tags.count("g") == 4
    # an arrowhead for each kind of edge, the one edge, its sample in the legend
    assert parsed.tags.count("path") == len(EDGE_ORDER) + 2
    assert len(parsed.texts["node-slot"]) == 2


def test_the_scenario_page_draws_every_node_and_carries_its_messages(store: Store) -> None:
    build_scenario(store)
    graph = build_graph(store, None, all_sessions=True, checkpoints=True).to_json()
    parsed = parse_page(render(graph, redact=False, details=details(store, graph, redact=False)))
    assert parsed.tags.count("g") == len(graph["nodes"])
    data = parsed.data()
    assert data["graph"] == graph
    texts = [m["text"] for m in data["details"]["messages"]]
    assert "Draft the migration plan." in texts
    assert len(texts) == len(set(map(str, data["details"]["messages"])))  # each message once
    slots = [n for n in graph["nodes"] if n["kind"] == "slot"]
    zones = data["details"]["slots"]
    assert all(sum(map(len, zones[n["id"]])) == n["messages"] for n in slots)
    drawn = [n["id"] for n in graph["nodes"] if n["kind"] == "checkpoint"]
    assert sorted(data["details"]["checkpoints"]) == sorted(drawn)


def test_redact_embeds_no_message_text(store: Store) -> None:
    build_scenario(store)
    graph = build_graph(store, None, all_sessions=True, checkpoints=True, turns=True).to_json()
    source = render(graph, redact=True, details=details(store, graph, redact=True))
    for said in ("Draft the migration plan", "careful advisor", "billing service"):
        assert said not in source
    assert parse_page(source).data()["redacted"] is True
