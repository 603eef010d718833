"""The reads of the PostgreSQL backend, over whatever runs their statements: the backend's
own connections (each read one statement, which sees one committed state; a log read a
REPEATABLE READ snapshot) or a transaction's, which sees its own writes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import IO, Any

from pydantic import ValidationError

from agctl.base.errors import CorruptDocument, NotFound
from agctl.base.ids import validate_id
from agctl.base.validation import validation_summary
from agctl.context.models import Draft, Session, Slot
from agctl.storage.base import append_problem, check_cache
from agctl.storage.postgres.log import open_log


class Known:
    """A slot as this backend last read or wrote it, at a revision: what an append must
    extend (compared in memory, as the file backend does, not read back)."""

    __slots__ = ("compressed", "immutable", "messages", "rev")

    def __init__(self, slot: Slot) -> None:
        self.rev = slot.rev
        self.immutable = list(slot.immutable)
        self.compressed = list(slot.compressed)
        self.messages = list(slot.messages)

    def extended_by(self, slot: Slot, count: int) -> str | None:
        return append_problem((self.immutable, self.compressed, self.messages), slot, count)


class PgLogReader:
    """The committed checkpoint log of one session (or, in a Tx, the staged one)."""

    def __init__(self, name: str, owner: Reading, session_id: str) -> None:
        self.name = name
        self._owner = owner
        self._session_id = session_id

    def size(self) -> int:
        return self._owner._log_size(self._session_id)

    def open(self) -> IO[bytes]:
        """A reader over the log as it is now: outside a transaction, on a connection of
        its own in a read-only REPEATABLE READ snapshot, held until it is closed."""
        return self._owner._open_log(self.name, self._session_id)


class Reading:
    """The Reader methods over statements run by `_rows` (a connection of the backend,
    or a transaction's)."""

    _sql: dict[str, bytes]
    _known: dict[tuple[str, str], Known]
    where: str

    def _rows(self, name: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        raise NotImplementedError

    def _one(self, name: str, params: Sequence[Any]) -> tuple[Any, ...] | None:
        rows = self._rows(name, params)
        return rows[0] if rows else None

    def _corrupt(self, what: str, exc: ValidationError) -> CorruptDocument:
        return CorruptDocument(f"{self.where}: {what}", validation_summary(exc, what))

    def session_ids(self) -> list[str]:
        return [str(row[0]) for row in self._rows("session_ids", [])]

    def has_session(self, session_id: str) -> bool:
        return self._one("has_session", [validate_id(session_id, "session")]) is not None

    def _session_row(self, session_id: str) -> tuple[bytes, int] | None:
        row = self._one("session", [session_id])
        return None if row is None else (bytes(row[0]), int(row[1]))

    def load_session(self, session_id: str) -> Session:
        row = self._session_row(validate_id(session_id, "session"))
        if row is None:
            raise NotFound(f"session {session_id!r} not found")
        try:
            session = Session.model_validate_json(row[0])
        except ValidationError as exc:
            raise self._corrupt(f"session {session_id!r}", exc) from None
        session.rev = row[1]
        return session

    def _saw_slot(self, session_id: str, slot_id: str, rev: int, count: int) -> None:
        """A slot's stored revision and message count, as just read."""

    def slot_ids(self, session_id: str) -> list[str]:
        sid = validate_id(session_id, "session")
        ids = [str(row[0]) for row in self._rows("slot_ids", [sid])]
        if not ids and not self.has_session(sid):
            raise NotFound(f"session {session_id!r} not found")
        return ids

    def load_slot(self, session_id: str, slot_id: str, *, reuse: Slot | None = None) -> Slot:
        sid, slot_id = validate_id(session_id, "session"), validate_id(slot_id, "slot")
        row = self._one(
            "slot", [reuse.rev if reuse is not None and reuse.id == slot_id else -1, sid, slot_id]
        )
        if row is None:
            if not self.has_session(sid):
                raise NotFound(f"session {session_id!r} not found")
            raise NotFound(f"slot {slot_id!r} not found in session {session_id!r}")
        self._saw_slot(sid, slot_id, int(row[1]), int(row[2]))
        if row[3] is None and reuse is not None:
            return reuse  # stored at its revision, which no other write was ever given
        header, rev, rows = bytes(row[0]), int(row[1]), row[3]
        document = header[:-1] + b',"messages":[' + b",".join(rows) + b"]}"
        try:
            slot = Slot.from_json(document)
        except ValidationError as exc:
            raise self._corrupt(f"slot {slot_id!r} of session {session_id!r}", exc) from None
        slot.rev = rev
        self._known[(sid, slot_id)] = Known(slot)
        return slot

    def slot_rev(self, session_id: str, slot_id: str) -> int | None:
        row = self._one(
            "slot_rev", [validate_id(session_id, "session"), validate_id(slot_id, "slot")]
        )
        return None if row is None else int(row[0])

    def draft_slots(self, session_id: str) -> list[str]:
        sid = validate_id(session_id, "session")
        ids = [str(row[0]) for row in self._rows("drafts", [sid])]
        if not ids and not self.has_session(sid):
            raise NotFound(f"session {session_id!r} not found")
        return ids

    def load_draft(self, session_id: str, slot_id: str) -> Draft:
        sid, slot_id = validate_id(session_id, "session"), validate_id(slot_id, "slot")
        doc = self._draft_doc(sid, slot_id)
        if doc is None:
            raise NotFound(f"slot {slot_id!r} of session {session_id!r} has no draft")
        try:
            return Draft.model_validate_json(doc)
        except ValidationError as exc:
            raise self._corrupt(f"draft of slot {slot_id!r}", exc) from None

    def _draft_doc(self, session_id: str, slot_id: str) -> bytes | None:
        """The slot's stored draft document (None: it has none)."""
        row = self._one("draft", [session_id, slot_id])
        return None if row is None else bytes(row[0])

    def _log_size(self, session_id: str) -> int:
        row = self._one("log_size", [session_id])
        return 0 if row is None else int(row[0])

    def _open_log(self, name: str, session_id: str) -> IO[bytes]:
        return open_log(name, session_id, self._log_size(session_id), self._rows)

    def checkpoint_log(self, session_id: str) -> Any:
        sid = validate_id(session_id, "session")
        return PgLogReader(f"checkpoint log of session {sid!r}", self, sid)

    def removed_checkpoints(self, session_id: str) -> set[str]:
        row = self._one("removed", [validate_id(session_id, "session")])
        if row is None:
            raise NotFound(f"session {session_id!r} not found")
        return set(row[0] or ())

    def cache(self, session_id: str, name: str) -> bytes | None:
        sid = validate_id(session_id, "session")
        row = self._one("cache", [sid, check_cache(name)])
        if row is None or row[0] is None:
            if not self.has_session(sid):
                raise NotFound(f"session {session_id!r} not found")
            return None
        return bytes(row[0])
