"""Helpers the tests share that are not fixtures: where the file backend keeps things (for
its own tests, which poke files on purpose) and documents as a store reads them."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agctl.store import Store


def checkpoints_dir(store: Store, session_id: str) -> Path:
    """The file backend's folder of a session's checkpoint log and caches."""
    return store.session_dir(session_id) / "checkpoints"


def stored_documents(where: Store | Path, session_id: str) -> dict[str, Any]:
    """The session document and every slot, as the store reads them (parsed, without
    the backend's revisions), keyed by the names the file backend gives their files."""
    store = where if isinstance(where, Store) else Store(where)
    documents = {"session.json": store.load_session(session_id).model_dump(mode="json")}
    for slot in store.list_slots(session_id):
        documents[f"slots/{slot.id}.json"] = slot.model_dump(mode="json")
    return documents


class ProcessDied(BaseException):
    """A death runs no handler (an exception would, and a handler might finish the work)."""


@contextlib.contextmanager
def dying_after_one_change() -> Iterator[None]:
    """The next commit of the file backend dies after its commit point, with only the
    first of its changes applied: what kill -9 at that moment leaves."""
    from agctl.storage.file.journal import Journal

    original = Journal._apply
    applied: list[object] = []

    def dies(self: Journal, op: list[Any], temp: Path | None) -> None:
        if applied:
            raise ProcessDied
        applied.append(op)
        original(self, op, temp)

    Journal._apply = dies  # type: ignore[method-assign]
    try:
        with pytest.raises(ProcessDied):
            yield
    finally:
        Journal._apply = original  # type: ignore[method-assign]
