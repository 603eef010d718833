"""A transaction of the PostgreSQL backend: its statements run in the database transaction
that holds the session's row lock, its writes sent with the next statement that needs an
answer (a pipeline), and what it reads or writes of its session's rows remembered, since
nobody else writes them while it holds the lock."""

from __future__ import annotations

import bisect
import contextlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import IO, Any

import psycopg

from agctl.base.errors import Conflict, NotFound, UsageError
from agctl.base.ids import validate_id
from agctl.context.models import Draft, Message, Session, Slot
from agctl.storage.base import check_cache
from agctl.storage.postgres.connection import Conn, queue
from agctl.storage.postgres.log import LogRows, log_chunks, open_log
from agctl.storage.postgres.reads import Known, PgLogReader, Reading

# Checkpoint log rows kept from one transaction on a session to the next (its end, which
# the next checkpoint reads).
WARM_LOG_ROWS = 16


def _header(slot: Slot) -> bytes:
    """The slot's document without its `messages` zone (kept a row a message)."""
    return slot.model_dump_json(exclude={"messages", "rev"}).encode()


def _message_rows(messages: Sequence[Message]) -> list[bytes]:
    return [message.model_dump_json().encode() for message in messages]


class Warm:
    """What a committed transaction knew of its session's rows, at the generation it
    committed: the next transaction that finds that generation under the lock starts
    from it (nobody has committed on the session since), the others read afresh."""

    __slots__ = ("caches", "drafts", "gen", "log_rows", "slot_ids", "slots", "stamp")

    def __init__(self, gen: int, stamp: tuple[Any, ...] = ()) -> None:
        self.gen = gen
        # The session row's revision and log size it committed, and the stamp of the
        # session's slots and drafts: a writer that does not know the generation (an
        # agctl from before it, still running) moves one of them.
        self.stamp = stamp
        self.slots: dict[str, tuple[int, int]] = {}  # slot id -> (revision, message count)
        self.slot_ids: list[str] | None = None
        self.caches: dict[str, bytes | None] = {}
        self.drafts: dict[str, bytes | None] = {}  # slot id -> draft document, None: none
        self.log_rows = LogRows()


class PgLogWriter(PgLogReader):
    def __init__(self, name: str, tx: PgTx) -> None:
        super().__init__(name, tx, tx.session_id)
        self._tx = tx

    @property
    def rewinds(self) -> int:
        return self._tx.rewinds

    def append(self, build: Callable[[int], bytes]) -> int:
        tx = self._tx
        size = tx._log_size(tx.session_id)
        prefix = b"" if not size or tx._log_sealed() else b"\n"
        offset = size + len(prefix)
        data = prefix + build(offset)
        tx._execute("log_insert", [tx.session_id, size, data])
        tx._log_rows.add(size, data)
        tx._set_log_size(size + len(data), sealed=data.endswith(b"\n"))
        return offset

    def truncate(self, size: int) -> None:
        tx = self._tx
        sid = tx.session_id
        tx._execute("log_cut", [sid, size])
        tx._execute("log_trim", [size, sid, size, size])
        tx._log_rows.clear()
        tx._set_log_size(size, sealed=None)


class PgTx(Reading):
    """One transaction of a PostgresBackend (`backend`, whose statements and known slots
    it shares): its statements run in the database transaction that holds the session's
    row lock.

    A write whose answer nothing needs waits in `_pending` and goes to the server with
    the next statement that needs one, all in one round trip (a pipeline), the last of
    them with COMMIT: the server runs them in order, so every read still sees every
    write before it, and a failed one fails the transaction as it would alone."""

    def __init__(
        self,
        backend: Reading,
        session_id: str,
        conn: Conn,
        log_size: int,
        *,
        session_row: tuple[bytes, int] | None = None,
        revs: Sequence[int] = (),
        warm: Warm | None = None,
        xid: int | None = None,
    ):
        self.session_id = session_id
        self.xid = xid  # the database transaction's id
        self.where = backend.where
        self._conn = conn
        self._sql = backend._sql
        self._known = backend._known
        self._size = log_size
        self._sealed: bool | None = None  # whether the log ends with a newline (None: ask)
        self.rewinds = 0
        # What this transaction last read or wrote of its session's rows: nobody else
        # writes them while it holds the session's lock, so a second look needs no
        # statement. It starts from what the last transaction committed here knew, when
        # nobody has committed on the session since (`warm`).
        known = Warm(0) if warm is None else warm
        self._slots = known.slots
        self._slot_ids = known.slot_ids
        self._caches = known.caches
        self._drafts = known.drafts
        self._log_rows = known.log_rows
        self._session = session_row
        # Revisions taken from the sequence with the lock, not given to a document yet.
        self._revs = list(reversed(revs))
        # Statements sent when the next answer is needed, and how often that happened.
        self._pending: list[tuple[bytes, Sequence[Any]]] = []
        self._sends = 0

    def _rows(self, name: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        cursor = self._send(self._sql[name], params)
        return cursor.fetchall() if cursor.description is not None else []

    def _execute(self, name: str, params: Sequence[Any]) -> None:
        """A write whose answer nothing needs: sent with the next statement that has one."""
        self._pending.append((self._sql[name], params))

    def _send(self, query: bytes, params: Sequence[Any]) -> psycopg.Cursor[tuple[Any, ...]]:
        """`query`, after what is pending, in one round trip; its cursor."""
        return self._round_trip([(query, params)])[-1]

    def _round_trip(
        self, last: Sequence[tuple[bytes, Sequence[Any]]]
    ) -> list[psycopg.Cursor[tuple[Any, ...]]]:
        """What is pending, then `last`, in one round trip (a pipeline when there is
        more than one statement); the cursors of `last`."""
        conn = self._conn
        if not self._pending and len(last) == 1:
            return [queue(conn, *last[0])]
        pending, self._pending = self._pending, []
        self._sends += 1
        with conn.pipeline():
            for text, values in pending:
                queue(conn, text, values)
            return [queue(conn, text, values) for text, values in last]

    def finish(self) -> tuple[psycopg.Cursor[tuple[Any, ...]], Warm | None]:
        """What is pending, the log's size and a new generation in the session row, the
        slots-and-drafts stamp and COMMIT, in one round trip: COMMIT's cursor, and what
        this transaction knows at that generation (None: it does not know the
        generation, having no revision left for it)."""
        gen = self._take_rev()
        if gen is None:
            self._execute("put_end_new", [self._size, self.session_id])
            return self._send(self._sql["commit"], ()), None
        self._execute("put_end", [self._size, gen, self.session_id])
        stamped, done = self._round_trip(
            [(self._sql["stamp"], [self.session_id]), (self._sql["commit"], ())]
        )
        found = stamped.fetchone()
        if done.statusmessage != "COMMIT" or found is None or self._session is None:
            return done, None
        warm = Warm(gen, (self._session[1], self._size, list(found[0])))
        warm.slots, warm.slot_ids = self._slots, self._slot_ids
        warm.caches, warm.drafts = self._caches, self._drafts
        warm.log_rows = self._log_rows
        warm.log_rows.keep_last(WARM_LOG_ROWS)
        return done, warm

    def _take_rev(self) -> int | None:
        """A revision of this transaction's own for the next document written (None:
        none left, the write takes one in its statement)."""
        return self._revs.pop() if self._revs else None

    def _check(self, session_id: str) -> str:
        if validate_id(session_id, "session") != self.session_id:
            raise UsageError(
                f"session {session_id!r} written in a transaction of session {self.session_id!r}"
            )
        return session_id

    # ---- what this transaction knows of its own rows ---------------------------

    def has_session(self, session_id: str) -> bool:
        if validate_id(session_id, "session") == self.session_id:
            return True  # its row is locked by this transaction
        return super().has_session(session_id)

    def _session_row(self, session_id: str) -> tuple[bytes, int] | None:
        if session_id != self.session_id:
            return super()._session_row(session_id)
        if self._session is None:
            self._session = super()._session_row(session_id)
        return self._session

    def _saw_slot(self, session_id: str, slot_id: str, rev: int, count: int) -> None:
        if session_id == self.session_id:
            self._slots[slot_id] = (rev, count)

    def slot_ids(self, session_id: str) -> list[str]:
        if validate_id(session_id, "session") != self.session_id:
            return super().slot_ids(session_id)
        if self._slot_ids is None:
            self._slot_ids = super().slot_ids(session_id)
        return list(self._slot_ids)

    def load_slot(self, session_id: str, slot_id: str, *, reuse: Slot | None = None) -> Slot:
        if (
            reuse is not None
            and reuse.id == slot_id
            and session_id == self.session_id
            and slot_id in self._slots
            and self._slots[slot_id][0] == reuse.rev
        ):
            return reuse  # stored at its revision, which no other write was ever given
        return super().load_slot(session_id, slot_id, reuse=reuse)

    def _draft_doc(self, session_id: str, slot_id: str) -> bytes | None:
        if session_id != self.session_id:
            return super()._draft_doc(session_id, slot_id)
        if slot_id not in self._drafts:
            self._drafts[slot_id] = super()._draft_doc(session_id, slot_id)
        return self._drafts[slot_id]

    def cache(self, session_id: str, name: str) -> bytes | None:
        if validate_id(session_id, "session") != self.session_id:
            return super().cache(session_id, name)
        if name not in self._caches:
            self._caches[name] = super().cache(session_id, name)
        return self._caches[name]

    def _slot_state(self, slot_id: str) -> tuple[int, int] | None:
        """The slot's stored (revision, message count); None: there is no such slot."""
        if slot_id not in self._slots:
            row = self._one("slot_rev", [self.session_id, slot_id])
            if row is None:
                return None
            self._slots[slot_id] = (int(row[0]), int(row[1]))
        return self._slots[slot_id]

    def slot_rev(self, session_id: str, slot_id: str) -> int | None:
        sid, slot_id = validate_id(session_id, "session"), validate_id(slot_id, "slot")
        if sid != self.session_id:
            return super().slot_rev(sid, slot_id)
        state = self._slot_state(slot_id)
        return None if state is None else state[0]

    def _forget(self) -> None:
        """After a statement that removed the session's rows at once (replace, destroy)."""
        self._slots.clear()
        self._session = None
        self._slot_ids = None
        self._caches.clear()
        self._drafts.clear()
        self._log_rows.clear()

    # ---- the checkpoint log's end, kept here until commit ----------------------

    def _log_size(self, session_id: str) -> int:
        if session_id == self.session_id:
            return self._size
        return super()._log_size(session_id)

    def _log_sealed(self) -> bool:
        if self._sealed is None:
            found = self._log_rows.find(self._size - 1) if self._size else None
            if found is not None:
                start, data = found
                self._sealed = data[self._size - 1 - start] == 0x0A
            else:
                row = self._one("log_last_byte", [self.session_id])
                self._sealed = row is None or int(row[0]) == 0x0A
        return self._sealed

    def _open_log(self, name: str, session_id: str) -> IO[bytes]:
        if session_id != self.session_id:
            return super()._open_log(name, session_id)
        return open_log(name, session_id, self._size, self._rows, seen=self._log_rows)

    def _set_log_size(self, size: int, *, sealed: bool | None) -> None:
        self._size = size
        self._sealed = sealed

    # ---- writes ----------------------------------------------------------------

    def put_session(self, session: Session) -> None:
        self._check(session.id)
        doc = session.model_dump_json(exclude={"rev"}).encode()
        rev = self._take_rev() if self._session is not None else None
        if rev is not None:  # the row is there: this transaction holds its lock
            self._execute("put_session_at", [doc, rev, self.session_id])
        else:
            row = self._one("put_session", [doc, self.session_id])
            if row is None:
                raise NotFound(f"session {session.id!r} not found")
            rev = int(row[0])
        session.rev = rev
        self._session = (doc, rev)

    def put_slot(self, slot: Slot) -> None:
        sid, slot_id = self.session_id, validate_id(slot.id, "slot")
        self._execute("clear_messages", [sid, slot_id])
        header, count = _header(slot), len(slot.messages)
        rev = self._take_rev()
        if rev is not None:
            self._execute("put_slot_at", [sid, slot_id, header, rev, count])
        else:
            row = self._one("put_slot", [sid, slot_id, header, count])
            assert row is not None
            rev = int(row[0])
        self._insert_messages(slot_id, 0, slot.messages)
        if self._slot_ids is not None and slot_id not in self._slot_ids:
            bisect.insort(self._slot_ids, slot_id)
        slot.rev = rev
        self._slots[slot_id] = (slot.rev, len(slot.messages))
        self._known[(sid, slot_id)] = Known(slot)

    def _insert_messages(self, slot_id: str, start: int, messages: Sequence[Message]) -> None:
        if messages:
            numbers = list(range(start, start + len(messages)))
            self._execute(
                "insert_messages", [self.session_id, slot_id, numbers, _message_rows(messages)]
            )

    def append_messages(self, slot: Slot, count: int) -> None:
        sid, slot_id = self.session_id, validate_id(slot.id, "slot")
        state = self._slot_state(slot_id)
        if state is None:
            raise NotFound(f"slot {slot_id!r} not found in session {sid!r}")
        stored_rev, stored_count = state
        known = self._known.get((sid, slot_id))
        if known is None or known.rev != stored_rev:
            self.load_slot(sid, slot_id)
            known = self._known[(sid, slot_id)]
        problem = known.extended_by(slot, count)
        if problem is not None:
            raise Conflict(f"slot {slot_id!r} cannot be appended to as given: {problem}")
        new = slot.messages[len(slot.messages) - count :]
        self._insert_messages(slot_id, stored_count, new)
        rev = self._take_rev()
        if rev is not None:  # the row is there (its state was read in this transaction)
            self._execute("append_slot_at", [_header(slot), rev, count, sid, slot_id])
        else:
            updated = self._one("append_slot", [_header(slot), count, sid, slot_id])
            assert updated is not None
            rev = int(updated[0])
        slot.rev = rev
        self._slots[slot_id] = (slot.rev, stored_count + count)
        self._known[(sid, slot_id)] = Known(slot)

    def delete_slot(self, slot_id: str) -> None:
        slot_id = validate_id(slot_id, "slot")
        self._slots.pop(slot_id, None)
        if self._one("delete_slot", [self.session_id, slot_id]) is None:
            raise NotFound(f"slot {slot_id!r} not found in session {self.session_id!r}")
        if self._slot_ids is not None and slot_id in self._slot_ids:
            self._slot_ids.remove(slot_id)
        self._drafts.pop(slot_id, None)  # read again if asked
        self._known.pop((self.session_id, slot_id), None)

    def put_draft(self, draft: Draft) -> None:
        slot_id = validate_id(draft.slot, "slot")
        doc = draft.model_dump_json().encode()
        self._execute("put_draft", [self.session_id, slot_id, doc])
        self._drafts[slot_id] = doc

    def delete_draft(self, slot_id: str) -> bool:
        slot_id = validate_id(slot_id, "slot")
        if slot_id in self._drafts:
            had = self._drafts[slot_id] is not None
            if had:
                self._execute("delete_draft", [self.session_id, slot_id])
            self._drafts[slot_id] = None
            return had
        self._drafts[slot_id] = None
        return self._one("delete_draft", [self.session_id, slot_id]) is not None

    def checkpoint_log(self, session_id: str | None = None) -> PgLogWriter:
        if session_id is not None and validate_id(session_id, "session") != self.session_id:
            raise UsageError(
                f"the checkpoint log of session {session_id!r} is not writable in a "
                f"transaction of session {self.session_id!r}"
            )
        return PgLogWriter(f"checkpoint log of session {self.session_id!r}", self)

    def set_removed_checkpoints(self, ids: Iterable[str]) -> None:
        self._execute("put_removed", [sorted(set(ids)), self.session_id])

    def write_whole(self, slots: Sequence[Slot], log: bytes, removed: Iterable[str]) -> None:
        """The slots, checkpoint log and removed ids of a session written whole (created
        or replaced), the log in rows of about LOG_CHUNK bytes."""
        for slot in slots:
            self.put_slot(slot)
        self._log_rows.clear()
        if log:
            offsets, chunks = log_chunks(bytes(log))
            self._execute("log_chunks", [self.session_id, offsets, chunks])
        self._set_log_size(len(log), sealed=None)
        self.set_removed_checkpoints(removed)

    def write_cache(self, name: str, data: bytes | None, *, append: bool = False) -> None:
        sid = self.session_id
        if data is None:
            self._execute("drop_cache", [sid, check_cache(name)])
            self._caches[name] = None
        elif append:
            self._execute("append_cache", [sid, check_cache(name), bytes(data)])
            if name in self._caches:
                self._caches[name] = (self._caches[name] or b"") + bytes(data)
        else:
            data = bytes(data)
            self._execute("replace_cache", [sid, check_cache(name), sid, name, data])
            self._caches[name] = data

    @contextlib.contextmanager
    def savepoint(self) -> Iterator[None]:
        """A database savepoint, its statements sent with the others; what is kept here
        (the log's end, the rows known) is put back with it. One the server never saw
        (nothing was sent since it began) is undone by not sending it."""
        size, sealed = self._size, self._sealed
        slots, session = dict(self._slots), self._session
        mark, sends = len(self._pending), self._sends
        self._execute("savepoint", ())
        try:
            yield
        except BaseException:
            self._size, self._sealed = size, sealed
            self._slots, self._session = slots, session
            self._slot_ids = None
            self._caches.clear()
            self._drafts.clear()
            self._log_rows.clear()
            self.rewinds += 1
            if self._sends == sends:
                del self._pending[mark:]
            else:  # what is pending was queued inside it
                self._pending.clear()
                self._execute("rollback_to", ())
                self._execute("release", ())
            raise
        self._execute("release", ())
