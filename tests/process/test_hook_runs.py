"""What only real hook processes show: a timed-out hook's whole process group dies (even a
child that ignores SIGTERM), a flood of output is cut off, and `agctl hook test` exits as
the event would in a real `python -m agctl`."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from helpers import process_dead

from agctl.turn.hooks import MAX_STDOUT_BYTES, HookBlocked, HookSpec, run_hooks

START = {"prompt": "hello", "scratch": []}


def script(tmp_path: Path, name: str, body: str) -> list[str]:
    path = tmp_path / f"{name}.py"
    path.write_text("import json, os, signal, subprocess, sys, time\n" + textwrap.dedent(body))
    return [sys.executable, str(path)]


SPAWNS_A_CHILD = """
child = subprocess.Popen([sys.executable, "-c", {child!r}])
open({pidfile!r}, "w").write(str(child.pid))
time.sleep(600)
"""


@pytest.mark.parametrize(
    "child",
    [
        "import time; time.sleep(600)",
        # ignores SIGTERM: only the SIGKILL after the grace ends it
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)",
    ],
    ids=["plain child", "child ignoring SIGTERM"],
)
def test_a_timed_out_hook_s_process_group_dies(tmp_path: Path, child: str) -> None:
    pidfile = tmp_path / "child.pid"
    body = SPAWNS_A_CHILD.format(child=child, pidfile=str(pidfile))
    slow = HookSpec(
        name="slow", event="TurnStart", command=script(tmp_path, "slow", body), timeout_s=3
    )
    with pytest.raises(HookBlocked, match="timed out after 3s") as caught:
        run_hooks("TurnStart", START, [slow])
    assert caught.value.runs[0].exit is None
    assert pidfile.exists()
    assert process_dead(int(pidfile.read_text()))


def test_a_timed_out_observer_warns_and_its_child_dies_too(tmp_path: Path) -> None:
    pidfile = tmp_path / "child.pid"
    body = SPAWNS_A_CHILD.format(child="import time; time.sleep(600)", pidfile=str(pidfile))
    slow = HookSpec(
        name="slow", event="TurnEnd", command=script(tmp_path, "slow", body), timeout_s=3
    )
    outcome = run_hooks("TurnEnd", {}, [slow])
    assert [(r.outcome, r.message) for r in outcome.runs] == [("warned", "timed out after 3s")]
    assert process_dead(int(pidfile.read_text()))


def test_a_hook_that_floods_stdout_is_cut_off_and_fails(tmp_path: Path) -> None:
    flood = HookSpec(
        name="flood",
        event="TurnStart",
        command=script(tmp_path, "flood", "while True:\n    sys.stdout.write('x' * 65536)\n"),
    )
    with pytest.raises(HookBlocked, match=f"more than {MAX_STDOUT_BYTES} bytes"):
        run_hooks("TurnStart", START, [flood])


def test_a_hook_that_never_reads_its_payload_still_proceeds(tmp_path: Path) -> None:
    """A big payload and a hook that exits at once: the broken pipe is the hook's business."""
    deaf = HookSpec(name="deaf", event="TurnStart", command=script(tmp_path, "deaf", "pass\n"))
    outcome = run_hooks("TurnStart", {"prompt": "x" * (4 * 1024 * 1024), "scratch": []}, [deaf])
    assert [r.outcome for r in outcome.runs] == ["proceed"]


@pytest.fixture
def env(isolated_env: Path, tmp_path: Path) -> dict[str, str]:
    environ = dict(os.environ)
    environ["AGCTL_DATA_DIR"] = str(isolated_env)
    environ["AGCTL_CONFIG"] = str(tmp_path / "config.json")
    environ["PYTHONIOENCODING"] = "utf-8"
    return environ


def agctl(
    env: dict[str, str], cwd: Path, *args: str, stdin: bytes = b""
) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "agctl", *args],
        input=stdin,
        capture_output=True,
        env=env,
        cwd=cwd,
        timeout=60,
        check=False,
    )


def test_hook_test_exits_9_when_a_hook_blocks_and_0_with_agctl_no_hooks(
    env: dict[str, str], tmp_path: Path
) -> None:
    command = script(tmp_path, "veto", "print('vetoed', file=sys.stderr)\nsys.exit(2)\n")
    added = agctl(env, tmp_path, "hook", "add", "TurnStart", "veto", "--", *command)
    assert added.returncode == 0, added.stderr
    payload = json.dumps(START).encode()
    blocked = agctl(env, tmp_path, "hook", "test", "TurnStart", "--payload", "-", stdin=payload)
    assert blocked.returncode == 9
    assert b"agctl: error: hook 'veto' blocked TurnStart: vetoed" in blocked.stderr
    assert b"Traceback" not in blocked.stderr
    bypassed = agctl(
        {**env, "AGCTL_NO_HOOKS": "1"},
        tmp_path,
        "hook",
        "test",
        "TurnStart",
        "--payload",
        "-",
        "--json",
        stdin=payload,
    )
    assert bypassed.returncode == 0, bypassed.stderr
    assert json.loads(bypassed.stdout)["runs"] == []


def test_a_project_file_runs_in_a_real_process_only_once_trusted(
    env: dict[str, str], tmp_path: Path
) -> None:
    repo = tmp_path / "repo"
    (repo / ".agctl").mkdir(parents=True)
    marker = tmp_path / "ran"
    command = script(tmp_path, "proj", f"open({str(marker)!r}, 'w')\n")
    (repo / ".agctl" / "hooks.json").write_text(
        json.dumps([{"name": "proj", "event": "TurnEnd", "command": command}])
    )
    ignored = agctl(env, repo, "hook", "test", "TurnEnd", "--payload", "-", stdin=b"{}")
    assert ignored.returncode == 0, ignored.stderr
    assert b"is ignored: its hooks run once you trust it" in ignored.stderr
    assert not marker.exists()
    trusted = agctl(env, repo, "hook", "trust")
    assert trusted.returncode == 0, trusted.stderr
    ran = agctl(env, repo, "hook", "test", "TurnEnd", "--payload", "-", stdin=b"{}")
    assert ran.returncode == 0, ran.stderr
    assert marker.exists()


def project_with_a_check(root: Path, marker: Path) -> Path:
    """A project whose hooks file runs its own script by a relative path, as many do."""
    (root / ".agctl").mkdir(parents=True)
    (root / ".agctl" / "check.sh").write_text(f"echo {root.name} >> '{marker}'\n")
    hooks_file = root / ".agctl" / "hooks.json"
    command = ["sh", ".agctl/check.sh"]
    hooks_file.write_text(json.dumps([{"name": "check", "event": "TurnEnd", "command": command}]))
    return hooks_file


@pytest.mark.parametrize("link", ["file", "folder"])
def test_a_clone_linking_to_a_trusted_hooks_file_runs_nothing(
    env: dict[str, str], tmp_path: Path, link: str
) -> None:
    marker = tmp_path / "ran"
    trusted = project_with_a_check(tmp_path / "mine", marker)
    assert agctl(env, trusted.parent.parent, "hook", "trust").returncode == 0
    ran = agctl(
        env, trusted.parent.parent, "hook", "test", "TurnEnd", "--payload", "-", stdin=b"{}"
    )
    assert ran.returncode == 0, ran.stderr
    assert marker.read_text() == "mine\n"
    marker.unlink()

    # The clone holds a link where its hooks file (or its .agctl) would be, and a script
    # of its own that the trusted file's relative command would name.
    clone = tmp_path / "clone"
    if link == "file":
        project_with_a_check(clone, marker)
        (clone / ".agctl" / "hooks.json").unlink()
        (clone / ".agctl" / "hooks.json").symlink_to(trusted)
    else:
        clone.mkdir()
        (clone / ".agctl").symlink_to(trusted.parent)
    before = (tmp_path / "config.json").read_bytes()
    ignored = agctl(env, clone, "hook", "test", "TurnEnd", "--payload", "-", "--json", stdin=b"{}")
    assert ignored.returncode == 0, ignored.stderr
    assert json.loads(ignored.stdout)["runs"] == []
    assert b"is a symbolic link" in ignored.stderr
    assert not marker.exists()
    refused = agctl(env, clone, "hook", "trust")
    assert refused.returncode == 5
    assert b"is a symbolic link" in refused.stderr
    assert b"hint: put a copy of the file itself at .agctl/hooks.json" in refused.stderr
    assert (tmp_path / "config.json").read_bytes() == before
    assert not marker.exists()


def test_ctrl_c_during_a_hook_kills_it_and_exits_130(env: dict[str, str], tmp_path: Path) -> None:
    pidfile = tmp_path / "hook.pid"
    command = script(tmp_path, "sleepy", f"open({str(pidfile)!r}, 'w').write(str(os.getpid()))\n"
                     "time.sleep(600)\n")  # fmt: skip
    assert agctl(env, tmp_path, "hook", "add", "TurnEnd", "sleepy", "--", *command).returncode == 0
    payload = tmp_path / "payload.json"
    payload.write_text("{}")
    running = subprocess.Popen(
        [sys.executable, "-m", "agctl", "hook", "test", "TurnEnd", "--payload", str(payload)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        cwd=tmp_path,
    )
    deadline = time.monotonic() + 30
    while not (pidfile.exists() and pidfile.read_text()) and time.monotonic() < deadline:
        time.sleep(0.05)
    hook_pid = int(pidfile.read_text())
    running.send_signal(signal.SIGINT)
    _, stderr = running.communicate(timeout=30)
    assert running.returncode == 130, stderr
    assert b"Traceback" not in stderr
    assert process_dead(hook_pid)
