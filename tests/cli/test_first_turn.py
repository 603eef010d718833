"""The first command a new user types: `agctl turn send "hello"` on a fresh machine starts
a session, makes it current and says so, where it said "no session selected"; a session
named that does not exist is still not found, and a dry run or a resumed draft still need
the session they are about."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from click.testing import Result

from agctl.base.errors import EXIT_NOT_FOUND, EXIT_USAGE

Run = Callable[..., Result]


def test_a_first_turn_with_no_session_starts_one_and_the_next_goes_on_in_it(run: Run) -> None:
    first = run("turn", "send", "hello", "--provider", "offline")
    assert first.exit_code == 0, first.output
    listed = json.loads(run("session", "list", "--json").stdout)
    assert len(listed) == 1
    started = listed[0]["id"]
    assert f"agctl: no session was selected: started {started}, now current" in first.stderr
    assert 'you said "hello"' in first.stdout

    again = run("turn", "send", "and then?", "--provider", "offline")
    assert again.exit_code == 0 and "started" not in again.stderr
    assert [s["id"] for s in json.loads(run("session", "list", "--json").stdout)] == [started]
    messages = json.loads(run("msg", "list", "--json").stdout)
    assert [m["content"] for m in messages][::2] == ["hello", "and then?"]


def test_quiet_starts_it_without_a_word(run: Run) -> None:
    result = run("-q", "turn", "send", "hello", "--provider", "offline")
    assert result.exit_code == 0 and result.stderr == ""
    assert len(json.loads(run("session", "list", "--json").stdout)) == 1


def test_what_still_needs_a_session_says_so(run: Run) -> None:
    missing = run("-s", "nope", "turn", "send", "hello", "--provider", "offline")
    assert missing.exit_code == EXIT_NOT_FOUND
    dry = run("turn", "send", "hello", "--provider", "offline", "--dry-run")
    assert dry.exit_code == EXIT_USAGE and "no session selected" in dry.stderr
    resumed = run("turn", "send", "--resume-draft", "--provider", "offline")
    assert resumed.exit_code == EXIT_USAGE and "no session selected" in resumed.stderr
    assert json.loads(run("session", "list", "--json").stdout) == []


def test_bad_input_on_a_first_turn_starts_no_session(
    run: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The slot, the tools and the model options are checked before a session is started:
    a typo on a fresh machine leaves nothing behind."""
    refused = [
        (("-o", "seed", "1", "--provider", "anthropic"), EXIT_USAGE, "accepts no model option"),
        (("-T", "nosuch", "--provider", "offline"), EXIT_NOT_FOUND, "no tool named nosuch"),
        (("--slot", "other", "--provider", "offline"), EXIT_NOT_FOUND, "slot 'other' not found"),
    ]
    monkeypatch.setenv("ANTHROPIC_API_KEY", "k")
    for args, code, said in refused:
        result = run("turn", "send", "hello", *args)
        assert result.exit_code == code, result.output
        assert said in result.stderr and "now current" not in result.stderr
        assert json.loads(run("session", "list", "--json").stdout) == []
    ok = run("turn", "send", "hello", "--slot", "default", "--provider", "offline")
    assert ok.exit_code == 0 and "started" in ok.stderr
