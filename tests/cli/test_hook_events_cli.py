"""Hooks fired by commands: a turn's, a rollback's and a fork's, --no-hooks, and the runs
in --json output."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import Result
from helpers import as_json, fails, ok

Run = Callable[..., Result]

LOGGER = """
import json, sys
with open(sys.argv[1], "a") as log:
    log.write(json.dumps(json.load(sys.stdin)) + "\\n")
if len(sys.argv) > 2:
    sys.stderr.write(sys.argv[2])
    sys.exit(2)
"""


@pytest.fixture
def logger(tmp_path: Path) -> Path:
    program = tmp_path / "logger.py"
    program.write_text(LOGGER)
    return program


def add_hook(run: Run, logger: Path, event: str, log: Path, *block: str) -> None:
    ok(run("hook", "add", event, f"log-{event.lower()}", "--", sys.executable, str(logger),
           str(log), *block))  # fmt: skip


def logged(log: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def test_a_turn_fires_its_hooks_and_lists_their_runs(
    run: Run, logger: Path, tmp_path: Path
) -> None:
    ok(run("session", "new", "s"))
    add_hook(run, logger, "TurnStart", tmp_path / "start.log")
    add_hook(run, logger, "TurnEnd", tmp_path / "end.log")
    data = as_json(ok(run("--json", "turn", "send", "hello")))
    assert [(h["event"], h["outcome"]) for h in data["hooks"]] == [
        ("TurnStart", "proceed"),
        ("TurnEnd", "proceed"),
    ]
    assert logged(tmp_path / "start.log")[0]["prompt"] == "hello"
    assert "hooks" not in as_json(ok(run("--json", "--no-hooks", "turn", "send", "again")))
    assert len(logged(tmp_path / "start.log")) == 1, "--no-hooks ran none"


def test_a_blocking_turn_start_hook_is_exit_9_and_keeps_the_draft(
    run: Run, logger: Path, tmp_path: Path
) -> None:
    ok(run("session", "new", "s"))
    add_hook(run, logger, "TurnStart", tmp_path / "start.log", "frozen for the release")
    fails(run("turn", "send", "hello"), 9, "frozen for the release")
    assert as_json(ok(run("--json", "draft", "show")))["prompt"] == "hello"


def test_rollback_undo_and_fork_fire_their_observing_hooks(
    run: Run, logger: Path, tmp_path: Path
) -> None:
    ok(run("session", "new", "s"))
    ok(run("turn", "send", "one"))
    ok(run("turn", "send", "two"))
    add_hook(run, logger, "PostRollback", tmp_path / "rollback.log")
    add_hook(run, logger, "PostFork", tmp_path / "fork.log")
    undone = as_json(ok(run("--json", "turn", "undo")))
    assert [h["event"] for h in undone["hooks"]] == ["PostRollback"]
    assert logged(tmp_path / "rollback.log")[0]["checkpoint"] == undone["restored"]
    checkpoint = undone["restored"]
    ok(run("ckpt", "rollback", undone["saved_as"]))
    assert len(logged(tmp_path / "rollback.log")) == 2
    forked = as_json(ok(run("--json", "ckpt", "fork", checkpoint, "--id", "what-if")))
    (fork,) = logged(tmp_path / "fork.log")
    assert (fork["checkpoint"], fork["new_session"], fork["session"]) == (
        checkpoint,
        "what-if",
        "s",
    )
    assert [h["event"] for h in forked["hooks"]] == ["PostFork"]


def test_an_observing_hook_that_fails_only_warns(run: Run, logger: Path, tmp_path: Path) -> None:
    ok(run("session", "new", "s"))
    ok(run("turn", "send", "one"))
    add_hook(run, logger, "PostRollback", tmp_path / "rollback.log", "cannot stop this")
    result = ok(run("turn", "undo"))
    assert "PostRollback" in result.stderr and "back at turn 0" in result.stdout
