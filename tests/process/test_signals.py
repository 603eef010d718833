"""SIGTERM and SIGHUP stop a real `agctl turn send` as Ctrl-C does: while a tool runs, its
process group is killed (not left to run past its timeout), the draft keeps the steps
finished so far, and agctl exits 143 or 129; `--resume-draft` then runs no finished tool
again. While the model's reply is awaited, the prompt is kept the same way."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from click.testing import Result
from fake_openai import FakeOpenAI
from helpers import agctl_in, ok, process_dead, served_env, wait_for

from agctl.store import Store

SID = "s"
# A tool (args in the environment) that logs each run NAME to $HOME/runs.log; while the
# file $HOME/hang.NAME exists, it starts a child in its group, writes "PGID CHILD" to
# $HOME/running.NAME (renamed into place: read whole or not at all) and waits.
TOOL = (
    'echo "$TOOL_ARG_NAME" >> "$HOME/runs.log"; '
    'if [ -e "$HOME/hang.$TOOL_ARG_NAME" ]; then sleep 600 & '
    'echo "$$ $!" > "$HOME/running.tmp.$TOOL_ARG_NAME"; '
    'mv "$HOME/running.tmp.$TOOL_ARG_NAME" "$HOME/running.$TOOL_ARG_NAME"; wait; fi; '
    'echo "done $TOOL_ARG_NAME"'
)
PARAMETERS = json.dumps({"type": "object", "properties": {"name": {"type": "string"}}})
WAIT_S = 60


def call(name: str) -> dict[str, str]:
    return {"id": f"call_{name}", "name": "t", "arguments": json.dumps({"name": name})}


@pytest.fixture
def home(run: Callable[..., Result], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The HOME the tool `t` sees (timeout 600 s: only agctl's stop can end it early)."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    ok(run("tool", "add", "t", "--description", "Wait", "--parameters", PARAMETERS,
           "--args", "env", "--timeout", "600", "--approve", "auto",
           "--", "sh", "-c", TOOL))  # fmt: skip
    ok(run("session", "new", SID))
    return home


@pytest.fixture
def env(home: Path, server: FakeOpenAI) -> dict[str, str]:
    return served_env(server.base_url)


@pytest.fixture
def started() -> Iterator[list[subprocess.Popen[str]]]:
    """The agctl processes a test starts: none outlives it, even when it fails."""
    processes: list[subprocess.Popen[str]] = []
    yield processes
    for process in processes:
        if process.poll() is None:
            process.kill()
            process.wait()


def agctl(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return agctl_in(env, *args, session=SID)


def start(
    env: dict[str, str], started: list[subprocess.Popen[str]], *args: str
) -> subprocess.Popen[str]:
    argv = [sys.executable, "-m", "agctl", "-s", SID, "turn", "send", *args, "--no-stream"]
    process = subprocess.Popen(
        argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, env=env,
    )  # fmt: skip
    started.append(process)
    return process


def running(home: Path, name: str) -> tuple[int, int]:
    """The process group of the tool's run NAME and the child it started, once it runs."""
    path = home / f"running.{name}"
    wait_for(path.exists, f"the tool's run {name}")
    group, child = path.read_text().split()
    return int(group), int(child)


def group_gone(group: int) -> bool:
    """Whether no process of the group runs (a zombie runs nothing: a container's PID 1
    may never reap it)."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError):
            continue
        if int(fields[2]) == group and fields[0] not in ("Z", "X"):
            return False
    return True


def runs(home: Path) -> list[str]:
    return (home / "runs.log").read_text().split()


@pytest.mark.parametrize(("signum", "status"), [(signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_a_signal_while_a_tool_runs_kills_it_keeps_the_draft_and_resumes(
    env: dict[str, str],
    home: Path,
    server: FakeOpenAI,
    started: list[subprocess.Popen[str]],
    signum: signal.Signals,
    status: int,
    isolated_env: Path,
) -> None:
    (home / "hang.second").touch()
    server.reply(tool_calls=[call("first")])
    server.reply(tool_calls=[call("second")])
    turn = start(env, started, "go", "-T", "t", "--approve", "auto")
    group, child = running(home, "second")

    turn.send_signal(signum)
    _, stderr = turn.communicate(timeout=WAIT_S)

    assert turn.returncode == status, stderr
    assert f"({signum.name})" in stderr and "--resume-draft" in stderr, stderr
    assert group_gone(group) and process_dead(child)
    shown = agctl(env, "--json", "draft", "show")
    assert shown.returncode == 0, shown.stderr
    draft = json.loads(shown.stdout)
    assert draft["prompt"] == "go"
    steps = Store(isolated_env).load_draft(SID, "default").steps
    kept = [(m.role, m.tool_call_id) for m in steps]
    assert kept == [("assistant", None), ("tool", "call_first"), ("assistant", None)]
    assert runs(home) == ["first", "second"]

    (home / "hang.second").unlink()
    server.reply("All done.")
    resumed = agctl(env, "turn", "send", "--resume-draft", "-T", "t", "--approve", "auto",
                    "--no-stream")  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout == "All done.\n"
    assert runs(home) == ["first", "second", "second"], "the finished call did not run again"


def test_a_signal_stops_calls_running_at_once_in_other_threads(
    env: dict[str, str],
    home: Path,
    server: FakeOpenAI,
    started: list[subprocess.Popen[str]],
    isolated_env: Path,
) -> None:
    """With --tool-jobs 2 the tools run in worker threads: the main thread's interrupt
    stops them too, or agctl would wait for them (600 s) before it could exit."""
    (home / "hang.left").touch()
    (home / "hang.right").touch()
    server.reply(tool_calls=[call("left"), call("right")])
    turn = start(env, started, "go", "-T", "t", "--approve", "auto", "--tool-jobs", "2")
    groups = [running(home, "left"), running(home, "right")]

    turn.send_signal(signal.SIGTERM)
    _, stderr = turn.communicate(timeout=WAIT_S)

    assert turn.returncode == 143, stderr
    for group, child in groups:
        assert group_gone(group) and process_dead(child)
    steps = Store(isolated_env).load_draft(SID, "default").steps
    assert [m.role for m in steps] == ["assistant"]


def held_reply(server: FakeOpenAI) -> tuple[threading.Event, threading.Event]:
    """The server's next reply held until `release` is set; `arrived` is set when its
    request came (a handshake, not a sleep)."""
    arrived, release = threading.Event(), threading.Event()

    def hold() -> None:
        arrived.set()
        release.wait(WAIT_S)

    server.before_reply(hold)
    return arrived, release


def test_a_signal_while_the_model_is_awaited_keeps_the_prompt(
    env: dict[str, str], server: FakeOpenAI, started: list[subprocess.Popen[str]]
) -> None:
    arrived, release = held_reply(server)
    turn = start(env, started, "--json", "a question")
    try:
        assert arrived.wait(WAIT_S), "the request never came"
        turn.send_signal(signal.SIGTERM)
        _, stderr = turn.communicate(timeout=WAIT_S)
    finally:
        release.set()

    assert turn.returncode == 143, stderr
    error = json.loads(stderr)["error"]
    assert (error["type"], error["exit"]) == ("TurnInterrupted", 143)
    draft = json.loads(agctl(env, "--json", "draft", "show").stdout)
    assert draft["prompt"] == "a question"
    listed = agctl(env, "--json", "msg", "list")
    assert json.loads(listed.stdout) == [], "nothing was written"


def test_a_signal_ignored_at_start_stays_ignored(
    env: dict[str, str], server: FakeOpenAI, started: list[subprocess.Popen[str]]
) -> None:
    """As under `nohup`: a hang-up the process was started ignoring does not stop it."""
    arrived, release = held_reply(server)
    argv = [sys.executable, "-m", "agctl", "-s", SID, "turn", "send", "hello", "--no-stream"]
    turn = subprocess.Popen(
        argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, env=env, preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN),
    )  # fmt: skip
    started.append(turn)
    try:
        assert arrived.wait(WAIT_S), "the request never came"
        turn.send_signal(signal.SIGHUP)
    finally:
        release.set()
    stdout, stderr = turn.communicate(timeout=WAIT_S)
    assert (turn.returncode, stdout) == (0, "echo: hello\n"), stderr


def test_the_suite_run_as_a_background_job_still_stops_a_chat_with_ctrl_c(
    tmp_path: Path,
) -> None:
    """A run started ignoring SIGINT (`pytest ... &` in a script) gives its agctl processes
    Ctrl-C back (tests/conftest.py): the chat's Ctrl-C mid-reply test, run so, passes."""
    test = "tests/process/test_chat.py::test_ctrl_c_mid_reply_keeps_the_draft_and_writes_nothing"
    tests = Path(__file__).resolve().parents[1]
    inner = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         f"--basetemp={tmp_path / 'inner'}", test],
        cwd=tests.parent, capture_output=True, text=True, timeout=300,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )  # fmt: skip
    assert inner.returncode == 0, inner.stdout[-3000:]
