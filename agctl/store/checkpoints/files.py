"""A session's checkpoint records, as its backend keeps them: the log and its records,
the index cache, the removed set (the heads cache is the planner's)."""

from __future__ import annotations

import contextlib
import logging
import weakref
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from agctl.base.errors import CorruptDocument, NotFound, StoreError
from agctl.base.validation import validation_summary
from agctl.storage.encoding import checked_value, encode_record
from agctl.store.checkpoints.pack import Log
from agctl.store.checkpoints.records import Checkpoint, CheckpointSummary, checkpoint_id
from agctl.store.work import reader

if TYPE_CHECKING:
    from agctl.storage.base import Backend

log = logging.getLogger("agctl.checkpoint")


# One Log over each transaction's log storage, so what it learnt (the last record, the
# lines it appended) serves the whole transaction.
_LOGS: weakref.WeakKeyDictionary[Any, Log] = weakref.WeakKeyDictionary()


def open_log(backend: Backend, session_id: str) -> Log:
    """The session's log: as the open transaction sees it (its appends held until it
    commits), else as stored."""
    tx = backend.in_transaction(session_id)
    if tx is None:
        return Log(backend.checkpoint_log(session_id))
    storage = tx.checkpoint_log(session_id)
    try:
        known = _LOGS.get(storage)
    except TypeError:  # storage that cannot be weakly referenced: no sharing
        return Log(storage)
    if known is None:
        known = _LOGS[storage] = Log(storage)
    return known


def removed_ids(backend: Backend, session_id: str) -> set[str]:
    return reader(backend, session_id).removed_checkpoints(session_id)


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


def append_index(backend: Backend, session_id: str, summary: CheckpointSummary) -> None:
    """Best effort: the index is rebuilt from the log when it is behind."""
    _write_index(backend, session_id, encode_record(summary.index_line()), "updated")


def drop_index(backend: Backend, session_id: str) -> None:
    """Remove an index that disagrees with the log; the listing rebuilds it."""
    _write_index(backend, session_id, None, "rebuilt")


def _write_index(backend: Backend, session_id: str, line: bytes | None, done: str) -> None:
    """Append `line` to the index (None: drop it), in the open transaction or else as
    the backend's best effort."""
    tx = backend.in_transaction(session_id)
    try:
        if tx is not None:
            tx.write_cache("index", line, append=True)
        else:
            backend.write_cache(session_id, "index", line, append=True)
    except StoreError as exc:
        log.warning("checkpoint index not %s: %s", done, exc)


def indexed_ids(backend: Backend, session_id: str) -> set[str]:
    ids: set[str] = set()
    for line in (reader(backend, session_id).cache(session_id, "index") or b"").splitlines():
        with contextlib.suppress(TypeError, KeyError):
            ids.add(str(checked_value(line)["id"]))
    return ids
