"""What a tool or hook starts ends with its call, even a child that left the call's process
group and session (setsid) and lost its parent (a daemon's double fork): a real
`agctl turn send` runs a tool that leaves such a sleeper behind, and when the turn is done
the sleeper is gone."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from click.testing import Result
from fake_openai import FakeOpenAI
from helpers import agctl_in, ok, process_dead, served_env

SID = "s"
WAIT_S = 60
PARAMETERS = json.dumps({"type": "object", "properties": {"name": {"type": "string"}}})

# Each leaves `sleep 600` running in a session of its own, its pid in $HOME/pid.NAME (NAME
# the call's argument), and returns once that file is there.
SETSID = 'setsid sh -c \'echo $$ > "$F.tmp"; mv "$F.tmp" "$F"; exec sleep 600\' &'
# The child that calls setsid exits at once: the sleeper is an orphan before agctl looks.
DOUBLE_FORK = 'sh -c "' + SETSID.replace('"', '\\"').replace("$", "\\$") + '"'
# It also ignores SIGTERM and holds none of the call's pipes.
DEAF = (
    'setsid sh -c \'trap "" TERM; echo $$ > "$F.tmp"; mv "$F.tmp" "$F"; '
    "exec sleep 600' </dev/null >/dev/null 2>&1 &"
)
ESCAPES = {"setsid": SETSID, "double fork": DOUBLE_FORK, "deaf to SIGTERM": DEAF}


def leaving(escape: str) -> str:
    """A tool (arguments in the environment) that leaves a sleeper by `escape`."""
    return (
        'export F="$HOME/pid.$TOOL_ARG_NAME"; '
        f"{escape}\n"
        'while [ ! -e "$F" ]; do sleep 0.01; done; echo "left $TOOL_ARG_NAME"'
    )


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The HOME the tools see; a sleeper a failed test leaves is killed."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    yield home
    for pidfile in home.glob("pid.*"):
        if pidfile.suffix == ".tmp":
            continue
        pid = int(pidfile.read_text())
        if not process_dead(pid) and "sleep" in Path(f"/proc/{pid}/cmdline").read_text():
            os.kill(pid, signal.SIGKILL)


@pytest.fixture
def env(home: Path, server: FakeOpenAI, run: Callable[..., Result]) -> dict[str, str]:
    ok(run("session", "new", SID))
    return served_env(server.base_url)


def add_tool(run: Callable[..., Result], name: str, escape: str) -> None:
    ok(run("tool", "add", name, "--description", "Leave", "--parameters", PARAMETERS,
           "--args", "env", "--approve", "auto", "--", "sh", "-c", leaving(escape)))  # fmt: skip


def agctl(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return agctl_in(env, *args, session=SID)


def call(tool: str, name: str) -> dict[str, str]:
    return {"id": f"call_{name}", "name": tool, "arguments": json.dumps({"name": name})}


def gone(pid: int) -> bool:
    """Whether `pid` dies within the bounded wait (a kill is quick, not instant)."""
    deadline = time.monotonic() + WAIT_S
    while not process_dead(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def sleeper(home: Path, name: str) -> int:
    return int((home / f"pid.{name}").read_text())


@pytest.mark.parametrize("escape", list(ESCAPES.values()), ids=list(ESCAPES))
def test_a_child_that_escapes_the_group_ends_with_the_call(
    run: Callable[..., Result], env: dict[str, str], home: Path, server: FakeOpenAI, escape: str
) -> None:
    add_tool(run, "t", escape)
    server.reply(tool_calls=[call("t", "one")])
    server.reply("done")
    sent = agctl(env, "turn", "send", "go", "-T", "t", "--approve", "auto", "--no-stream")
    assert sent.returncode == 0, sent.stderr
    assert sent.stdout == "done\n"
    tool_result = json.loads(agctl(env, "--json", "msg", "list").stdout)[2]["content"]
    assert tool_result == "left one\n"
    assert gone(sleeper(home, "one"))


def test_calls_running_at_once_each_leave_nothing(
    run: Callable[..., Result], env: dict[str, str], home: Path, server: FakeOpenAI
) -> None:
    """Two calls in worker threads, each leaving an orphan: one that cannot be told apart
    is ended with the last call that may own it, and none outlives the step."""
    add_tool(run, "fork", DOUBLE_FORK)
    add_tool(run, "deaf", DEAF)
    server.reply(tool_calls=[call("fork", "left"), call("deaf", "right")])
    server.reply("done")
    sent = agctl(env, "turn", "send", "go", "-T", "fork", "-T", "deaf", "--approve", "auto",
                 "--tool-jobs", "2", "--no-stream")  # fmt: skip
    assert sent.returncode == 0, sent.stderr
    assert gone(sleeper(home, "left")) and gone(sleeper(home, "right"))


def test_a_hook_leaves_nothing_either(
    run: Callable[..., Result], env: dict[str, str], home: Path
) -> None:
    script = leaving(DOUBLE_FORK).replace("$TOOL_ARG_NAME", "hook").replace('echo "left hook"', "")
    ok(run("hook", "add", "TurnStart", "escape", "--", "sh", "-c", script))
    sent = agctl(env, "turn", "send", "hello", "--no-stream")
    assert sent.returncode == 0, sent.stderr
    assert sent.stdout == "echo: hello\n"
    assert gone(sleeper(home, "hook"))


# A process that adopts orphans as the command line does, holding a daemon of its own (as a
# test's PostgreSQL server, started by pg_ctl, is held) when it runs a tool that leaves one.
HOLDER = """
import subprocess, sys
from agctl.base import interrupts
from agctl.turn.tools import ToolSpec, run_tool

interrupts.adopt_orphans()
spec = ToolSpec.model_validate({"name": "t", "command": ["sh", "-c", sys.argv[2]], "args": "env"})
run_tool(spec, {"name": "warm-up"}, data_dir=None)  # the process is a subreaper from here on
daemon = sys.argv[1]
subprocess.run(["sh", "-c", daemon], env={"F": sys.argv[3], "PATH": "/usr/bin:/bin"},
               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
run_tool(spec, {"name": "call"}, data_dir=None)
print("ran")
"""


def test_a_daemon_of_the_process_s_own_is_not_taken_for_a_call_s(home: Path) -> None:
    """Only orphans that came while a call ran are a call's: the daemon the process
    started before it (re-parented to it, in a session of its own) lives on."""
    daemon = home / "pid.daemon"
    while_waiting = 'while [ ! -e "$F" ]; do sleep 0.01; done'
    held = subprocess.run(
        [sys.executable, "-c", HOLDER, f"{DOUBLE_FORK}\n{while_waiting}", leaving(DOUBLE_FORK),
         str(daemon)],
        capture_output=True, text=True, timeout=WAIT_S, check=False,
    )  # fmt: skip
    assert (held.returncode, held.stdout) == (0, "ran\n"), held.stderr
    assert gone(sleeper(home, "warm-up")) and gone(sleeper(home, "call"))
    assert not process_dead(int(daemon.read_text()))
