"""The file backend itself: the modes of everything it writes, its lock's bounded wait, the
temp files a killed writer left, swept by the next, and its reads, which take no lock yet never
see half a commit.

Each test with a "Before:" docstring failed before its fix (it says what happened then).
"""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from click.testing import Result
from helpers import SOURCE_ROOT, agctl_process

from agctl.providers.offline import OfflineProvider
from agctl.reports.checkup import diagnose
from agctl.store import Store
from agctl.turn.send import TurnOptions, send_turn

Run = Callable[..., Result]
SID = "s"


def walk(root: Path) -> Iterator[tuple[Path, os.stat_result]]:
    for path in [root, *sorted(root.rglob("*"))]:
        yield path, os.lstat(path)


# ---- other local users ---------------------------------------------------------------------


@pytest.mark.parametrize("umask", [0o000, 0o002, 0o022])
def test_everything_is_private_whatever_the_umask(
    env: dict[str, str], isolated_env: Path, tmp_path: Path, umask: int
) -> None:
    """Before: under umask 000 the dirs were 0777 and the checkpoint index 0666."""
    steps = [
        ("session", "new", SID),
        ("-s", SID, "msg", "append", "user", "hi"),
        ("-s", SID, "turn", "send", "hello"),
        ("-s", SID, "slot", "derive", "side"),
        ("-s", SID, "ckpt", "create", "--label", "x"),
        ("-s", SID, "turn", "send", "again", "--slot", "side"),
        ("-s", SID, "turn", "undo"),
        ("-s", SID, "memory", "set", "k", "v"),
        ("session", "use", SID),
    ]
    for args in steps:
        done = agctl_process(env, *args, umask=umask)
        assert done.returncode == 0, (args, done.stderr)
    exported = tmp_path / "export.json"
    done = agctl_process(env, "session", "export", SID, "-o", str(exported), umask=umask)
    assert done.returncode == 0, done.stderr
    assert agctl_process(env, "session", "import", str(exported), "--as", "copy").returncode == 0
    fork = agctl_process(env, "-s", SID, "ckpt", "list", "--json", umask=umask)
    first = json.loads(fork.stdout)[-1]["id"]
    assert agctl_process(env, "-s", SID, "ckpt", "fork", first, umask=umask).returncode == 0
    seen_files = set()
    for path, info in walk(isolated_env):
        mode = stat.S_IMODE(info.st_mode)
        if stat.S_ISDIR(info.st_mode):
            assert mode == 0o700, (path, oct(mode))
        else:
            assert stat.S_ISREG(info.st_mode), path
            assert mode == 0o600, (path, oct(mode))
            seen_files.add(path.name)
    assert {"log", "index.jsonl", "heads.json", "session.json", ".lock"} <= seen_files


# ---- bounded waits ---------------------------------------------------------------------------

HOLDER = """
import sys, time
from pathlib import Path
from agctl.store import Store
store = Store(sys.argv[1])
with store.lock("s"):
    print("held", flush=True)
    time.sleep(120)
"""


def test_a_writer_waits_at_most_lock_timeout_and_names_the_holder(
    env: dict[str, str], isolated_env: Path, session: str
) -> None:
    """Before: a stopped writer holding the lock blocked every other writer forever."""
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(isolated_env)],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        os.kill(holder.pid, signal.SIGSTOP)
        started = time.monotonic()
        done = agctl_process(
            {**env, "AGCTL_LOCK_TIMEOUT": "0.5"},
            "-v",
            "-s",
            SID,
            "msg",
            "append",
            "user",
            "x",
            timeout=30,
        )
        waited = time.monotonic() - started
        assert done.returncode == 4, done.stderr
        assert f"process {holder.pid}" in done.stderr
        assert "lock_timeout" in done.stderr
        assert "waiting up to 0.5s" in done.stderr  # -v logs the wait
        assert waited < 25
        bad = agctl_process(
            {**env, "AGCTL_LOCK_TIMEOUT": "soon"}, "-s", SID, "msg", "append", "user", "x"
        )
        assert bad.returncode == 2 and "AGCTL_LOCK_TIMEOUT" in bad.stderr
    finally:
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait()
    assert agctl_process(env, "-s", SID, "msg", "append", "user", "y").returncode == 0


# ---- leftovers -------------------------------------------------------------------------------


def test_a_writer_sweeps_stale_temp_files_of_its_session(
    run: Run, store: Store, isolated_env: Path, session: str
) -> None:
    """Before: a killed writer's temp copies of a slot (deleted messages and all) stayed."""
    slots = isolated_env / "sessions" / SID / "slots"
    stale = slots / ".default.json.abc123.tmp"
    fresh = slots / ".default.json.def456.tmp"
    for path in (stale, fresh):
        path.write_text('{"secret": "deleted message"}')
    old = time.time() - 3600
    os.utime(stale, (old, old))
    outside = isolated_env.parent / "keep.tmp"
    outside.write_text("not agctl's")
    link = slots / ".link.json.zzz.tmp"
    link.symlink_to(outside)
    os.utime(link, (old, old), follow_symlinks=False)
    findings = {f.path for f in diagnose(store) if f.kind == "temp-file"}
    assert findings == {str(stale)}
    assert run("-s", SID, "msg", "append", "user", "x").exit_code == 0
    # Every write into a session dir is made under its lock: a writer holding it knows
    # that any temp file there is a killed writer's, however recent (a link is left).
    assert not stale.exists() and not fresh.exists()
    assert outside.exists() and link.is_symlink()


# Reads session, slot, session again until the writer says it is done: the slot, read in
# between, holds two messages a turn of at least the first count and at most the second.
# Once it has seen five states it says so (the writer goes on until then).
READER = r"""
import json, sys
from pathlib import Path
from agctl.store import Store

root, done, ready, enough = (Path(arg) for arg in sys.argv[1:5])
store = Store(root)
reads = problems = 0
seen = set()
while not done.exists() or reads < 50:
    before = store.load_session("s").turn_count
    messages = len(store.load_slot("s").messages)
    after = store.load_session("s").turn_count
    reads += 1
    seen.add(messages)
    if reads == 1:
        ready.touch()  # the writer starts once the reader reads
    if len(seen) == 5:
        enough.touch()
    if not 2 * before <= messages <= 2 * after or messages % 2:
        problems += 1
        print(json.dumps({"before": before, "messages": messages, "after": after}))
print(json.dumps({"reads": reads, "problems": problems, "states": len(seen)}))
"""


def test_a_reader_never_sees_half_a_turn(isolated_env: Path, tmp_path: Path) -> None:
    store = Store(isolated_env)
    store.create_session("s")
    script = tmp_path / "reader.py"
    script.write_text(READER)
    done, ready, enough = tmp_path / "done", tmp_path / "ready", tmp_path / "enough"
    env = {**os.environ, "PYTHONPATH": SOURCE_ROOT}
    reader = subprocess.Popen(
        [sys.executable, str(script), str(isolated_env), str(done), str(ready), str(enough)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        deadline = time.monotonic() + 60
        while not ready.exists() and reader.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        last = None
        options = TurnOptions(model="offline")
        # 150 turns at least, and on until the reader has seen five states (a fast machine
        # commits 150 in a few of its reads), within a bound.
        for number in range(5000):
            result = send_turn(store, "s", f"q{number}", OfflineProvider(), options, reuse=last)
            last = result.slot
            if number >= 149 and (enough.exists() or reader.poll() is not None):
                break
        done.touch()
        out, err = reader.communicate(timeout=120)
    finally:
        if reader.poll() is None:
            reader.kill()
    assert reader.returncode == 0, err
    *torn, summary = (json.loads(line) for line in out.splitlines())
    assert torn == [] and summary["problems"] == 0, torn[:3]
    assert summary["reads"] >= 50
    assert summary["states"] >= 5, "the reads happened while the turns were committed"
