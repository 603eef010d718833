"""A session's checkpoint log as rows of the `checkpoint_log` table: cut into rows when
given whole, and read back as a seekable byte stream that fetches the rows it needs."""

from __future__ import annotations

import bisect
import io
from collections.abc import Callable, Sequence
from typing import IO, Any

from agctl.base.errors import CorruptDocument, NotFound

# Checkpoint log rows fetched around a position a reader needs.
LOG_ROWS = 16
# A history given whole (an import) is stored in rows of about this size, cut at lines.
LOG_CHUNK = 1 << 16


def log_chunks(data: bytes) -> tuple[list[int], list[bytes]]:
    """A whole history cut into rows of about LOG_CHUNK bytes, each ending at a line end
    where there is one (a reader fetches rows, never half a line it does not need)."""
    offsets, chunks = [], []
    start = 0
    while start < len(data):
        end = data.find(b"\n", min(start + LOG_CHUNK, len(data)) - 1)
        end = len(data) if end < 0 else end + 1
        offsets.append(start)
        chunks.append(data[start:end])
        start = end
    return offsets, chunks


class LogRows:
    """Rows of a checkpoint log as fetched or written, by offset: what one reader has
    seen, or what a transaction has (nobody else writes the log while it holds the lock;
    what it cuts it forgets)."""

    __slots__ = ("rows", "starts")

    def __init__(self) -> None:
        self.starts: list[int] = []
        self.rows: dict[int, bytes] = {}

    def find(self, position: int) -> tuple[int, bytes] | None:
        index = bisect.bisect_right(self.starts, position) - 1
        if index >= 0:
            start = self.starts[index]
            data = self.rows[start]
            if position < start + len(data):
                return start, data
        return None

    def add(self, start: int, data: bytes) -> None:
        if start not in self.rows:
            bisect.insort(self.starts, start)
        self.rows[start] = data

    def clear(self) -> None:
        self.starts.clear()
        self.rows.clear()

    def keep_last(self, count: int) -> None:
        """Forget all but the last `count` rows."""
        for start in self.starts[:-count]:
            del self.rows[start]
        del self.starts[:-count]


class LogRaw(io.RawIOBase):
    """A checkpoint log as a seekable byte stream over its rows, fetched as they are
    needed: the log up to `size` when opened (rows are only ever added after it)."""

    def __init__(
        self,
        fetch: Callable[[int, int], list[tuple[int, bytes]]],
        size: int,
        on_close: Callable[[], None] | None = None,
        rows: LogRows | None = None,
    ) -> None:
        super().__init__()
        self._fetch = fetch
        self._on_close = on_close
        self._size = size
        self._position = 0
        self._rows = LogRows() if rows is None else rows

    def close(self) -> None:
        if not self.closed and self._on_close is not None:
            self._on_close()
        super().close()

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._position, io.SEEK_END: self._size}[whence]
        self._position = max(0, base + offset)
        return self._position

    def _row(self, position: int) -> tuple[int, bytes]:
        found = self._rows.find(position)
        if found is None:
            for start, data in self._fetch(position, self._size):
                if start not in self._rows.rows:
                    self._rows.add(start, data)
            found = self._rows.find(position)
        if found is None:
            raise CorruptDocument("checkpoint log", f"no stored row holds byte {position}")
        return found

    def readinto(self, buffer: Any) -> int:
        if self._position >= self._size:
            return 0
        start, data = self._row(self._position)
        begin = self._position - start
        count = min(len(buffer), len(data) - begin, self._size - self._position)
        buffer[:count] = data[begin : begin + count]
        self._position += count
        return count


def open_log(
    name: str,
    session_id: str,
    size: int,
    rows: Callable[[str, Sequence[Any]], list[tuple[Any, ...]]],
    on_close: Callable[[], None] | None = None,
    seen: LogRows | None = None,
) -> IO[bytes]:
    if not size:
        if on_close is not None:
            on_close()
        raise NotFound(f"{name} not found")

    def fetch(position: int, end: int) -> list[tuple[int, bytes]]:
        found = rows(
            "log_rows", [session_id, position, LOG_ROWS, session_id, position, end, LOG_ROWS]
        )
        return [(int(off), bytes(data)) for off, data in found]

    return io.BufferedReader(LogRaw(fetch, size, on_close, seen), buffer_size=8192)
