"""`turn send` with tools: the loop from the command line, approval without a terminal,
the step log after a kill -9 between steps, and a recorded run replayed with no tool."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import Result
from helpers import as_json, fails, fails_with_message, ok

from agctl.store import Store

Run = Callable[..., Result]

# A tool that logs each run to $HOME/runs.log (so a test counts them), then answers.
TOOL = """
import json, os, sys
args = json.load(sys.stdin)
home = os.environ["HOME"]
with open(home + "/runs.log", "a") as runs:
    runs.write(json.dumps(args) + "\\n")
print(args["a"] * args["b"])
"""
SCHEMA = json.dumps(
    {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        "required": ["a", "b"],
    }
)


@pytest.fixture
def tool(run: Run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Tool `mul` (approve: ask), its runs logged to $HOME/runs.log; the HOME it sees."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    program = tmp_path / "mul.py"
    program.write_text(TOOL)
    ok(run("tool", "add", "mul", "--description", "Multiply", "--parameters", SCHEMA,
           "--", sys.executable, str(program)))  # fmt: skip
    ok(run("session", "new", "s"))
    return home


def runs(home: Path) -> list[dict[str, int]]:
    log = home / "runs.log"
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def script(tmp_path: Path, *turns: object) -> str:
    path = tmp_path / "script.json"
    path.write_text(json.dumps(list(turns)))
    return str(path)


MUL = {"tool_calls": [{"id": "m1", "name": "mul", "arguments": {"a": 6, "b": 7}}]}


def test_a_turn_runs_the_tool_and_answers(run: Run, tool: Path, tmp_path: Path) -> None:
    steps = script(tmp_path, [MUL, "It is 42."])
    result = ok(run("--json", "turn", "send", "6*7?", "-T", "mul", "--approve", "auto",
                    "--script", steps))  # fmt: skip
    data = as_json(result)
    assert data["reply"] == "It is 42."
    assert [c["name"] for c in data["steps"][0]["tool_calls"]] == ["mul"]
    assert data["steps"][0]["tool_calls"][0]["exit"] == 0
    assert runs(tool) == [{"a": 6, "b": 7}]
    roles = [m["role"] for m in as_json(ok(run("--json", "msg", "list")))]
    assert roles == ["user", "assistant", "tool", "assistant"]


def test_a_tool_that_asks_with_no_terminal_stops_the_turn_at_exit_9(
    run: Run, tool: Path, tmp_path: Path
) -> None:
    steps = script(tmp_path, [MUL, "It is 42."])
    waiting = fails_with_message(
        run("turn", "send", "6*7?", "-T", "mul", "--script", steps), 9, "needs approval"
    )
    assert waiting.stderr.startswith("tool mul(")  # the call's line, then the error
    assert runs(tool) == [] and as_json(ok(run("--json", "msg", "list"))) == []
    denied = as_json(ok(run("--json", "turn", "send", "6*7?", "-T", "mul", "--approve", "never",
                            "--script", steps)))  # fmt: skip
    assert denied["steps"][0]["tool_calls"][0]["outcome"] == "denied" and runs(tool) == []


def test_an_unknown_tool_is_refused_before_any_request(run: Run, tool: Path) -> None:
    fails(run("turn", "send", "hi", "-T", "nope"), 3, "no tool named nope")
    fails(run("turn", "send", "hi", "--approve", "auto"), 2, "no tool is offered")


def test_the_dry_run_shows_the_tools_offered(run: Run, tool: Path) -> None:
    request = as_json(ok(run("--json", "turn", "send", "hi", "-T", "mul", "--tool-choice",
                             "mul", "--dry-run")))["request"]  # fmt: skip
    assert [t["function"]["name"] for t in request["tools"]] == ["mul"]
    assert request["tool_choice"] == {"type": "function", "function": {"name": "mul"}}


def test_a_turn_killed_between_steps_goes_on_without_running_the_tool_again(
    tool: Path, tmp_path: Path, isolated_env: Path
) -> None:
    """kill -9 while the model is asked for step 2: the step log (the draft) has step 1's
    result, and --resume-draft finishes the turn with it; the tool ran once."""
    from fake_openai import FakeOpenAI

    with FakeOpenAI() as server:
        server.reply(tool_calls=[{"id": "m1", "name": "mul", "arguments": '{"a": 6, "b": 7}'}])
        # Queued once step 1's request has taken its reply: step 2's request hangs.
        server.before_reply(lambda: server.fail("slow", seconds=30))
        env = {**os.environ, "AGCTL_PROVIDER": "openai", "AGCTL_BASE_URL": server.base_url,
               "AGCTL_MODEL": "m", "AGCTL_API_KEY": "k"}  # fmt: skip
        argv = [sys.executable, "-m", "agctl", "-s", "s", "turn", "send", "6*7?", "-T", "mul",
                "--approve", "auto", "--no-stream"]  # fmt: skip
        turn = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 30
        while len(server.requests) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(server.requests) == 2, turn.communicate()
        turn.send_signal(signal.SIGKILL)
        turn.wait()
        assert runs(tool) == [{"a": 6, "b": 7}]
        draft = Store(isolated_env).load_draft("s", "default")
        assert [m.role for m in draft.steps] == ["assistant", "tool"]
        server.reply(text="It is 42.")
        done = subprocess.run([*argv[:7], "--resume-draft", "-T", "mul", "--approve", "auto",
                               "--no-stream"], env=env, capture_output=True, text=True)  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert "It is 42." in done.stdout
    assert runs(tool) == [{"a": 6, "b": 7}], "the recorded result was used"
    slot = Store(isolated_env).load_slot("s")
    assert [m.role for m in slot.messages] == ["user", "assistant", "tool", "assistant"]


def test_a_recorded_tool_run_replays_with_no_tool_on_path(
    run: Run, tool: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    steps = script(tmp_path, [MUL, "It is 42."])
    cassette = str(tmp_path / "run.cassette")
    ok(run("turn", "send", "6*7?", "-T", "mul", "--approve", "auto", "--script", steps,
           "--record", cassette))  # fmt: skip
    assert len(runs(tool)) == 1
    ok(run("session", "new", "ci"))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    data = as_json(ok(run("--json", "-s", "ci", "turn", "send", "6*7?", "-T", "mul",
                          "--cassette", cassette)))  # fmt: skip
    assert data["reply"] == "It is 42." and len(runs(tool)) == 1
    assert data["steps"][0]["tool_calls"][0]["outcome"] == "replayed"


@pytest.mark.parametrize("shape", ["openai", "ollama"])
def test_parallel_calls_over_http_run_in_order_in_either_delta_shape(
    tool: Path, shape: str, isolated_env: Path
) -> None:
    """Three calls in one streamed reply: OpenAI numbers them 0, 1, 2 and sends arguments
    in pieces; Ollama sends each whole as index 0. Both make three calls, run in order."""
    from fake_openai import FakeOpenAI

    with FakeOpenAI() as server:
        calls = [{"id": f"p{n}", "name": "mul", "arguments": {"a": n, "b": 10}} for n in (1, 2, 3)]
        server.reply(tool_calls=calls, same_index=shape == "ollama")
        server.reply(text="10, 20 and 30.")
        env = {**os.environ, "AGCTL_PROVIDER": "openai", "AGCTL_BASE_URL": server.base_url,
               "AGCTL_MODEL": "m", "AGCTL_API_KEY": "k"}  # fmt: skip
        done = subprocess.run(
            [sys.executable, "-m", "agctl", "-s", "s", "--json", "turn", "send", "times ten",
             "-T", "mul", "--approve", "auto", "--stream", "--tool-jobs", "3"],
            env=env, capture_output=True, text=True,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        second = server.requests[1].body["messages"]
    assert [r["a"] for r in runs(tool)] and sorted(r["a"] for r in runs(tool)) == [1, 2, 3]
    results = [(m["tool_call_id"], m["content"].strip()) for m in second if m["role"] == "tool"]
    assert results == [("p1", "10"), ("p2", "20"), ("p3", "30")]
    assert json.loads(done.stdout)["reply"] == "10, 20 and 30."


def test_a_three_step_tool_run_recorded_once_replays_in_ci_with_check(
    run: Run, tool: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Record a transcript's tool-using turn (three requests, two tool rounds) with the
    tools running, then replay it from the cassette in a fresh data dir with no tool on
    PATH, checking the reply and the calls: nothing runs, everything matches."""
    steps = script(
        tmp_path,
        [
            {"tool_calls": [{"id": "s1", "name": "mul", "arguments": {"a": 6, "b": 7}}]},
            {"tool_calls": [{"id": "s2", "name": "mul", "arguments": {"a": 42, "b": 2}}]},
            "6*7*2 is 84.",
        ],
    )
    transcript = tmp_path / "t.jsonl"
    line = {
        "input": "What is 6*7*2?",
        "expect": "6*7*2 is 84.",
        "expect_tools": [
            {"name": "mul", "arguments": {"a": 6}},
            {"name": "mul", "arguments": {"b": 2}},
        ],
    }
    transcript.write_text(json.dumps(line) + "\n")
    cassette = tmp_path / "ci.cassette"
    ok(run("turn", "replay", str(transcript), "--new-session", "rec", "-T", "mul", "--approve",
           "auto", "--script", steps, "--record", str(cassette), "--check"))  # fmt: skip
    assert len(runs(tool)) == 2
    monkeypatch.setenv("PATH", str(tmp_path / "nothing-here"))
    monkeypatch.setenv("AGCTL_DATA_DIR", str(tmp_path / "a-fresh-data-dir"))
    printed = ok(run("--json", "turn", "replay", str(transcript), "--new-session", "ci",
                     "-T", "mul", "--cassette", str(cassette), "--check"))  # fmt: skip
    replayed = json.loads(printed.stdout.splitlines()[-1])
    summary = replayed.get("summary", replayed)
    assert summary["matched"] == 1 and summary["mismatched"] == []
    assert len(runs(tool)) == 2, "no tool ran in the replay"
    wrong = tmp_path / "wrong.jsonl"
    wrong.write_text(
        json.dumps({**line, "expect_tools": [{"name": "mul", "arguments": {"a": 9}}]}) + "\n"
    )
    failed = run("turn", "replay", str(wrong), "--new-session", "ci2", "-T", "mul",
                 "--cassette", str(cassette), "--check")  # fmt: skip
    assert failed.exit_code == 8 and '-tool call: mul {"a":9}' in failed.output


def test_a_long_result_is_cut_for_the_model_and_kept_whole_in_the_slot(
    run: Run, tmp_path: Path, isolated_env: Path
) -> None:
    program = tmp_path / "big.py"
    program.write_text("import sys; sys.stdin.read(); print('x' * 100000)")
    ok(run("tool", "add", "big", "--description", "Big", "--max-output", "1000", "--approve",
           "auto", "--", sys.executable, str(program)))  # fmt: skip
    ok(run("session", "new", "s"))
    steps = script(tmp_path, [{"tool_calls": [{"id": "b1", "name": "big"}]}, "Long."])
    ok(run("turn", "send", "go", "-T", "big", "--script", steps))
    (result,) = [m for m in Store(isolated_env).load_slot("s").messages if m.role == "tool"]
    assert len(result.text()) <= 1000 and "bytes cut" in result.text()
    assert result.output is not None and result.output.startswith("x" * 100000)
    assert result.output_sha256 and len(result.output_sha256) == 64
    exported = as_json(ok(run("--json", "msg", "export", "--format", "openai")))
    assert all("output" not in m for m in exported), "the whole output is kept, never sent"
