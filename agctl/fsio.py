"""Crash-safe file primitives: atomic replace, directory fsync, per-session locks."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import signal
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from agctl.errors import CorruptDocument, NotFound, StoreError


def _describe(exc: OSError) -> str:
    return exc.strerror or str(exc)


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: Path, data: bytes, *, durable: bool = True) -> None:
    """Replace `path` with `data` so that a crash leaves the old or the new file, never a mix.

    `durable=False` skips the fsyncs, for caches that can be rebuilt.
    """
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as exc:
        raise StoreError(f"cannot write {path}: {_describe(exc)}") from exc
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            # The kernel stamps files with a coarse clock; a fine-grained mtime keeps
            # (inode, mtime, size) distinct between two quick writes (see read_versioned).
            now = time.time_ns()
            os.utime(handle.fileno(), ns=(now, now))
            if durable:
                os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        if isinstance(exc, OSError):
            raise StoreError(f"cannot write {path}: {_describe(exc)}") from exc
        raise
    if durable:
        fsync_dir(path.parent)


def append_durably(path: Path, build: Callable[[int], bytes], *, lock: bool = False) -> int:
    """Append `build(offset)` to a line-oriented file in one write, then fsync.

    `offset` is where the new data will start. A last line torn by an earlier crash is
    sealed with a newline first, so the new data always starts a line of its own. With
    `lock`, an exclusive flock on the file is held while appending. Returns `offset`.
    """
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o600)
    except OSError as exc:
        raise StoreError(f"cannot open {path}: {_describe(exc)}") from exc
    try:
        if lock:
            fcntl.flock(fd, fcntl.LOCK_EX)
        end = os.fstat(fd).st_size
        seal = b"\n" if end and os.pread(fd, 1, end - 1) != b"\n" else b""
        data = seal + build(end + len(seal))
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    except OSError as exc:
        raise StoreError(f"cannot write {path}: {_describe(exc)}") from exc
    finally:
        os.close(fd)
    return end + len(seal)


def read_bytes(path: Path, what: str = "file") -> bytes:
    """Read a regular file, refusing symlinks so no document can point outside the data dir."""
    return read_versioned(path, what)[0]


Version = tuple[int, int, int]


def read_versioned(path: Path, what: str = "file") -> tuple[bytes, Version]:
    """The bytes of `path` and a token that changes whenever the file is replaced.

    Every write goes through `os.replace`, which gives the file a new inode, so (inode,
    mtime, size) taken from the same open descriptor identifies the version read.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError as exc:
        raise NotFound(f"{what} not found: {path}") from exc
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise CorruptDocument(path, "is a symbolic link; refusing to follow it") from exc
        raise StoreError(f"cannot read {path}: {_describe(exc)}") from exc
    try:
        with os.fdopen(fd, "rb") as handle:
            info = os.fstat(handle.fileno())
            return handle.read(), (info.st_ino, info.st_mtime_ns, info.st_size)
    except OSError as exc:
        raise StoreError(f"cannot read {path}: {_describe(exc)}") from exc


def current_version(path: Path) -> Version | None:
    try:
        info = os.stat(path, follow_symlinks=False)
    except OSError:
        return None
    return (info.st_ino, info.st_mtime_ns, info.st_size)


def remove_file(path: Path) -> None:
    try:
        path.unlink()
    except FileNotFoundError:
        return
    except OSError as exc:
        raise StoreError(f"cannot remove {path}: {_describe(exc)}") from exc
    fsync_dir(path.parent)


_local = threading.local()


def holds_lock(lock_path: Path) -> bool:
    """Whether this thread already holds `lock_path` through `exclusive_lock`."""
    held: dict[str, int] = _local.__dict__.get("held", {})
    return str(lock_path) in held


@contextlib.contextmanager
def exclusive_lock(lock_path: Path) -> Iterator[None]:
    """Hold an exclusive flock on `lock_path`; re-entrant within one thread."""
    held: dict[str, int] = _local.__dict__.setdefault("held", {})
    key = str(lock_path)
    if key in held:
        held[key] += 1
        try:
            yield
        finally:
            held[key] -= 1
        return
    try:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    except OSError as exc:
        raise StoreError(f"cannot open lock file {lock_path}: {_describe(exc)}") from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        held[key] = 1
        try:
            yield
        finally:
            del held[key]
    finally:
        os.close(fd)


@contextlib.contextmanager
def deferred_interrupts(*, reraise: bool = True) -> Iterator[None]:
    """Hold Ctrl-C (SIGINT) until a multi-file commit is done, then raise it (or, with
    `reraise=False`, drop it: the work it would have stopped is complete)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: received.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if received and reraise:
        raise KeyboardInterrupt
