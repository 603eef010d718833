"""The storage interface: what the domain may ask of a backend, and nothing more.

A backend keeps sessions. Each session holds one session document, its slot documents,
one draft per slot at most, its checkpoint log (an append-only run of byte records whose
offsets are checkpoint ids) and the set of removed checkpoint ids, plus caches that the
checkpoint code rebuilds when they are missing or wrong.

- Reads on the backend itself are lock-free snapshots: a document is read whole, as one
  committed transaction left it, never half written.
- `Backend.transaction(session_id)` yields a `Tx`: the session's exclusive lock is held
  for its whole life; the `Tx` reads its own writes; everything written through it
  becomes visible together when the block ends without an exception, or not at all.
  Transactions of one thread nest: an inner `transaction` of the same session is the
  outer `Tx` itself, committed with it.
- Every stored document has a revision, `rev`: a counter the backend advances on each
  write of it. "Did anyone change this since I read it" compares revisions.

Nothing here knows what a turn, a rollback or a compression is; nothing above this
package knows what a path, an inode or a journal file is.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from typing import IO, TYPE_CHECKING, Generic, NamedTuple, Protocol, TypeVar

if TYPE_CHECKING:
    from agctl.context.models import Draft, Message, Session, Slot

# The caches a backend keeps for the checkpoint code, by name.
CACHES = ("heads", "index")


def check_cache(name: str) -> str:
    """`name` if it is one of CACHES, else UsageError."""
    if name not in CACHES:
        from agctl.base.errors import UsageError

        raise UsageError(f"no cache is named {name!r}: the caches are {', '.join(CACHES)}")
    return name


def next_rev(stored: int | None) -> int:
    """The revision a write gives a document stored at `stored` (None or 0: not stored).

    A new document starts from the clock (microseconds), so one deleted and made again
    under the same id never repeats a revision its predecessor had: a cache that says
    "unchanged since revision R" cannot mistake the new one for the old."""
    if stored:
        return stored + 1
    import time

    return time.time_ns() // 1000


def lock_timeout() -> float:
    """How long a writer waits for a session another holds, on every backend:
    AGCTL_LOCK_TIMEOUT, else the config's `lock_timeout`, else 30 seconds."""
    import os

    from agctl.base.errors import AgctlError, UsageError

    env = os.environ.get("AGCTL_LOCK_TIMEOUT")
    if env:
        try:
            value = float(env)
        except ValueError:
            value = -1.0
        if not value > 0 or value == float("inf"):
            raise UsageError(f"AGCTL_LOCK_TIMEOUT must be a number of seconds above 0, not {env!r}")
        return value
    from agctl.base.fsio import DEFAULT_LOCK_TIMEOUT
    from agctl.config.file import ConfigFile

    try:
        return ConfigFile().load().lock_timeout
    except AgctlError:
        return DEFAULT_LOCK_TIMEOUT  # the config cannot be read: its default


def append_problem(
    stored: tuple[Sequence[Message], Sequence[Message], Sequence[Message]],
    slot: Slot,
    count: int,
) -> str | None:
    """Why `slot` is not the slot whose zones (immutable, compressed, messages) are
    `stored` plus `count` appended messages, or None: what every backend's
    `append_messages` checks before it appends."""
    immutable, compressed, messages = stored
    kept = len(slot.messages) - count
    if count < 0 or kept != len(messages):
        return f"it holds {len(messages)} messages, not {kept}"
    if slot.immutable != list(immutable) or slot.compressed != list(compressed):
        return "its immutable or compressed zone differs"
    if slot.messages[:kept] != list(messages):
        return "its earlier messages differ"
    return None


class LogReader(Protocol):
    """The checkpoint log of one session, as bytes: `name` names it in messages."""

    name: str

    def size(self) -> int:
        """Its length in bytes (0 when there is none)."""
        ...

    def open(self) -> IO[bytes]:
        """A binary reader over a snapshot of it, positioned at 0 (seek, read, readline,
        iteration by lines). Raises NotFound when the log does not exist."""
        ...


class LogWriter(LogReader, Protocol):
    @property
    def rewinds(self) -> int:
        """Advanced whenever a savepoint undoes appends to this log: what a reader
        remembered of it (its last record, the lines it appended) is then forgotten."""
        ...

    def append(self, build: Callable[[int], bytes]) -> int:
        """Append `build(offset)`, where `offset` is where it will start (after a newline
        sealing a torn last line, if any); return that offset."""
        ...

    def truncate(self, size: int) -> None:
        """Cut the log to `size` bytes (a torn tail nothing refers to)."""
        ...


class Reader(Protocol):
    """What can be read of a backend: lock-free on the backend, own writes seen in a Tx."""

    def session_ids(self) -> list[str]:
        """The ids of every session, sorted."""
        ...

    def has_session(self, session_id: str) -> bool: ...

    def load_session(self, session_id: str) -> Session:
        """The session document as one commit left it (a commit at work is waited for,
        or read around); NotFound if there is none, CorruptDocument (exit 5) if it
        cannot be read; InvalidId for an id no session may have."""
        ...

    def slot_ids(self, session_id: str) -> list[str]:
        """The session's slot ids, sorted; NotFound when the session is gone."""
        ...

    def load_slot(self, session_id: str, slot_id: str, *, reuse: Slot | None = None) -> Slot:
        """The slot document. `reuse` is a slot read or written earlier through this
        backend and not modified since: it is returned as it is when the stored slot is
        still at its revision."""
        ...

    def slot_rev(self, session_id: str, slot_id: str) -> int | None:
        """The slot's current revision, cheaply; None when it does not exist."""
        ...

    def draft_slots(self, session_id: str) -> list[str]:
        """The slots that have a draft (slots removed since included), sorted."""
        ...

    def load_draft(self, session_id: str, slot_id: str) -> Draft:
        """The slot's draft; NotFound when it has none."""
        ...

    def checkpoint_log(self, session_id: str) -> LogReader: ...

    def removed_checkpoints(self, session_id: str) -> set[str]: ...

    def cache(self, session_id: str, name: str) -> bytes | None:
        """A cache of the checkpoint code (one of CACHES), or None. Trailing blanks are
        not part of a cache (a backend may pad one it rewrites in place)."""
        ...


class Tx(Reader, Protocol):
    """One unit of work on one session, under its exclusive lock."""

    session_id: str

    def put_session(self, session: Session) -> None:
        """Write the session document (its `rev` is advanced)."""
        ...

    def put_slot(self, slot: Slot) -> None:
        """Write the whole slot, replacing what is stored (its `rev` is advanced)."""
        ...

    def append_messages(self, slot: Slot, count: int) -> None:
        """The slot as stored plus `count` messages appended to its `messages` zone: `slot`
        is the whole slot in memory, its last `count` messages the new ones, and its
        header (config, meta) as it is now. Earlier messages are not written again."""
        ...

    def delete_slot(self, slot_id: str) -> None: ...

    def put_draft(self, draft: Draft) -> None: ...

    def delete_draft(self, slot_id: str) -> bool:
        """Remove the slot's draft; whether there was one."""
        ...

    def checkpoint_log(self, session_id: str | None = None) -> LogWriter:
        """The session's checkpoint log, its appends part of this transaction."""
        ...

    def set_removed_checkpoints(self, ids: Iterable[str]) -> None: ...

    def write_cache(self, name: str, data: bytes | None, *, append: bool = False) -> None:
        """Replace (None: drop) a cache of the checkpoint code, or append `data` to it
        (the index grows a line a checkpoint)."""
        ...

    def savepoint(self) -> AbstractContextManager[None]:
        """A unit of work inside the transaction: if it fails, what it wrote is undone and
        the transaction goes on from where it was; a document written after it gets a
        new revision (a checkpoint made in it tells the two states apart)."""
        ...


class NewSession(NamedTuple):
    """A session to create whole (Backend.create_session): its documents, its checkpoint
    history and the checkpoint ids removed from it."""

    session: Session
    slots: Sequence[Slot]
    checkpoint_log: bytes
    removed: Iterable[str]


class Backend(Reader, Protocol):
    """Where sessions live: the file store, the memory store, PostgreSQL. A backend
    subclasses it for `create_session`, which checks the ids before its `_create` (no
    part of the contract: what a backend implements, never what the domain calls)."""

    def transaction(self, session_id: str) -> AbstractContextManager[Tx]:
        """The session's exclusive lock and a Tx over it; NotFound if the session does
        not exist (or is destroyed while waiting). A lock held too long by another
        process raises Conflict (exit 4) after the lock timeout."""
        ...

    def in_transaction(self, session_id: str) -> Tx | None:
        """The Tx this thread has open on the session, if any."""
        ...

    def create_session(
        self,
        session: Session,
        slots: Sequence[Slot],
        *,
        checkpoint_log: bytes = b"",
        removed: Iterable[str] = (),
    ) -> None:
        """A new session with these documents (and checkpoint history), all or nothing;
        AlreadyExists if its id is taken, InvalidId for an id no session or slot may have."""
        from agctl.base.ids import validate_id

        validate_id(session.id, "session")
        for slot in slots:
            validate_id(slot.id, "slot")
        self._create(NewSession(session, slots, checkpoint_log, removed))

    def _create(self, new: NewSession) -> None:
        """What `create_session` does once the ids are checked: each backend's own."""
        ...

    def replace_session(self, session: Session, slots: Sequence[Slot]) -> None:
        """Swap the existing session of this id for a new one with these documents and
        no checkpoint history, all or nothing."""
        ...

    def destroy_session(self, session_id: str) -> None:
        """Remove a session and everything it holds; NotFound if there is none."""
        ...

    def current_session_id(self) -> str | None:
        """The session chosen with `session use` (kept on this machine)."""
        ...

    def set_current_session(self, session_id: str | None) -> None: ...

    def pending(self, session_id: str) -> bool:
        """Whether an interrupted commit waits to be finished by the next writer."""
        ...

    def write_cache(
        self, session_id: str, name: str, data: bytes | None, *, append: bool = False
    ) -> None:
        """What `Tx.write_cache` does, outside a transaction: best effort and lock-free,
        for a reader that found a cache behind (of a session that has a checkpoint log).
        A cache is never trusted blindly, so a lost write is only work done again."""
        ...


TxT = TypeVar("TxT")


class OpenTxs(Generic[TxT]):
    """The transactions each thread has open on one backend, by session: what its
    `in_transaction` answers, and the nesting its `transaction` promises (an inner one on
    the same session is the outer Tx itself)."""

    def __init__(self) -> None:
        self._local = threading.local()

    def _open(self) -> dict[str, TxT]:
        if not hasattr(self._local, "txs"):
            self._local.txs = {}
        txs: dict[str, TxT] = self._local.txs
        return txs

    def get(self, session_id: str) -> TxT | None:
        """The Tx this thread has open on the session, if any."""
        from agctl.base.ids import validate_id

        return self._open().get(validate_id(session_id, "session"))

    @contextlib.contextmanager
    def nested(
        self, session_id: str, begin: Callable[[], AbstractContextManager[TxT]]
    ) -> Iterator[TxT]:
        """The Tx this thread has open on the session, else a new one `begin` opens (and
        commits when the block ends), known as open while the block runs."""
        outer = self.get(session_id)
        if outer is not None:
            yield outer
            return
        txs = self._open()
        with begin() as tx:
            txs[session_id] = tx
            try:
                yield tx
            finally:
                del txs[session_id]

    def refuse(self, session_id: str, action: str) -> None:
        """Conflict when this thread has a Tx open on the session: it would write its
        documents back over a session replaced or destroyed under it."""
        if self.get(session_id) is not None:
            from agctl.base.errors import Conflict

            raise Conflict(f"cannot {action} session {session_id!r} inside a transaction on it")
