"""Append-only live slots: a slot document plus a log of the messages appended since.

`slots/<id>.json` is the slot as it was last written whole; `slots/<id>.log` holds one
line per transaction that appended messages to its `messages` zone since, each with the
slot's new revision and counters:

    {"base": <digest of the .json's bytes>, "rev": R, "meta": {...}, "m": [messages]} + sum

A line applies only to the document it names (`base`) and only in the order of revisions,
so a log left behind by a rewrite of the document (which removes it in the same
transaction), or a document replaced by hand or by an older agctl, never gets lines that
are not its own. A torn last line is never applied (the journal redoes it).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import orjson
from pydantic import ValidationError

from agctl.base.errors import CorruptDocument, NotFound
from agctl.base.fsio import read_bytes
from agctl.base.hashing import data_hash
from agctl.base.validation import validation_summary
from agctl.context.models import Message, Slot, message_list_adapter, stored_messages
from agctl.storage.base import append_problem
from agctl.storage.encoding import checked_value, encode_record
from agctl.storage.file import layout
from agctl.storage.file.journal import Op, pack_data

# What of a slot's meta an append changes (anything else changed means a whole write): the
# counters, and the fingerprint of the request a turn sent (agctl.context.cache.sent_marks), which
# every turn renews, so a turn stays one line however long its slot.
APPENDED_META = ("message_count", "total_tokens", "updated_at", "sent")


def log_path(document: Path) -> Path:
    return layout.slot_log(document)


def log_name(document_name: str) -> str:
    return document_name[: -len(layout.DOCUMENT)] + layout.SLOT_LOG


def base_of(raw: bytes) -> str:
    return data_hash(raw)


def extending_lines(data: bytes, base: str, rev: int) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, line) of the log `data` that extend the document whose bytes hash to
    `base`, stored at revision `rev`: whole, sound lines, in revision order, up to the
    first that is not."""
    for number, line in enumerate(data.splitlines(keepends=True), 1):
        value = checked_value(line) if line.endswith(b"\n") else None
        if not isinstance(value, dict) or value.get("base") != base:
            return
        if value.get("rev") != rev + 1:
            return
        yield number, value
        rev = int(value["rev"])


def apply_lines(document: Path, slot: Slot, base: str) -> None:
    """Apply to `slot` (read from `document`, whose bytes hash to `base`) the lines of its
    log that extend it, in order."""
    path = log_path(document)
    try:
        data = read_bytes(path, f"slot {slot.id!r}")
    except NotFound:
        return
    meta: dict[str, Any] = {}
    for number, value in extending_lines(data, base, slot.rev):
        try:
            slot.messages.extend(stored_messages(value.get("m")))
        except ValidationError as exc:
            summary = validation_summary(exc, "message")
            raise CorruptDocument(path, f"line {number}: {summary}") from None
        if isinstance(value.get("meta"), dict):
            meta.update({k: v for k, v in value["meta"].items() if k in APPENDED_META})
        slot.rev = int(value["rev"])
    if meta:
        try:
            slot.meta = type(slot.meta).model_validate({**slot.meta.model_dump(), **meta})
        except ValidationError as exc:
            raise CorruptDocument(path, validation_summary(exc, "meta")) from None


def raw_document(document: bytes, log: bytes | None) -> dict[str, Any] | None:
    """A slot as stored, parsed but not validated, with the messages and counters its log
    appended: for readers that scan many slots (search, the session graph). None when it
    is not a JSON object of the shape the log extends (the validated read says what is
    wrong)."""
    try:
        value = orjson.loads(document)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(value, dict):
        return None
    if log:
        rev, messages = value.get("rev"), value.get("messages")
        if not isinstance(rev, int) or not isinstance(messages, list):
            return None
        for _, line in extending_lines(log, base_of(document), rev):
            if not isinstance(line.get("m"), list):
                return None
            messages.extend(line["m"])
            if isinstance(line.get("meta"), dict) and isinstance(value.get("meta"), dict):
                value["meta"].update(
                    {k: line["meta"][k] for k in APPENDED_META if k in line["meta"]}
                )
    return value


# What a transaction appended to a slot: (messages, revision) for each unit of work that
# appended, in order; the slot's last messages are theirs.
Appended = tuple[tuple[int, int], ...]


def append_op(document: Path, name: str, slot: Slot, appended: Appended, base: str) -> Op:
    """The journal change that appends to its log a line for each unit's messages (the
    last of `slot`'s), at the unit's revision: the log's revisions go up one a line.
    The last line carries the counters the slot has now."""
    path = log_path(document)
    try:
        offset = os.stat(path, follow_symlinks=False).st_size
    except FileNotFoundError:
        offset = 0
    start = len(slot.messages) - sum(count for count, _ in appended)
    dumped = message_list_adapter().dump_python(slot.messages[start:], mode="json")
    lines = []
    position = 0
    for number, (count, rev) in enumerate(appended, 1):
        line: dict[str, Any] = {"base": base, "rev": rev}
        if number == len(appended):
            line["meta"] = slot.meta.model_dump(mode="json", include=set(APPENDED_META))
        line["m"] = dumped[position : position + count]
        position += count
        lines.append(encode_record(line))
    return ["at", name, offset, pack_data(b"".join(lines))]


def header_of(slot: Slot) -> dict[str, Any]:
    """What of a slot an append does not change: its config, and its meta but counters."""
    return {
        "config": slot.config.model_dump(mode="json"),
        "meta": slot.meta.model_dump(mode="json", exclude=set(APPENDED_META)),
    }


class StoredSlot(NamedTuple):
    """A slot as this backend last read or wrote it: its files' stats and revision, what
    its log's lines extend, and its zones and header then (what an append must extend)."""

    keys: tuple[Any, Any]
    rev: int
    base: str
    immutable: list[Message]
    compressed: list[Message]
    messages: list[Message]
    header: dict[str, Any]

    @classmethod
    def of(cls, slot: Slot, base: str, keys: tuple[Any, Any]) -> StoredSlot:
        return cls(
            keys,
            slot.rev,
            base,
            list(slot.immutable),
            list(slot.compressed),
            list(slot.messages),
            header_of(slot),
        )

    def extended_by(self, slot: Slot, count: int) -> str | None:
        """Why `slot` is not this stored slot plus `count` appended messages, or None."""
        return append_problem((self.immutable, self.compressed, self.messages), slot, count)
