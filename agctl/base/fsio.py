"""Crash-safe file primitives: atomic replace, directory fsync, per-session locks."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import signal
import stat
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from agctl.base.errors import Conflict, CorruptDocument, NotFound, StoreError
from agctl.base.interrupts import INTERRUPTING, hold

log = logging.getLogger("agctl.store")

# Conversations are private: whatever the umask, agctl's own files and directories are
# readable by their owner only.
PRIVATE_DIR = 0o700
PRIVATE_FILE = 0o600
# Opened without following a final symlink, and without blocking on a FIFO: the type of
# what was opened is checked on the descriptor before a byte is read or written.
_SAFE_FLAGS = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
TEMP_SUFFIX = ".tmp"


def _describe(exc: OSError) -> str:
    return exc.strerror or str(exc)


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISLNK, "a symbolic link"),
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def not_regular(path: Path | str, mode: int) -> CorruptDocument:
    """The error for a path agctl expected to be a regular file of its own."""
    return CorruptDocument(path, f"is {_kind(mode)}, not a regular file; refusing to use it")


def _refuse_link_error(path: Path | str, exc: OSError) -> CorruptDocument | None:
    if exc.errno == errno.ELOOP:
        return CorruptDocument(path, "is a symbolic link; refusing to follow it")
    if exc.errno == errno.ENXIO:  # a FIFO opened for writing with no reader
        return CorruptDocument(path, "is a FIFO, not a regular file; refusing to use it")
    return None


def open_regular(
    path: Path | str, flags: int = os.O_RDONLY, mode: int = PRIVATE_FILE, *, follow: bool = False
) -> int:
    """A descriptor on the regular file `path`, never through a symlink, never blocking.

    Raises NotFound when it does not exist (and O_CREAT is not given), CorruptDocument
    (exit 5, naming the path) when it is a link, a directory, a FIFO or a device. With
    `follow` (a file of the user's, like the config), a link to a regular file is fine.
    """
    return open_with_status(path, flags, mode, follow=follow)[0]


def open_with_status(
    path: Path | str, flags: int = os.O_RDONLY, mode: int = PRIVATE_FILE, *, follow: bool = False
) -> tuple[int, os.stat_result]:
    """open_regular, with the file's status as it was opened (one fstat fewer)."""
    safe = _SAFE_FLAGS & ~os.O_NOFOLLOW if follow else _SAFE_FLAGS
    try:
        fd = os.open(path, flags | safe, mode)
    except FileNotFoundError as exc:
        raise NotFound(f"not found: {path}") from exc
    except OSError as exc:
        refused = _refuse_link_error(path, exc)
        if refused is not None:
            raise refused from exc
        if exc.errno in (errno.EISDIR, errno.ENOTDIR):
            info = _lstat(path)
            raise not_regular(path, info.st_mode if info else stat.S_IFDIR) from exc
        raise StoreError(f"cannot open {path}: {_describe(exc)}") from exc
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise not_regular(path, info.st_mode)
        if flags & os.O_CREAT and info.st_size == 0 and stat.S_IMODE(info.st_mode) != mode:
            os.fchmod(fd, mode)  # created now, under whatever umask
        # O_NONBLOCK kept a FIFO from blocking the open; on the regular file this now is
        # it changes nothing (reads and writes of regular files never return EAGAIN).
    except BaseException:
        os.close(fd)
        raise
    return fd, info


def _lstat(path: Path | str) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except OSError:
        return None


def check_regular(path: Path | str) -> bool:
    """Whether `path` exists as a regular file; anything else in its place is refused."""
    info = _lstat(path)
    if info is None:
        return False
    if not stat.S_ISREG(info.st_mode):
        raise not_regular(path, info.st_mode)
    return True


def check_dir(path: Path | str) -> bool:
    """Whether `path` exists as a real directory (not a link to one); else refused."""
    info = _lstat(path)
    if info is None:
        return False
    if not stat.S_ISDIR(info.st_mode):
        if stat.S_ISLNK(info.st_mode):
            raise CorruptDocument(path, "is a symbolic link; refusing to follow it")
        raise CorruptDocument(path, f"is {_kind(info.st_mode)}, not a directory")
    return True


def make_dirs(path: Path) -> None:
    """`mkdir -p` where every directory created is 0700 whatever the umask."""
    missing: list[Path] = []
    current = path
    while _lstat(current) is None and current.parent != current:
        missing.append(current)
        current = current.parent
    for directory in reversed(missing):
        try:
            os.mkdir(directory, PRIVATE_DIR)
        except FileExistsError:
            continue
        except OSError as exc:
            raise StoreError(f"cannot create {directory}: {_describe(exc)}") from exc
        with contextlib.suppress(OSError):
            os.chmod(directory, PRIVATE_DIR)


def _milliseconds(since: float) -> float:
    return (time.monotonic() - since) * 1000


def fsync_file(fd: int, path: Path | str) -> None:
    """fsync, with its duration in the debug log (`-vv`): the cost of durability."""
    started = time.monotonic()
    os.fsync(fd)
    log.debug("fsync %s (%.1f ms)", path, _milliseconds(started))


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        fsync_file(fd, path)
    finally:
        os.close(fd)


def exchange_paths(first: Path, second: Path) -> bool:
    """Swap two directories in one atomic step (Linux renameat2 RENAME_EXCHANGE), so a
    crash leaves one or the other in place; False where the system cannot (the caller
    then renames twice)."""
    import ctypes
    import sys

    if not sys.platform.startswith("linux"):
        return False
    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return False
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p]
    renameat2.argtypes += [ctypes.c_uint]
    at_cwd, rename_exchange = -100, 2
    if renameat2(at_cwd, os.fsencode(first), at_cwd, os.fsencode(second), rename_exchange) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
        return False
    raise OSError(code, os.strerror(code), str(second))


def write_atomic(path: Path, data: bytes, *, durable: bool = True) -> None:
    """Replace `path` with `data` so that a crash leaves the old or the new file, never a mix.

    `durable=False` skips the fsyncs, for caches that can be rebuilt. The file is 0600;
    anything but a regular file in its place (a link, a FIFO) is refused.
    """
    info = _lstat(path)
    if info is not None and not stat.S_ISREG(info.st_mode):
        raise not_regular(path, info.st_mode)
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=TEMP_SUFFIX)
    except OSError as exc:
        raise StoreError(f"cannot write {path}: {_describe(exc)}") from exc
    try:
        os.fchmod(fd, PRIVATE_FILE)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            # The kernel stamps files with a coarse clock; a fine-grained mtime keeps
            # (inode, mtime, size) distinct between two quick writes (see read_versioned).
            now = time.time_ns()
            os.utime(handle.fileno(), ns=(now, now))
            if durable:
                fsync_file(handle.fileno(), tmp)
        os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        if isinstance(exc, OSError):
            raise StoreError(f"cannot write {path}: {_describe(exc)}") from exc
        raise
    log.debug("wrote %s (%d bytes)", path, len(data))
    if durable:
        fsync_dir(path.parent)


def append_durably(
    path: Path,
    build: Callable[[int], bytes],
    *,
    lock: bool = False,
    durable: bool = True,
    follow: bool = False,
) -> int:
    """Append `build(offset)` to a line-oriented file in one write, then fsync.

    `offset` is where the new data will start. A last line torn by an earlier crash is
    sealed with a newline first, so the new data always starts a line of its own. With
    `lock`, an exclusive flock on the file is held while appending. Returns `offset`.
    The file must be a regular file, reached without a symlink unless `follow` (a file
    the user named, like a cassette); it is created 0600.
    """
    flags = os.O_RDWR | os.O_CREAT | os.O_APPEND
    if follow:
        try:
            fd = os.open(path, flags | os.O_CLOEXEC, PRIVATE_FILE)
        except OSError as exc:
            raise StoreError(f"cannot open {path}: {_describe(exc)}") from exc
    else:
        fd = open_regular(path, flags)
    try:
        if lock:
            fcntl.flock(fd, fcntl.LOCK_EX)
        end = os.fstat(fd).st_size
        seal = b"\n" if end and os.pread(fd, 1, end - 1) != b"\n" else b""
        data = seal + build(end + len(seal))
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        log.debug("appended %d bytes to %s", len(data), path)
        if durable:
            fsync_file(fd, path)
    except OSError as exc:
        raise StoreError(f"cannot write {path}: {_describe(exc)}") from exc
    finally:
        os.close(fd)
    return end + len(seal)


def read_bytes(
    path: Path, what: str = "file", *, follow: bool = False, limit: int | None = None
) -> bytes:
    """Read a regular file, refusing symlinks so no document can point outside the data dir
    (unless `follow`: a file of the user's, like the config); with `limit`, at most
    `limit` + 1 bytes, so a caller tells a file too large without reading all of it."""
    return read_versioned(path, what, follow=follow, limit=limit)[0]


Version = tuple[int, int, int]


def read_versioned(
    path: Path, what: str = "file", *, follow: bool = False, limit: int | None = None
) -> tuple[bytes, Version]:
    """The bytes of `path` and a token that changes whenever the file is replaced.

    Every write goes through `os.replace`, which gives the file a new inode, so (inode,
    mtime, size) taken from the same open descriptor identifies the version read. With
    `limit`, reading stops after `limit` + 1 bytes.
    """
    try:
        fd, info = open_with_status(path, follow=follow)
    except NotFound as exc:
        raise NotFound(f"{what} not found: {path}") from exc
    try:
        most = info.st_size if limit is None else min(info.st_size, limit)
        chunks = [os.read(fd, most + 1)]  # one read, unless the file grew
        while chunks[-1] and (limit is None or sum(map(len, chunks)) <= limit):
            chunks.append(os.read(fd, 65536))
        data = b"".join(chunks)[: None if limit is None else limit + 1]
    except OSError as exc:
        raise StoreError(f"cannot read {path}: {_describe(exc)}") from exc
    finally:
        os.close(fd)
    log.debug("read %s (%d bytes)", path, len(data))
    return data, (info.st_ino, info.st_mtime_ns, info.st_size)


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


def read_pointer(path: Path) -> str | None:
    """The session id a current-session pointer file names (None: there is none)."""
    try:
        value = read_bytes(path, "current-session pointer").decode().strip()
    except NotFound:
        return None
    except UnicodeDecodeError:
        raise CorruptDocument(path, "not UTF-8 text") from None
    return value or None


def write_pointer(path: Path, session_id: str | None) -> None:
    """Point the current-session pointer file at `session_id` (None: remove it)."""
    if session_id is None:
        remove_file(path)
        return
    make_dirs(path.parent)
    write_atomic(path, session_id.encode() + b"\n")


_local = threading.local()


def holds_lock(lock_path: Path) -> bool:
    """Whether this thread already holds `lock_path` through `exclusive_lock`."""
    held: dict[str, int] = _local.__dict__.get("held", {})
    return str(lock_path) in held


def _holder(fd: int) -> str:
    """Who holds the lock, as its holder wrote it: `process N (agctl ...)`, when known."""
    try:
        text = os.pread(fd, 200, 0).decode("utf-8", "replace").split("\n", 1)[0]
        pid = int(text.split()[0])
    except (OSError, ValueError, IndexError):
        return ""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            words = [w.decode("utf-8", "replace") for w in handle.read().split(b"\0") if w]
    except OSError:
        words = []
    command = " ".join(Path(words[0]).name if i == 0 else w for i, w in enumerate(words[:4]))
    command = command[:60] + ("…" if len(command) > 60 else "")
    return f"process {pid}" + (f" ({command})" if command else "")


def _wait_for_lock(fd: int, lock_path: Path, timeout: Callable[[], float]) -> None:
    """flock with a deadline: polls, so a stopped or hung holder cannot block forever."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return
    except BlockingIOError:
        pass
    limit = timeout()
    holder = _holder(fd)
    log.info("waiting up to %.1fs for %s, held by %s", limit, lock_path, holder or "another")
    deadline = time.monotonic() + limit
    delay = 0.001
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            pass
        left = deadline - time.monotonic()
        if left <= 0:
            holder = _holder(fd) or holder
            raise LockTimeout(lock_path, limit, holder)
        time.sleep(min(delay, left))
        delay = min(delay * 2, 0.02)


class LockTimeout(Conflict):
    """Another process held a session's lock for longer than `lock_timeout`."""

    def __init__(self, lock_path: Path, limit: float, holder: str) -> None:
        self.holder = holder
        by = f" by {holder}" if holder else " by another process"
        super().__init__(
            f"{lock_path.parent.name}: still locked{by} after {limit:g}s (lock_timeout); "
            "if that process is stopped or hung, end it and try again"
        )


# The width of the holder's pid line in a lock file.
PID_WIDTH = 16
# How long a writer waits for another process's lock (config `lock_timeout`).
DEFAULT_LOCK_TIMEOUT = 30.0


def _default_timeout() -> float:
    return DEFAULT_LOCK_TIMEOUT


@contextlib.contextmanager
def exclusive_lock(
    lock_path: Path, timeout: Callable[[], float] = _default_timeout
) -> Iterator[None]:
    """Hold an exclusive flock on `lock_path`; re-entrant within one thread.

    Waits at most `timeout()` seconds (asked only when the lock is busy), then raises
    LockTimeout naming the holder, which writes its pid into the lock file.
    """
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
        fd = open_regular(lock_path, os.O_RDWR | os.O_CREAT)
    except NotFound as exc:
        raise StoreError(f"cannot open lock file {lock_path}: no such directory") from exc
    try:
        asked = time.monotonic()
        _wait_for_lock(fd, lock_path, timeout)
        taken = time.monotonic()
        log.debug("lock %s taken (waited %.1f ms)", lock_path, _milliseconds(asked))
        with contextlib.suppress(OSError):
            # A fixed width overwrites the last holder's pid without cutting the file
            # (which costs a journal commit of the file system, on every lock taken).
            os.pwrite(fd, f"{os.getpid():<{PID_WIDTH - 1}}\n".encode(), 0)
        held[key] = 1
        try:
            yield
        finally:
            del held[key]
            log.debug("lock %s released (held %.1f ms)", lock_path, _milliseconds(taken))
    finally:
        os.close(fd)


@contextlib.contextmanager
def deferred_interrupts(*, reraise: bool = True) -> Iterator[None]:
    """Hold Ctrl-C, SIGTERM and SIGHUP (those not ignored) until a multi-file commit is
    done, then deliver the first that came to the handler it would have met (the command
    line's raises agctl.base.errors.Interrupted; Python's own raises KeyboardInterrupt), or, with
    `reraise=False`, hold it (agctl.base.interrupts.hold): the work it would have stopped is
    complete, and a loop of such works (a replay) stops before its next one."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []
    previous = {}
    for signum in INTERRUPTING:
        handler = signal.getsignal(signum)
        if handler is not None and handler is not signal.SIG_IGN:
            previous[signum] = signal.signal(signum, lambda number, frame: received.append(number))
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    if received and reraise:
        signal.raise_signal(received[0])
    elif received:
        hold(received[0])
