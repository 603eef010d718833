"""agctl.graph.text: the graph drawn in lanes of text, every slot shown, within 80 columns."""

from __future__ import annotations

from typing import Any

from helpers import check_text

from agctl.graph import text
from agctl.graph.model import build_graph
from agctl.store import Store


def test_the_golden_text_shows_every_slot_and_the_current_marks(scenario: dict[str, Any]) -> None:
    drawn = text.render(scenario)
    starred = [line for line in drawn.splitlines() if line.lstrip().startswith("*")]
    assert [line.split()[1] for line in starred] == ["consult", "default"]
    assert "↖ merged from draft (append)" in drawn
    assert "↖ rolled back to c2" in drawn
    assert "forked from c2" in drawn
    ascii_drawn = text.render(scenario, unicode=False)
    assert ascii_drawn.isascii()


def test_many_lanes_still_fit_80_columns(store: Store) -> None:
    store.create_session("s")
    for index in range(40):
        store.derive_slot("s", f"branch-{index:02}-" + "x" * 100, source="default")
    drawn = text.render(build_graph(store, "s").to_json())
    check_text(drawn)
    assert drawn.count("○") == 41  # every slot drawn, those past the lanes with their origin
    assert "↖ default" in drawn
