"""Standard input that is not what a command can take,: invalid UTF-8 is refused with the byte
named and nothing written, and a 50 MB message is stored intact in bounded memory (a real
process).

A refusal here means: a non-zero exit code, one `agctl: error: ...` message on stderr, no
traceback, and the data dir's files byte for byte as they were (lock files aside: taking a
lock is not writing data).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import Result
from helpers import SOURCE_ROOT, refuses_and_writes_nothing

from agctl.store import Store

Run = Callable[..., Result]


# ---- invalid UTF-8 on standard input -----------------------------------------------------

NOT_UTF8 = [
    pytest.param(b"\xff\xfe\x00garbage", id="bom-like"),
    pytest.param(b"ok \xc3\x28 then", id="bad-continuation"),
    pytest.param(b"\xed\xa0\x80 lone surrogate", id="surrogate"),
    pytest.param(b'[{"role": "user", "content": "a\xffb"}]', id="inside-json"),
    pytest.param(b'{"role": "user", "content": "a\xc0\xafb"}\n', id="overlong-jsonl"),
]


STDIN_COMMANDS = [
    pytest.param(("msg", "append", "user", "-"), id="msg-append"),
    pytest.param(("msg", "append", "user"), id="msg-append-implicit"),
    pytest.param(("msg", "insert", "0", "user", "-"), id="msg-insert"),
    pytest.param(("msg", "edit", "0", "-"), id="msg-edit"),
    pytest.param(("msg", "import", "-"), id="msg-import"),
    pytest.param(("msg", "import", "-", "--format", "openai"), id="msg-import-openai"),
    pytest.param(("msg", "import", "-", "--format", "jsonl"), id="msg-import-jsonl"),
    pytest.param(("turn", "send", "-"), id="turn-send"),
    pytest.param(("turn", "replay", "-"), id="turn-replay"),
    pytest.param(("session", "import", "-"), id="session-import"),
    pytest.param(("slot", "new", "static", "--static", "-"), id="slot-new-static"),
]


@pytest.mark.parametrize("data", NOT_UTF8)
@pytest.mark.parametrize("args", STDIN_COMMANDS)
def test_invalid_utf8_on_stdin_is_refused(
    run: Run, isolated_env: Path, session: str, args: tuple[str, ...], data: bytes
) -> None:
    refuses_and_writes_nothing(run, isolated_env, *args, input=data, code=5)


def test_invalid_utf8_error_names_the_byte(run: Run, isolated_env: Path, session: str) -> None:
    result = refuses_and_writes_nothing(
        run, isolated_env, "msg", "append", "user", "-", input=b"ok \xc3\x28", code=5
    )
    assert "not valid UTF-8" in result.stderr and "byte 3" in result.stderr


# ---- a 50 MB message -----------------------------------------------------------------------

BIG_MB = 50


# ASCII, CJK, emoji, NUL and a control character: every kind JSON has to escape or encode.
BIG_UNIT = "context 上下文 🧪 \x00\x1b\t|"


def big_text() -> str:
    unit_bytes = len(BIG_UNIT.encode())
    return BIG_UNIT * (BIG_MB * 1024 * 1024 // unit_bytes)


# Runs its arguments as a child and writes the child's exit code and peak RSS (KiB) to
# the file its first argument names. A process's peak RSS starts at its parent's at the
# fork (Linux keeps the larger across exec): measured from this small process, not from
# the test run's, which may hold more than the bound by the time this test runs.
MEASURE = """
import os, subprocess, sys
child = subprocess.Popen(sys.argv[2:])
_, status, usage = os.wait4(child.pid, 0)
with open(sys.argv[1], "w") as out:
    out.write(f"{os.waitstatus_to_exitcode(status)} {usage.ru_maxrss}")
"""


def run_child(args: list[str], stdin: Path, env: dict[str, str]) -> tuple[int, float, float]:
    """Run agctl in a child process; return its exit code, peak RSS in MB and seconds."""
    started = time.monotonic()
    with (
        stdin.open("rb") as feed,
        tempfile.TemporaryFile() as out,
        tempfile.TemporaryFile() as err,
        tempfile.TemporaryDirectory() as work,
    ):
        measured = Path(work) / "measured"
        command = [sys.executable, "-m", "agctl", *args]
        subprocess.run(
            [sys.executable, "-c", MEASURE, str(measured), *command],
            stdin=feed,
            stdout=out,
            stderr=err,
            env=env,
            check=True,
        )
        seconds = time.monotonic() - started
        code, peak_kib = (int(n) for n in measured.read_text().split())
        err.seek(0)
        stderr = err.read()
    assert b"Traceback" not in stderr, stderr.decode(errors="replace")
    return code, peak_kib / 1024, seconds


def test_a_50_mb_message_is_stored_intact_in_bounded_time_and_memory(
    store: Store, session: str, isolated_env: Path, tmp_path: Path
) -> None:
    text = big_text()
    assert len(text.encode()) > (BIG_MB - 1) * 1024 * 1024
    feed = tmp_path / "big.txt"
    feed.write_text(text, encoding="utf-8")
    env = {**os.environ, "AGCTL_DATA_DIR": str(isolated_env), "PYTHONPATH": SOURCE_ROOT}

    code, peak_mb, seconds = run_child(["msg", "append", "user", "-"], feed, env)

    assert code == 0
    assert peak_mb < 1024, f"appending {BIG_MB} MB took {peak_mb:.0f} MB of memory"
    assert seconds < 60, f"appending {BIG_MB} MB took {seconds:.1f} s"
    slot = store.load_slot(session)
    assert [m.role for m in slot.messages] == ["user", "assistant", "user"]
    assert slot.messages[-1].content == text
    path = isolated_env / "sessions" / session / "slots" / "default.json"
    assert json.loads(path.read_bytes())["messages"][-1]["content"] == text
    store.update_slot(session, None, lambda s: s.append(s.messages[0]))
    after = store.load_slot(session)
    assert len(after.messages) == 4 and after.messages[2].content == text
    feed.unlink()  # pytest keeps recent temp dirs: leave no 100 MB behind
    shutil.rmtree(isolated_env)
