"""The PostgreSQL backend's connections: opening one (waiting out a server that cannot
take one yet, for the connect patience, said on stderr), the pool of idle ones, the
reader connection the lock-free reads share, a transaction begun with its lock in one
round trip, and what a database error means to the user."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterator, Sequence
from typing import IO, Any

import psycopg
from psycopg import errors as pg_errors

from agctl.base.errors import Conflict, StoreError, UsageError
from agctl.storage.postgres import listing
from agctl.storage.postgres.log import open_log
from agctl.storage.postgres.reads import Known, Reading
from agctl.storage.postgres.statements import statements
from agctl.storage.urls import redact

Conn = psycopg.Connection[tuple[Any, ...]]

log = logging.getLogger("agctl.store")

# How long a new connection may keep failing (a server restarting) before we give up,
# unless the config's store.connect_patience says (agctl.storage.factory.StoreChoice): a
# few seconds, said on stderr, since a turn waits on it with nothing else on screen; and
# only once a process (a store found down is then tried once a connection), so a failed
# turn that still tries to keep its draft does not wait again at every step.
CONNECT_PATIENCE = 5.0

# The server says it cannot take connections yet (starting up, shutting down, in
# recovery): worth waiting for, as is no answer at all (a socket not there yet). libpq
# gives a refusal at connect as text only ("FATAL:  database ... does not exist").
_NOT_YET = {"57P03"}
_NOT_YET_TEXT = ("starting up", "shutting down", "in recovery", "not yet accepting")


def unavailable(exc: psycopg.OperationalError) -> bool:
    """Whether a failed connect may succeed soon: a wrong password, database or role
    will not, and is reported at once."""
    if exc.sqlstate is not None:
        return exc.sqlstate in _NOT_YET
    text = str(exc)
    return "FATAL:" not in text or any(phrase in text for phrase in _NOT_YET_TEXT)


def queue(conn: Conn, query: bytes, params: Sequence[Any]) -> psycopg.Cursor[tuple[Any, ...]]:
    """One statement on `conn` (in a pipeline: sent with the others at its end), its
    results in binary: a slot's messages come as bytes, not hex text to be decoded
    (5,000 messages: 42 ms -> 4.5 ms)."""
    return conn.execute(query, params, binary=True)


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def rollback(conn: Conn) -> None:
    if conn.closed:
        return
    try:
        conn.execute("ROLLBACK")
    except psycopg.Error:
        conn.close()


def store_error(where: str, exc: psycopg.Error, session_id: str | None = None) -> Exception:
    """What a database error means to the user: a lock held too long is a conflict."""
    about = f" on session {session_id!r}" if session_id else ""
    if isinstance(exc, pg_errors.LockNotAvailable):
        return Conflict(
            f"another writer holds session {session_id!r} of {where}; it was not released "
            "within the lock timeout (AGCTL_LOCK_TIMEOUT)"
        )
    if isinstance(exc, pg_errors.SerializationFailure | pg_errors.DeadlockDetected):
        return Conflict(f"a concurrent writer{about} got in the way ({first_line(exc)})")
    return StoreError(
        f"the store {where} failed{about}: {first_line(exc)}; nothing of this transaction "
        "was committed"
    )


class Connections(Reading):
    """The connections of a backend on `dsn` (see PostgresBackend), and the reads on
    them: each one statement on the reader connection, a log read in a snapshot of its
    own."""

    def __init__(self, dsn: str, *, schema: str, connect_patience: float | None) -> None:
        self.dsn = dsn
        # How long a connect waits out a server that is not there yet (the config's
        # store.connect_patience, through the store's choice; None: CONNECT_PATIENCE; 0:
        # one attempt, for a TAB that must not hang).
        self.connect_patience = connect_patience
        # Whether a connect waited its patience out and failed: the next ones (a failed
        # turn keeping its draft) try once, and say so, rather than wait again.
        self._down = False
        self.schema = schema
        self.where = f"{redact(dsn)} (schema {schema})"
        self._sql = statements(schema)
        # The slots as last read or written here, shared with the transactions.
        self._known: dict[tuple[str, str], Known] = {}
        self._reader: Conn | None = None
        self._reader_lock = threading.Lock()
        self._idle: list[Conn] = []
        self._pool_lock = threading.Lock()

    def _patience(self) -> float:
        if self._down:
            return 0.0
        return CONNECT_PATIENCE if self.connect_patience is None else self.connect_patience

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
                    if unavailable(exc) and patience > 0:
                        log.warning(
                            "the store %s does not answer (%s): trying again for up to %gs "
                            "(store.connect_patience)",
                            self.where,
                            first_line(exc),
                            patience,
                        )
                if not unavailable(exc) or time.monotonic() + delay > deadline:
                    self._down = unavailable(exc)
                    tried = f", {attempts} attempts in {patience:g}s" if attempts > 1 else ""
                    raise StoreError(
                        f"cannot connect to the store {self.where}{tried}: {first_line(exc)}"
                    ) from None
                log.info("store %s: attempt %d failed: %s", self.where, attempts, first_line(exc))
                time.sleep(delay)
                delay = min(delay * 2, 1.0)
                continue
            except psycopg.ProgrammingError as exc:  # a malformed connection string
                raise UsageError(f"bad store URL {redact(self.dsn)}: {first_line(exc)}") from None
            if self._down or attempts > 1:
                log.info("store %s answers again (attempt %d)", self.where, attempts)
            self._down = False
            try:
                self._ready(conn)
            except BaseException:
                conn.close()
                raise
            return conn

    def _ready(self, conn: Conn) -> None:
        """What a new connection is made ready with before it is used (nothing here)."""

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
                                cursor = queue(conn, self._sql[name], lock)
                        if lock:
                            found = cursor.fetchone()
                    else:
                        conn.execute(begin)
                except psycopg.Error as exc:
                    lost = isinstance(exc, psycopg.OperationalError) and conn.closed
                    if lost and not attempt:
                        self._drop_idle()
                        continue
                    rollback(conn)
                    raise store_error(self.where, exc, session_id) from None
                except BaseException:
                    rollback(conn)
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
                    cursor = queue(self._reader, self._sql[name], params)
                    return cursor.fetchall() if cursor.description is not None else []
                except psycopg.Error as exc:
                    lost = isinstance(exc, psycopg.OperationalError) and self._reader.closed
                    if not lost or attempt:
                        raise store_error(self.where, exc) from None
                    self._reader = None
                    self._drop_idle()
        raise AssertionError("unreachable")

    def _open_log(self, name: str, session_id: str) -> IO[bytes]:
        snapshot = self._begun("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", session_id)
        conn, _ = snapshot.__enter__()
        try:
            row = queue(conn, self._sql["log_size"], [session_id]).fetchone()
        except BaseException as exc:
            rollback(conn)
            snapshot.__exit__(None, None, None)
            if isinstance(exc, psycopg.OperationalError):
                raise store_error(self.where, exc, session_id) from None
            raise

        def rows(name: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
            try:
                return queue(conn, self._sql[name], params).fetchall()
            except psycopg.Error as exc:
                raise store_error(self.where, exc, session_id) from None

        def close() -> None:
            rollback(conn)
            snapshot.__exit__(None, None, None)

        return open_log(name, session_id, 0 if row is None else int(row[0]), rows, close)

    def close(self) -> None:
        self._drop_idle()
        with self._reader_lock:
            if self._reader is not None:
                self._reader.close()
                self._reader = None
