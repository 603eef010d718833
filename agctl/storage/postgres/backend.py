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

The backend is built by job: statements (agctl.storage.postgres.statements), reads
(reads), the checkpoint log's rows (log), connections (connection), the schema's
migrations (migrations), a transaction and its writes (tx); here, transactions are
opened, committed and nested, and whole sessions created, replaced and destroyed.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
from pathlib import Path

import psycopg

from agctl.base.errors import AlreadyExists, NotFound, StoreError
from agctl.base.fsio import read_pointer, write_pointer
from agctl.base.ids import validate_id
from agctl.context.models import Session, Slot
from agctl.storage.base import Backend, NewSession, OpenTxs, Tx, lock_timeout
from agctl.storage.local_drafts import LocalDrafts
from agctl.storage.postgres import listing
from agctl.storage.postgres.connection import Conn, first_line, queue, rollback, store_error
from agctl.storage.postgres.migrations import Migrations
from agctl.storage.postgres.tx import PgTx, Warm

# How long a commit whose connection was lost asks again while the server still has its
# transaction "in progress": the server ends one whose client is gone as soon as it reads
# the closed socket, unless a statement of it waits (on a lock), which may yet commit.
OUTCOME_PATIENCE = 3.0
# Revisions a transaction takes from the sequence with its lock, for the documents it
# writes (a turn writes two) and the generation it commits; past them a write takes one
# in its own statement.
LOCK_REVS = 4


class PostgresBackend(Migrations, Backend):
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
        super().__init__(
            dsn,
            schema=schema,
            connect_patience=connect_patience,
            auto_migrate=auto_migrate,
            shared_owner=shared_owner,
        )
        self.local_dir = local_dir
        # Where a draft goes when the server cannot take it (agctl.store.drafts), on this machine.
        key = listing.store_key(dsn, schema)
        self.local_drafts = LocalDrafts.in_data_dir(local_dir, key)
        # Session id -> what the last transaction this backend committed on it knew.
        self._warm: dict[str, Warm] = {}
        self._txs: OpenTxs[PgTx] = OpenTxs()

    # ---- transactions --------------------------------------------------------------

    def in_transaction(self, session_id: str) -> Tx | None:
        return self._txs.get(session_id)

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
                rollback(conn)
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
            rollback(conn)
            raise store_error(self.where, exc, session_id) from None
        except BaseException:
            rollback(conn)
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
                    raise store_error(self.where, exc, session_id) from None
                raise StoreError(
                    f"the connection to the store {self.where} was lost while session "
                    f"{session_id!r} was being committed: the change may or may not have "
                    f"been committed ({first_line(exc)})"
                ) from None
            rollback(conn)
            raise store_error(self.where, exc, session_id) from None
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

    def transaction(self, session_id: str) -> AbstractContextManager[Tx]:
        return self._txs.nested(session_id, lambda: self._begin(session_id))

    @contextlib.contextmanager
    def _begin(self, session_id: str) -> Iterator[PgTx]:
        with self._locked(session_id) as tx:
            assert tx is not None  # None only when skipping a lock held
            yield tx

    def _create(self, new: NewSession) -> None:
        session, checkpoint_log = new.session, new.checkpoint_log
        sid = session.id
        with self._begun("BEGIN", sid) as (conn, _):
            with self._undone_on_error(conn, sid):
                doc = session.model_dump_json(exclude={"rev"}).encode()
                row = queue(
                    conn, self._sql["insert_session"], [sid, doc, [], len(checkpoint_log)]
                ).fetchone()
                if row is None:
                    raise AlreadyExists(f"session {sid!r} already exists")
                tx = PgTx(self, sid, conn, len(checkpoint_log), xid=int(row[1]))
                tx.write_whole(new.slots, checkpoint_log, new.removed)
            self._commit(tx)
            session.rev = int(row[0])

    def replace_session(self, session: Session, slots: Sequence[Slot]) -> None:
        sid = validate_id(session.id, "session")
        self._txs.refuse(sid, "replace")
        with self._locked(sid) as tx:
            assert tx is not None
            for name in ("clear_slots", "clear_drafts", "clear_log", "clear_caches"):
                tx._execute(name, [sid])
            tx._forget()
            tx.put_session(session)
            tx.write_whole(slots, b"", ())

    def destroy_session(self, session_id: str) -> None:
        sid = validate_id(session_id, "session")
        self._txs.refuse(sid, "destroy")
        with self._locked(sid) as tx:
            assert tx is not None
            tx._execute("destroy", [sid])
            tx._forget()
        self._warm.pop(sid, None)
        if self.current_session_id() == sid:
            self.set_current_session(None)

    def write_cache(
        self, session_id: str, name: str, data: bytes | None, *, append: bool = False
    ) -> None:
        """Best effort: done only if no transaction holds the session (SKIP LOCKED)."""
        if self.in_transaction(session_id) is not None:
            return
        try:
            with self._locked(validate_id(session_id, "session"), skip_locked=True) as tx:
                if tx is not None:
                    tx.write_cache(name, data, append=append)
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
