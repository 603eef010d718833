"""Listings a script can trim and trust: --limit on session, ckpt and msg list, whole
messages with msg list --full, and the checkpoints that hold the live state."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from click.testing import Result

from agctl.cli.app import most_recent
from agctl.context.models import Message
from agctl.store import Store
from agctl.store.checkpointer import Checkpointer

Run = Callable[..., Result]


def ok(run: Run, *args: str) -> Result:
    result = run(*args)
    assert result.exit_code == 0, result.output
    return result


def column(result: Result, position: int) -> list[str]:
    """One column of a text table (the header line skipped)."""
    return [line.split()[position] for line in result.stdout.splitlines()[1:]]


@pytest.fixture
def turns(run: Run) -> Checkpointer:
    """Session s with three turns (four checkpoints: before turn 1, after each turn)."""
    ok(run, "session", "new", "s")
    for text in ("one", "two", "three"):
        ok(run, "turn", "send", text)
    from agctl.store import Store

    return Checkpointer(Store())


def live_ids(run: Run) -> list[str]:
    rows = json.loads(ok(run, "ckpt", "list", "--json").stdout)
    return [row["id"] for row in rows if row["live"]]


# ---- --limit ---------------------------------------------------------------------------


def test_most_recent_keeps_the_listings_order() -> None:
    assert most_recent([1, 2, 3, 4], 2, newest_first=False) == [3, 4]
    assert most_recent([4, 3, 2, 1], 2, newest_first=True) == [4, 3]
    assert most_recent([1, 2], 5, newest_first=False) == [1, 2]
    assert most_recent([1, 2], None, newest_first=True) == [1, 2]


def test_session_list_limit_shows_the_newest_oldest_first(run: Run) -> None:
    for sid in ("first", "second", "third"):
        ok(run, "session", "new", sid)
    rows = json.loads(ok(run, "session", "list", "--limit", "2", "--json").stdout)
    assert [row["id"] for row in rows] == ["second", "third"]
    assert column(ok(run, "session", "list", "-n", "1"), 1) == ["third"]


def test_ckpt_list_limit_shows_the_newest(run: Run, turns: Checkpointer) -> None:
    newest = turns.ids("s")
    rows = json.loads(ok(run, "ckpt", "list", "-n", "2", "--json").stdout)
    assert [row["id"] for row in rows] == newest[:2]
    assert len(ok(run, "ckpt", "list", "--limit", "3").stdout.splitlines()) == 1 + 3


def test_msg_list_limit_shows_the_last_messages_with_their_indexes(run: Run, turns: object) -> None:
    assert column(ok(run, "msg", "list", "-n", "2"), 0) == ["4", "5"]
    users = json.loads(ok(run, "msg", "list", "--role", "user", "-n", "2", "--json").stdout)
    assert [(m["index"], m["content"]) for m in users] == [(2, "two"), (4, "three")]
    assert column(ok(run, "msg", "list", "-n", "100"), 0) == ["0", "1", "2", "3", "4", "5"]


@pytest.mark.parametrize(
    "args",
    [["session", "list"], ["ckpt", "list"], ["msg", "list"], ["search", "x"]],
    ids=" ".join,
)
@pytest.mark.parametrize("limit", ["0", "-1", "many"])
def test_a_limit_below_one_is_a_usage_error(
    run: Run, turns: object, args: list[str], limit: str
) -> None:
    result = run(*args, "--limit", limit)
    assert result.exit_code == 2
    assert "--limit" in result.stderr


# ---- msg list --full -------------------------------------------------------------------


def test_msg_list_full_prints_whole_messages(run: Run, store: Store) -> None:
    long_text = "first line\n" + "word " * 60 + "\nlast line"
    ok(run, "session", "new", "s")
    ok(run, "msg", "append", "user", long_text)
    call = {"id": "call_1", "function": {"name": "lookup", "arguments": '{"q": "x"}'}}
    store.update_slot("s", None, lambda s: s.append(Message(role="assistant", tool_calls=[call])))
    ok(run, "msg", "append", "tool", "found", "--tool-call-id", "call_1")
    cut = ok(run, "msg", "list").stdout
    assert "last line" not in cut  # the table cuts the preview to the terminal's width
    full = ok(run, "msg", "list", "--full").stdout
    assert full.split("\n\n") == [
        f"#0 user ({store.load_slot('s').messages[0].token_count()} tokens)\n{long_text}",
        f"#1 assistant ({store.load_slot('s').messages[1].token_count()} tokens)\n"
        'call call_1: lookup({"q": "x"})',
        f"#2 tool tool_call_id=call_1 ({store.load_slot('s').messages[2].token_count()} tokens)"
        "\nfound\n",
    ]
    last = ok(run, "msg", "list", "--full", "-n", "1").stdout
    assert last.startswith("#2 tool")


def test_msg_list_full_json_is_the_same_as_without(run: Run, turns: object) -> None:
    assert ok(run, "msg", "list", "--full", "--json").stdout == (
        ok(run, "msg", "list", "--json").stdout
    )


def test_msg_list_full_of_an_empty_slot_says_so(run: Run) -> None:
    ok(run, "session", "new", "s")
    result = ok(run, "msg", "list", "--full")
    assert (result.stdout, result.stderr.strip()) == ("", "slot default has no messages")


# ---- the checkpoints that hold the live state ----------------------------------------------


def test_the_checkpoint_after_the_last_turn_holds_the_live_state(
    run: Run, turns: Checkpointer
) -> None:
    assert live_ids(run) == [turns.ids("s")[0]]
    lines = ok(run, "ckpt", "list").stdout.splitlines()
    assert lines[1].startswith("*  " + turns.ids("s")[0])
    assert not any(line.startswith("*") for line in lines[2:])


def test_after_a_rollback_its_target_holds_the_live_state(run: Run, turns: Checkpointer) -> None:
    target = turns.ids("s")[2]  # after turn 1
    ok(run, "ckpt", "rollback", target)
    assert live_ids(run) == [target]
    ok(run, "turn", "undo")  # back to turn 0: the checkpoint before turn 1
    assert live_ids(run) == [turns.ids("s")[-1]]


def test_a_change_is_seen_and_undoing_it_by_hand_matches_again(
    run: Run, turns: Checkpointer, store: Store
) -> None:
    """Appending and popping a message rewrites the slot file: the comparison then goes by
    content, not by the file's version."""
    newest = turns.ids("s")[0]
    ok(run, "msg", "append", "user", "extra")
    assert live_ids(run) == []
    ok(run, "msg", "pop")
    assert live_ids(run) == [newest]
    ok(run, "msg", "edit", "0", "ONE")  # the same size and tokens: only its hash differs
    assert (
        store.load_slot("s").meta.total_tokens
        == turns.state("s", turns.load("s", newest)).slots["default"].meta.total_tokens
    )
    assert live_ids(run) == []
    before_edit = turns.ids("s")[0]  # 'before msg edit': the state with "one"
    assert turns.load("s", before_edit).label == "before msg edit"
    ok(run, "msg", "edit", "0", "one")
    # Back as it was: the turn's checkpoint matches, and so does the edit's first one.
    assert live_ids(run) == [before_edit, newest]


@pytest.mark.parametrize(
    "change",
    [
        ["memory", "set", "k", "v"],
        ["session", "set", "title", "T"],
        ["slot", "new", "other"],
        ["slot", "mode", "readonly"],
    ],
    ids=" ".join,
)
def test_any_change_to_the_session_is_seen(
    run: Run, turns: Checkpointer, change: list[str]
) -> None:
    ok(run, *change)
    assert live_ids(run) == []


def test_two_checkpoints_of_the_same_state_both_hold_it(run: Run, turns: Checkpointer) -> None:
    ok(run, "ckpt", "create", "--label", "again")
    assert live_ids(run) == turns.ids("s")[:2]


def test_the_library_answers_for_the_summaries_it_is_given(turns: Checkpointer) -> None:
    summaries = turns.summaries("s")
    assert turns.matching_live("s", summaries[1:]) == set()
    assert turns.matching_live("s", summaries) == {summaries[0].id}
