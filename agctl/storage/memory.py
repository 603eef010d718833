"""The memory backend: the reference implementation of `storage.base.Backend`.

Small enough to be obviously correct, so that the conformance suite (tests/storage/) pins
what every backend must do and fast library tests need no disk. Each session's committed
state is an immutable snapshot replaced whole on commit: a reader holds either the old
snapshot or the new one, and a transaction works on a private copy.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import itertools
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from typing import IO

from agctl.base.errors import AlreadyExists, Conflict, NotFound, UsageError
from agctl.base.ids import validate_id
from agctl.context.models import Draft, Session, Slot, message_list_adapter
from agctl.storage.base import Backend, NewSession, OpenTxs, Tx, check_cache


@dataclasses.dataclass(frozen=True)
class _Stored:
    """A document as serialised JSON, with the revision its last write gave it."""

    data: bytes
    rev: int


@dataclasses.dataclass
class _State:
    """Everything one session holds; never changed once committed."""

    session: _Stored
    slots: dict[str, _Stored]
    drafts: dict[str, bytes] = dataclasses.field(default_factory=dict)
    log: bytes = b""
    removed: frozenset[str] = frozenset()
    caches: dict[str, bytes] = dataclasses.field(default_factory=dict)

    def copy(self) -> _State:
        return dataclasses.replace(
            self, slots=dict(self.slots), drafts=dict(self.drafts), caches=dict(self.caches)
        )


def _log_name(session_id: str) -> str:
    return f"checkpoint log of session {session_id!r}"


class _LogReader:
    """A view of one session's checkpoint log, read from `source` each time."""

    def __init__(self, name: str, source: Callable[[], bytes]) -> None:
        self.name = name
        self._source = source

    def size(self) -> int:
        return len(self._source())

    def open(self) -> IO[bytes]:
        data = self._source()
        if not data:
            raise NotFound(f"{self.name} not found")
        return io.BytesIO(data)


class _LogWriter(_LogReader):
    """The checkpoint log staged in a transaction."""

    def __init__(self, name: str, state: _State, tx: MemoryTx) -> None:
        super().__init__(name, lambda: state.log)
        self._state = state
        self._tx = tx

    @property
    def rewinds(self) -> int:
        return self._tx.rewinds

    def append(self, build: Callable[[int], bytes]) -> int:
        log = self._state.log
        if log and not log.endswith(b"\n"):
            log += b"\n"
        offset = len(log)
        self._state.log = log + build(offset)
        return offset

    def truncate(self, size: int) -> None:
        self._state.log = self._state.log[:size]


class _Reading:
    """The Reader methods over whatever `_state` gives for a session."""

    def _state(self, session_id: str) -> _State | None:
        raise NotImplementedError

    def _existing(self, session_id: str) -> _State:
        state = self._state(validate_id(session_id, "session"))
        if state is None:
            raise NotFound(f"session {session_id!r} not found")
        return state

    def _session_ids(self) -> Iterable[str]:
        raise NotImplementedError

    def session_ids(self) -> list[str]:
        return sorted(sid for sid in self._session_ids() if self._state(sid) is not None)

    def has_session(self, session_id: str) -> bool:
        return self._state(validate_id(session_id, "session")) is not None

    def load_session(self, session_id: str) -> Session:
        stored = self._existing(session_id).session
        session = Session.model_validate_json(stored.data)
        session.rev = stored.rev
        return session

    def slot_ids(self, session_id: str) -> list[str]:
        return sorted(self._existing(session_id).slots)

    def load_slot(self, session_id: str, slot_id: str, *, reuse: Slot | None = None) -> Slot:
        stored = self._existing(session_id).slots.get(validate_id(slot_id, "slot"))
        if stored is None:
            raise NotFound(f"slot {slot_id!r} not found in session {session_id!r}")
        if reuse is not None and reuse.id == slot_id and reuse.rev == stored.rev:
            return reuse
        slot = Slot.from_json(stored.data)
        slot.rev = stored.rev
        return slot

    def slot_rev(self, session_id: str, slot_id: str) -> int | None:
        state = self._state(validate_id(session_id, "session"))
        stored = None if state is None else state.slots.get(validate_id(slot_id, "slot"))
        return None if stored is None else stored.rev

    def draft_slots(self, session_id: str) -> list[str]:
        return sorted(self._existing(session_id).drafts)

    def load_draft(self, session_id: str, slot_id: str) -> Draft:
        data = self._existing(session_id).drafts.get(validate_id(slot_id, "slot"))
        if data is None:
            raise NotFound(f"slot {slot_id!r} of session {session_id!r} has no draft")
        return Draft.model_validate_json(data)

    def checkpoint_log(self, session_id: str) -> _LogReader:
        validate_id(session_id, "session")

        def committed() -> bytes:
            state = self._state(session_id)
            return b"" if state is None else state.log

        return _LogReader(_log_name(session_id), committed)

    def removed_checkpoints(self, session_id: str) -> set[str]:
        return set(self._existing(session_id).removed)

    def cache(self, session_id: str, name: str) -> bytes | None:
        return self._existing(session_id).caches.get(check_cache(name))


class MemoryTx(_Reading):
    """A transaction of MemoryBackend: writes go to a private copy, committed whole."""

    def __init__(self, backend: MemoryBackend, session_id: str, staged: _State) -> None:
        self.session_id = session_id
        self._backend = backend
        self._staged = staged
        self.rewinds = 0  # savepoints undone (see LogWriter.rewinds)

    @contextlib.contextmanager
    def savepoint(self) -> Iterator[None]:
        """Undone on failure by putting the copy taken at its start back (in place: log
        writers hold the staged state); every write gives a new revision anyway."""
        saved = self._staged.copy()
        try:
            yield
        except BaseException:
            for field in dataclasses.fields(_State):
                setattr(self._staged, field.name, getattr(saved, field.name))
            self.rewinds += 1
            raise

    def _state(self, session_id: str) -> _State | None:
        if session_id == self.session_id:
            return self._staged
        return self._backend._state(session_id)

    def _session_ids(self) -> Iterable[str]:
        return {*self._backend._session_ids(), self.session_id}

    def _stored(self, document: Session | Slot) -> _Stored:
        """The document serialised at a new revision, which it now carries."""
        document.rev = self._backend._next_rev()
        return _Stored(document.model_dump_json().encode(), document.rev)

    def put_session(self, session: Session) -> None:
        if validate_id(session.id, "session") != self.session_id:
            raise UsageError(
                f"session {session.id!r} written in a transaction of session {self.session_id!r}"
            )
        self._staged.session = self._stored(session)

    def put_slot(self, slot: Slot) -> None:
        validate_id(slot.id, "slot")
        self._staged.slots[slot.id] = self._stored(slot)

    def append_messages(self, slot: Slot, count: int) -> None:
        stored = self.load_slot(self.session_id, slot.id)
        kept = len(slot.messages) - count
        adapter = message_list_adapter()
        unchanged = (
            0 <= count <= len(slot.messages)
            and adapter.dump_json(stored.messages) == adapter.dump_json(slot.messages[:kept])
            and adapter.dump_json(stored.immutable) == adapter.dump_json(slot.immutable)
            and adapter.dump_json(stored.compressed) == adapter.dump_json(slot.compressed)
        )
        if not unchanged:
            raise Conflict(
                f"slot {slot.id!r} of session {self.session_id!r} as stored is not the "
                f"slot given minus its last {count} messages: it cannot be appended to"
            )
        self.put_slot(slot)

    def delete_slot(self, slot_id: str) -> None:
        if self._staged.slots.pop(validate_id(slot_id, "slot"), None) is None:
            raise NotFound(f"slot {slot_id!r} not found in session {self.session_id!r}")

    def put_draft(self, draft: Draft) -> None:
        self._staged.drafts[validate_id(draft.slot, "slot")] = draft.model_dump_json().encode()

    def delete_draft(self, slot_id: str) -> bool:
        return self._staged.drafts.pop(validate_id(slot_id, "slot"), None) is not None

    def checkpoint_log(self, session_id: str | None = None) -> _LogWriter:
        if session_id is not None and validate_id(session_id, "session") != self.session_id:
            raise UsageError(
                f"the checkpoint log of session {session_id!r} is not writable in a "
                f"transaction of session {self.session_id!r}"
            )
        return _LogWriter(_log_name(self.session_id), self._staged, self)

    def set_removed_checkpoints(self, ids: Iterable[str]) -> None:
        self._staged.removed = frozenset(ids)

    def write_cache(self, name: str, data: bytes | None, *, append: bool = False) -> None:
        caches = self._staged.caches
        if data is None:
            caches.pop(check_cache(name), None)
        else:
            caches[check_cache(name)] = (caches.get(name, b"") if append else b"") + bytes(data)


class MemoryBackend(_Reading, Backend):
    """Sessions in a dict of immutable snapshots, one RLock per session."""

    def __init__(self) -> None:
        self._sessions: dict[str, _State] = {}
        self._locks: dict[str, threading.RLock] = {}
        self._guard = threading.Lock()  # over _sessions and _locks as dicts
        self._txs: OpenTxs[MemoryTx] = OpenTxs()
        self._revisions = itertools.count(1)
        self._current: str | None = None

    def _next_rev(self) -> int:
        """One counter for every document: a revision is never given twice, so a slot
        deleted and written again, or a session replaced, never matches an old copy."""
        with self._guard:
            return next(self._revisions)

    def _state(self, session_id: str) -> _State | None:
        return self._sessions.get(session_id)

    def _session_ids(self) -> Iterable[str]:
        with self._guard:
            return list(self._sessions)

    def _lock(self, session_id: str) -> threading.RLock:
        with self._guard:
            return self._locks.setdefault(session_id, threading.RLock())

    def transaction(self, session_id: str) -> AbstractContextManager[Tx]:
        return self._txs.nested(session_id, lambda: self._begin(session_id))

    @contextlib.contextmanager
    def _begin(self, session_id: str) -> Iterator[MemoryTx]:
        """A Tx on a private copy of the session, under its lock, committed by putting
        the copy in its place."""
        with self._lock(session_id):
            tx = MemoryTx(self, session_id, self._existing(session_id).copy())
            yield tx
            with self._guard:
                self._sessions[session_id] = tx._staged

    def in_transaction(self, session_id: str) -> Tx | None:
        return self._txs.get(session_id)

    def _new_state(
        self, session: Session, slots: Sequence[Slot], log: bytes, removed: Iterable[str]
    ) -> _State:
        """A session's state as a transaction would stage it, its documents at new revisions."""
        validate_id(session.id, "session")
        placeholder = _Stored(b"", 0)
        tx = MemoryTx(self, session.id, _State(session=placeholder, slots={}))
        tx.put_session(session)
        for slot in slots:
            tx.put_slot(slot)
        tx._staged.log = bytes(log)
        tx.set_removed_checkpoints(removed)
        return tx._staged

    def _create(self, new: NewSession) -> None:
        session = new.session
        state = self._new_state(session, new.slots, new.checkpoint_log, new.removed)
        with self._lock(session.id), self._guard:
            if session.id in self._sessions:
                raise AlreadyExists(f"session {session.id!r} already exists")
            self._sessions[session.id] = state

    def write_cache(
        self, session_id: str, name: str, data: bytes | None, *, append: bool = False
    ) -> None:
        """A cache written outside a transaction: in memory, a short one of its own (none
        for a session gone, as on every backend)."""
        if self.in_transaction(session_id) is None:
            with contextlib.suppress(NotFound), self.transaction(session_id) as tx:
                tx.write_cache(name, data, append=append)

    def replace_session(self, session: Session, slots: Sequence[Slot]) -> None:
        state = self._new_state(session, slots, b"", ())
        self._txs.refuse(session.id, "replace")
        with self._lock(session.id):
            self._existing(session.id)
            with self._guard:
                self._sessions[session.id] = state

    def destroy_session(self, session_id: str) -> None:
        self._txs.refuse(session_id, "destroy")
        with self._lock(session_id):
            self._existing(session_id)
            with self._guard:
                del self._sessions[session_id]

    def current_session_id(self) -> str | None:
        return self._current

    def set_current_session(self, session_id: str | None) -> None:
        if session_id is not None:
            self._existing(session_id)
        self._current = session_id

    def pending(self, session_id: str) -> bool:
        validate_id(session_id, "session")
        return False
