"""The file backend's one redo journal: how a transaction over many files is atomic.

Each session dir holds one `journal` file. A transaction commits by appending one record
that lists, as bytes, every change it makes to the session's files (put a file, delete
one, write at an offset of a log, cut a log short), and fsyncing it: that fsync is the
commit point. The changes are then applied without syncing each file, and the header's
`applied` mark moves past the record. The next writer that finds a record not applied
(its writer was killed mid-way) replays it; after a power failure (the machine's boot id
differs from the header's) every record still in the journal is replayed, in order, over
files that were synced when the journal was last emptied. Each change is physical and
idempotent, so replaying a record twice gives the same files.

When the journal grows past FLUSH_BYTES, every file its records touched is fsynced and
the journal is emptied. Without a boot id (not Linux) it is emptied after every commit.

    header   {"agctl": "journal", "boot": <boot id>, "applied": <10-digit offset>} + sum
    record   {"ops": [[op, path, ...], ...]} + sum, one a line (agctl.storage.encoding)

    ["put", path, data]          replace the file with data (atomically)
    ["mv", temp, path]           replace the file with a temp file written (and synced)
                                 before the record: how a large document is put
    ["del", path]                remove the file
    ["at", path, offset, data]   cut the file to offset, then write data there
    ["over", path, data, size]   write data at 0, blanks after it up to size, in place
    ["cut", path, size]          cut the file to size

Paths are relative to the session dir, and only ones this backend writes are replayed; a
journal not owned by the data dir's owner, or writable by others, is refused (exit 5).
"""

from __future__ import annotations

import base64
import contextlib
import errno
import functools
import logging
import os
import re
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import orjson

from agctl.base.errors import AgctlError, CommitPending, CorruptDocument, NotFound, StoreError
from agctl.base.fsio import (
    PRIVATE_FILE,
    TEMP_SUFFIX,
    check_dir,
    check_regular,
    fsync_dir,
    fsync_file,
    make_dirs,
    open_regular,
    open_with_status,
)
from agctl.base.hashing import line_sum
from agctl.storage.encoding import encode_record

log = logging.getLogger("agctl.store")

FLUSH_BYTES = 256 * 1024
_APPLIED_DIGITS = 12
# The files a journal may name, relative to the session dir.
_REPLAYABLE = re.compile(
    r"(session\.json|draft\.json|slots/[^/\0]+\.(json|log)|drafts/[^/\0]+\.json"
    r"|checkpoints/(log|index\.jsonl|heads\.json|removed\.json))"
)
# The temp file of a large put: `.<name>.<random>.tmp` beside its target.
_TEMP = re.compile(r"((slots|drafts|checkpoints)/)?\.[^/\0]+\.tmp")

Op = list[Any]


def boot_id() -> str | None:
    """This boot of the machine, or None where the system does not say (then every
    commit syncs its files before it returns)."""
    try:
        with open("/proc/sys/kernel/random/boot_id", "rb") as handle:
            return handle.read().decode().strip() or None
    except OSError:
        return None


_BOOT = boot_id()


def _decode(line: bytes) -> Any:
    body, sep, digest = line.rstrip(b"\n").rpartition(b"\t")
    if not line.endswith(b"\n") or not sep or digest != line_sum(body):
        return None
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:
        return None


def _header(applied: int, boot: str | None) -> bytes:
    mark = f"{applied:0{_APPLIED_DIGITS}d}"
    return encode_record({"agctl": "journal", "boot": boot or "", "applied": mark})


@functools.cache
def _header_size_of(boot: str | None) -> int:
    return len(_header(0, boot))


def _header_size() -> int:
    return _header_size_of(_BOOT)


def pack_data(data: bytes) -> dict[str, str]:
    try:
        return {"t": data.decode("utf-8")}
    except UnicodeDecodeError:
        return {"b": base64.b64encode(data).decode("ascii")}


def unpack_data(value: Any) -> bytes:
    if isinstance(value, dict) and isinstance(value.get("t"), str):
        return value["t"].encode("utf-8")  # type: ignore[no-any-return]
    if isinstance(value, dict) and isinstance(value.get("b"), str):
        return base64.b64decode(value["b"])
    raise ValueError("no data")


def trusted_file(path: Path, owner: int) -> bool:
    """Whether a journal exists and may be applied: a regular file, not a link, owned by
    the data dir's owner and writable by no one else. One planted by someone else is
    refused (CorruptDocument, exit 5) instead of being replayed."""
    fd = _trusted_fd(path, owner)
    if fd is None:
        return False
    os.close(fd)
    return True


def _trusted_fd(path: Path, owner: int, flags: int = os.O_RDONLY) -> int | None:
    try:
        fd = open_regular(path, flags)
    except NotFound:
        return None
    info = os.fstat(fd)
    if info.st_uid != owner or info.st_mode & 0o022:
        os.close(fd)
        raise CorruptDocument(
            path,
            f"recovery journal owned by uid {info.st_uid} with mode "
            f"{info.st_mode & 0o777:03o}, not by the data dir's owner ({owner}) "
            "with mode 600: not applied ('agctl doctor --fix' removes it)",
        )
    return fd


class Journal:
    """The redo journal of one session dir (the caller holds the session's lock)."""

    def __init__(self, directory: Path, path: Path, owner: int) -> None:
        self.directory = directory
        self.path = path
        self.owner = owner
        self._real: set[Path] = set()  # folders found real (agctl's own: not swapped)
        self._targets: dict[str, Path] = {}  # names checked, in folders found real

    # ---- reading -------------------------------------------------------------------

    def _trusted_fd(self, flags: int = os.O_RDONLY) -> int | None:
        return _trusted_fd(self.path, self.owner, flags)

    def pending(self) -> bool:
        """Whether a commit waits to be applied (or replayed after a power failure);
        cheap: the header and the size."""
        return self.pending_at(self.mark())

    def mark(self) -> tuple[int, bytes] | None:
        """The journal's size and header: every commit changes them (it appends its
        record before it changes any file, and marks it applied after), so a read made
        between two equal marks, neither pending, saw no commit at work."""
        try:
            fd, info = open_with_status(self.path)
        except NotFound:
            return None
        except CorruptDocument:
            return (-1, b"")
        try:
            return info.st_size, os.pread(fd, _header_size() + 64, 0)
        finally:
            os.close(fd)

    def pending_at(self, mark: tuple[int, bytes] | None) -> bool:
        if mark is None:
            return False
        size, head = mark
        return size < 0 or self._unapplied_from(head, size) is not None

    def _unapplied_from(self, head: bytes, size: int) -> int | None:
        """Where the records to replay start, or None when all is applied."""
        line = head.split(b"\n", 1)[0] + b"\n"
        header = _decode(line)
        if not isinstance(header, dict) or header.get("agctl") != "journal":
            return len(line) if size > len(line) else (0 if size else None)
        try:
            applied = int(header["applied"])
        except (KeyError, TypeError, ValueError):
            applied = len(line)
        if _BOOT is None or header.get("boot") != _BOOT:
            applied = len(line)  # written before this boot: its files may not be synced
        return applied if size > max(applied, len(line)) else None

    def _records(self, data: bytes, start: int) -> Iterator[tuple[int, list[Op]]]:
        """The whole, sound records from `start` on, with their end offsets; a torn or
        damaged one ends the journal (it never committed)."""
        offset = start
        while offset < len(data):
            end = data.find(b"\n", offset)
            if end < 0:
                return
            record = _decode(data[offset : end + 1])
            if not isinstance(record, dict) or not isinstance(record.get("ops"), list):
                return
            offset = end + 1
            yield offset, record["ops"]

    # ---- committing ----------------------------------------------------------------

    def commit(self, ops: Sequence[Op], *, durable: bool = True) -> None:
        """Write `ops` as one record (fsynced when `durable`: the commit point), apply
        them, and mark them applied; flush when the journal has grown large."""
        if not ops:
            return
        record = encode_record({"ops": list(ops)})
        # New documents are written aside first: a full disk fails here, before anything
        # is committed or changed.
        temps = self._prepare(ops)
        try:
            fd = self._trusted_fd(os.O_RDWR)
        except BaseException:
            self._discard(temps)
            raise
        created = fd is None
        try:
            if fd is None:
                fd = open_regular(self.path, os.O_RDWR | os.O_CREAT, PRIVATE_FILE)
        except BaseException:
            self._discard(temps)
            raise
        try:
            size = os.fstat(fd).st_size
            if size == 0:
                os.pwrite(fd, _header(_header_size(), _BOOT), 0)
                size = _header_size()
            elif size > _header_size() and any(op[0] == "mv" for op in ops):
                # A move is replayed only while its temp file is there: an earlier record
                # replayed after a power failure would otherwise write over the moved file
                # (a log written again by `store gc`) and stay. Those go to disk first.
                self._flush(fd)
                size = _header_size()
            try:
                try:
                    self._write_record(fd, record, size, durable)
                except OSError as exc:
                    if exc.errno not in (errno.ENOSPC, errno.EFBIG) or size <= _header_size():
                        raise
                    # Full: the records before are applied; emptying the journal may make
                    # room.
                    self._flush(fd)
                    size = _header_size()
                    self._write_record(fd, record, size, durable)
                if durable and created:
                    fsync_dir(self.directory)
            except BaseException:
                self._discard(temps)
                raise
            end = size + len(record)
            try:
                self._finish(ops, temps)
            except AgctlError as exc:
                raise CommitPending(self.directory.name, exc) from exc
            os.pwrite(fd, _header(end, _BOOT), 0)
            if _BOOT is None or end > FLUSH_BYTES:
                self._flush(fd)
        except OSError as exc:
            raise StoreError(f"cannot write {self.path}: {exc.strerror}") from exc
        finally:
            os.close(fd)

    def _write_record(self, fd: int, record: bytes, at: int, durable: bool) -> None:
        """Write a record at the journal's end (and fsync it: the commit point); on
        failure it is cut off again (it was not committed, and must not be replayed)."""
        try:
            done = 0
            while done < len(record):  # a short write: the next one says why
                done += os.pwrite(fd, record[done:], at + done)
            if durable:
                fsync_file(fd, self.path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, at)
            raise

    def recover(self) -> bool:
        """Replay what was committed and not applied; whether anything was."""
        fd = self._trusted_fd(os.O_RDWR)
        if fd is None:
            return False
        try:
            size = os.fstat(fd).st_size
            if self._unapplied_from(os.pread(fd, _header_size() + 64, 0), size) is None:
                return False  # all applied: the records are not read
            data = os.pread(fd, size, 0)
            start = self._unapplied_from(data[: _header_size() + 64], size)
            if start is None:
                return False
            replayed = 0
            for _, ops in self._records(data, start):
                self.apply(ops, replay=True)
                replayed += 1
            if replayed:
                log.warning("finished an interrupted commit of %s", self.directory.name)
            # Replayed changes are synced now, so the journal can start again empty.
            self._flush(fd, data=data)
            return True
        except OSError as exc:
            raise StoreError(f"cannot recover {self.path}: {exc.strerror}") from exc
        finally:
            os.close(fd)

    def flush(self) -> None:
        """Sync every file the journal's records changed, then empty it."""
        fd = self._trusted_fd(os.O_RDWR)
        if fd is None:
            return
        try:
            self._flush(fd)
        except OSError as exc:
            raise StoreError(f"cannot flush {self.path}: {exc.strerror}") from exc
        finally:
            os.close(fd)

    def _flush(self, fd: int, data: bytes | None = None) -> None:
        """Sync the files the records changed, then empty the journal (synced too)."""
        if data is None:
            size = os.fstat(fd).st_size
            data = os.pread(fd, size, 0) if size else b""
        touched: set[str] = set()
        for _, ops in self._records(data, len(data.split(b"\n", 1)[0]) + 1):
            touched.update(str(op[-1] if op[0] == "mv" else op[1]) for op in ops)
        for name in sorted(touched):
            self._sync_file(self.directory / name)
        for folder in {str(Path(name).parent) for name in touched}:
            with contextlib.suppress(OSError):
                fsync_dir(self.directory / folder)
        os.ftruncate(fd, 0)
        os.pwrite(fd, _header(_header_size(), _BOOT), 0)
        fsync_file(fd, self.path)

    @staticmethod
    def _sync_file(path: Path) -> None:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            return  # removed by a later change
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    # ---- applying ------------------------------------------------------------------

    def _target(self, name: Any, pattern: re.Pattern[str] = _REPLAYABLE) -> Path:
        known = self._targets.get(name) if pattern is _REPLAYABLE else None
        if known is not None:
            return known
        if not isinstance(name, str) or not pattern.fullmatch(name) or ".." in name:
            raise CorruptDocument(self.path, f"names a file it may not change: {name!r}")
        target = self.directory / name
        folder = target.parent
        if folder != self.directory and folder not in self._real and check_dir(folder):
            self._real.add(folder)  # never through a link in the folder's place
        if pattern is _REPLAYABLE and (folder == self.directory or folder in self._real):
            self._targets[name] = target
        return target

    def apply(self, ops: Sequence[Op], *, replay: bool = False) -> None:
        try:
            self._finish(ops, self._prepare(ops))
        except (ValueError, TypeError, IndexError, KeyError) as exc:
            if not replay:
                raise
            raise CorruptDocument(self.path, f"unreadable change: {exc}") from None

    def _prepare(self, ops: Sequence[Op]) -> dict[int, Path]:
        """Write the data of every put to a temp file beside its target (not synced: until
        the journal is emptied, its record can write it again); their paths by op."""
        temps: dict[int, Path] = {}
        try:
            for number, op in enumerate(ops):
                if op[0] != "put":
                    continue
                target = self._target(op[1])
                data = unpack_data(op[2])
                temps[number] = self._write_temp(target, data)
                log.debug("wrote %s (%d bytes)", target, len(data))
        except BaseException:
            self._discard(temps)
            raise
        return temps

    @staticmethod
    def _write_temp(target: Path, data: bytes) -> Path:
        make_dirs(target.parent)
        if os.path.lexists(target):
            check_regular(target)  # a link or a FIFO in its place is refused
        try:
            fd, name = tempfile.mkstemp(
                dir=target.parent, prefix=f".{target.name}.", suffix=TEMP_SUFFIX
            )
        except OSError as exc:
            raise StoreError(f"cannot write {target}: {exc.strerror}") from exc
        try:
            os.fchmod(fd, PRIVATE_FILE)
            done = 0
            while done < len(data):
                done += os.write(fd, data[done:] if done else data)
        except OSError as exc:
            os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(name)
            raise StoreError(f"cannot write {target}: {exc.strerror}") from exc
        os.close(fd)
        return Path(name)

    @staticmethod
    def _discard(temps: dict[int, Path]) -> None:
        for temp in temps.values():
            with contextlib.suppress(OSError):
                temp.unlink()

    def _finish(self, ops: Sequence[Op], temps: dict[int, Path]) -> None:
        try:
            for number, op in enumerate(ops):
                self._apply(op, temps.pop(number, None))
        finally:
            self._discard(temps)

    def _apply(self, op: Op, temp: Path | None) -> None:
        kind = op[0]
        if kind == "mv":
            source, target = self._target(op[1], _TEMP), self._target(op[2])
            if os.path.lexists(source):  # else moved already: this is a replay
                check_regular(source)
                make_dirs(target.parent)
                os.replace(source, target)
            return
        target = self._target(op[1])
        if kind == "put":
            if temp is None:  # pragma: no cover - _prepare wrote one for every put
                raise ValueError("a put without its data")
            try:
                os.replace(temp, target)
            except OSError as exc:
                raise StoreError(f"cannot write {target}: {exc.strerror}") from exc
        elif kind == "del":
            with contextlib.suppress(FileNotFoundError):
                target.unlink()
        elif kind in ("at", "cut"):
            self._write_at(target, int(op[2]), unpack_data(op[3]) if kind == "at" else b"")
        elif kind == "over":
            self._overwrite(target, unpack_data(op[2]), int(op[3]))
        else:
            raise ValueError(kind)

    @staticmethod
    def _write_at(target: Path, offset: int, data: bytes) -> None:
        make_dirs(target.parent)
        fd = open_regular(target, os.O_RDWR | os.O_CREAT, PRIVATE_FILE)
        try:
            Journal._write_fd(fd, target, offset, data)
        except OSError as exc:
            raise StoreError(f"cannot write {target}: {exc.strerror}") from exc
        finally:
            os.close(fd)

    @staticmethod
    def _overwrite(target: Path, data: bytes, size: int) -> None:
        fd = open_regular(target, os.O_RDWR | os.O_CREAT, PRIVATE_FILE)
        try:
            padded = data + b" " * (size - len(data))
            done = 0
            while done < len(padded):
                done += os.pwrite(fd, padded[done:], done)
            if os.fstat(fd).st_size > size:
                os.ftruncate(fd, size)
        except OSError as exc:
            raise StoreError(f"cannot write {target}: {exc.strerror}") from exc
        finally:
            os.close(fd)

    @staticmethod
    def _write_fd(fd: int, target: Path, offset: int, data: bytes) -> None:
        """Cut the open file to `offset` (if it is not that long already) and write there."""
        if os.fstat(fd).st_size != offset:
            os.ftruncate(fd, offset)
        view = memoryview(data)
        position = offset
        while view:
            written = os.pwrite(fd, view, position)
            view = view[written:]
            position += written
