"""agctl.graph.dot: DOT that Graphviz draws, whatever the labels say."""

from __future__ import annotations

import shutil
from typing import Any

import pytest
from helpers import HOSTILE_TEXTS, accepted_by_graphviz, hostile_graph

from agctl.graph import dot


def test_graphviz_draws_the_scenario_and_hostile_labels(scenario: dict[str, Any]) -> None:
    if shutil.which("dot") is None:
        pytest.skip("Graphviz's dot is not installed (apt: graphviz)")
    svg = accepted_by_graphviz(dot.render(scenario))
    assert svg.count('class="cluster"') == 3
    for said in HOSTILE_TEXTS:
        graph = hostile_graph(["a", "b-c", "d.e"], [said])
        assert "<svg" in accepted_by_graphviz(dot.render(graph))
