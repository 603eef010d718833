"""`--provider NAME` on every command that calls a model, and `ctx show` telling the model
and window the turn would really use."""

from __future__ import annotations

import json
import socket
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import Result

Run = Callable[..., Result]


def _closed_port() -> int:
    """A loopback port nothing listens on: a request there fails at once."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def unreachable(run: Run, tmp_path: Path) -> str:
    """A session whose profile is an OpenAI-compatible server that is not there."""
    url = f"http://127.0.0.1:{_closed_port()}/v1"
    added = run("profile", "add", "away", "--base-url", url, "--model", "m-away", "--api-key", "k")
    assert added.exit_code == 0, added.stderr
    assert run("session", "new", "s", "--profile", "away").exit_code == 0
    for text in ("one", "two", "three", "four"):
        assert run("msg", "append", "user", text).exit_code == 0
        assert run("msg", "append", "assistant", f"re {text}").exit_code == 0
    assert run("slot", "derive", "b").exit_code == 0
    assert run("msg", "append", "user", "in b", "--slot", "b").exit_code == 0
    transcript = tmp_path / "transcript.jsonl"
    transcript.write_text(json.dumps({"input": "replayed"}) + "\n")
    return str(transcript)


COMMANDS = {
    "turn send": ["turn", "send", "hi"],
    "turn replay": ["turn", "replay", "{transcript}"],
    "ctx show": ["ctx", "show"],
    "ctx compress": ["ctx", "compress", "--keep-recent", "2", "--min-tokens", "0"],
    "slot summarize": ["slot", "summarize"],
    "slot merge": ["slot", "merge", "b", "--strategy", "summary"],
}


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_provider_offline_needs_no_network(name: str, run: Run, unreachable: str) -> None:
    args = [arg.format(transcript=unreachable) for arg in COMMANDS[name]]
    if name == "ctx show":  # it calls no model: it names the provider instead
        shown = json.loads(run(*args, "--provider", "offline", "--json").stdout)
        assert shown["provider"] == "offline"
        assert json.loads(run(*args, "--json").stdout)["provider"] == "openai"
        return
    # The control: without the flag the command goes to the server that is not there.
    refused = run(*args)
    assert refused.exit_code == 6, refused.stdout + refused.stderr
    result = run(*args, "--provider", "offline")
    assert result.exit_code == 0, result.stdout + result.stderr


def test_the_flag_wins_over_the_environment(
    run: Run, unreachable: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGCTL_PROVIDER", "openai")
    result = run("ctx", "show", "--provider", "offline", "--json")
    assert json.loads(result.stdout)["provider"] == "offline"
    assert run("turn", "send", "hi", "--provider", "offline").exit_code == 0


def test_an_unknown_provider_is_a_usage_error(run: Run, unreachable: str) -> None:
    result = run("turn", "send", "hi", "--provider", "carrier-pigeon")
    assert result.exit_code == 2
    assert "carrier-pigeon" in result.stderr


@pytest.mark.parametrize(
    "flags",
    [[], ["--model", "m-flag"], ["--provider", "offline"], ["--profile", "near"]],
    ids=["profile of the session", "--model", "--provider", "--profile"],
)
def test_ctx_show_reports_what_the_turn_really_uses(
    flags: list[str], run: Run, unreachable: str
) -> None:
    assert (
        run("profile", "add", "near", "--provider", "offline", "--model", "m-near").exit_code == 0
    )
    shown = json.loads(run("ctx", "show", *flags, "--json").stdout)
    sent = json.loads(run("turn", "send", "hi", "--dry-run", *flags, "--json").stdout)
    assert shown["provider"] == sent["provider"]
    assert shown["model"] == sent["request"]["model"]
    text = run("ctx", "show", *flags).stdout.splitlines()[0]
    assert f"{shown['provider']} model {shown['model']} · window {shown['window']}" in text


def test_ctx_show_reports_the_profiles_window(run: Run, unreachable: str) -> None:
    assert run("config", "set", "context_windows.m-away", "5000").exit_code == 0
    shown = json.loads(run("ctx", "show", "--json").stdout)
    assert (shown["model"], shown["window"]) == ("m-away", 5000)
    full = "word " * 6000
    # The turn checks the same window: a prompt past it is refused as context full.
    assert run("turn", "send", full, "--provider", "offline").exit_code == 7
