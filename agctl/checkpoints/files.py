"""A session's checkpoint files: the log and its records, the index, the removed set.

Paths come from agctl.storage.file.layout; the heads cache is the planner's.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import orjson
from pydantic import ValidationError

from agctl.checkpoints.records import Checkpoint, CheckpointSummary, checkpoint_id
from agctl.errors import CorruptDocument, NotFound, StoreError
from agctl.fsio import append_durably, read_bytes, remove_file
from agctl.pack import Log, checked_value, encode_record
from agctl.storage.file import layout
from agctl.validation import validation_summary

if TYPE_CHECKING:
    from agctl.store import Store

log = logging.getLogger("agctl.checkpoint")


def directory(store: Store, session_id: str) -> Path:
    return store.session_subdir(session_id, layout.CHECKPOINTS)


def path(store: Store, session_id: str, where: Callable[[Path], Path]) -> Path:
    """A file of the session's checkpoints (`where` is one of layout's), its folder
    checked first."""
    directory(store, session_id)
    return where(store.session_dir(session_id))


def open_log(store: Store, session_id: str) -> Log:
    return Log(path(store, session_id, layout.checkpoint_log))


def removed_ids(store: Store, session_id: str) -> set[str]:
    where = path(store, session_id, layout.removed_checkpoints)
    try:
        return set(orjson.loads(read_bytes(where)))
    except NotFound:
        return set()
    except (orjson.JSONDecodeError, TypeError) as exc:
        raise CorruptDocument(where, str(exc)) from None


def read_checkpoint(history: Log, offset: int) -> Checkpoint:
    """The checkpoint record at `offset` of the log, with its id."""
    record = history.read(offset)
    data = record.get("c")
    if not isinstance(data, dict):
        raise NotFound(f"no checkpoint {checkpoint_id(offset)!r} in {history.path}")
    try:
        checkpoint = Checkpoint.model_validate(data)
    except ValidationError as exc:
        summary = validation_summary(exc, "record")
        raise CorruptDocument(history.path, f"checkpoint at byte {offset}: {summary}") from None
    checkpoint.id = checkpoint_id(offset)
    return checkpoint


def head(history: Log) -> int | None:
    """The checkpoint the live session descends from: the last checkpoint record, or
    the target of a rollback written after it."""
    last = history.last()
    if last is None:
        return None
    offset, record = last
    if "r" in record:
        return int(record["r"])
    return offset if "c" in record else None


def append_index(store: Store, session_id: str, summary: CheckpointSummary) -> None:
    """Best effort: the index is rebuilt from the log when it is behind."""
    line = encode_record(summary.model_dump(mode="json"))
    where = path(store, session_id, layout.checkpoint_index)
    try:
        append_durably(where, lambda offset: line, durable=False)
    except StoreError as exc:
        log.warning("checkpoint index not updated: %s", exc)


def drop_index(store: Store, session_id: str) -> None:
    """Remove an index that disagrees with the log; the listing rebuilds it."""
    try:
        remove_file(path(store, session_id, layout.checkpoint_index))
    except StoreError as exc:
        log.warning("checkpoint index not rebuilt: %s", exc)


def indexed_ids(store: Store, session_id: str) -> set[str]:
    ids: set[str] = set()
    try:
        lines = read_bytes(path(store, session_id, layout.checkpoint_index)).splitlines()
    except NotFound:
        return ids
    for line in lines:
        with contextlib.suppress(TypeError, KeyError):
            ids.add(str(checked_value(line)["id"]))
    return ids
