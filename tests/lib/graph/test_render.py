"""The session graph's renderers (agctl.graph: text, mermaid, dot, json): golden files of
the issue-15 scenario, and properties over hostile labels — no user text where an id
goes, every quote escaped, every text line within 80 columns, DOT that Graphviz accepts.

The golden files are tests/golden/graph/*; after a deliberate change to a renderer,
write them again with `AGCTL_UPDATE_GOLDEN=1 python -m pytest tests/lib/graph/test_render.py`
and read the diff.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from helpers import HOSTILE_TEXTS, accepted_by_graphviz, check_text, hostile_graph
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agctl.graph import dot, mermaid, text
from agctl.graph.model import build_graph
from agctl.graph.render import render
from agctl.storage.memory import MemoryBackend
from agctl.store import Store
from agctl.store.checkpointer import Checkpointer
from tests.graph_scenario import build_scenario

GOLDEN = Path(__file__).resolve().parents[2] / "golden" / "graph"
UPDATE = os.environ.get("AGCTL_UPDATE_GOLDEN") == "1"


CASES = {
    "scenario.txt": lambda g: text.render(g, unicode=True) + "\n",
    "scenario-ascii.txt": lambda g: text.render(g, unicode=False) + "\n",
    "scenario.mmd": mermaid.render,
    "scenario.dot": dot.render,
    "scenario.json": lambda g: render(g, "json"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_scenario_matches_its_golden_file(name: str, scenario: dict[str, Any]) -> None:
    drawn = CASES[name](scenario)
    path = GOLDEN / name
    if UPDATE:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(drawn)
    assert drawn == path.read_text(), f"{name} changed: see this file's docstring"


def test_redact_drops_message_text_only() -> None:
    store = Store(backend=MemoryBackend())
    build_scenario(store)
    graph = build_graph(store, "consult", turns=True).to_json()
    shared = json.loads(render(graph, "json", redact=True))
    turns = [t for n in shared["nodes"] for t in n.get("turns", [])]
    assert turns and all("text" not in t and t["role"] and t["tokens"] for t in turns)
    assert "Should we migrate" in render(graph, "text")
    assert "Should we migrate" not in render(graph, "text", redact=True)


# ---- hostile labels -----------------------------------------------------------------------

hostile = st.one_of(st.sampled_from(HOSTILE_TEXTS), st.text(max_size=60))
ids = st.from_regex(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}", fullmatch=True)


MERMAID_LINE = re.compile(
    r"(%% agctl session graph v1|flowchart LR|  end"
    r'|  subgraph s\d+\["[^"\n]*"\]'
    r'|    n\d+(\(\["[^"\n]*"\]\)|\["[^"\n]*"\]|\{\{"[^"\n]*"\}\})'
    r'|  n\d+ (-->|-\.->)\|"[^"\n]*"\| n\d+'
    r"|  classDef (current|gone) [a-z:0-9 -]+|  class n\d+(,n\d+)* (current|gone))"
)
DOT_QUOTED = re.compile(r'"(?:[^"\\\n]|\\.)*"')
DOT_BARE = re.compile(
    r"(digraph|subgraph|graph|node|edge|label|shape|style|rankdir|fontname|fontsize|->|[\[\]{};,=\s])*"
)


def check_mermaid(drawn: str) -> None:
    for line in drawn.splitlines():
        assert MERMAID_LINE.fullmatch(line), repr(line[:200])
    for inside in re.findall(r'"([^"]*)"', drawn):
        # Anything Mermaid's parser or its HTML labels could read is an entity code.
        assert re.fullmatch(r"([^<>`%\\|\x00#]|#\w+;)*", inside), repr(inside[:200])


def check_dot(drawn: str) -> None:
    assert "\x00" not in drawn
    bare = DOT_QUOTED.sub("", drawn)
    assert DOT_BARE.fullmatch(bare), repr(bare[:300])
    node_ids = re.findall(r'^    ("[^"]*") \[', drawn, flags=re.MULTILINE)
    assert node_ids and all(re.fullmatch(r'"n\d+"', ident) for ident in node_ids)
    for ident in re.findall(r'^  ("[^"]*") -> ("[^"]*")', drawn, flags=re.MULTILINE):
        assert all(re.fullmatch(r'"n\d+"', part) for part in ident)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(ids, min_size=1, max_size=5, unique=True), st.lists(hostile, min_size=1, max_size=5)
)
def test_hostile_labels_stay_labels_in_every_renderer(
    session_ids: list[str], texts: list[str]
) -> None:
    graph = hostile_graph(session_ids, texts)
    check_mermaid(mermaid.render(graph))
    check_dot(dot.render(graph))
    check_text(text.render(graph, unicode=True))
    check_text(text.render(graph, unicode=False))
    assert text.render(graph, unicode=False).isascii()
    assert json.loads(render(graph, "json")) == graph


def test_hostile_labels_the_store_accepts_stay_labels(store: Store) -> None:
    """Titles and checkpoint labels are where user text gets in (ids are validated)."""
    keeper = Checkpointer(store)
    store.create_session("s", title=HOSTILE_TEXTS[0])
    for said in HOSTILE_TEXTS:
        keeper.create("s", label=said)
    store.create_session("t" * 128, parent_id="s", title="\u202e" + "t" * 10_000)
    graph = build_graph(store, "s", checkpoints=True).to_json()
    labels = {n.get("checkpoint_label") for n in graph["nodes"]}
    assert set(HOSTILE_TEXTS) <= labels  # stored as given, cleaned only when drawn
    check_mermaid(mermaid.render(graph))
    check_dot(dot.render(graph))
    check_text(text.render(graph))
    check_text(text.render(graph, unicode=False))
    if shutil.which("dot"):
        accepted_by_graphviz(dot.render(graph))


# ---- Graphviz -----------------------------------------------------------------------------
