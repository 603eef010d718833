"""The checkpoint log: one append-only file holding every checkpoint of a session.

Each line is one record, told apart by its first key:

    {"h": hash, "p": parent, "m": message}   a message node; `p` is the byte offset of
                                              the node before it in its zone (-1: first)
    {"b": hash, "d": document}               a blob: a slot or session document part
    {"c": checkpoint}                        a checkpoint: refers to blobs and node tips
    {"r": offset}                            a rollback to the checkpoint at `offset`

A zone of a checkpoint is the offset of its last node, so a checkpoint costs only what is
new since the history it extends. Records are never rewritten; everything a record refers
to was written before it, in the same or an earlier append, and each append is fsynced
before anything else refers to it. A crash can leave at most a torn last line, which
nothing refers to and the next append seals.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import orjson

from agctl.errors import CorruptDocument, StoreError
from agctl.fsio import append_durably

NO_PARENT = -1
Node = tuple[str, int, dict[str, Any]]  # (hash, own offset, message)


def content_hash(data: Any) -> str:
    """Hash of a JSON value as stored (sorted keys, compact)."""
    encoded = orjson.dumps(data, option=orjson.OPT_SORT_KEYS)
    return hashlib.blake2b(encoded, digest_size=16).hexdigest()


class Log:
    """Append records in one fsynced write; read them back by offset."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def size(self) -> int:
        try:
            return self.path.stat().st_size
        except FileNotFoundError:
            return 0

    def append(self, records: Sequence[bytes | Any]) -> list[int]:
        """Write records (JSON values, or callables of the offsets so far); return offsets.

        A record that is a callable is called with the list of offsets already assigned
        in this batch, so it can refer to records written just before it.
        """
        if not records:
            return []
        offsets: list[int] = []

        def encode(start: int) -> bytes:
            chunks = []
            end = start
            for record in records:
                value = record(offsets) if callable(record) else record
                line = orjson.dumps(value) + b"\n"
                offsets.append(end)
                end += len(line)
                chunks.append(line)
            return b"".join(chunks)

        append_durably(self.path, encode)
        return offsets

    def read(self, offset: int) -> dict[str, Any]:
        try:
            with open(self.path, "rb") as handle:
                handle.seek(offset)
                return self._parse(handle.readline(), offset)
        except FileNotFoundError:
            raise CorruptDocument(self.path, "missing: the checkpoint history is gone") from None
        except OSError as exc:
            raise StoreError(f"cannot read {self.path}: {exc.strerror}") from None

    def _parse(self, line: bytes, offset: int) -> dict[str, Any]:
        try:
            record = orjson.loads(line)
        except orjson.JSONDecodeError:
            raise CorruptDocument(self.path, f"unreadable record at byte {offset}") from None
        if not isinstance(record, dict):
            raise CorruptDocument(self.path, f"unreadable record at byte {offset}")
        return record

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
            with open(self.path, "rb") as handle:
                offset = tip
                while offset != NO_PARENT and len(walked) <= count:
                    handle.seek(offset)
                    record = self._parse(handle.readline(), offset)
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
                    walked.append((digest, offset, parent, data))
                    offset = parent
        except FileNotFoundError:
            raise CorruptDocument(self.path, "missing: the checkpoint history is gone") from None
        except OSError as exc:
            raise StoreError(f"cannot read {self.path}: {exc.strerror}") from None
        if len(walked) != count:
            raise CorruptDocument(
                self.path, f"the chain ending at byte {tip} has {len(walked)} nodes, not {count}"
            )
        return [(digest, offset, data) for digest, offset, _, data in reversed(walked)]

    def last(self) -> tuple[int, dict[str, Any]] | None:
        """The last whole record and its offset (a torn last line is skipped)."""
        size = self.size()
        if not size:
            return None
        data = b""
        position = size
        with open(self.path, "rb") as handle:
            while True:
                step = min(65536, position)
                position -= step
                handle.seek(position)
                data = handle.read(step) + data
                end = data.rfind(b"\n")
                if end >= 0:
                    start = data.rfind(b"\n", 0, end) + 1
                    if start or not position:
                        return position + start, self._parse(data[start:end], position + start)
                if not position:
                    return None

    def scan(self, start: int) -> Iterator[tuple[int, int, dict[str, Any]]]:
        """Every whole record from `start` on: (offset, end, record); skips torn lines."""
        try:
            with open(self.path, "rb") as handle:
                handle.seek(start)
                offset = start
                for line in handle:
                    end = offset + len(line)
                    if line.endswith(b"\n"):
                        try:
                            record = orjson.loads(line)
                        except orjson.JSONDecodeError:
                            record = None
                        if isinstance(record, dict):
                            yield offset, end, record
                    offset = end
        except FileNotFoundError:
            return


def common_prefix(left: Sequence[str], right: Sequence[str]) -> int:
    count = 0
    for a, b in zip(left, right, strict=False):
        if a != b:
            break
        count += 1
    return count
