"""`msg pin`, `msg unpin`, `msg append --pin`: the marks of `msg list` and `ctx show`, and
a compression that cannot fit the pins failing with exit 7."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import Result
from helpers import data_dir_files

from agctl.store import Store

Run = Callable[..., Result]


def ok(result: Result) -> Result:
    assert result.exit_code == 0, (result.exit_code, result.stdout, result.stderr)
    return result


@pytest.fixture(autouse=True)
def session(run: Run) -> None:
    ok(run("session", "new", "s"))
    for number in range(6):
        role = "user" if number % 2 == 0 else "assistant"
        ok(run("msg", "append", role, f"message {number} about /srv/data-{number}.csv"))


def test_pin_and_unpin_say_what_they_did(run: Run, store: Store) -> None:
    assert ok(run("msg", "pin", "1", "-1")).stdout == (
        "pinned messages 1, 5 in slot default (2 pinned now)\n"
    )
    assert json.loads(ok(run("msg", "unpin", "-1", "--json")).stdout) == {
        "slot": "default",
        "unpinned": [5],
        "pinned_count": 1,
    }
    assert store.load_slot("s").pinned() == [1]
    assert ok(run("msg", "pin", "1", "--quiet")).stdout == ""


def test_append_pin_and_list_marks_the_pins(run: Run) -> None:
    ok(run("msg", "append", "user", "Never touch prod.", "--pin"))
    ok(run("msg", "pin", "0"))
    lines = ok(run("msg", "list")).stdout.splitlines()
    assert lines[0].split() == ["#", "PIN", "ROLE", "TOKENS", "CONTENT"]
    marks = {line.split()[0]: line.split()[1] for line in lines[1:]}
    assert [i for i, mark in marks.items() if mark == "P"] == ["0", "6"]
    rows = json.loads(ok(run("msg", "list", "--json")).stdout)
    assert [row["index"] for row in rows if row.get("pinned") is True] == [0, 6]
    assert all("pinned" not in row for row in rows if row["index"] not in (0, 6))
    full = ok(run("msg", "list", "--full", "-n", "1")).stdout
    assert full.startswith("#6 user pinned (")


def test_ctx_show_counts_the_pins(run: Run, store: Store) -> None:
    assert "pinned" not in ok(run("ctx", "show")).stdout
    ok(run("msg", "pin", "0", "2"))
    tokens = sum(m.token_count() for m in store.load_slot("s").messages[:3:2])
    shown = json.loads(ok(run("ctx", "show", "--json")).stdout)
    assert shown["pinned"]["messages"] == 2 and shown["pinned"]["tokens"] == tokens
    assert f"pinned: 2 messages, {tokens} tokens of the " in ok(run("ctx", "show")).stdout


def test_compress_keeps_the_pins_then_refuses_when_they_are_over_the_budget(
    run: Run, store: Store, isolated_env: Path
) -> None:
    ok(run("msg", "pin", "1"))
    ok(run("ctx", "compress", "--strategy", "truncate", "--keep-recent", "2", "--min-tokens", "0"))
    texts = [m.text() for m in store.load_slot("s").messages]
    assert texts == [
        "message 1 about /srv/data-1.csv",
        "message 4 about /srv/data-4.csv",
        "message 5 about /srv/data-5.csv",
    ]
    ok(run("msg", "pin", "0", "1", "2"))
    ok(run("slot", "set", "budget", '{"history": 20, "tool_results": 0}'))
    before = data_dir_files(isolated_env)
    for dry_run in ("--dry-run", None):
        args = ["ctx", "compress", "--keep-recent", "0", "--min-tokens", "0", "--json"]
        result = run(*args, *([dry_run] if dry_run else []))
        assert result.exit_code == 7, (result.stdout, result.stderr)
        error = json.loads(result.stderr)["error"]
        assert error["type"] == "PinsOverBudget"
        assert "the 3 pinned messages of slot 'default' hold" in error["message"]
        assert "over the 20 its budget gives the messages zone" in error["message"]
        assert data_dir_files(isolated_env) == before  # nothing compressed or checkpointed


@pytest.mark.parametrize(
    ("args", "code", "said"),
    [
        (["msg", "pin", "9"], 3, "index 9 is out of range"),
        (["msg", "unpin", "0", "-7"], 3, "index -7 is out of range"),
        (["msg", "pin"], 2, "Missing argument 'INDEX...'"),
        (["msg", "pin", "one"], 2, "'one' is not a valid integer"),
        (["msg", "pin", "0", "--slot", "nope"], 3, "nope"),
    ],
)
def test_bad_indexes_change_nothing(
    run: Run, isolated_env: Path, args: list[str], code: int, said: str
) -> None:
    before = data_dir_files(isolated_env)
    result = run(*args)
    assert result.exit_code == code, (result.stdout, result.stderr)
    assert said in result.stderr
    assert data_dir_files(isolated_env) == before
