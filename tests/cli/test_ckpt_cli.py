"""`agctl ckpt` and `agctl turn undo`: wiring, output and exit codes, through Click's runner."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import Result
from helpers import (
    EXIT_CONFLICT,
    EXIT_NOT_FOUND,
    EXIT_PROVIDER,
    EXIT_USAGE,
    as_json,
    data_dir_files,
    documents,
    draft_file,
    dying_after_one_change,
    fails,
    ok,
    send,
    turns_with_checkpoints,
)

from agctl.store import Store
from agctl.store.checkpointer import Checkpointer

Run = Callable[..., Result]

SID = "s"


@pytest.fixture
def session(run: Run) -> str:
    ok(run("session", "new", SID))
    return SID


@pytest.fixture
def turns(run: Run, session: str, isolated_env: Path) -> dict[int, tuple[str, dict[str, Any]]]:
    """Three turns: turn number -> (its checkpoint id, the documents after it)."""
    return turns_with_checkpoints(run, isolated_env, session)


# ---- create, list, show ----------------------------------------------------------------


def test_turns_checkpoint_and_list_shows_them_newest_first(
    run: Run, turns: dict[int, tuple[str, dict[str, Any]]]
) -> None:
    rows = as_json(run("ckpt", "list", "--json"))
    assert [(r["id"], r["turn"], r["label"], r["messages"]) for r in rows[:3]] == [
        (turns[3][0], 3, "after turn 3", 6),
        (turns[2][0], 2, "after turn 2", 4),
        (turns[1][0], 1, "after turn 1", 2),
    ]
    assert [(r["turn"], r["label"], r["messages"]) for r in rows[3:]] == [(0, "before turn 1", 0)]
    assert all(r["auto"] and r["slots"] == 1 and r["current_slot"] == "default" for r in rows)
    assert all(r["created_at"].endswith("Z") for r in rows)

    lines = ok(run("ckpt", "list")).stdout.splitlines()
    assert lines[0].split() == ["ID", "TURN", "CREATED", "SLOTS", "MSGS", "SLOT", "LABEL"]
    assert lines[1].split()[:3] == ["*", turns[3][0], "3"]  # it holds the live state
    assert lines[1].endswith("after turn 3")
    assert len(lines) == 5


def test_create_with_a_label_and_show_it(run: Run, session: str, isolated_env: Path) -> None:
    ok(run("msg", "append", "user", "hello"))
    ok(run("memory", "set", "goal", "ship"))
    identifier = ok(run("ckpt", "create", "--label", "good draft")).stdout.strip()
    row = as_json(run("ckpt", "list", "--json"))[0]
    assert row["id"] == identifier
    assert (row["label"], row["auto"], row["turn"], row["messages"]) == ("good draft", False, 0, 1)
    made = as_json(run("ckpt", "create", "--json"))
    assert made["label"] is None and made["auto"] is False and made["id"] != identifier

    shown = as_json(run("ckpt", "show", identifier, "--messages", "--json"))
    docs = documents(isolated_env)
    assert shown["id"] == identifier and shown["label"] == "good draft"
    assert shown["session"] == docs["session"]
    [slot] = shown["slot_states"]
    assert slot["document"] == docs["slot:default"]
    assert (slot["id"], slot["mode"], slot["messages"], slot["immutable"]) == (
        "default",
        "full",
        1,
        0,
    )
    assert "document" not in as_json(run("ckpt", "show", identifier, "--json"))["slot_states"][0]

    text = ok(run("ckpt", "show", identifier)).stdout
    assert f"checkpoint    {identifier}" in text
    assert "label         good draft" in text
    assert "memory keys   goal" in text
    assert "SLOT     MODE  IMMUTABLE  COMPRESSED  MESSAGES  TOKENS" in text


def test_a_turn_on_another_slot_is_listed_and_shown_with_its_slot(run: Run, session: str) -> None:
    ok(run("slot", "derive", "draft", "--from", "default"))
    ok(run("turn", "send", "--slot", "draft", "Draft the plan."))
    ok(run("ckpt", "create", "--label", "manual"))
    rows = as_json(run("ckpt", "list", "--json"))
    assert [(r["label"], r["slot"], r["current_slot"]) for r in rows] == [
        ("manual", None, "default"),
        ("after turn 1", "draft", "default"),
        ("before turn 1", "draft", "default"),
    ]
    lines = ok(run("ckpt", "list")).stdout.splitlines()
    column = lines[0].index(" SLOT ") + 1
    assert [line[column:].split()[0] for line in lines[1:]] == [
        "default",
        "draft",
        "draft",
    ]
    after = rows[1]["id"]
    assert as_json(run("ckpt", "show", after, "--json"))["slot"] == "draft"
    assert "turn's slot   draft" in ok(run("ckpt", "show", after)).stdout
    assert "turn's slot" not in ok(run("ckpt", "show", rows[0]["id"])).stdout


def test_list_without_checkpoints(run: Run, session: str) -> None:
    result = ok(run("ckpt", "list"))
    assert result.stdout == "" and result.stderr.strip() == "no checkpoints"
    assert as_json(run("ckpt", "list", "--json")) == []


# ---- turn send --no-checkpoint, turn undo ----------------------------------------------


def test_no_checkpoint_turns_leave_nothing_to_undo(
    run: Run, session: str, isolated_env: Path
) -> None:
    assert send(run, "one", "--no-checkpoint")["checkpoint"] is None
    ok(run("config", "set", "auto_checkpoint", "false"))
    assert send(run, "two")["checkpoint"] is None
    assert as_json(run("ckpt", "list", "--json")) == []
    before = documents(isolated_env)
    fails(run("turn", "undo"), EXIT_NOT_FOUND, "no checkpoint", "turn 1")
    assert documents(isolated_env) == before
    assert send(run, "three", "--checkpoint")["checkpoint"] is not None


def test_turn_undo(
    run: Run, turns: dict[int, tuple[str, dict[str, Any]]], isolated_env: Path
) -> None:
    undone = as_json(run("turn", "undo", "2", "--json"))
    assert undone["restored"] == turns[1][0] and undone["turn"] == 1
    assert documents(isolated_env) == turns[1][1]
    assert Checkpointer(Store(isolated_env)).load(SID, undone["saved_as"]).turn_index == 3

    fails(run("turn", "undo", "2"), EXIT_NOT_FOUND, "only 1 turns")
    fails(run("turn", "undo", "0"), EXIT_USAGE)
    text = ok(run("turn", "undo")).stdout
    assert text.startswith("back at turn 0; the replaced state is checkpoint ")
    assert documents(isolated_env)["session"]["turn_count"] == 0

    ok(run("ckpt", "rollback", undone["saved_as"]))
    assert documents(isolated_env) == turns[3][1]


# ---- rollback, fork --------------------------------------------------------------------


def test_rollback_and_its_rollback(
    run: Run, turns: dict[int, tuple[str, dict[str, Any]]], isolated_env: Path
) -> None:
    ok(run("slot", "derive", "side", "--use"))
    ok(run("memory", "set", "k", "v"))
    replaced = documents(isolated_env)

    result = as_json(run("ckpt", "rollback", turns[2][0], "--json"))
    assert result["restored"] == turns[2][0] and result["turn"] == 2
    assert documents(isolated_env) == turns[2][1]

    text = ok(run("ckpt", "rollback", result["saved_as"])).stdout.strip()
    assert text.startswith(f"rolled back to {result['saved_as']} (turn 3); ")
    assert documents(isolated_env) == replaced


def test_fork(run: Run, turns: dict[int, tuple[str, dict[str, Any]]], isolated_env: Path) -> None:
    forked = as_json(run("ckpt", "fork", turns[1][0], "--id", "what-if", "--use", "--json"))
    assert forked == {"session": "what-if", "parent_id": SID}
    assert Store(isolated_env).current_session_id() == "what-if"
    assert ok(run("session", "parent", "what-if")).stdout.strip() == SID
    assert ok(run("session", "children", SID)).stdout.strip() == "what-if"
    fork_docs = documents(isolated_env, "what-if")
    assert fork_docs["slot:default"] == turns[1][1]["slot:default"]

    parent = data_dir_files(isolated_env, SID)
    assert send(run, "only in the fork")["turn"] == 2
    assert data_dir_files(isolated_env, SID) == parent
    child = data_dir_files(isolated_env, "what-if")
    send(run, "only in the parent", "--session", SID)
    assert data_dir_files(isolated_env, "what-if") == child

    fails(run("-s", SID, "ckpt", "fork", turns[1][0], "--id", "what-if"), EXIT_CONFLICT)
    plain = ok(run("-s", SID, "ckpt", "fork", turns[2][0])).stdout.strip()
    assert plain in ok(run("session", "children", SID)).stdout.split()


# ---- rm, prune, prefixes ---------------------------------------------------------------


def test_rm_and_prune(
    run: Run, turns: dict[int, tuple[str, dict[str, Any]]], isolated_env: Path
) -> None:
    ids = [r["id"] for r in as_json(run("ckpt", "list", "--json"))]
    doomed = turns[2][0]
    assert as_json(run("ckpt", "rm", doomed, doomed, "--json")) == {"removed": [doomed]}
    fails(run("ckpt", "show", doomed), EXIT_NOT_FOUND, doomed)
    fails(run("ckpt", "rollback", doomed), EXIT_NOT_FOUND)
    fails(run("ckpt", "rm", doomed), EXIT_NOT_FOUND)
    left = [i for i in ids if i != doomed]
    assert [r["id"] for r in as_json(run("ckpt", "list", "--json"))] == left

    pruned = ok(run("ckpt", "prune", "--keep", "2")).stdout.strip()
    assert pruned == "removed 1 checkpoint(s); kept the newest 2"
    assert [r["id"] for r in as_json(run("ckpt", "list", "--json"))] == left[:2]
    again = as_json(run("ckpt", "prune", "--keep", "2", "--json"))
    assert again == {"removed": [], "kept": left[:2], "kept_for_undo": []}
    fails(run("ckpt", "prune", "--keep", "-1"), EXIT_USAGE)
    ok(run("ckpt", "rollback", turns[1][0]))
    assert documents(isolated_env) == turns[1][1]
    ok(run("ckpt", "rollback", turns[3][0]))
    assert documents(isolated_env) == turns[3][1]


def test_ids_by_unique_prefix_and_ambiguous_prefixes(
    run: Run, turns: dict[int, tuple[str, dict[str, Any]]]
) -> None:
    ids = [r["id"] for r in as_json(run("ckpt", "list", "--json"))]
    target = turns[2][0]
    prefix = next(
        target[:n]
        for n in range(1, len(target) + 1)
        if [i for i in ids if i.startswith(target[:n])] == [target]
    )
    assert as_json(run("ckpt", "show", prefix, "--json"))["id"] == target
    shared = ids[0][0]
    assert sum(i.startswith(shared) for i in ids) > 1
    for command in (("show",), ("rollback",), ("diff",), ("rm",), ("fork",)):
        fails(run("ckpt", *command, shared), EXIT_USAGE, "ambiguous")
    fails(run("ckpt", "diff", target, shared), EXIT_USAGE, "ambiguous")
    fails(run("ckpt", "show", "zzzz"), EXIT_NOT_FOUND)
    fails(run("ckpt", "show", "../x"), EXIT_USAGE)


# ---- diff ------------------------------------------------------------------------------


def test_diff_human_and_json(run: Run, session: str, isolated_env: Path) -> None:
    ok(run("msg", "append", "user", "hello"))
    ok(run("msg", "append", "user", "world"))
    ok(run("slot", "new", "gone"))
    ok(run("memory", "set", "k1", "v1"))
    ok(run("memory", "set", "k2", "v2"))
    a = ok(run("ckpt", "create")).stdout.strip()
    before = as_json(run("ckpt", "show", a, "--json"))

    ok(run("msg", "edit", "0", "hello again"))
    ok(run("msg", "append", "assistant", "hi there"))
    ok(run("slot", "mode", "focused", "--summary", "Short."))
    ok(run("slot", "rm", "gone"))
    ok(run("slot", "derive", "fresh"))
    ok(run("memory", "set", "k1", "v1b"))
    ok(run("memory", "rm", "k2"))
    ok(run("memory", "set", "k3", "v3"))
    b = ok(run("ckpt", "create")).stdout.strip()
    after = as_json(run("ckpt", "show", b, "--json"))
    tokens = {
        name: {s["id"]: s["tokens"] for s in shown["slot_states"]}
        for name, shown in (("a", before), ("b", after))
    }
    delta = tokens["b"]["default"] - tokens["a"]["default"]
    total = sum(tokens["b"].values()) - sum(tokens["a"].values())

    diff = as_json(run("ckpt", "diff", a, b, "--json"))
    assert diff == {
        "from": a,
        "to": b,
        "slots": {
            "created": ["fresh"],
            "deleted": ["gone"],
            "changed": {
                "default": {
                    "config": {
                        "mode": ["full", "focused"],
                        "focused.summary_override": [None, "Short."],
                    },
                    "messages": {
                        "added": [{"index": 2, "role": "assistant", "text": "hi there"}],
                        "removed": [],
                        "changed": [
                            {"index": 0, "role": "user", "old": "hello", "new": "hello again"}
                        ],
                    },
                    "tokens": delta,
                }
            },
        },
        "current_slot": ["default", "default"],
        "turn_count": [0, 0],
        "memory": {
            "added": {"k3": "v3"},
            "removed": {"k2": "v2"},
            "changed": {"k1": ["v1", "v1b"]},
        },
        "tokens": total,
    }
    assert as_json(run("ckpt", "diff", a, "--json")) == {**diff, "to": "live"}

    send(run, "a question")
    text = ok(run("ckpt", "diff", a)).stdout.splitlines()
    assert text[0] == f"from {a} to live"
    assert text[1:3] == ["+ slot fresh (created)", "- slot gone (deleted)"]
    assert text[3].startswith("~ slot default (+")
    assert text[4:7] == [
        "    config focused.summary_override: None -> Short.",
        "    config mode: full -> focused",
        "    + messages[2] assistant: hi there",
    ]
    assert text[7] == "    + messages[3] user: a question"
    assert text[8].startswith("    + messages[4] assistant: Offline reply to turn 1")
    assert text[9:] == [
        "    ~ messages[0] user: hello -> hello again",
        "turns: 0 -> 1",
        "+ memory k3 = v3",
        "- memory k2",
        "~ memory k1: v1 -> v1b",
        text[-1],
    ]
    assert text[-1].startswith("tokens: +")


# ---- damage and recovery ---------------------------------------------------------------


def test_an_interrupted_rollback_is_finished_before_the_next_write(
    run: Run, turns: dict[int, tuple[str, dict[str, Any]]], isolated_env: Path
) -> None:
    ok(run("slot", "derive", "later", "--use"))
    ok(run("memory", "set", "k", "v"))
    target, expected = turns[2]
    # The rollback died after its commit point, half its documents rewritten.
    with dying_after_one_change():
        run("ckpt", "rollback", target)
    assert Store(isolated_env).pending_recovery(SID)

    ok(run("msg", "append", "user", "after the crash"))

    assert not Store(isolated_env).pending_recovery(SID)
    now = documents(isolated_env)
    assert sorted(now) == ["session", "slot:default"]
    assert now["session"] == expected["session"]
    slot, wanted = now["slot:default"], expected["slot:default"]
    *kept, new = slot["messages"]
    assert kept == wanted["messages"]
    assert (new["role"], new["content"]) == ("user", "after the crash")
    assert slot["config"] == wanted["config"]
    assert slot["meta"]["message_count"] == wanted["meta"]["message_count"] + 1


def test_a_failed_turn_leaves_the_checkpoints_alone(
    run: Run, session: str, isolated_env: Path, tmp_path: Path
) -> None:
    script = tmp_path / "script.json"
    script.write_text(json.dumps(["the only answer"]))
    assert send(run, "one", "--script", str(script))["checkpoint"] is not None
    ids = as_json(run("ckpt", "list", "--json"))
    checkpoints = data_dir_files(isolated_env, SID)
    script.write_text("[]")
    fails(
        run("turn", "send", "two", "--script", str(script)),
        EXIT_PROVIDER,
        "turn 1 (the session's turn 2) has none",
    )
    assert as_json(run("ckpt", "list", "--json")) == ids
    after = data_dir_files(isolated_env, SID)
    assert json.loads(after.pop(draft_file(SID)))["prompt"] == "two"
    assert after == checkpoints


# ---- sessions --------------------------------------------------------------------------


def test_session_rm_with_a_fork_child(
    run: Run, turns: dict[int, tuple[str, dict[str, Any]]], isolated_env: Path
) -> None:
    ok(run("ckpt", "fork", turns[1][0], "--id", "child"))
    ok(run("session", "new", "other", "--no-use"))
    kept = Checkpointer(Store(isolated_env)).ids(SID)
    fails(run("session", "rm", SID), EXIT_CONFLICT, "has children", "child")
    assert kept and Checkpointer(Store(isolated_env)).ids(SID) == kept

    result = as_json(run("session", "rm", "--recursive", SID, "--json"))

    assert result == {"destroyed": [SID, "child"], "orphaned": []}
    assert Store(isolated_env).session_ids() == ["other"]
    assert not data_dir_files(isolated_env, SID) and not data_dir_files(isolated_env, "child")
