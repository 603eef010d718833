"""agctl.graph.document: the graph's JSON form and its schema."""

from __future__ import annotations

import json
from typing import Any

from agctl.graph.document import GraphDocument
from agctl.graph.render import render


def test_the_json_form_matches_its_schema(scenario: dict[str, Any]) -> None:
    document = GraphDocument.model_validate(scenario)
    assert len(document.nodes) == len(scenario["nodes"])
    assert json.loads(render(scenario, "json")) == scenario
