"""The record lines the stores keep: a JSON value, a tab and its checksum (8 hex digits
of BLAKE2b over the JSON, agctl.base.hashing.line_sum), a newline. A session's checkpoint log
and its caches hold such lines, and so do the file backend's slot logs (slotlog.py) and
redo journal (journal.py): a changed byte shows as a failed checksum, never as another
value."""

from __future__ import annotations

from typing import Any

import orjson

from agctl.base.hashing import LINE_SUM_LENGTH, line_sum


def encode_record(value: Any) -> bytes:
    data = orjson.dumps(value)
    return data + b"\t" + line_sum(data) + b"\n"


def checked_value(line: bytes) -> Any:
    """The JSON value of a line written by `encode_record`, or None when the line has no
    checksum, fails it, or does not parse: for the caches, which are rebuilt then."""
    body, sep, digest = line.rstrip().rpartition(b"\t")  # blanks after it: padding
    if not sep or digest != line_sum(body):
        return None
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:
        return None


def checksum_of(line: bytes) -> str | None:
    """The checksum at the end of a line as `encode_record` writes it (None if none)."""
    width = LINE_SUM_LENGTH + 2
    tail = line[-width:]
    if len(tail) != width or tail[:1] != b"\t" or tail[-1:] != b"\n":
        return None
    return tail[1:-1].decode("ascii", "replace")
