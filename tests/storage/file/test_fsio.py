"""Atomic writes and locks, on real files; and the reads no planted link, FIFO or directory
in place of a data dir's file can divert or hang (agctl/base/fsio.py's rule, through the store,
the CLI and TAB completion)."""

from __future__ import annotations

import errno
import multiprocessing
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import Result
from helpers import agctl_process

from agctl.base.errors import CorruptDocument, NotFound, StoreError
from agctl.base.fsio import exclusive_lock, read_bytes, write_atomic
from agctl.store import Store
from agctl.store.checkpointer import Checkpointer


def test_write_atomic_replaces_and_leaves_no_temp(tmp_path: Path) -> None:
    target = tmp_path / "doc.json"
    write_atomic(target, b"old")
    write_atomic(target, b"new")
    assert target.read_bytes() == b"new"
    assert os.listdir(tmp_path) == ["doc.json"]


def test_failed_write_keeps_the_old_file_and_removes_the_temp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "doc.json"
    write_atomic(target, b"old")

    def full_disk(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full_disk)
    with pytest.raises(StoreError, match="No space left on device") as caught:
        write_atomic(target, b"new")
    assert str(target) in str(caught.value)
    assert target.read_bytes() == b"old"
    assert os.listdir(tmp_path) == ["doc.json"]


def test_interrupted_write_removes_the_temp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "doc.json"

    def interrupted(src: str, dst: str) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        write_atomic(target, b"data")
    assert os.listdir(tmp_path) == []


def test_read_bytes_errors(tmp_path: Path) -> None:
    with pytest.raises(NotFound):
        read_bytes(tmp_path / "missing")
    with pytest.raises(CorruptDocument, match="is a directory"):
        read_bytes(tmp_path)


def _hold_lock(path: str, ready: multiprocessing.synchronize.Event, seconds: float) -> None:
    with exclusive_lock(Path(path)):
        ready.set()
        time.sleep(seconds)
        Path(path + ".released").write_text("yes")


def test_lock_excludes_another_process(tmp_path: Path) -> None:
    lock = tmp_path / ".lock"
    ready = multiprocessing.get_context("fork").Event()
    holder = multiprocessing.get_context("fork").Process(
        target=_hold_lock, args=(str(lock), ready, 0.5)
    )
    holder.start()
    assert ready.wait(10)
    with exclusive_lock(lock):
        assert Path(str(lock) + ".released").exists()
    holder.join(10)
    assert holder.exitcode == 0


def test_lock_is_reentrant_in_one_thread(tmp_path: Path) -> None:
    lock = tmp_path / ".lock"
    with exclusive_lock(lock), exclusive_lock(lock):
        pass
    with exclusive_lock(lock):
        pass


def test_interrupts_are_deferred_until_the_block_ends() -> None:
    from agctl.base.fsio import deferred_interrupts

    finished = []
    with pytest.raises(KeyboardInterrupt), deferred_interrupts():
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.05)
        finished.append(True)
    assert finished == [True]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_sigterm_and_sighup_wait_for_the_block_as_ctrl_c_does(signum: signal.Signals) -> None:
    """With the command line's handlers, a termination signal sent during a commit waits
    for it, then stops agctl as the Interrupted carrying that signal."""
    from agctl.base.errors import Interrupted
    from agctl.base.fsio import deferred_interrupts
    from agctl.base.interrupts import INTERRUPTING, interrupt_on_signals

    saved = {number: signal.getsignal(number) for number in INTERRUPTING}
    interrupt_on_signals()
    finished = []
    try:
        with pytest.raises(Interrupted) as caught, deferred_interrupts():
            os.kill(os.getpid(), signum)
            time.sleep(0.05)
            finished.append(True)
        handlers = {number: signal.getsignal(number) for number in INTERRUPTING}
    finally:
        for number, handler in saved.items():
            signal.signal(number, handler)
    assert finished == [True]
    assert caught.value.signum == signum
    assert all(handler is not saved[number] for number, handler in handlers.items())


Run = Callable[..., Result]


SID = "s"


# ---- planted links, FIFOs and devices --------------------------------------------------------

SESSION_FILES = [
    "session.json",
    "slots/default.json",
    "checkpoints/log",
    "checkpoints/index.jsonl",
    "checkpoints/heads.json",
    "checkpoints/removed.json",
    "drafts/default.json",
    ".lock",
]


COMMANDS = [
    ("msg", "append", "user", "more"),
    ("turn", "send", "next"),
    ("ckpt", "list"),
    ("ckpt", "create"),
    ("turn", "undo"),
    ("msg", "list"),
    ("turn", "send", "--resume-draft"),
]


def _planted_session(store: Store, isolated_env: Path) -> Path:
    keeper = Checkpointer(store)
    first = keeper.ids(SID)[-1]
    keeper.remove(SID, [keeper.ids(SID)[0]])
    assert first
    from agctl.context.models import Draft

    store.save_draft(SID, Draft(prompt="p", slot="default"))
    return isolated_env / "sessions" / SID


@pytest.mark.parametrize("name", SESSION_FILES)
@pytest.mark.parametrize("dangling", [False, True], ids=["to-a-file", "dangling"])
def test_no_file_under_a_session_is_reached_through_a_symlink(
    run: Run,
    store: Store,
    isolated_env: Path,
    tmp_path: Path,
    session: str,
    name: str,
    dangling: bool,
) -> None:
    """Before: a link in place of the checkpoint log made a turn append the conversation
    to the link's target (and a dangling link created it)."""
    directory = _planted_session(store, isolated_env)
    planted = directory / name
    target = tmp_path / "outside" / "victim"
    target.parent.mkdir()
    if not dangling:
        target.write_bytes(planted.read_bytes() if planted.exists() else b"{}")
    original = target.read_bytes() if target.exists() else None
    if planted.exists():
        planted.unlink()
    planted.symlink_to(target)
    refused = 0
    for args in COMMANDS:
        result = run("-s", SID, *args)
        assert "Traceback" not in result.stderr
        assert result.exit_code in (0, 3, 5), (args, result.stderr)
        if result.exit_code == 5:
            refused += 1
            assert str(planted) in result.stderr, result.stderr
            assert "symbolic link" in result.stderr
    assert refused, "a planted link was used without a word"
    assert planted.is_symlink()
    if original is None:
        assert not target.exists(), "a dangling link created its target"
    else:
        assert target.read_bytes() == original


@pytest.mark.parametrize("name", ["slots", "checkpoints"])
def test_a_linked_directory_under_a_session_is_refused(
    run: Run, isolated_env: Path, tmp_path: Path, session: str, name: str
) -> None:
    directory = isolated_env / "sessions" / SID / name
    elsewhere = tmp_path / f"elsewhere-{name}"
    directory.rename(elsewhere)
    directory.symlink_to(elsewhere)
    before = sorted(p.name for p in elsewhere.iterdir())
    reads = ("msg", "append", "user", "x") if name == "slots" else ("ckpt", "list")
    for args in (reads, ("turn", "send", "y"), ("ckpt", "create")):
        result = run("-s", SID, *args)
        assert result.exit_code == 5, (args, result.output)
        assert str(directory) in result.stderr and "symbolic link" in result.stderr
    assert sorted(p.name for p in elsewhere.iterdir()) == before


def test_a_linked_session_directory_is_refused(
    run: Run, isolated_env: Path, tmp_path: Path, session: str
) -> None:
    directory = isolated_env / "sessions" / SID
    elsewhere = tmp_path / "elsewhere"
    directory.rename(elsewhere)
    directory.symlink_to(elsewhere)
    result = run("-s", SID, "msg", "append", "user", "x")
    assert result.exit_code == 5 and "symbolic link" in result.stderr


@pytest.mark.parametrize("name", ["slots/default.json", "session.json", "checkpoints/log"])
def test_a_fifo_in_place_of_a_document_is_refused_without_hanging(
    env: dict[str, str], isolated_env: Path, session: str, name: str
) -> None:
    """Before: a FIFO in place of a slot file made every reader hang."""
    path = isolated_env / "sessions" / SID / name
    path.unlink()
    os.mkfifo(path, 0o600)
    reads = ("ckpt", "list") if name.endswith("log") else ("msg", "list")
    for args in (reads, ("turn", "send", "x"), ("ckpt", "create")):
        done = agctl_process(env, "-s", SID, *args, timeout=20)
        assert done.returncode == 5, (args, done.stderr)
        assert str(path) in done.stderr and "FIFO" in done.stderr
        assert "Traceback" not in done.stderr


def test_a_checkpoint_log_that_is_a_directory_is_a_clear_error(
    run: Run, isolated_env: Path, session: str
) -> None:
    log = isolated_env / "sessions" / SID / "checkpoints" / "log"
    log.rename(log.with_name("old-log"))
    log.mkdir()
    for args in (("ckpt", "list"), ("turn", "send", "x"), ("ckpt", "verify")):
        result = run("-s", SID, *args)
        assert result.exit_code == 5, (args, result.output)
        assert str(log) in result.stderr and "directory" in result.stderr


def test_corrupt_document_names_the_path(store: Store, isolated_env: Path) -> None:
    store.create_session(SID)
    path = isolated_env / "sessions" / SID / "session.json"
    path.unlink()
    path.symlink_to("/etc/hostname")
    with pytest.raises(CorruptDocument) as caught:
        store.load_session(SID)
    assert caught.value.path == path


def test_tab_completion_never_hangs_on_a_fifo_or_follows_a_link(
    env: dict[str, str], run: Run, isolated_env: Path, session: str, tmp_path: Path
) -> None:
    """Before: a FIFO in place of session.json or the checkpoint index hung every TAB."""
    assert run("session", "use", SID).exit_code == 0
    directory = isolated_env / "sessions" / SID
    for name in ("session.json", "checkpoints/index.jsonl"):
        (directory / name).unlink()
        os.mkfifo(directory / name, 0o600)
    (isolated_env / "current-session").unlink()
    secret = tmp_path / "secret"
    secret.write_text(SID)
    (isolated_env / "current-session").symlink_to(secret)
    for words in ("agctl session use ", "agctl -s s ckpt show "):
        done = subprocess.run(
            [sys.executable, "-m", "agctl"],
            env={
                **env,
                "_AGCTL_COMPLETE": "bash_complete",
                "COMP_WORDS": words,
                "COMP_CWORD": str(len(words.split())),
            },
            capture_output=True,
            text=True,
            timeout=20,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        assert "Traceback" not in done.stderr
