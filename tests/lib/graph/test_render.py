"""The session graph's renderers (agctl.graph: text, mermaid, dot, json): golden files of
the issue-15 scenario, and properties over hostile labels — no user text where an id
goes, every quote escaped, every text line within 80 columns, DOT that Graphviz accepts.

The golden files are tests/golden/graph/*; after a deliberate change to a renderer,
write them again with `AGCTL_UPDATE_GOLDEN=1 python -m pytest tests/lib/graph/test_render.py`
and read the diff.
"""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agctl.graph import dot, mermaid, text
from agctl.graph.document import GraphDocument
from agctl.graph.model import build_graph
from agctl.graph.render import render
from agctl.storage.memory import MemoryBackend
from agctl.store import Store
from agctl.store.checkpointer import Checkpointer
from tests.graph_scenario import build_scenario

GOLDEN = Path(__file__).resolve().parents[2] / "golden" / "graph"
UPDATE = os.environ.get("AGCTL_UPDATE_GOLDEN") == "1"
HOSTILE_TEXTS = [
    'say "hi"',
    "a]b[c",
    "x --> y",
    "%% comment",
    "</script><script>alert(1)</script>",
    "nul\x00byte",
    "\u202eRTL override\u202c עברית العربية",
    "\x1b[2Jescape\x07",
    "back\\slash \\N \\G \\n",
    "#quot; & <b>bold</b> `tick` | pipe {brace}",
    "line\nbreak\u2028sep",
    "多字节的中文名字" * 20,
    "n" * 10_000,
]


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
    return graph


@pytest.fixture(scope="module")
def scenario() -> dict[str, Any]:
    store = Store(backend=MemoryBackend())
    build_scenario(store)
    graph = build_graph(store, all_sessions=True, checkpoints=True).to_json()
    return normalised(graph)


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


def test_the_golden_text_shows_every_slot_and_the_current_marks(scenario: dict[str, Any]) -> None:
    drawn = text.render(scenario)
    starred = [line for line in drawn.splitlines() if line.lstrip().startswith("*")]
    assert [line.split()[1] for line in starred] == ["consult", "default"]
    assert "↖ merged from draft (append)" in drawn
    assert "↖ rolled back to c2" in drawn
    assert "forked from c2" in drawn
    ascii_drawn = text.render(scenario, unicode=False)
    assert ascii_drawn.isascii()


def test_the_json_form_matches_its_schema(scenario: dict[str, Any]) -> None:
    document = GraphDocument.model_validate(scenario)
    assert len(document.nodes) == len(scenario["nodes"])
    assert json.loads(render(scenario, "json")) == scenario


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


def hostile_graph(session_ids: list[str], texts: list[str]) -> dict[str, Any]:
    """A graph shaped as the model makes them, with user text in every field it could be."""
    nodes: list[dict[str, Any]] = []
    edges: list[dict[str, Any]] = []

    def add(kind: str, session: str, **fields: Any) -> str:
        node = {"id": f"n{len(nodes)}", "kind": kind, "session": session, **fields}
        nodes.append(node)
        return str(node["id"])

    previous = None
    for index, session in enumerate(session_ids):
        said = texts[index % len(texts)]
        top = add(
            "session",
            session,
            slot=None,
            label=session,
            title=said,
            parent=None,
            current=index == 0,
            orphan=index == 2,
            missing=False,
            created_at=None,
        )
        slot = add(
            "slot",
            session,
            slot=session,
            label=session,
            mode="full",
            messages=3,
            tokens=10,
            current=True,
            depth=0,
            source="new",
            created_at="x",
            turns=[{"zone": "messages", "role": "user", "text": said, "tokens": 1}],
        )
        mark = add(
            "checkpoint",
            session,
            slot=session,
            label=said or "x",
            checkpoint=session[:8],
            turn=1,
            checkpoint_label=said,
            auto=False,
            created_at="x",
        )
        edges.append(
            {"from": top, "to": slot, "kind": "derived", "strategy": said, "dashed": False}
        )
        edges.append({"from": mark, "to": slot, "kind": "merged", "strategy": said, "dashed": True})
        if previous is not None:
            edges.append(
                {"from": previous, "to": top, "kind": "forked", "strategy": None, "dashed": False}
            )
        previous = mark
    current = {"session": session_ids[0], "slot": session_ids[0]}
    return {"version": 1, "current": current, "nodes": nodes, "edges": edges}


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


def check_text(drawn: str) -> None:
    for line in drawn.splitlines():
        assert text.display_width(line) <= text.WIDTH, repr(line)
        assert line.isprintable(), repr(line)


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


def test_many_lanes_still_fit_80_columns(store: Store) -> None:
    store.create_session("s")
    for index in range(40):
        store.derive_slot("s", f"branch-{index:02}-" + "x" * 100, source="default")
    drawn = text.render(build_graph(store, "s").to_json())
    check_text(drawn)
    assert drawn.count("○") == 41  # every slot drawn, those past the lanes with their origin
    assert "↖ default" in drawn


# ---- Graphviz -----------------------------------------------------------------------------


def accepted_by_graphviz(document: str) -> str:
    result = subprocess.run(
        ["dot", "-Tsvg"], input=document.encode(), capture_output=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr.decode(errors="replace")
    assert b"Error" not in result.stderr, result.stderr.decode(errors="replace")
    return result.stdout.decode()


def test_graphviz_draws_the_scenario_and_hostile_labels(scenario: dict[str, Any]) -> None:
    if shutil.which("dot") is None:
        pytest.skip("Graphviz's dot is not installed (apt: graphviz)")
    svg = accepted_by_graphviz(dot.render(scenario))
    assert svg.count('class="cluster"') == 3
    for said in HOSTILE_TEXTS:
        graph = hostile_graph(["a", "b-c", "d.e"], [said])
        assert "<svg" in accepted_by_graphviz(dot.render(graph))
