"""`--script` replies are read from the first by each command, whatever turns the session
already has (before: by the session's turn number, so a one-reply script failed on any
session with a turn, and the demo padded its script with three unused replies)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from click.testing import Result

Run = Callable[..., Result]


def ok(result: Result) -> Result:
    assert result.exit_code == 0, (result.stdout, result.stderr)
    return result


def test_a_script_starts_at_its_first_reply_in_a_session_with_turns(
    run: Run, tmp_path: Path
) -> None:
    ok(run("session", "new", "s"))
    for prompt in ("one", "two"):
        ok(run("turn", "send", prompt))
    script = tmp_path / "script.json"
    script.write_text(json.dumps(["scripted"]))
    sent = json.loads(ok(run("--json", "turn", "send", "three", "--script", str(script))).stdout)
    assert (sent["turn"], sent["reply"]) == (3, "scripted")
    again = json.loads(ok(run("--json", "turn", "send", "four", "--script", str(script))).stdout)
    assert (again["turn"], again["reply"]) == (4, "scripted")  # each command from the first


def test_a_replay_advances_through_the_script_turn_by_turn(run: Run, tmp_path: Path) -> None:
    ok(run("session", "new", "s"))
    ok(run("turn", "send", "before"))
    script = tmp_path / "script.json"
    script.write_text(json.dumps(["first", "second", "third"]))
    transcript = tmp_path / "chat.jsonl"
    transcript.write_text("".join(json.dumps({"input": f"q{n}"}) + "\n" for n in range(3)))
    ok(run("turn", "replay", str(transcript), "--script", str(script)))
    ok(run("turn", "replay", str(transcript), "--script", str(script)))  # again, from the first
    replies = json.loads(ok(run("--json", "msg", "list")).stdout)
    texts = [m["content"] for m in replies if m["role"] == "assistant"]
    assert texts[1:] == ["first", "second", "third"] * 2


def test_a_scripted_tool_loop_takes_its_steps_in_a_later_turn(run: Run, tmp_path: Path) -> None:
    ok(run("session", "new", "s"))
    ok(run("turn", "send", "before"))
    call = {"name": "echo", "arguments": {"text": "hi"}}
    script = tmp_path / "script.json"
    script.write_text(json.dumps([[{"content": None, "tool_calls": [call]}, "done"]]))
    tool = ["tool", "add", "echo", "--description", "Echo.", "--approve", "auto", "--", "cat"]
    ok(run(*tool))
    sent = ok(run("--json", "turn", "send", "go", "-T", "echo", "--script", str(script)))
    data = json.loads(sent.stdout)
    assert (data["turn"], data["reply"], len(data["steps"])) == (2, "done", 2)


def test_a_script_that_runs_out_says_which_reply_was_missing(run: Run, tmp_path: Path) -> None:
    ok(run("session", "new", "s"))
    script = tmp_path / "script.json"
    script.write_text(json.dumps(["only"]))
    transcript = tmp_path / "chat.jsonl"
    transcript.write_text("".join(json.dumps({"input": f"q{n}"}) + "\n" for n in range(2)))
    result = run("turn", "replay", str(transcript), "--script", str(script))
    assert result.exit_code == 6
    assert "has 1 replies, one a turn this command sends; its turn 2" in result.stderr
