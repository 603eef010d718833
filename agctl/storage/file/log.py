"""The checkpoint log as a file: read as a snapshot, and inside a transaction with its
appends held until it commits."""

from __future__ import annotations

import io
import os
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from agctl.base.errors import StoreError
from agctl.base.fsio import append_durably, check_regular, open_regular
from agctl.storage.file.journal import Op, pack_data


class _Spliced(io.RawIOBase):
    """An open file's first `cut` bytes, then bytes not written yet: a snapshot of a log
    (nothing appended after `cut` is seen; a log is cut short only by a rename, so the
    file read stays whole), or a Tx's view of it with its staged appends."""

    def __init__(self, fd: int, cut: int, staged: bytes) -> None:
        super().__init__()
        self._fd = fd
        self._cut = cut
        self._staged = staged
        self._position = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        size = self._cut + len(self._staged)
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._position, io.SEEK_END: size}[whence]
        self._position = max(base + offset, 0)
        return self._position

    def tell(self) -> int:
        return self._position

    def readinto(self, buffer: Any) -> int:
        want = len(buffer)
        if self._position < self._cut:
            data = os.pread(self._fd, min(want, self._cut - self._position), self._position)
        else:
            start = self._position - self._cut
            data = self._staged[start : start + want]
        buffer[: len(data)] = data
        self._position += len(data)
        return len(data)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        super().close()


class FileLog:
    """A checkpoint log file outside any transaction: read by anyone; appended to directly
    (each append fsynced) only by tools and tests that work on a log file itself."""

    rewinds = 0  # no savepoint undoes a direct append

    def __init__(self, path: Path) -> None:
        self.path = path
        self.name = str(path)

    def size(self) -> int:
        if not check_regular(self.path):
            return 0
        try:
            return self.path.stat(follow_symlinks=False).st_size
        except FileNotFoundError:
            return 0

    def open(self) -> IO[bytes]:
        fd = open_regular(self.path)
        return io.BufferedReader(_Spliced(fd, os.fstat(fd).st_size, b""))

    def append(self, build: Callable[[int], bytes]) -> int:
        return append_durably(self.path, build)

    def truncate(self, size: int) -> None:
        try:
            os.truncate(self.path, size)
        except OSError as exc:
            raise StoreError(f"cannot repair {self.path}: {exc.strerror}") from None


class TxLog(FileLog):
    """The checkpoint log inside a transaction: appends are held until it commits."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.base = super().size()
        self.cut: int | None = None  # the file cut short to this, before `staged`
        self.staged = bytearray()  # only ever appended to: cutting it makes a new one
        self.rewinds = 0  # how often a savepoint undid appends (readers' memos then go)
        self._frozen: bytes | None = None  # `staged` as bytes, while it does not grow

    def state(self) -> tuple[int | None, bytearray, int]:
        """Where the log is now, for `rewind`."""
        return self.cut, self.staged, len(self.staged)

    def rewind(self, state: tuple[int | None, bytearray, int]) -> None:
        """Undo what was appended or cut since `state` (a savepoint's undo)."""
        self.cut, self.staged, size = state
        del self.staged[size:]
        self._frozen = None
        self.rewinds += 1

    def _staged_bytes(self) -> bytes:
        if self._frozen is None or len(self._frozen) != len(self.staged):
            self._frozen = bytes(self.staged)
        return self._frozen

    def size(self) -> int:
        return (self.base if self.cut is None else self.cut) + len(self.staged)

    def _last_byte(self) -> bytes:
        if self.staged:
            return bytes(self.staged[-1:])
        end = self.base if self.cut is None else self.cut
        if not end:
            return b""
        fd = open_regular(self.path)
        try:
            return os.pread(fd, 1, end - 1)
        finally:
            os.close(fd)

    def open(self) -> IO[bytes]:
        if self.cut is None and not self.staged:
            return super().open()
        cut = self.base if self.cut is None else self.cut
        fd = open_regular(self.path) if cut else -1
        return io.BufferedReader(_Spliced(fd, cut, self._staged_bytes()))

    def append(self, build: Callable[[int], bytes]) -> int:
        end = self.size()
        seal = b"\n" if end and self._last_byte() != b"\n" else b""
        offset = end + len(seal)
        self.staged += seal + build(offset)
        return offset

    def truncate(self, size: int) -> None:
        kept = self.base if self.cut is None else self.cut
        if size >= kept:
            self.staged = self.staged[: size - kept]
        else:
            self.cut = size
            self.staged = bytearray()
        self._frozen = None

    def ops(self, name: str, put: Callable[[str, bytes], Op]) -> list[Op]:
        """Appends are written in place; a log cut short is replaced whole (by `put`), so
        that a reader holding the old file keeps reading what it opened."""
        if self.cut is None and not self.staged:
            return []
        if self.cut is None:
            return [["at", name, self.base, pack_data(self._staged_bytes())]]
        kept = b""
        if self.cut:
            with self.open() as handle:
                kept = handle.read(self.cut)
        return [put(name, kept + self._staged_bytes())]
