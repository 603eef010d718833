"""Each tool call of a turn shows on stderr as one line: the tool, its arguments (escaped,
cut short), and how it ended (exit and bytes printed, or denied, refused, replayed).
Before: calls showed only with -v or --json."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import Result
from terminal import on_terminal, raw_controls

from agctl.cli.turn import call_line
from agctl.turn.steps import CallRecord

Run = Callable[..., Result]
HOSTILE = "a\u202eb\x1b[31mred\x07"  # a bidi override, a colour, a bell
LONG = "x" * 100


def ok(result: Result) -> Result:
    assert result.exit_code == 0, (result.stdout, result.stderr)
    return result


@pytest.fixture
def tools(run: Run, tmp_path: Path) -> Path:
    """Session s; `cat` runs unasked, `never` is never run; a script whose one turn calls
    cat twice (hostile and long arguments), a tool no one defined, never (denied) and
    ghost (whose program is not there)."""
    ok(run("session", "new", "s"))
    cat = ["--description", "Echo.", "--approve", "auto", "--", "cat"]
    ok(run("tool", "add", "cat", *cat))
    ok(run("tool", "add", "never", "--description", "No.", "--approve", "deny", "--", "true"))
    ghost = ["--description", "Gone.", "--approve", "auto", "--", str(tmp_path / "no-such-program")]
    ok(run("tool", "add", "ghost", *ghost))
    calls = [
        {"name": "cat", "arguments": {"text": HOSTILE}},
        {"name": "cat", "arguments": {"text": LONG}},
        {"name": "missing", "arguments": {}},
        {"name": "never", "arguments": {}},
        {"name": "ghost", "arguments": {}},
    ]
    script = tmp_path / "script.json"
    script.write_text(json.dumps([[{"content": "Looking.", "tool_calls": calls}, "done"]]))
    return script


def test_each_call_is_one_line_on_stderr(run: Run, tools: Path) -> None:
    result = ok(run("turn", "send", "go", "--tools", "all", "--script", str(tools)))
    assert result.stdout == "done\n"
    lines = result.stderr.splitlines()
    assert len(lines) == 5, result.stderr
    assert lines[0].startswith('tool cat({"text":"a\\u202eb\\u001b[31mred')
    assert "\u202e" not in result.stderr and "\x1b" not in result.stderr
    assert lines[1].startswith('tool cat({"text":"' + "x" * 50 + "…) → exit 0, 111 bytes, ")
    assert lines[2] == "tool missing({}) → refused (unknown tool or invalid arguments), not run"
    assert lines[3] == "tool never({}) → denied, not run"
    assert lines[4] == (
        "tool ghost({}) → could not start (no such program, or not allowed to run), not run"
    )


@pytest.mark.parametrize("quiet", [("--json",), ("-q",), ("--jsonl",)])
def test_json_and_quiet_show_no_call_lines(run: Run, tools: Path, quiet: tuple[str]) -> None:
    args = ["turn", "send", "go", "--tools", "all", "--script", str(tools)]
    result = ok(run(*quiet, *args) if quiet[0] != "--jsonl" else run(*args, *quiet))
    assert "tool " not in result.stderr
    if quiet[0] == "--json":
        steps = json.loads(result.stdout)["steps"]
        outcomes = [c["outcome"] for c in steps[0]["tool_calls"]]
        assert outcomes == ["ran", "ran", "error", "denied", "error"]
        assert "output_bytes" not in steps[0]["tool_calls"][0]  # the JSON stays as it was


def test_a_replay_shows_its_calls_too(run: Run, tools: Path, tmp_path: Path) -> None:
    transcript = tmp_path / "chat.jsonl"
    transcript.write_text(json.dumps({"input": "go"}) + "\n")
    result = ok(run("turn", "replay", str(transcript), "--tools", "all", "--script", str(tools)))
    assert [line.split("(")[0] for line in result.stderr.splitlines()] == [
        "tool cat",
        "tool cat",
        "tool missing",
        "tool never",
        "tool ghost",
    ]


def test_a_call_line_on_a_real_terminal_drives_nothing(
    run: Run, tools: Path, isolated_env: Path
) -> None:
    env = {**os.environ, "AGCTL_DATA_DIR": str(isolated_env), "PYTHONIOENCODING": "utf-8"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    args = ("turn", "send", "go", "--tools", "all", "--script", str(tools), "--stream")
    status, received = on_terminal(env, *args)
    assert status == 0, received
    assert raw_controls(received) == []
    text = received.decode()
    assert "\u202e" not in text
    # The streamed "Looking." ends its line before the first call's.
    assert 'Looking.\ntool cat({"text":"a\\u202eb\\u001b[31mred' in text.replace("\r\n", "\n")
    assert "tool never({}) → denied, not run" in text


def test_a_replayed_call_says_nothing_ran() -> None:
    record = CallRecord("c1", "f", "{}", outcome="replayed")
    assert call_line(record) == "tool f({}) → answered from the cassette, not run"
    ran = CallRecord("c2", "f", "{}", exit=3, duration_ms=5, output_bytes=1)
    assert call_line(ran) == "tool f({}) → exit 3, 1 byte, 5 ms"
    unstarted = CallRecord("c5", "f", "{}", outcome="error", output_bytes=0)
    assert (
        call_line(unstarted)
        == "tool f({}) → could not start (no such program, or not allowed to run), not run"
    )
    named = CallRecord("c3", "n" * 100 + "\u2067", "{}", outcome="error")
    assert call_line(named).startswith("tool " + "n" * 59 + "…({}) → refused")
    assert call_line(CallRecord("c4", "g\u2067", "{}", outcome="denied")).startswith(
        "tool g\\u2067({})"
    )


def test_a_call_left_waiting_for_approval_has_its_line_too(run: Run, tmp_path: Path) -> None:
    """With no terminal to ask on, a call of a tool set to ask waits in the draft (exit 9):
    its line says so, beside the line of the call of the same reply that ran."""
    ok(run("session", "new", "s"))
    ok(run("tool", "add", "asked", "--description", "Asks.", "--", "true"))
    ok(run("tool", "add", "cat", "--description", "Echo.", "--approve", "auto", "--", "cat"))
    calls = [{"name": "asked", "arguments": {}}, {"name": "cat", "arguments": {"x": 1}}]
    script = tmp_path / "script.json"
    script.write_text(json.dumps([[{"content": "", "tool_calls": calls}, "done"]]))
    result = run("turn", "send", "go", "--tools", "all", "--script", str(script))
    assert result.exit_code == 9, result.stderr
    lines = result.stderr.splitlines()
    assert lines[0] == "tool asked({}) → waits for approval in the draft, not run"
    assert lines[1].startswith('tool cat({"x":1}) → exit 0, 7 bytes, ')
    assert lines[2].startswith("agctl: error: ")
