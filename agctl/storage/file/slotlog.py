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
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from agctl.errors import CorruptDocument, NotFound
from agctl.fsio import read_bytes
from agctl.hashing import data_hash
from agctl.models import Slot, message_list_adapter
from agctl.pack import checked_value, encode_record
from agctl.storage.file import layout
from agctl.storage.file.journal import Op, pack_data
from agctl.validation import validation_summary

# What of a slot's meta an append changes (anything else changed means a whole write).
APPENDED_META = ("message_count", "total_tokens", "updated_at")


def log_path(document: Path) -> Path:
    return layout.slot_log(document)


def log_name(document_name: str) -> str:
    return document_name[: -len(layout.DOCUMENT)] + layout.SLOT_LOG


def base_of(raw: bytes) -> str:
    return data_hash(raw)


def replay(document: Path, slot: Slot, base: str) -> None:
    """Apply to `slot` (read from `document`, whose bytes hash to `base`) the lines of its
    log that extend it, in order."""
    path = log_path(document)
    try:
        data = read_bytes(path, f"slot {slot.id!r}")
    except NotFound:
        return
    adapter = message_list_adapter()
    meta: dict[str, Any] = {}
    for number, line in enumerate(data.splitlines(keepends=True), 1):
        value = checked_value(line) if line.endswith(b"\n") else None
        if not isinstance(value, dict) or value.get("base") != base:
            break
        if value.get("rev") != slot.rev + 1:
            break
        try:
            slot.messages.extend(adapter.validate_python(value.get("m")))
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


def append_op(document: Path, name: str, slot: Slot, count: int, base: str) -> Op:
    """The journal change that appends the last `count` messages of `slot` to its log."""
    path = log_path(document)
    try:
        offset = os.stat(path, follow_symlinks=False).st_size
    except FileNotFoundError:
        offset = 0
    new = slot.messages[len(slot.messages) - count :]
    messages = message_list_adapter().dump_python(new, mode="json")
    meta = slot.meta.model_dump(mode="json", include=set(APPENDED_META))
    line = encode_record({"base": base, "rev": slot.rev, "meta": meta, "m": messages})
    return ["at", name, offset, pack_data(line)]
