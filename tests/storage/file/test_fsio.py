"""Atomic writes and locks, on real files."""

from __future__ import annotations

import errno
import multiprocessing
import os
import signal
import time
from pathlib import Path

import pytest

from agctl.base.errors import CorruptDocument, NotFound, StoreError
from agctl.base.fsio import exclusive_lock, read_bytes, write_atomic


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
