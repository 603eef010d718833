"""The session graph model (agctl.graph.model): which nodes and edges the store's history
gives, with synthetic ids, for the scenario of issue 15 and the corners around it."""

from __future__ import annotations

from typing import Any

import pytest

from agctl.base.errors import NotFound, UsageError
from agctl.context.models import isoformat
from agctl.graph.model import build_graph
from agctl.providers.offline import OfflineProvider
from agctl.storage.memory import MemoryBackend
from agctl.store import Store
from agctl.store.checkpointer import Checkpointer
from agctl.turn.merge import merge_slots
from agctl.turn.send import TurnOptions, send_turn
from tests.graph_scenario import build_scenario
from tests.helpers import append


def named(graph: dict[str, Any]) -> dict[str, str]:
    """Node id -> a readable name: session, session/slot or session@checkpoint."""
    names = {}
    for node in graph["nodes"]:
        if node["kind"] == "session":
            names[node["id"]] = node["session"]
        elif node["kind"] == "slot":
            names[node["id"]] = f"{node['session']}/{node['slot']}"
        else:
            names[node["id"]] = f"{node['session']}@{node['checkpoint']}"
    return names


def edges(graph: dict[str, Any]) -> set[tuple[str, str, str, str | None, bool]]:
    names = named(graph)
    return {
        (e["kind"], names[e["from"]], names[e["to"]], e["strategy"], e["dashed"])
        for e in graph["edges"]
    }


def test_the_scenario_gives_every_kind_of_edge(store: Store) -> None:
    ids = build_scenario(store)
    graph = build_graph(store, all_sessions=True).to_json()
    first, replaced = ids["first_checkpoint"], ids["before_rollback"]
    assert edges(graph) == {
        ("derived", "consult/default", "consult/draft", "full", False),
        ("derived", "consult/default", "consult/brief", "focused", False),
        ("merged", "consult/draft", "consult/default", "append", False),
        ("rolled_back", f"consult@{replaced}", f"consult@{first}", None, True),
        ("forked", f"consult@{first}", "what-if", None, False),
        ("parent", "consult", "notes", None, False),
    }
    assert graph["version"] == 1
    assert graph["current"] == {"session": "consult", "slot": "default"}


def test_every_edge_says_when_it_happened(store: Store) -> None:
    """The HTML page's time axis: a derive when its slot was made, a merge when it was
    merged, a fork or a child when its session was made, a rollback at its checkpoint."""
    build_scenario(store)
    graph = build_graph(store, all_sessions=True, checkpoints=True).to_json()
    nodes = {n["id"]: n for n in graph["nodes"]}
    at = {edge["kind"]: edge["at"] for edge in graph["edges"]}
    for edge in graph["edges"]:
        if edge["kind"] in ("derived", "forked", "parent"):
            assert edge["at"] == nodes[edge["to"]]["created_at"]
        if edge["kind"] == "rolled_back":
            assert edge["at"] == nodes[edge["from"]]["created_at"]
    merge = store.load_slot("consult", "default").meta.merges[0]
    assert at["merged"] == isoformat(merge.at)
    draft = next(n for n in graph["nodes"] if n.get("slot") == "draft")
    later = [n for n in graph["nodes"] if n["kind"] == "checkpoint" and n["session"] == "consult"]
    assert draft["created_at"] < at["merged"] <= later[-1]["created_at"]


def test_node_ids_are_synthetic_and_every_edge_joins_two_nodes(store: Store) -> None:
    build_scenario(store)
    graph = build_graph(store, all_sessions=True, checkpoints=True).to_json()
    ids = [node["id"] for node in graph["nodes"]]
    assert ids == [f"n{k}" for k in range(len(ids))]
    for edge in graph["edges"]:
        assert edge["from"] in ids and edge["to"] in ids


def test_slot_nodes_carry_mode_counts_depth_and_the_current_marker(store: Store) -> None:
    build_scenario(store)
    graph = build_graph(store, "consult").to_json()
    slots = {
        n["slot"]: n for n in graph["nodes"] if n["kind"] == "slot" and n["session"] == "consult"
    }
    assert list(slots) == ["default", "draft", "brief"]  # each after what it came from
    default, brief = slots["default"], slots["brief"]
    assert (default["mode"], default["current"], default["depth"]) == ("full", True, 0)
    assert (brief["mode"], brief["current"], brief["depth"]) == ("focused", False, 1)
    stored = store.load_slot("consult", "default")
    assert default["messages"] == stored.meta.message_count == 4
    assert default["tokens"] == stored.meta.total_tokens > 0
    assert "turns" not in default


def test_without_checkpoints_only_fork_and_rollback_ends_are_drawn(store: Store) -> None:
    ids = build_scenario(store)
    drawn = build_graph(store, "consult").to_json()
    marks = {n["checkpoint"] for n in drawn["nodes"] if n["kind"] == "checkpoint"}
    assert marks == {ids["first_checkpoint"], ids["before_rollback"]}
    every = build_graph(store, "consult", checkpoints=True).to_json()
    listed = [n for n in every["nodes"] if n["kind"] == "checkpoint" and n["session"] == "consult"]
    summaries = Checkpointer(store).summaries("consult")
    assert [n["checkpoint"] for n in listed] == [s.id for s in reversed(summaries)]
    labelled = next(n for n in listed if n["checkpoint"] == ids["labelled_checkpoint"])
    assert labelled["label"] == labelled["checkpoint_label"] == "plan merged"
    assert labelled["auto"] is False and labelled["turn"] == 2


def test_a_session_is_drawn_with_its_descendants_only(store: Store) -> None:
    build_scenario(store)
    sessions = lambda g: [n["session"] for n in g["nodes"] if n["kind"] == "session"]  # noqa: E731
    assert sessions(build_graph(store, "consult").to_json()) == ["consult", "what-if", "notes"]
    assert sessions(build_graph(store, "what").to_json()) == ["what-if"]
    assert sessions(build_graph(store).to_json()) == ["consult", "what-if", "notes"]


def test_no_session_chosen_is_a_usage_error(store: Store) -> None:
    store.create_session("lone")
    with pytest.raises(UsageError, match="no session chosen"):
        build_graph(store)
    with pytest.raises(NotFound):
        build_graph(store, "nothing-here")
    assert len(build_graph(store, all_sessions=True).nodes) == 2


def test_orphans_hang_from_one_dashed_stand_in_for_their_missing_parent(store: Store) -> None:
    store.create_session("gone")
    store.create_session("kid-a", parent_id="gone")
    store.create_session("kid-b", parent_id="gone")
    store.destroy_session("gone", orphan=True)
    graph = build_graph(store, all_sessions=True).to_json()
    ghosts = [n for n in graph["nodes"] if n.get("missing")]
    assert [(g["session"], g["kind"]) for g in ghosts] == [("gone", "session")]
    assert edges(graph) == {
        ("parent", "gone", "kid-a", None, True),
        ("parent", "gone", "kid-b", None, True),
    }
    orphans = {n["session"]: n["orphan"] for n in graph["nodes"] if n["kind"] == "session"}
    assert orphans == {"gone": False, "kid-a": True, "kid-b": True}


def test_both_merge_strategies_are_edges(store: Store) -> None:
    store.create_session("s")
    store.derive_slot("s", "side")
    append(store, "s", "from the side", slot="side")
    merge_slots(store, "s", "side", "default", strategy="summary", provider=OfflineProvider())
    store.derive_slot("s", "other", source="default")
    append(store, "s", "from the other", slot="other")
    merge_slots(store, "s", "other", "side", strategy="append")
    merged = {e for e in edges(build_graph(store, "s").to_json()) if e[0] == "merged"}
    assert merged == {
        ("merged", "s/side", "s/default", "summary", False),
        ("merged", "s/other", "s/side", "append", False),
    }


def test_a_fork_is_found_again_after_gc_renumbers_the_checkpoints(store: Store) -> None:
    keeper = Checkpointer(store)
    store.create_session("s")
    dropped = keeper.create("s", label="dropped")
    append(store, "s", "hello")
    kept = keeper.create("s", label="kept")
    keeper.fork("s", kept.id, "child")
    keeper.remove("s", [dropped.id])
    keeper.gc("s")
    renumbered = {s.label: s.id for s in keeper.summaries("s")}["kept"]
    assert renumbered != kept.id
    graph = build_graph(store, "s").to_json()
    assert ("forked", f"s@{renumbered}", "child", None, False) in edges(graph)


def test_a_turn_on_another_slot_puts_its_checkpoints_on_that_slots_lane(store: Store) -> None:
    """`turn send --slot draft` while `default` is current: its checkpoints, before and
    after it, belong to draft; a checkpoint not taken for a turn, to the current slot."""
    store.create_session("s")
    store.derive_slot("s", "draft", source="default", strategy="full")
    options = TurnOptions(model="offline", slot="draft")
    send_turn(store, "s", "Draft the plan.", OfflineProvider(), options)
    Checkpointer(store).create("s", label="manual")
    assert store.load_session("s").current_slot == "default"
    graph = build_graph(store, "s", checkpoints=True).to_json()
    lanes = {
        n["checkpoint_label"]: (n["slot"], n["current_slot"])
        for n in graph["nodes"]
        if n["kind"] == "checkpoint"
    }
    assert lanes == {
        "before turn 1": ("draft", "default"),
        "after turn 1": ("draft", "default"),
        "manual": ("default", "default"),
    }


def test_a_session_forked_without_a_record_of_it_hangs_from_its_parent(store: Store) -> None:
    store.create_session("s")
    store.create_session("kid", parent_id="s")
    assert edges(build_graph(store, "s").to_json()) == {("parent", "s", "kid", None, False)}


def test_turns_puts_each_slots_messages_on_its_node(store: Store) -> None:
    build_scenario(store)
    graph = build_graph(store, "consult", turns=True).to_json()
    default = next(n for n in graph["nodes"] if n["kind"] == "slot")
    texts = [(t["zone"], t["role"], t["text"]) for t in default["turns"]]
    assert texts[0] == ("messages", "user", "Should we migrate the billing service?")
    assert len(texts) == default["messages"]
    assert all(t["tokens"] > 0 for t in default["turns"])


def test_the_model_is_the_same_from_a_memory_store() -> None:
    memory = Store(backend=MemoryBackend())
    build_scenario(memory)
    graph = build_graph(memory, all_sessions=True).to_json()
    assert {e[0] for e in edges(graph)} == {"derived", "merged", "rolled_back", "forked", "parent"}
