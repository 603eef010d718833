"""The session graph page in a real browser (headless Chromium), on the issue's scenario:
every slot is drawn, a click on a slot shows its messages, two checkpoints diff, search
marks, a session collapses, and a screenshot is drawn."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from graph_scenario import build_scenario
from test_export_page import screenshot_is_a_picture

from agctl.graph.html import details, render
from agctl.graph.model import build_graph
from agctl.store import Store


def scenario_page(store: Store, target: Path) -> dict[str, Any]:
    build_scenario(store)
    graph = build_graph(store, None, all_sessions=True, checkpoints=True).to_json()
    target.write_text(render(graph, redact=False, details=details(store, graph, redact=False)))
    return graph


def test_the_graph_page_in_chromium(chromium: Any, store: Store, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By

    graph = scenario_page(store, tmp_path / "graph.html")
    chromium.get((tmp_path / "graph.html").as_uri())
    slots = {n["id"]: n for n in graph["nodes"] if n["kind"] == "slot"}
    drawn = {
        g.get_attribute("data-node"): g
        for g in chromium.find_elements(By.CSS_SELECTOR, "g.node-slot")
    }
    assert drawn.keys() == slots.keys()
    assert all(g.is_displayed() for g in drawn.values())
    screenshot_is_a_picture(chromium, tmp_path / "graph.png")

    panel = chromium.find_element(By.ID, "panel")
    for node_id, node in slots.items():
        drawn[node_id].click()
        assert panel.get_attribute("data-node") == node_id
        assert f"slot {node['slot']} · session {node['session']}" in panel.text
        shown = panel.find_elements(By.CSS_SELECTOR, "article.message")
        assert len(shown) == node["messages"]
    draft = next(i for i, n in slots.items() if n["slot"] == "draft")
    drawn[draft].click()
    assert "Draft the migration plan." in panel.text

    checkpoints = [
        n for n in graph["nodes"] if n["kind"] == "checkpoint" and n["session"] == "consult"
    ]
    first, last = checkpoints[0], checkpoints[-1]
    chromium.find_element(By.CSS_SELECTOR, f'g[data-node="{first["id"]}"] circle').click()
    chromium.find_element(By.CSS_SELECTOR, f'g[data-node="{last["id"]}"] circle').click()
    assert f"diff from {first['checkpoint']} to {last['checkpoint']}" in panel.text
    assert "slot created: draft" in panel.text
    assert "+ [2] user: Draft the migration plan." in panel.text
    # The checkpoint after the turn sent to draft (default current) shows draft's messages,
    # and its diff with one on default's lane changes no current slot.
    on_draft = next(n for n in checkpoints if n["slot"] == "draft")
    before = next(n for n in checkpoints if n["checkpoint_label"] == "after turn 1")
    chromium.find_element(By.CSS_SELECTOR, f'g[data-node="{on_draft["id"]}"] circle').click()
    assert "slot draft at this checkpoint" in panel.text
    assert "Draft the migration plan." in panel.text
    chromium.find_element(By.CSS_SELECTOR, f'g[data-node="{before["id"]}"] circle').click()
    assert f"diff from {on_draft['checkpoint']} to {before['checkpoint']}" in panel.text
    assert "current slot:" not in panel.text

    chromium.find_element(By.ID, "search").send_keys("migration plan")
    matched = {
        g.get_attribute("data-node") for g in chromium.find_elements(By.CSS_SELECTOR, "g.match")
    }
    assert draft in matched
    assert not any(slots[m]["slot"] == "brief" for m in matched if m in slots)

    session = next(
        n for n in graph["nodes"] if n["kind"] == "session" and n["session"] == "consult"
    )
    chromium.find_element(By.CSS_SELECTOR, f'g[data-node="{session["id"]}"]').click()
    assert not drawn[draft].is_displayed()
    chromium.find_element(By.ID, "expand").click()
    assert drawn[draft].is_displayed()
