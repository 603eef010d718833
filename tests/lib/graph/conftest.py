"""The session graph of the issue-15 scenario, as every renderer's test draws it."""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest

from agctl.graph.model import build_graph
from agctl.storage.memory import MemoryBackend
from agctl.store import Store
from tests.graph_scenario import build_scenario


def normalised(graph: dict[str, Any]) -> dict[str, Any]:
    """The graph with what changes run to run made stable: checkpoint ids (log offsets,
    which depend on timestamps' lengths) become c1, c2, … and times a fixed one."""
    graph = copy.deepcopy(graph)
    ids = [n["checkpoint"] for n in graph["nodes"] if n["kind"] == "checkpoint"]
    stable = {old: f"c{k + 1}" for k, old in enumerate(dict.fromkeys(ids))}
    pattern = re.compile(r"\b(" + "|".join(map(re.escape, stable)) + r")\b") if stable else None

    def fix(value: Any) -> Any:
        if isinstance(value, str) and pattern is not None:
            return pattern.sub(lambda m: stable[m.group()], value)
        return value

    for node in graph["nodes"]:
        for key, value in list(node.items()):
            node[key] = fix(value)
        if node.get("created_at"):
            node["created_at"] = "2025-01-01T00:00:00Z"
    for edge in graph["edges"]:
        if edge.get("at"):
            edge["at"] = "2025-01-01T00:00:00Z"
    return graph


@pytest.fixture(scope="module")
def scenario() -> dict[str, Any]:
    store = Store(backend=MemoryBackend())
    build_scenario(store)
    graph = build_graph(store, all_sessions=True, checkpoints=True).to_json()
    return normalised(graph)
