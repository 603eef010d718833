"""The PostgreSQL backend: sessions shared by every machine that reaches one database.

The same contract as the file backend (agctl.storage.base), kept by the database:
- a transaction on a session is a database transaction at READ COMMITTED that first
  locks the session's row (`SELECT … FOR UPDATE`, never an advisory lock, which a
  transaction-mode pooler breaks); `lock_timeout` (AGCTL_LOCK_TIMEOUT, the config's
  `lock_timeout`, 30 s) turns a wait that is too long into Conflict (exit 4);
- everything a unit of work writes commits together or not at all; a savepoint is a
  database savepoint;
- a turn inserts its new messages (`slot_messages`) and rewrites only the slot's header;
- a write nothing waits on goes with the next statement that needs an answer, in one
  round trip (a pipeline), the last ones with COMMIT; the lock's round trip brings the
  session document and revisions for the transaction's writes;
- each commit gives the session row a new generation (a revision): a transaction that
  finds the generation its backend last committed starts from what that one knew of
  the session's rows (slots, drafts, caches, the log's end), since nobody wrote since;
- a connection lost while committing: the server is asked what became of the
  transaction (committed, aborted), and only without an answer is the outcome unknown;
- reads outside a transaction are single statements: each one sees one committed state;
- revisions come from one sequence, so a revision is never given twice;
- a connection lost before a transaction starts is opened again (a server restarting,
  a pooler recycling it); one lost inside a transaction fails it, and nothing of it is
  committed.

Only the current-session pointer stays on this machine (`local_dir`), per store, and
the drafts of turns that failed while the server could not take them (`local_drafts`).
psycopg is imported here, and this module only where a postgresql URL is used.
"""

from __future__ import annotations

import bisect
import contextlib
import io
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import IO, Any

import psycopg
from psycopg import errors as pg_errors
from pydantic import ValidationError

from agctl.errors import (
    AlreadyExists,
    Conflict,
    CorruptDocument,
    DataError,
    NotFound,
    StoreError,
    UsageError,
)
from agctl.fsio import read_pointer, write_pointer
from agctl.ids import validate_id
from agctl.models import Draft, Message, Session, Slot
from agctl.storage.base import CACHES, Tx, append_problem, lock_timeout
from agctl.storage.local_drafts import LocalDrafts
from agctl.storage.postgres import listing
from agctl.storage.postgres import schema as pg_schema
from agctl.storage.urls import redact
from agctl.validation import validation_summary

Conn = psycopg.Connection[tuple[Any, ...]]

log = logging.getLogger("agctl.store")

# How long a new connection may keep failing (a server restarting) before we give up,
# unless the config's store.connect_patience says: a few seconds, said on stderr, since a
# turn waits on it with nothing else on screen; and only once a process (a store found
# down is then tried once a connection), so a failed turn that still tries to keep its
# draft does not wait again at every step.
CONNECT_PATIENCE = 5.0
# How long a commit whose connection was lost asks again while the server still has its
# transaction "in progress": the server ends one whose client is gone as soon as it reads
# the closed socket, unless a statement of it waits (on a lock), which may yet commit.
OUTCOME_PATIENCE = 3.0
# Checkpoint log rows fetched around a position a reader needs.
LOG_ROWS = 16
# A history given whole (an import) is stored in rows of about this size, cut at lines.
LOG_CHUNK = 1 << 16
# Revisions a transaction takes from the sequence with its lock, for the documents it
# writes (a turn writes two) and the generation it commits; past them a write takes one
# in its own statement.
LOCK_REVS = 4
# Checkpoint log rows kept from one transaction on a session to the next (its end, which
# the next checkpoint reads).
WARM_LOG_ROWS = 16

_STAMP = """ARRAY[(SELECT coalesce(max(t.rev), 0) FROM {s}.slots AS t WHERE t.session_id = r.id),
                  (SELECT count(*) FROM {s}.slots AS t WHERE t.session_id = r.id),
                  (SELECT count(*) FROM {s}.drafts AS d WHERE d.session_id = r.id),
                  (SELECT coalesce(max(d.xmin::text::bigint), 0) FROM {s}.drafts AS d
                   WHERE d.session_id = r.id)]"""

_SQL = {
    **listing.STATEMENTS,  # the lists a TAB reads too
    "session": "SELECT doc, rev FROM {s}.sessions WHERE id = %s",
    "has_session": "SELECT 1 FROM {s}.sessions WHERE id = %s",
    "lock_timeout": "SELECT set_config('lock_timeout', %s, true)",
    # The session's row locked, with what a transaction starts from: the log's size, the
    # session document, the generation, LOCK_REVS revisions of its own, its id (asked
    # after if the connection is lost while it commits) and the stamp of its slots and
    # drafts ("stamp").
    "lock": """SELECT log_size, doc, rev, gen, ARRAY(SELECT nextval({revs})
                   FROM generate_series(1, %s)), txid_current(), {stamp}
               FROM {s}.sessions AS r WHERE id = %s FOR UPDATE""",
    "lock_or_skip": """SELECT log_size, doc, rev, gen, ARRAY(SELECT nextval({revs})
                           FROM generate_series(1, %s)), txid_current(), {stamp}
                       FROM {s}.sessions AS r WHERE id = %s FOR UPDATE SKIP LOCKED""",
    # What any write to a session's slots or drafts moves, whoever makes it (an agctl
    # from before the generation too): the slots' highest revision (every write takes a
    # new one, in lock order) and count, the drafts' count and newest row version.
    "stamp": "SELECT {stamp} FROM {s}.sessions AS r WHERE id = %s",
    "xact_status": "SELECT txid_status(%s)",
    # What a commit writes last: the log's size and the generation.
    "put_end": "UPDATE {s}.sessions SET log_size = %s, gen = %s WHERE id = %s",
    "put_end_new": "UPDATE {s}.sessions SET log_size = %s, gen = nextval({revs}) WHERE id = %s",
    "slot": """SELECT header, rev, count, CASE WHEN rev = %s THEN NULL ELSE ARRAY(
                   SELECT m.data FROM {s}.slot_messages AS m
                   WHERE m.session_id = t.session_id AND m.slot_id = t.id ORDER BY m.seq)
               END FROM {s}.slots AS t WHERE session_id = %s AND id = %s""",
    "slot_rev": "SELECT rev, count FROM {s}.slots WHERE session_id = %s AND id = %s",
    "draft": "SELECT doc FROM {s}.drafts WHERE session_id = %s AND slot_id = %s",
    "removed": "SELECT removed FROM {s}.sessions WHERE id = %s",
    "cache": """SELECT string_agg(data, ''::bytea ORDER BY seq) FROM {s}.caches
                WHERE session_id = %s AND name = %s""",
    "log_size": "SELECT log_size FROM {s}.sessions WHERE id = %s",
    "log_rows": """(SELECT off, data FROM {s}.checkpoint_log
                    WHERE session_id = %s AND off <= %s ORDER BY off DESC LIMIT %s)
                   UNION ALL
                   (SELECT off, data FROM {s}.checkpoint_log
                    WHERE session_id = %s AND off > %s AND off < %s ORDER BY off LIMIT %s)""",
    "log_last_byte": """SELECT get_byte(data, length(data) - 1) FROM {s}.checkpoint_log
                        WHERE session_id = %s ORDER BY off DESC LIMIT 1""",
    "log_insert": "INSERT INTO {s}.checkpoint_log (session_id, off, data) VALUES (%s, %s, %s)",
    "log_cut": "DELETE FROM {s}.checkpoint_log WHERE session_id = %s AND off >= %s",
    "log_trim": """UPDATE {s}.checkpoint_log
                   SET data = substring(data FROM 1 FOR (%s - off)::integer)
                   WHERE session_id = %s AND off < %s AND off + length(data) > %s""",
    "log_chunks": """INSERT INTO {s}.checkpoint_log (session_id, off, data)
                     SELECT %s, o, d FROM unnest(%s::bigint[], %s::bytea[]) AS t(o, d)""",
    "insert_session": """INSERT INTO {s}.sessions (id, doc, rev, removed, log_size)
                         VALUES (%s, %s, nextval({revs}), %s, %s)
                         ON CONFLICT (id) DO NOTHING RETURNING rev, txid_current()""",
    "put_session": """UPDATE {s}.sessions SET doc = %s, rev = nextval({revs})
                      WHERE id = %s RETURNING rev""",
    "put_session_at": "UPDATE {s}.sessions SET doc = %s, rev = %s WHERE id = %s",
    "put_removed": "UPDATE {s}.sessions SET removed = %s WHERE id = %s",
    "clear_slots": "DELETE FROM {s}.slots WHERE session_id = %s",
    "clear_drafts": "DELETE FROM {s}.drafts WHERE session_id = %s",
    "clear_log": "DELETE FROM {s}.checkpoint_log WHERE session_id = %s",
    "clear_caches": "DELETE FROM {s}.caches WHERE session_id = %s",
    "destroy": "DELETE FROM {s}.sessions WHERE id = %s RETURNING 1",
    "put_slot": """INSERT INTO {s}.slots (session_id, id, header, rev, count)
                   VALUES (%s, %s, %s, nextval({revs}), %s)
                   ON CONFLICT (session_id, id) DO UPDATE
                   SET header = excluded.header, rev = excluded.rev, count = excluded.count
                   RETURNING rev""",
    "put_slot_at": """INSERT INTO {s}.slots (session_id, id, header, rev, count)
                      VALUES (%s, %s, %s, %s, %s)
                      ON CONFLICT (session_id, id) DO UPDATE
                      SET header = excluded.header, rev = excluded.rev, count = excluded.count""",
    "clear_messages": "DELETE FROM {s}.slot_messages WHERE session_id = %s AND slot_id = %s",
    "insert_messages": """INSERT INTO {s}.slot_messages (session_id, slot_id, seq, data)
                          SELECT %s, %s, q, d FROM unnest(%s::integer[], %s::bytea[])
                          AS t(q, d)""",
    "append_slot": """UPDATE {s}.slots SET header = %s, rev = nextval({revs}),
                      count = count + %s WHERE session_id = %s AND id = %s RETURNING rev""",
    "append_slot_at": """UPDATE {s}.slots SET header = %s, rev = %s, count = count + %s
                         WHERE session_id = %s AND id = %s""",
    "delete_slot": "DELETE FROM {s}.slots WHERE session_id = %s AND id = %s RETURNING 1",
    "put_draft": """INSERT INTO {s}.drafts (session_id, slot_id, doc) VALUES (%s, %s, %s)
                    ON CONFLICT (session_id, slot_id) DO UPDATE SET doc = excluded.doc""",
    "delete_draft": "DELETE FROM {s}.drafts WHERE session_id = %s AND slot_id = %s RETURNING 1",
    "drop_cache": "DELETE FROM {s}.caches WHERE session_id = %s AND name = %s",
    "append_cache": "INSERT INTO {s}.caches (session_id, name, data) VALUES (%s, %s, %s)",
    "replace_cache": """WITH gone AS (DELETE FROM {s}.caches WHERE session_id = %s AND name = %s)
                        INSERT INTO {s}.caches (session_id, name, data) VALUES (%s, %s, %s)""",
    # One name for every savepoint: a nested one shadows the one around it, and RELEASE
    # or ROLLBACK TO names the newest.
    "savepoint": "SAVEPOINT agctl",
    "release": "RELEASE SAVEPOINT agctl",
    "rollback_to": "ROLLBACK TO SAVEPOINT agctl",
    "commit": "COMMIT",
}
_SQL = {name: text.replace("{stamp}", _STAMP) for name, text in _SQL.items()}


def _statements(schema: str) -> dict[str, bytes]:
    """The statements with the schema in them, rendered once: psycopg caches the parsing
    of a bytes query, but renders a Composed one again at every execute."""
    return {name: pg_schema.statement(text, schema).as_bytes(None) for name, text in _SQL.items()}


def _check_cache(name: str) -> str:
    if name not in CACHES:
        raise UsageError(f"no cache is named {name!r}: the caches are {', '.join(CACHES)}")
    return name


def _header(slot: Slot) -> bytes:
    """The slot's document without its `messages` zone (kept a row a message)."""
    return slot.model_dump_json(exclude={"messages", "rev"}).encode()


def _message_rows(messages: Sequence[Message]) -> list[bytes]:
    return [message.model_dump_json().encode() for message in messages]


def _log_chunks(data: bytes) -> tuple[list[int], list[bytes]]:
    """A whole history cut into rows of about LOG_CHUNK bytes, each ending at a line end
    where there is one (a reader fetches rows, never half a line it does not need)."""
    offsets, chunks = [], []
    start = 0
    while start < len(data):
        end = data.find(b"\n", min(start + LOG_CHUNK, len(data)) - 1)
        end = len(data) if end < 0 else end + 1
        offsets.append(start)
        chunks.append(data[start:end])
        start = end
    return offsets, chunks


class _Warm:
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
        self.log_rows = _LogRows()


class _Known:
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


class _LogRows:
    """Rows of a checkpoint log as fetched or written, by offset: what one reader has
    seen, or what a transaction has (nobody else writes the log while it holds the lock;
    what it cuts it forgets)."""

    __slots__ = ("rows", "starts")

    def __init__(self) -> None:
        self.starts: list[int] = []
        self.rows: dict[int, bytes] = {}

    def find(self, position: int) -> tuple[int, bytes] | None:
        index = bisect.bisect_right(self.starts, position) - 1
        if index >= 0:
            start = self.starts[index]
            data = self.rows[start]
            if position < start + len(data):
                return start, data
        return None

    def add(self, start: int, data: bytes) -> None:
        if start not in self.rows:
            bisect.insort(self.starts, start)
        self.rows[start] = data

    def clear(self) -> None:
        self.starts.clear()
        self.rows.clear()

    def keep_last(self, count: int) -> None:
        """Forget all but the last `count` rows."""
        for start in self.starts[:-count]:
            del self.rows[start]
        del self.starts[:-count]


class _LogRaw(io.RawIOBase):
    """A checkpoint log as a seekable byte stream over its rows, fetched as they are
    needed: the log up to `size` when opened (rows are only ever added after it)."""

    def __init__(
        self,
        fetch: Callable[[int, int], list[tuple[int, bytes]]],
        size: int,
        on_close: Callable[[], None] | None = None,
        rows: _LogRows | None = None,
    ) -> None:
        super().__init__()
        self._fetch = fetch
        self._on_close = on_close
        self._size = size
        self._position = 0
        self._rows = _LogRows() if rows is None else rows

    def close(self) -> None:
        if not self.closed and self._on_close is not None:
            self._on_close()
        super().close()

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._position, io.SEEK_END: self._size}[whence]
        self._position = max(0, base + offset)
        return self._position

    def _row(self, position: int) -> tuple[int, bytes]:
        found = self._rows.find(position)
        if found is None:
            for start, data in self._fetch(position, self._size):
                if start not in self._rows.rows:
                    self._rows.add(start, data)
            found = self._rows.find(position)
        if found is None:
            raise CorruptDocument("checkpoint log", f"no stored row holds byte {position}")
        return found

    def readinto(self, buffer: Any) -> int:
        if self._position >= self._size:
            return 0
        start, data = self._row(self._position)
        begin = self._position - start
        count = min(len(buffer), len(data) - begin, self._size - self._position)
        buffer[:count] = data[begin : begin + count]
        self._position += count
        return count


class _LogReader:
    """The committed checkpoint log of one session (or, in a Tx, the staged one)."""

    def __init__(self, name: str, owner: _Reading, session_id: str) -> None:
        self.name = name
        self._owner = owner
        self._session_id = session_id

    def size(self) -> int:
        return self._owner._log_size(self._session_id)

    def open(self) -> IO[bytes]:
        """A reader over the log as it is now: outside a transaction, on a connection of
        its own in a read-only REPEATABLE READ snapshot, held until it is closed."""
        return self._owner._open_log(self.name, self._session_id)


def _open_log(
    name: str,
    session_id: str,
    size: int,
    rows: Callable[[str, Sequence[Any]], list[tuple[Any, ...]]],
    on_close: Callable[[], None] | None = None,
    seen: _LogRows | None = None,
) -> IO[bytes]:
    if not size:
        if on_close is not None:
            on_close()
        raise NotFound(f"{name} not found")

    def fetch(position: int, end: int) -> list[tuple[int, bytes]]:
        found = rows(
            "log_rows", [session_id, position, LOG_ROWS, session_id, position, end, LOG_ROWS]
        )
        return [(int(off), bytes(data)) for off, data in found]

    return io.BufferedReader(_LogRaw(fetch, size, on_close, seen), buffer_size=8192)


class _LogWriter(_LogReader):
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


class _Reading:
    """The Reader methods over statements run by `_rows` (a connection of the backend,
    or a transaction's)."""

    _sql: dict[str, bytes]
    _known: dict[tuple[str, str], _Known]
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
        self._known[(sid, slot_id)] = _Known(slot)
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
        return _open_log(name, session_id, self._log_size(session_id), self._rows)

    def checkpoint_log(self, session_id: str) -> Any:
        sid = validate_id(session_id, "session")
        return _LogReader(f"checkpoint log of session {sid!r}", self, sid)

    def removed_checkpoints(self, session_id: str) -> set[str]:
        row = self._one("removed", [validate_id(session_id, "session")])
        if row is None:
            raise NotFound(f"session {session_id!r} not found")
        return set(row[0] or ())

    def cache(self, session_id: str, name: str) -> bytes | None:
        sid = validate_id(session_id, "session")
        row = self._one("cache", [sid, _check_cache(name)])
        if row is None or row[0] is None:
            if not self.has_session(sid):
                raise NotFound(f"session {session_id!r} not found")
            return None
        return bytes(row[0])


class PgTx(_Reading):
    """One transaction of a PostgresBackend: its statements run in the database
    transaction that holds the session's row lock.

    A write whose answer nothing needs waits in `_pending` and goes to the server with
    the next statement that needs one, all in one round trip (a pipeline), the last of
    them with COMMIT: the server runs them in order, so every read still sees every
    write before it, and a failed one fails the transaction as it would alone."""

    def __init__(
        self,
        backend: PostgresBackend,
        session_id: str,
        conn: Conn,
        log_size: int,
        *,
        session_row: tuple[bytes, int] | None = None,
        revs: Sequence[int] = (),
        warm: _Warm | None = None,
        xid: int | None = None,
    ):
        self.session_id = session_id
        self.xid = xid  # the database transaction's id
        self.backend = backend
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
        known = _Warm(0) if warm is None else warm
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
            return [_queue(conn, *last[0])]
        pending, self._pending = self._pending, []
        self._sends += 1
        with conn.pipeline():
            for text, values in pending:
                _queue(conn, text, values)
            return [_queue(conn, text, values) for text, values in last]

    def finish(self) -> tuple[psycopg.Cursor[tuple[Any, ...]], _Warm | None]:
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
        warm = _Warm(gen, (self._session[1], self._size, list(found[0])))
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
        return _open_log(name, session_id, self._size, self._rows, seen=self._log_rows)

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
        self._known[(sid, slot_id)] = _Known(slot)

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
        self._known[(sid, slot_id)] = _Known(slot)

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

    def checkpoint_log(self, session_id: str | None = None) -> _LogWriter:
        if session_id is not None and validate_id(session_id, "session") != self.session_id:
            raise UsageError(
                f"the checkpoint log of session {session_id!r} is not writable in a "
                f"transaction of session {self.session_id!r}"
            )
        return _LogWriter(f"checkpoint log of session {self.session_id!r}", self)

    def set_removed_checkpoints(self, ids: Iterable[str]) -> None:
        self._execute("put_removed", [sorted(set(ids)), self.session_id])

    def put_cache(self, name: str, data: bytes | None) -> None:
        if data is None:
            self._execute("drop_cache", [self.session_id, _check_cache(name)])
            self._caches[name] = None
        else:
            sid, data = self.session_id, bytes(data)
            self._execute("replace_cache", [sid, _check_cache(name), sid, name, data])
            self._caches[name] = data

    def append_cache(self, name: str, data: bytes) -> None:
        self._execute("append_cache", [self.session_id, _check_cache(name), bytes(data)])
        if name in self._caches:
            self._caches[name] = (self._caches[name] or b"") + bytes(data)

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


class PostgresBackend(_Reading):
    """Sessions in one schema of a PostgreSQL database (see the module docstring).

    `dsn`: a libpq connection string or postgresql:// URL (passwords from libpq's own
    sources: PGPASSFILE, PGSERVICE, the environment); `schema`: where the tables are;
    `local_dir`: this machine's data dir, which keeps the current-session pointer;
    `auto_migrate`: run the migrations the schema is behind on when first connecting
    (and refuse one from a newer agctl, or one another role owns), as every command but
    `store status` does; `connect_patience`: seconds to wait out a server that cannot
    take connections yet; `shared_owner`: the role other than the connecting one (and
    those it is a member of) whose schema and tables are accepted (see
    agctl.storage.postgres.schema.check_owner)."""

    kind = "postgresql"
    latest_version = pg_schema.VERSION

    def __init__(
        self,
        dsn: str,
        *,
        schema: str = "agctl",
        local_dir: Path,
        auto_migrate: bool = True,
        connect_patience: float | None = None,
        shared_owner: str | None = None,
    ) -> None:
        self.dsn = dsn
        self.shared_owner = shared_owner
        # How long a connect waits out a server that is not there yet (None: the config's
        # store.connect_patience, else CONNECT_PATIENCE; 0: one attempt, for a TAB that
        # must not hang).
        self.connect_patience = connect_patience
        # Whether a connect waited its patience out and failed: the next ones (a failed
        # turn keeping its draft) try once, and say so, rather than wait again.
        self._down = False
        self.schema = schema
        self.where = f"{redact(dsn)} (schema {schema})"
        self.local_dir = local_dir
        # Where a draft goes when the server cannot take it (agctl.drafts), on this machine.
        key = listing.store_key(dsn, schema)
        self.local_drafts = LocalDrafts.in_data_dir(local_dir, key)
        self._sql = _statements(schema)
        self._known: dict[tuple[str, str], _Known] = {}
        # Session id -> what the last transaction this backend committed on it knew.
        self._warm: dict[str, _Warm] = {}
        self._reader: Conn | None = None
        self._reader_lock = threading.Lock()
        self._idle: list[Conn] = []
        self._pool_lock = threading.Lock()
        self._open = threading.local()
        # Whether the first connection brings the schema up to date (`store status` looks
        # at it as it is).
        self._migrated = not auto_migrate

    # ---- connections ---------------------------------------------------------------

    def _patience(self) -> float:
        if self._down:
            return 0.0
        if self.connect_patience is not None:
            return self.connect_patience
        return connect_patience()

    def _connect(self) -> Conn:
        """A new connection, retried while the server cannot take one yet (restarting,
        starting up) for the connect patience, said on stderr: a connection is only
        ever opened where no transaction is at work."""
        patience: float | None = None
        deadline, delay, attempts = 0.0, 0.05, 0
        while True:
            attempts += 1
            try:
                conn: Conn = psycopg.connect(
                    self.dsn, autocommit=True, **listing.connect_bounds(self.dsn)
                )
            except psycopg.OperationalError as exc:
                if patience is None:
                    patience = self._patience()
                    deadline = time.monotonic() + patience
                    if _unavailable(exc) and patience > 0:
                        log.warning(
                            "the store %s does not answer (%s): trying again for up to %gs "
                            "(store.connect_patience)",
                            self.where,
                            _first_line(exc),
                            patience,
                        )
                if not _unavailable(exc) or time.monotonic() + delay > deadline:
                    self._down = _unavailable(exc)
                    tried = f", {attempts} attempts in {patience:g}s" if attempts > 1 else ""
                    raise StoreError(
                        f"cannot connect to the store {self.where}{tried}: {_first_line(exc)}"
                    ) from None
                log.info("store %s: attempt %d failed: %s", self.where, attempts, _first_line(exc))
                time.sleep(delay)
                delay = min(delay * 2, 1.0)
                continue
            except psycopg.ProgrammingError as exc:  # a malformed connection string
                raise UsageError(f"bad store URL {redact(self.dsn)}: {_first_line(exc)}") from None
            if self._down or attempts > 1:
                log.info("store %s answers again (attempt %d)", self.where, attempts)
            self._down = False
            if not self._migrated:
                self._migrated = True
                try:
                    self.migrate(conn)
                except BaseException:
                    self._migrated = False
                    conn.close()
                    raise
            return conn

    def migrate(self, conn: Conn | None = None) -> list[int]:
        """Run the migrations the schema is behind on, each in its own transaction;
        the versions reached. A schema another role owns, unless it is `shared_owner`,
        and one from a newer agctl are refused (exit 5)."""
        if conn is None:
            with self._connection() as fresh:
                return self.migrate(fresh)
        try:
            state = pg_schema.schema_state(conn, self.schema)
            pg_schema.check_owner(state, self.where, self.shared_owner)
            found = state.version
            self.check_version(found)
            reached = []
            while found < pg_schema.VERSION:
                step = pg_schema.migrate_step(
                    conn, self.schema, pg_schema.VERSION, self.where, self.shared_owner
                )
                if step is None:
                    break
                reached.append(step)
                found = step
        except psycopg.Error as exc:  # no right to make the schema or its tables, say
            raise StoreError(
                f"the store {self.where} could not be brought up to date: {_first_line(exc)}"
            ) from None
        return reached

    def check_version(self, found: int) -> None:
        if found > pg_schema.VERSION:
            raise DataError(
                f"the store {self.where} has schema version {found}, from a newer agctl; "
                f"this agctl knows versions up to {pg_schema.VERSION}: upgrade agctl"
            )

    def version(self) -> int:
        with self._connection() as conn:
            return pg_schema.stored_version(conn, self.schema)

    def access(self) -> dict[str, Any]:
        """Whose the schema is and who else may read it (`store status`), and whether
        this backend uses it ("own", "member", "shared": the accepted `shared_owner`'s,
        "refused", or "none": no schema yet)."""
        with self._connection() as conn:
            state = pg_schema.schema_state(conn, self.schema)
            found = pg_schema.readers(conn, self.schema) if state.owner is not None else None
        try:
            pg_schema.check_owner(state, self.where, self.shared_owner)
            refusal = None
        except DataError as exc:
            refusal = str(exc)
        if state.owner is None:
            verdict = "none"
        elif refusal is not None:
            verdict = "refused"
        elif state.owner == state.user:
            verdict = "own"
        else:
            verdict = "member" if state.owner_is_ours else "shared"
        members, grants = found if found is not None else ([], [])
        return {
            "user": state.user,
            "owner": state.owner,
            "access": verdict,
            "refusal": refusal,
            "owner_members": members,
            "foreign_tables": [{"table": t, "owner": o} for t, o in state.foreign],
            "readers": grants,
        }

    def _take_idle(self) -> Conn | None:
        with self._pool_lock:
            while self._idle:
                conn = self._idle.pop()
                if not conn.closed:
                    return conn
        return None

    @contextlib.contextmanager
    def _connection(self) -> Iterator[Conn]:
        """An idle connection of the pool, else the reader's when no read is using it (a
        command, one thread, then opens one connection, not two), else a new one; given
        back to the pool afterwards unless broken."""
        conn = self._take_idle()
        if conn is None and self._reader_lock.acquire(blocking=False):
            try:
                if self._reader is not None and not self._reader.closed:
                    conn, self._reader = self._reader, None
            finally:
                self._reader_lock.release()
        if conn is None:
            conn = self._connect()
        try:
            yield conn
        finally:
            if (
                not conn.closed
                and conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
            ):
                with self._pool_lock:
                    self._idle.append(conn)
            else:
                conn.close()

    @contextlib.contextmanager
    def _begun(
        self,
        begin: str = "BEGIN",
        session_id: str | None = None,
        settings: Sequence[Any] = (),
        lock: Sequence[Any] = (),
        skip_locked: bool = False,
    ) -> Iterator[tuple[Conn, tuple[Any, ...] | None]]:
        """A pooled connection in a new transaction, and the session row `lock` (the
        "lock" statement's parameters) locked when given. A connection found lost before
        anything is done is replaced: a server restart cuts every idle one, so the rest of
        the pool goes too and a new connection is opened (waiting out a restart,
        CONNECT_PATIENCE). BEGIN, `settings` (parameters of the "lock_timeout" statement)
        and the lock go in one round trip (a pipeline)."""
        for attempt in range(2):
            with self._connection() as conn:
                found = None
                try:
                    if settings or lock:
                        with conn.pipeline():
                            conn.execute(begin)
                            if settings:
                                conn.execute(self._sql["lock_timeout"], settings)
                            if lock:
                                name = "lock_or_skip" if skip_locked else "lock"
                                cursor = _queue(conn, self._sql[name], lock)
                        if lock:
                            found = cursor.fetchone()
                    else:
                        conn.execute(begin)
                except psycopg.Error as exc:
                    lost = isinstance(exc, psycopg.OperationalError) and conn.closed
                    if lost and not attempt:
                        self._drop_idle()
                        continue
                    _rollback(conn)
                    raise _store_error(self.where, exc, session_id) from None
                except BaseException:
                    _rollback(conn)
                    raise
                yield conn, found
                return

    def _drop_idle(self) -> None:
        with self._pool_lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    def _rows(self, name: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        """One statement on the reader connection (an idle one of the pool, else a new
        one): opened again once if it was lost (a statement outside a transaction can be
        run again), then new, and the idle ones dropped (a restart cut them all)."""
        with self._reader_lock:
            for attempt in range(2):
                if self._reader is None or self._reader.closed:
                    self._reader = (None if attempt else self._take_idle()) or self._connect()
                try:
                    cursor = _queue(self._reader, self._sql[name], params)
                    return cursor.fetchall() if cursor.description is not None else []
                except psycopg.Error as exc:
                    lost = isinstance(exc, psycopg.OperationalError) and self._reader.closed
                    if not lost or attempt:
                        raise _store_error(self.where, exc) from None
                    self._reader = None
                    self._drop_idle()
        raise AssertionError("unreachable")

    def _open_log(self, name: str, session_id: str) -> IO[bytes]:
        snapshot = self._begun("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", session_id)
        conn, _ = snapshot.__enter__()
        try:
            row = _queue(conn, self._sql["log_size"], [session_id]).fetchone()
        except BaseException as exc:
            _rollback(conn)
            snapshot.__exit__(None, None, None)
            if isinstance(exc, psycopg.OperationalError):
                raise _store_error(self.where, exc, session_id) from None
            raise

        def rows(name: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
            try:
                return _queue(conn, self._sql[name], params).fetchall()
            except psycopg.Error as exc:
                raise _store_error(self.where, exc, session_id) from None

        def close() -> None:
            _rollback(conn)
            snapshot.__exit__(None, None, None)

        return _open_log(name, session_id, 0 if row is None else int(row[0]), rows, close)

    def close(self) -> None:
        self._drop_idle()
        with self._reader_lock:
            if self._reader is not None:
                self._reader.close()
                self._reader = None

    # ---- transactions --------------------------------------------------------------

    def _open_txs(self) -> dict[str, PgTx]:
        if not hasattr(self._open, "txs"):
            self._open.txs = {}
        txs: dict[str, PgTx] = self._open.txs
        return txs

    def in_transaction(self, session_id: str) -> Tx | None:
        return self._open_txs().get(validate_id(session_id, "session"))

    @contextlib.contextmanager
    def _locked(self, session_id: str, *, skip_locked: bool = False) -> Iterator[PgTx | None]:
        """A database transaction holding the session's row lock (None with `skip_locked`
        when another holds it). Before the lock is held nothing is done, so a connection
        lost until then is opened again; after it, a lost one fails the transaction."""
        timeout = [f"{int(lock_timeout() * 1000)}ms"]
        lock = [LOCK_REVS, session_id]
        warm = self._warm.pop(session_id, None)
        with self._begun("BEGIN", session_id, timeout, lock, skip_locked) as (conn, found):
            if found is None:
                _rollback(conn)
                if skip_locked:
                    yield None
                    return
                raise NotFound(f"session {session_id!r} not found")
            size, doc, rev, gen, revs, xid, stamp = found
            if warm is not None and (warm.gen, warm.stamp) != (gen, (rev, size, list(stamp))):
                warm = None  # somebody committed on the session since
            tx = PgTx(
                self,
                session_id,
                conn,
                int(size),
                session_row=(bytes(doc), int(rev)),
                revs=revs,
                warm=warm,
                xid=int(xid),
            )
            with self._undone_on_error(conn, session_id):
                yield tx
            self._commit(tx)

    @contextlib.contextmanager
    def _undone_on_error(self, conn: Conn, session_id: str) -> Iterator[None]:
        """The transaction on `conn` rolled back if the block fails; a database error
        told as the store's (StoreError, or Conflict for a lock held too long)."""
        try:
            yield
        except psycopg.Error as exc:
            _rollback(conn)
            raise _store_error(self.where, exc, session_id) from None
        except BaseException:
            _rollback(conn)
            raise

    def _commit(self, tx: PgTx) -> None:
        """COMMIT, with the statements still pending. When the connection is lost
        meanwhile, the server is asked on a new one what became of the transaction:
        committed is done, aborted committed nothing, and no answer leaves the outcome
        unknown. A statement that failed, or a COMMIT refused, committed nothing."""
        conn, session_id = tx._conn, tx.session_id
        try:
            done, warm = tx.finish()
        except psycopg.Error as exc:
            if isinstance(exc, psycopg.OperationalError) and conn.closed:
                outcome = self._outcome(tx.xid)
                if outcome == "committed":
                    return
                if outcome == "aborted":
                    raise _store_error(self.where, exc, session_id) from None
                raise StoreError(
                    f"the connection to the store {self.where} was lost while session "
                    f"{session_id!r} was being committed: the change may or may not have "
                    f"been committed ({_first_line(exc)})"
                ) from None
            _rollback(conn)
            raise _store_error(self.where, exc, session_id) from None
        if done.statusmessage == "ROLLBACK":  # a failed statement was caught, not raised
            raise StoreError(
                f"the transaction on session {session_id!r} of {self.where} failed inside "
                "and was rolled back: nothing of it was committed"
            )
        if warm is not None:
            self._warm[session_id] = warm

    def _outcome(self, xid: int | None) -> str | None:
        """What became of a transaction whose connection was lost: "committed",
        "aborted", "in progress", or None when the server cannot say (or be reached)."""
        if xid is None:
            return None
        self._drop_idle()  # a lost connection may be a restart, which cut them all
        deadline, pause = time.monotonic() + OUTCOME_PATIENCE, 0.01
        try:
            with self._connection() as conn:
                while True:
                    row = conn.execute(self._sql["xact_status"], [xid]).fetchone()
                    status = None if row is None or row[0] is None else str(row[0])
                    if status != "in progress" or time.monotonic() + pause > deadline:
                        return status
                    time.sleep(pause)
                    pause = min(pause * 2, 0.2)
        except (psycopg.Error, StoreError):
            return None

    @contextlib.contextmanager
    def transaction(self, session_id: str) -> Iterator[Tx]:
        outer = self.in_transaction(session_id)
        if outer is not None:
            yield outer
            return
        txs = self._open_txs()
        with self._locked(session_id) as tx:
            assert tx is not None
            txs[session_id] = tx
            try:
                yield tx
            finally:
                del txs[session_id]

    def _not_in_transaction(self, session_id: str, action: str) -> None:
        if self.in_transaction(session_id) is not None:
            raise Conflict(f"cannot {action} session {session_id!r} inside a transaction on it")

    def _write_session(
        self, tx: PgTx, slots: Sequence[Slot], log: bytes, removed: Iterable[str]
    ) -> None:
        for slot in slots:
            tx.put_slot(slot)
        tx._log_rows.clear()
        if log:
            offsets, chunks = _log_chunks(bytes(log))
            tx._execute("log_chunks", [tx.session_id, offsets, chunks])
        tx._set_log_size(len(log), sealed=None)
        tx.set_removed_checkpoints(removed)

    def create_session(
        self,
        session: Session,
        slots: Sequence[Slot],
        *,
        checkpoint_log: bytes = b"",
        removed: Iterable[str] = (),
    ) -> None:
        sid = validate_id(session.id, "session")
        for slot in slots:
            validate_id(slot.id, "slot")
        with self._begun("BEGIN", sid) as (conn, _):
            with self._undone_on_error(conn, sid):
                doc = session.model_dump_json(exclude={"rev"}).encode()
                row = _queue(
                    conn, self._sql["insert_session"], [sid, doc, [], len(checkpoint_log)]
                ).fetchone()
                if row is None:
                    raise AlreadyExists(f"session {sid!r} already exists")
                tx = PgTx(self, sid, conn, len(checkpoint_log), xid=int(row[1]))
                self._write_session(tx, slots, checkpoint_log, removed)
            self._commit(tx)
            session.rev = int(row[0])

    def replace_session(self, session: Session, slots: Sequence[Slot]) -> None:
        sid = validate_id(session.id, "session")
        self._not_in_transaction(sid, "replace")
        with self._locked(sid) as tx:
            assert tx is not None
            for name in ("clear_slots", "clear_drafts", "clear_log", "clear_caches"):
                tx._execute(name, [sid])
            tx._forget()
            tx.put_session(session)
            self._write_session(tx, slots, b"", ())

    def destroy_session(self, session_id: str) -> None:
        sid = validate_id(session_id, "session")
        self._not_in_transaction(sid, "destroy")
        with self._locked(sid) as tx:
            assert tx is not None
            tx._execute("destroy", [sid])
            tx._forget()
        self._warm.pop(sid, None)
        if self.current_session_id() == sid:
            self.set_current_session(None)

    def repair_cache(self, session_id: str, name: str, append: bytes | None) -> None:
        """Best effort: done only if no transaction holds the session (SKIP LOCKED)."""
        if self.in_transaction(session_id) is not None:
            return
        try:
            with self._locked(validate_id(session_id, "session"), skip_locked=True) as tx:
                if tx is None:
                    return
                if append is None:
                    tx.put_cache(name, None)
                else:
                    tx.append_cache(name, append)
        except (StoreError, NotFound):
            pass

    def pending(self, session_id: str) -> bool:
        validate_id(session_id, "session")
        return False  # a database transaction is never left half done

    # ---- the current-session pointer (this machine's) ----------------------------

    def _pointer(self) -> Path:
        return listing.pointer_path(self.local_dir, self.dsn, self.schema)

    def current_session_id(self) -> str | None:
        return read_pointer(self._pointer())

    def set_current_session(self, session_id: str | None) -> None:
        if session_id is not None:
            self.load_session(session_id)
        write_pointer(self._pointer(), session_id)


# The server says it cannot take connections yet (starting up, shutting down, in
# recovery): worth waiting for, as is no answer at all (a socket not there yet). libpq
# gives a refusal at connect as text only ("FATAL:  database ... does not exist").
_NOT_YET = {"57P03"}
_NOT_YET_TEXT = ("starting up", "shutting down", "in recovery", "not yet accepting")


def connect_patience() -> float:
    """How long a connect waits out a server that is down: the config's
    store.connect_patience, else CONNECT_PATIENCE (read only when a connect fails)."""
    from agctl.config import ConfigStore
    from agctl.errors import AgctlError

    try:
        configured = ConfigStore().load().store.connect_patience
    except AgctlError:
        configured = None  # the config cannot be read: the default
    return CONNECT_PATIENCE if configured is None else configured


def _unavailable(exc: psycopg.OperationalError) -> bool:
    """Whether a failed connect may succeed soon: a wrong password, database or role
    will not, and is reported at once."""
    if exc.sqlstate is not None:
        return exc.sqlstate in _NOT_YET
    text = str(exc)
    return "FATAL:" not in text or any(phrase in text for phrase in _NOT_YET_TEXT)


def _queue(conn: Conn, query: bytes, params: Sequence[Any]) -> psycopg.Cursor[tuple[Any, ...]]:
    """One statement on `conn` (in a pipeline: sent with the others at its end), its
    results in binary: a slot's messages come as bytes, not hex text to be decoded
    (5,000 messages: 42 ms -> 4.5 ms)."""
    return conn.execute(query, params, binary=True)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _rollback(conn: Conn) -> None:
    if conn.closed:
        return
    try:
        conn.execute("ROLLBACK")
    except psycopg.Error:
        conn.close()


def _store_error(where: str, exc: psycopg.Error, session_id: str | None = None) -> Exception:
    """What a database error means to the user: a lock held too long is a conflict."""
    about = f" on session {session_id!r}" if session_id else ""
    if isinstance(exc, pg_errors.LockNotAvailable):
        return Conflict(
            f"another writer holds session {session_id!r} of {where}; it was not released "
            "within the lock timeout (AGCTL_LOCK_TIMEOUT)"
        )
    if isinstance(exc, pg_errors.SerializationFailure | pg_errors.DeadlockDetected):
        return Conflict(f"a concurrent writer{about} got in the way ({_first_line(exc)})")
    return StoreError(
        f"the store {where} failed{about}: {_first_line(exc)}; nothing of this transaction "
        "was committed"
    )
