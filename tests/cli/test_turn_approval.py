"""Deciding a draft's waiting tool calls: what --approve-call and --deny-call accept, and
how the waiting calls are listed; over real HTTP from the fake OpenAI server, with a real
tool counting its runs in a file."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import Result
from fake_openai import FakeOpenAI
from helpers import as_json, fails, ok

Run = Callable[..., Result]

# Counts its runs: one line in $HOME/runs.log each.
COUNT = (
    "import os, sys; sys.stdin.read(); open(os.environ['HOME'] + '/runs.log', 'a').write('x\\n')"
)


@pytest.fixture
def home(run: Run, server: FakeOpenAI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Tool `count` (approve: auto) and `ask` (approve: ask), each adding a line to
    $HOME/runs.log when it runs; session s; agctl pointed at the fake server."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    for name, approve in (("count", "auto"), ("ask", "ask")):
        ok(run("tool", "add", name, "--description", name, "--approve", approve,
               "--", sys.executable, "-c", COUNT))  # fmt: skip
    ok(run("session", "new", "s"))
    for key, value in (("PROVIDER", "openai"), ("BASE_URL", server.base_url),
                       ("MODEL", "m"), ("API_KEY", "k")):  # fmt: skip
        monkeypatch.setenv(f"AGCTL_{key}", value)
    return home


def runs(home: Path) -> int:
    log = home / "runs.log"
    return len(log.read_text().splitlines()) if log.exists() else 0


def calls(count: int, prefix: str = "c", tool: str = "count") -> list[dict[str, Any]]:
    return [{"id": f"{prefix}{n}", "name": tool, "arguments": {}} for n in range(1, count + 1)]


def send(run: Run, *args: str) -> Result:
    return run("turn", "send", *args, "-T", "count", "-T", "ask", "--no-stream")


# ---- deciding the waiting calls of a draft -----------------------------------------------


@pytest.fixture
def waiting(run: Run, home: Path, server: FakeOpenAI) -> None:
    """A draft whose last reply's calls a1 and a2 (tool `ask`) wait for approval, with
    no terminal (the test run's is never asked: see conftest)."""
    server.reply(tool_calls=calls(2, "a", tool="ask"))
    fails(send(run, "go"), 9, "2 tool calls need approval", "ask 'a1', ask 'a2'",
          "the calls waiting were kept as a draft")  # fmt: skip
    assert runs(home) == 0


def test_all_decides_every_waiting_call_the_other_flag_does_not_name(
    run: Run, home: Path, server: FakeOpenAI, waiting: None
) -> None:
    server.reply(text="Ok.")
    ok(send(run, "--resume-draft", "--deny-call", "a1", "--approve-call", "all"))
    sent = {m["tool_call_id"]: m["content"] for m in server.requests[1].body["messages"]
            if m["role"] == "tool"}  # fmt: skip
    assert sent["a1"].startswith("error: denied") and not sent["a2"].startswith("error")
    assert runs(home) == 1


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--approve-call", "zz"], "no waiting call with that id (its waiting calls: 'a1', 'a2'"),
        (["--approve-call", "a1", "--deny-call", "a1"], "both --approve-call and --deny-call"),
        (["--approve-call", "all", "--deny-call", "all"], "contradict"),
    ],
)
def test_a_decision_that_misses_or_contradicts_is_refused(
    run: Run, home: Path, waiting: None, flags: list[str], message: str
) -> None:
    fails(send(run, "--resume-draft", *flags), 2, message)
    assert runs(home) == 0


def test_a_decision_needs_a_draft(run: Run, home: Path) -> None:
    fails(send(run, "go", "--approve-call", "a1"), 2, "give them with --resume-draft")


def test_waiting_calls_are_listed_escaped(
    run: Run, home: Path, server: FakeOpenAI, isolated_env: Path
) -> None:
    call = {"id": "k\u202e1", "name": "ask", "arguments": {"x": "\u2066\x9b"}}
    server.reply(tool_calls=[call])
    fails(send(run, "go"), 9, "needs approval")
    shown = ok(run("draft", "show"))
    assert "k\\u202e1  ask  " in shown.stderr and "\\u2066\\u009b" in shown.stderr
    assert "\u202e" not in shown.stderr and "awaits approval" in shown.stderr
    data = as_json(run("--json", "draft", "show"))
    assert data["waiting_calls"][0]["id"] == "k\u202e1"
    assert json.loads(data["waiting_calls"][0]["arguments"]) == {"x": "\u2066\x9b"}


def test_a_terminal_that_cannot_be_opened_is_said_not_taken_for_none(
    run: Run, home: Path, server: FakeOpenAI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only "no terminal" (ENXIO, ENOENT, ENODEV) means there is none; another failure to
    open it (here EISDIR) is named where the call is left waiting."""
    monkeypatch.setattr("agctl.cli.ask.TERMINAL", str(tmp_path))
    server.reply(tool_calls=calls(1, "a", tool="ask"))
    failed = fails(send(run, "go"), 9, "needs approval", "cannot be opened to ask on (")
    assert "no terminal" not in failed.stderr.splitlines()[0]
    assert runs(home) == 0
