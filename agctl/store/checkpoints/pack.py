"""The checkpoint log: one append-only file holding every checkpoint of a session.

Each line is one record, told apart by its first key:

    {"h": hash, "p": parent, "m": message}   a message node; `p` is the byte offset of
                                              the node before it in its zone (-1: first)
    {"b": hash, "d": document}               a blob: a slot or session document part
    {"c": checkpoint}                        a checkpoint: refers to blobs and node tips
    {"r": offset}                            a rollback to the checkpoint at `offset`

Every line ends with a tab and its own checksum (8 hex digits of BLAKE2b over the JSON:
agctl.storage.encoding, which the stores' own record lines share), verified whenever it
is read, so a changed byte is an error naming the record, never a different state; a
log starts with a header record saying so. Logs written before checksums (no header)
stay readable, their records unverifiable.

A zone of a checkpoint is the offset of its last node, so a checkpoint costs only what is
new since the history it extends. Records are never rewritten (only `store gc` writes a
whole new log, in one transaction: agctl.store.checkpoints.gc); everything a record refers
to was written before it, in the same or an earlier append, and each append is fsynced
before anything else refers to it. A crash can leave at most a torn last line, which
nothing refers to and the next append seals.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from typing import IO, TYPE_CHECKING, Any

import orjson

from agctl.base.errors import CorruptDocument, DataError, NotFound, StoreError
from agctl.base.hashing import LINE_SUM_LENGTH, content_hash, line_sum
from agctl.storage.encoding import checksum_of, encode_record

if TYPE_CHECKING:
    from agctl.storage.base import LogReader, LogWriter

log = logging.getLogger("agctl.checkpoint")
NO_PARENT = -1
Node = tuple[str, int, dict[str, Any]]  # (hash, own offset, message)
HEADER = {"agctl": "checkpoint-log", "checksums": 1}


class BytesLog:
    """A log's bytes held in memory, read like a stored one (agctl.storage.base.LogReader)."""

    def __init__(self, data: bytes, name: str = "checkpoint log") -> None:
        self.data = data
        self.name = name

    def size(self) -> int:
        return len(self.data)

    def open(self) -> IO[bytes]:
        import io

        return io.BytesIO(self.data)


class NoRecord(CorruptDocument):
    """No record starts at the offset asked for (an id that names nothing)."""


def _read_back(held: int) -> int:
    """How much more of a log to read, going back from its end, when `held` bytes did
    not hold what is looked for: a little first (a last record is short), doubling."""
    return min(max(4096, held), 1 << 20)


class Log:
    """Append records in one write; read them back by offset, each one verified.

    Over a backend's log storage (agctl.storage.base.LogReader; a LogWriter to append,
    inside a transaction), or a BytesLog (an export being checked before it is stored)."""

    def __init__(self, storage: LogReader | LogWriter) -> None:
        self.storage = storage
        self.path = storage.name
        self._checked: bool | None = None  # whether every line must carry a checksum
        self._digests: dict[int, str] = {}  # line_digest of lines appended or found here
        self._checksums: dict[int, str] = {}  # the checksum of the last line appended
        self._last: tuple[int, tuple[int, dict[str, Any]] | None] | None = None  # by size
        self._sealed: int | None = None  # a size at which the log ends with a whole line
        self._rewinds = getattr(storage, "rewinds", 0)

    def _memos(self) -> None:
        """Forget what was learnt of the log if a savepoint has undone appends to it."""
        rewinds = getattr(self.storage, "rewinds", 0)
        if rewinds != self._rewinds:
            self._rewinds = rewinds
            self._checked = None
            self._digests.clear()
            self._checksums.clear()
            self._last = None
            self._sealed = None

    def size(self) -> int:
        return self.storage.size()

    def _writer(self) -> LogWriter:
        append = getattr(self.storage, "append", None)
        if append is None:
            raise StoreError(f"{self.path} is not open for writing (no transaction)")
        return self.storage  # type: ignore[return-value]

    def _open(self) -> IO[bytes]:
        try:
            return self.storage.open()
        except NotFound:
            raise CorruptDocument(self.path, "missing: the checkpoint history is gone") from None

    def append(self, records: Sequence[bytes | Any]) -> list[int]:
        """Write records (JSON values, or callables of the offsets so far); return offsets.

        A record that is a callable is called with the list of offsets already assigned
        in this batch, so it can refer to records written just before it. A new log
        starts with its header.
        """
        if not records:
            return []
        self._memos()
        offsets: list[int] = []
        written: dict[int, str] = {}
        checksums: dict[int, str] = {}
        values: list[Any] = []

        def encode(start: int) -> bytes:
            chunks = []
            end = start
            written.clear()
            checksums.clear()
            values.clear()
            if start == 0:
                chunks.append(encode_record(HEADER))
                end += len(chunks[0])
            for record in records:
                value = record(offsets) if callable(record) else record
                line = encode_record(value)
                offsets.append(end)
                values.append(value)
                end += len(line)
                chunks.append(line)
            # The last line's fingerprint is what callers ask for (the caches tie
            # themselves to it); any other is read back if asked.
            written[offsets[-1]] = line_sum(chunks[-1]).decode()
            checksums[offsets[-1]] = checksum_of(chunks[-1]) or ""
            return b"".join(chunks)

        self._drop_torn_tail()
        self._writer().append(encode)
        self._digests.update(written)
        self._checksums.update(checksums)
        # The log now ends with the last record written: known without reading it back.
        self._sealed = self.size()
        if isinstance(values[-1], dict):
            self._last = (self._sealed, (offsets[-1], values[-1]))
        return offsets

    def replace(self, data: bytes) -> None:
        """Make the log exactly `data` (whole lines, a header first): what `store gc`
        writes, in the transaction that commits it; everything learnt of the old log
        is forgotten."""
        writer = self._writer()
        writer.truncate(0)
        if data:
            writer.append(lambda offset: data)
        self._checked = None
        self._digests.clear()
        self._checksums.clear()
        self._last = None
        self._sealed = self.size()

    def _drop_torn_tail(self) -> None:
        """Cut off what a crash mid-append left after the last newline (nothing refers to
        it), so a torn header cannot turn a new log into one without checksums."""
        if not self.size():
            return
        torn_at, torn = self.torn_tail()
        if torn:
            self._writer().truncate(torn_at)
            self._checked = None

    def checked(self) -> bool:
        """Whether this log carries checksums (its first line is the header)."""
        self._memos()
        if self._checked is None:
            try:
                with self._open() as handle:
                    first = handle.readline()
            except CorruptDocument:
                return True
            self._checked = not first or self._is_header(first)
        return self._checked

    def _is_header(self, line: bytes) -> bool:
        body, sep, digest = line.rstrip(b"\n").rpartition(b"\t")
        if not sep:
            return False
        try:
            return digest == line_sum(body) and orjson.loads(body) == HEADER
        except orjson.JSONDecodeError:
            return False

    def decode(self, line: bytes, offset: int) -> dict[str, Any]:
        """The record of one whole line, its checksum verified (exit 5 if it fails)."""
        body, sep, digest = line.rstrip(b"\n").rpartition(b"\t")
        if sep:
            if digest != line_sum(body):
                raise CorruptDocument(
                    self.path, f"the record at byte {offset} does not match its checksum"
                )
        elif self.checked():
            raise CorruptDocument(self.path, f"the record at byte {offset} has no checksum")
        else:
            body = line  # written before checksums: readable, not verifiable
        try:
            record = orjson.loads(body)
        except orjson.JSONDecodeError:
            raise CorruptDocument(self.path, f"unreadable record at byte {offset}") from None
        if not isinstance(record, dict):
            raise CorruptDocument(self.path, f"unreadable record at byte {offset}")
        return record

    @staticmethod
    def _line_at(handle: Any, offset: int) -> bytes:
        """The line starting at `offset`; b"" when `offset` does not start a line."""
        if offset < 0:
            return b""
        if offset:
            handle.seek(offset - 1)
            if handle.read(1) != b"\n":
                return b""
        handle.seek(offset)
        return handle.readline()  # type: ignore[no-any-return]

    def read(self, offset: int) -> dict[str, Any]:
        try:
            with self._open() as handle:
                line = self._line_at(handle, offset)
        except OSError as exc:
            raise StoreError(f"cannot read {self.path}: {exc.strerror}") from None
        if not line:
            if self._whole_record_at(offset):
                raise CorruptDocument(
                    self.path, f"the newline before the record at byte {offset} is damaged"
                )
            raise NoRecord(self.path, f"no record starts at byte {offset}")
        if not line.endswith(b"\n"):
            raise CorruptDocument(self.path, f"the record at byte {offset} is cut short")
        return self.decode(line, offset)

    def _whole_record_at(self, offset: int) -> bool:
        """Whether a line that passes its checksum runs from `offset` (though the byte
        before it is not a newline): a record whose separator was damaged."""
        if offset < 0:
            return False
        with self._open() as handle:
            handle.seek(offset)
            line = handle.readline()
        body, sep, digest = line.rstrip(b"\n").rpartition(b"\t")
        return bool(sep) and digest == line_sum(body)

    def line_digest(self, offset: int) -> str | None:
        """A fingerprint of the whole line at `offset` (None if no line starts there):
        what the caches over the log remember, to notice a log that was replaced."""
        return self.line_digests([offset]).get(offset)

    def line_digests(self, offsets: Sequence[int]) -> dict[int, str]:
        """`line_digest` of many offsets, with one open file; lines this object just
        appended are not read again."""
        self._memos()
        found = {o: self._digests[o] for o in offsets if o in self._digests}
        wanted = [o for o in offsets if o not in found]
        if not wanted:
            return found
        try:
            with self._open() as handle:
                for offset in wanted:
                    line = self._line_at(handle, offset)
                    if line.endswith(b"\n"):
                        found[offset] = line_sum(line).decode()
        except (OSError, DataError):
            pass
        return found

    def line_checksums(self, spans: Sequence[tuple[int, int]]) -> dict[int, str]:
        """The checksum carried by the line of each (offset, end) that is one whole line
        of the log, read from its last bytes alone (and the newline before it): cheap
        enough to check thousands of index lines against the log. Lines this object just
        appended are not read again."""
        self._memos()
        found = {o: self._checksums[o] for o, _ in spans if o in self._checksums}
        width = LINE_SUM_LENGTH + 2  # a tab, the checksum, the newline
        try:
            with self._open() as handle:
                for offset, end in spans:
                    if offset in found or end - offset < width + 2:
                        continue
                    if offset:
                        handle.seek(offset - 1)
                        if handle.read(1) != b"\n":
                            continue
                    handle.seek(end - width)
                    checksum = checksum_of(handle.read(width))
                    if checksum is not None:
                        found[offset] = checksum
        except (OSError, DataError):
            pass
        return found

    def blob(self, offset: int) -> dict[str, Any]:
        record = self.read(offset)
        data = record.get("d")
        if not isinstance(data, dict) or content_hash(data) != record.get("b"):
            raise CorruptDocument(self.path, f"blob at byte {offset} does not match its hash")
        return data

    def chain(self, tip: int, count: int) -> list[Node]:
        """The `count` nodes ending at `tip`, oldest first, each checked against its hash."""
        if tip == NO_PARENT or count == 0:
            if count:
                raise CorruptDocument(self.path, f"an empty chain cannot hold {count} nodes")
            return []
        walked: list[tuple[str, int, int, dict[str, Any]]] = []
        try:
            with self._open() as handle:
                offset = tip
                while offset != NO_PARENT and len(walked) <= count:
                    line = self._line_at(handle, offset)
                    if not line.endswith(b"\n"):
                        raise CorruptDocument(self.path, f"no message node at byte {offset}")
                    record = self.decode(line, offset)
                    try:
                        digest, parent, data = str(record["h"]), int(record["p"]), record["m"]
                    except (KeyError, TypeError, ValueError):
                        raise CorruptDocument(
                            self.path, f"no message node at byte {offset}"
                        ) from None
                    if not isinstance(data, dict) or content_hash(data) != digest:
                        raise CorruptDocument(
                            self.path, f"node at byte {offset} does not match its hash"
                        )
                    if parent >= offset:
                        raise CorruptDocument(
                            self.path, f"node at byte {offset} points forward, to {parent}"
                        )
                    walked.append((digest, offset, parent, data))
                    offset = parent
        except OSError as exc:
            raise StoreError(f"cannot read {self.path}: {exc.strerror}") from None
        if len(walked) != count:
            raise CorruptDocument(
                self.path, f"the chain ending at byte {tip} has {len(walked)} nodes, not {count}"
            )
        return [(digest, offset, data) for digest, offset, _, data in reversed(walked)]

    def last(self) -> tuple[int, dict[str, Any]] | None:
        """The last sound record and its offset: a torn last line is skipped, and so is a
        damaged one (with a warning), so one changed byte cannot stop every later append.
        Remembered while the log keeps its size (within a transaction, nothing else
        writes it)."""
        size = self.size()
        self._memos()
        if self._last is not None and self._last[0] == size:
            return self._last[1]
        found = self._find_last(size)
        self._last = (size, found)
        return found

    def _find_last(self, size: int) -> tuple[int, dict[str, Any]] | None:
        if not size:
            return None
        with self._open() as handle:
            position = size  # `data` holds the file from `position` to its end
            data = b""
            end = -1  # where in `data` the newline ending the next candidate line is
            while True:
                if end < 0:
                    end = data.rfind(b"\n")
                start = data.rfind(b"\n", 0, end) + 1 if end >= 0 else 0
                if end >= 0 and (start or not position):
                    offset = position + start
                    line = data[start : end + 1]
                    try:
                        record = self.decode(line, offset)
                    except CorruptDocument as exc:
                        log.warning("skipping %s", exc)
                    else:
                        if offset + len(line) == size:  # the last line is whole
                            self._sealed = size
                            self._digests[offset] = line_sum(line).decode()
                        return None if record == HEADER and not offset else (offset, record)
                    if not start:
                        return None
                    end = start - 1
                    continue
                if not position:
                    return None
                step = min(_read_back(len(data)), position)
                position -= step
                handle.seek(position)
                data = handle.read(step) + data
                if end >= 0:
                    end += step

    def torn_tail(self) -> tuple[int, bytes]:
        """Where the bytes after the last newline start, and those bytes (b"" if none):
        what a crash mid-append leaves, and the next append seals."""
        size = self.size()
        self._memos()
        if not size or self._sealed == size:
            return size, b""
        with self._open() as handle:
            position = size
            tail = b""
            while position:
                step = min(_read_back(len(tail)), position)
                position -= step
                handle.seek(position)
                tail = handle.read(step) + tail
                newline = tail.rfind(b"\n")
                if newline >= 0:
                    return position + newline + 1, tail[newline + 1 :]
            return 0, tail

    def scan(
        self, start: int, problems: list[CorruptDocument] | None = None
    ) -> Iterator[tuple[int, int, dict[str, Any]]]:
        """Every whole record from `start` on: (offset, end, record). A torn last line
        (a crash mid-append) is skipped; a damaged whole line is skipped too, and added
        to `problems` when given."""
        if not self.size():
            return
        with self._open() as handle:
            handle.seek(start)
            offset = start
            for line in handle:
                end = offset + len(line)
                if line.endswith(b"\n"):
                    try:
                        record = self.decode(line, offset)
                    except CorruptDocument as exc:
                        if problems is not None:
                            problems.append(exc)
                    else:
                        if record != HEADER or offset:
                            yield offset, end, record
                offset = end


def common_prefix(left: Sequence[str], right: Sequence[str]) -> int:
    count = 0
    for a, b in zip(left, right, strict=False):
        if a != b:
            break
        count += 1
    return count
