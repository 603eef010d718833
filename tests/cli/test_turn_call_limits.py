"""How many tool calls a turn may run: the caps per reply and per turn (flag and config),
over real HTTP from the fake OpenAI server, with a real tool counting its runs in a file."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import Result
from fake_openai import FakeOpenAI
from helpers import as_json, fails, fails_with_message, ok

from agctl.store import Store

Run = Callable[..., Result]

# Counts its runs: one line in $HOME/runs.log each.
COUNT = (
    "import os, sys; sys.stdin.read(); open(os.environ['HOME'] + '/runs.log', 'a').write('x\\n')"
)


@pytest.fixture
def home(run: Run, server: FakeOpenAI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Tool `count` (approve: auto), adding a line to $HOME/runs.log each run; session s;
    agctl pointed at the fake server."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    ok(run("tool", "add", "count", "--description", "Count", "--approve", "auto",
           "--", sys.executable, "-c", COUNT))  # fmt: skip
    ok(run("session", "new", "s"))
    for key, value in (("PROVIDER", "openai"), ("BASE_URL", server.base_url),
                       ("MODEL", "m"), ("API_KEY", "k")):  # fmt: skip
        monkeypatch.setenv(f"AGCTL_{key}", value)
    return home


def runs(home: Path) -> int:
    log = home / "runs.log"
    return len(log.read_text().splitlines()) if log.exists() else 0


def calls(count: int, prefix: str = "c") -> list[dict[str, Any]]:
    return [{"id": f"{prefix}{n}", "name": "count", "arguments": {}} for n in range(1, count + 1)]


def send(run: Run, *args: str) -> Result:
    return run("turn", "send", *args, "-T", "count", "--no-stream")


# ---- calls per reply and per turn ---------------------------------------------------------


def test_a_reply_with_33_calls_runs_none_and_keeps_the_draft(
    run: Run, home: Path, server: FakeOpenAI, isolated_env: Path
) -> None:
    server.reply(tool_calls=calls(33))
    fails(send(run, "go"), 10, "33 tool calls in one reply", "(32)", "none of its 33 calls")
    assert runs(home) == 0
    assert len(server.requests) == 1
    draft = Store(isolated_env).load_draft("s", "default")
    assert [len(m.tool_calls or ()) for m in draft.steps] == [33]
    # Raised for this turn, the calls kept in the draft run, each once.
    server.reply(text="Counted.")
    done = as_json(send(run, "--json", "--resume-draft", "--max-calls-per-reply", "33"))
    assert done["reply"] == "Counted." and runs(home) == 33
    assert len([m for m in server.requests[1].body["messages"] if m["role"] == "tool"]) == 33


def test_the_config_sets_the_cap_per_reply(run: Run, home: Path, server: FakeOpenAI) -> None:
    ok(run("config", "set", "max_calls_per_reply", "2"))
    server.reply(tool_calls=calls(3))
    fails(send(run, "go"), 10, "more than --max-calls-per-reply allows (2)")
    assert runs(home) == 0


def test_the_cap_per_turn_counts_every_reply_of_the_turn(
    run: Run, home: Path, server: FakeOpenAI
) -> None:
    """3 calls run; the next reply's 2 would make 5 of at most 4: none of them runs."""
    server.reply(tool_calls=calls(3, "a"))
    server.reply(tool_calls=calls(2, "b"))
    # The 3 calls that ran show their lines on stderr before the error.
    result = fails_with_message(
        send(run, "go", "--max-calls-per-turn", "4"), 10, "5 tool calls in this turn", "(4)"
    )
    assert result.stderr.count("\nagctl: error: ") == 1
    assert runs(home) == 3
