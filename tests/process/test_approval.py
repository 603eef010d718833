"""Approving tool calls, for real: the question on a pseudo-terminal that is the process's
controlling terminal (stdin elsewhere), and a turn with no terminal at all that stops with
its waiting calls in the draft, decided later by `turn send --resume-draft`.

Real processes (`python -m agctl`), real HTTP to the fake OpenAI server on loopback, and a
real tool logging each run to a file.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import Result
from fake_openai import FakeOpenAI
from helpers import ok
from terminal import TIMEOUT, ControllingTerminal, raw_controls

from agctl.store import Store
from agctl.turn.tools import DENIED

Run = Callable[..., Result]

# Logs its run to $HOME/runs.log as {"tool": ..., "name": ...}, then answers.
MARK = """
import json, os, sys
args = json.load(sys.stdin)
with open(os.path.join(os.environ["HOME"], "runs.log"), "a") as runs:
    runs.write(json.dumps({"tool": sys.argv[1], "name": args["name"]}) + "\\n")
print("marked " + args["name"])
"""
SCHEMA = json.dumps({"type": "object", "properties": {"name": {"type": "string"}}})
QUESTION = b"[y/n/always] "


@pytest.fixture
def home(run: Run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Tools `mark` (left at the default approve: ask) and `note` (approve: auto), both
    logging their runs to $HOME/runs.log; session s. The HOME the tools see."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    program = tmp_path / "mark.py"
    program.write_text(MARK)
    ok(run("tool", "add", "mark", "--description", "Mark", "--parameters", SCHEMA,
           "--", sys.executable, str(program), "mark"))  # fmt: skip
    ok(run("tool", "add", "note", "--description", "Note", "--parameters", SCHEMA,
           "--approve", "auto", "--", sys.executable, str(program), "note"))  # fmt: skip
    ok(run("session", "new", "s"))
    return home


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server
    assert server.errors == []


def runs(home: Path) -> list[str]:
    log = home / "runs.log"
    lines = log.read_text().splitlines() if log.exists() else []
    return [json.loads(line)["name"] for line in lines]


def environment(server: FakeOpenAI) -> dict[str, str]:
    return {**os.environ, "AGCTL_PROVIDER": "openai", "AGCTL_BASE_URL": server.base_url,
            "AGCTL_MODEL": "m", "AGCTL_API_KEY": "k", "PYTHONIOENCODING": "utf-8"}  # fmt: skip


def results(request: Any) -> dict[str, str]:
    """The tool results a request carries, by call id."""
    return {
        m["tool_call_id"]: m["content"] for m in request.body["messages"] if m["role"] == "tool"
    }


def call(call_id: str, tool: str, name: str) -> dict[str, Any]:
    return {"id": call_id, "name": tool, "arguments": {"name": name}}


# ---- asked on the terminal -----------------------------------------------------------------


def test_the_terminal_is_asked_and_yes_no_and_always_are_obeyed(
    home: Path, fake: FakeOpenAI
) -> None:
    """Four steps of `mark` (approve: ask) with stdin at /dev/null: asked on /dev/tty
    three times; yes runs it, no tells the model DENIED, always runs the next call of the
    tool unasked."""
    fake.reply(tool_calls=[call("c1", "mark", "yes")])
    fake.reply(tool_calls=[call("c2", "mark", "no")])
    fake.reply(tool_calls=[call("c3", "mark", "always")])
    fake.reply(tool_calls=[call("c4", "mark", "unasked")])
    fake.reply(text="All done.")
    terminal = ControllingTerminal(
        environment(fake), "-s", "s", "turn", "send", "go", "-T", "mark", "--no-stream"
    )
    first = terminal.wait_for(QUESTION)
    assert b"tool mark" in first and b'{"name":"yes"}' in first
    terminal.type("y")
    assert b'{"name":"no"}' in terminal.wait_for(QUESTION)
    terminal.type("n")
    assert b'{"name":"always"}' in terminal.wait_for(QUESTION)
    terminal.type("always")
    status, out, err = terminal.finish()
    assert status == 0, err
    assert out.strip() == "All done."
    assert terminal.received.count(QUESTION) == 3, terminal.received
    assert runs(home) == ["yes", "always", "unasked"]
    requests = fake.requests
    assert results(requests[1]) == {"c1": "marked yes\n"}
    assert results(requests[2])["c2"] == DENIED
    assert results(requests[4])["c4"] == "marked unasked\n"


def test_the_question_shows_what_the_model_wrote_escaped(home: Path, fake: FakeOpenAI) -> None:
    """Bidi overrides, C1 controls and escape sequences in the arguments never reach the
    terminal raw: each is shown as its escape."""
    hostile = "safe\u202etxt.exe\u2066 \x9b2J \x1b]0;evil\x07 end"
    fake.reply(tool_calls=[call("c1", "mark", hostile)])
    fake.reply(text="Ok.")
    terminal = ControllingTerminal(
        environment(fake), "-s", "s", "turn", "send", "go", "-T", "mark", "--no-stream"
    )
    shown = terminal.wait_for(QUESTION)
    terminal.type("n")
    status, _, err = terminal.finish()
    assert status == 0, err
    assert b"\\u202e" in shown and b"\\u2066" in shown and b"\\u009b" in shown
    assert b"\\u001b" in shown
    assert raw_controls(terminal.received.replace(b"\r\n", b"\n")) == []
    text = terminal.received.decode()
    assert "\u202e" not in text and "\u2066" not in text
    assert runs(home) == []


def test_a_terminal_that_closes_before_an_answer_leaves_the_call_waiting(
    home: Path, fake: FakeOpenAI, isolated_env: Path
) -> None:
    """No answer is not yes: the call waits in the draft, exit 9."""
    fake.reply(tool_calls=[call("c1", "mark", "unanswered")])
    terminal = ControllingTerminal(
        environment(fake), "-s", "s", "turn", "send", "go", "-T", "mark", "--no-stream"
    )
    terminal.wait_for(QUESTION)
    os.write(terminal.master, b"\x04")  # Ctrl-D: end of input on the terminal
    status, _, err = terminal.finish()
    assert status == 9, err
    assert "the terminal closed before an answer came" in err
    assert runs(home) == []
    assert Store(isolated_env).load_draft("s", "default").awaiting_approval == ["c1"]


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_a_signal_while_a_worker_thread_asks_stops_the_question_and_runs_nothing(
    home: Path, fake: FakeOpenAI, isolated_env: Path, signum: int
) -> None:
    """With --tool-jobs 2 the questions are asked from worker threads: a signal stops the
    one on the terminal and the one waiting its turn, and neither call runs (before, agctl
    waited on for an answer, and a "y" typed later still ran the tool)."""
    fake.reply(tool_calls=[call("c1", "mark", "first"), call("c2", "mark", "second")])
    terminal = ControllingTerminal(
        environment(fake), "-s", "s", "turn", "send", "go", "-T", "mark", "--no-stream",
        "--tool-jobs", "2",
    )  # fmt: skip
    terminal.wait_for(QUESTION)
    terminal.process.send_signal(signum)
    status, _, err = terminal.finish()
    assert status == 128 + signum, err
    assert runs(home) == []
    assert terminal.received.count(QUESTION) == 1, terminal.received
    draft = Store(isolated_env).load_draft("s", "default")
    assert [m.role for m in draft.steps] == ["assistant"]


# ---- no terminal: decided later ------------------------------------------------------------


def agctl(server: FakeOpenAI, *args: str) -> subprocess.CompletedProcess[str]:
    """agctl in a session of its own: it has no controlling terminal at all."""
    return subprocess.run(
        [sys.executable, "-m", "agctl", "-s", "s", *args],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env=environment(server),
        start_new_session=True,
        timeout=TIMEOUT,
        check=False,
    )


@pytest.mark.parametrize("decision", ["--approve-call", "--deny-call"])
def test_a_turn_with_no_terminal_waits_in_its_draft_and_goes_on_when_decided(
    home: Path, fake: FakeOpenAI, isolated_env: Path, decision: str
) -> None:
    """A reply calls `mark` (ask) and `note` (auto): note runs, mark waits, exit 9, the
    draft lists it. --resume-draft with --approve-call runs it (note not again), with
    --deny-call the model gets DENIED; either way the turn goes on and commits."""
    fake.reply(tool_calls=[call("m1", "mark", "asked"), call("n1", "note", "auto")])
    stopped = agctl(fake, "turn", "send", "go", "-T", "mark", "-T", "note", "--no-stream")
    assert stopped.returncode == 9, stopped.stderr
    assert "mark 'm1'" in stopped.stderr and "--approve-call" in stopped.stderr
    assert runs(home) == ["auto"]
    shown = agctl(fake, "--json", "draft", "show")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["waiting_calls"] == [
        {"id": "m1", "tool": "mark", "arguments": '{"name": "asked"}', "awaiting_approval": True}
    ]
    listed = agctl(fake, "draft", "show")
    assert "m1  mark  " in listed.stderr and "awaits approval" in listed.stderr

    fake.reply(text="Finished.")
    resumed = agctl(fake, "turn", "send", "--resume-draft", "-T", "mark", "-T", "note",
                    "--no-stream", decision, "m1")  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout.strip() == "Finished."
    second = results(fake.requests[1])
    assert second["n1"] == "marked auto\n"
    if decision == "--approve-call":
        assert second["m1"] == "marked asked\n" and runs(home) == ["auto", "asked"]
    else:
        assert second["m1"] == DENIED and runs(home) == ["auto"]
    assert len(fake.requests) == 2
    slot = Store(isolated_env).load_slot("s")
    assert [m.role for m in slot.messages] == ["user", "assistant", "tool", "tool", "assistant"]
    assert agctl(fake, "draft", "show").returncode == 3, "the committed turn dropped its draft"
