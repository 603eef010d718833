"""A unit of work on one session: the storage transaction, held for the work's whole life,
and what must run before its first change (the undo checkpoint of a destructive command).

The Store opens it (`Store.work`) and hands it down: the rules (sessions, slots, drafts,
checkpoints) change a session through the work they are given and read through it or
through a storage Reader, and never reach back up for a transaction of their own. As in
httpx, where the Client opens and the transports below only carry out, the direction is
one way.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from agctl.base.errors import DataError, NotFound, StoreError
from agctl.base.ids import validate_id

if TYPE_CHECKING:
    from agctl.context.models import Session, Slot
    from agctl.storage.base import Backend, Reader, Tx

log = logging.getLogger("agctl.store")

# What runs before a work's first change, given the work (it may write through it).
BeforeChange = Callable[["Work"], object]


class Work:
    """A unit of work on `session_id`: its transaction (`tx`, opened on first use, so a
    rule that refuses its input before it reads or writes takes no lock; its reads see
    its own writes), the backend it belongs to (for what is kept beside the session's
    transaction, such as the drafts a shared store could not take), and the hook of its
    first change."""

    __slots__ = ("_before", "_opened", "_stack", "backend", "session_id")

    def __init__(
        self,
        backend: Backend,
        session_id: str,
        stack: contextlib.ExitStack[bool | None],
        before: BeforeChange | None = None,
    ) -> None:
        self.backend = backend
        self.session_id = session_id
        self._stack = stack
        self._before = before
        self._opened: Tx | None = None

    @property
    def tx(self) -> Tx:
        """The session's transaction, its exclusive lock taken when first asked for and
        held until the work ends (then committed, or rolled back by an exception)."""
        return self._open()

    def _open(self) -> Tx:
        if self._opened is None:
            self._opened = self._stack.enter_context(self.backend.transaction(self.session_id))
        return self._opened

    def opened(self) -> Backend:
        """The backend, with this work's transaction open from now on, so that what reads
        through the backend (agctl.store.work.reader) sees the work's own writes: for a
        rule that reads the session that way before it writes."""
        self._open()
        return self.backend

    @contextlib.contextmanager
    def locked(self) -> Iterator[Tx]:
        """The session's lock taken now rather than at the first read or write (a turn
        takes it before its commit holds off interrupts)."""
        yield self.tx

    def changing(self) -> Tx:
        """The transaction, for a change: called by every rule before it changes the
        session's documents, it first runs what must precede the first change, once."""
        tx = self.tx
        before, self._before = self._before, None
        if before is not None:
            before(self)
        return tx

    def load_session(self) -> Session:
        return self.tx.load_session(self.session_id)

    def slot_id(self, slot_id: str | None) -> str:
        """The given slot id, checked, or the session's current slot when None."""
        return self.load_session().current_slot if slot_id is None else validate_id(slot_id, "slot")

    def load_slot(self, slot_id: str | None = None, *, reuse: Slot | None = None) -> Slot:
        """The slot (the current one when None), as this work sees it; `reuse` is returned
        when the stored slot is still at its revision."""
        return self.tx.load_slot(self.session_id, self.slot_id(slot_id), reuse=reuse)

    def slot_ids(self) -> list[str]:
        return self.tx.slot_ids(self.session_id)


@contextlib.contextmanager
def work_on(
    backend: Backend, session_id: str, before: BeforeChange | None = None
) -> Iterator[Work]:
    """A unit of work on the session, on `backend` (its transactions nest: inside an open
    one, the work shares it and the outermost commits)."""
    with contextlib.ExitStack() as stack:
        yield Work(backend, session_id, stack, before)


def reader(backend: Backend, session_id: str) -> Reader:
    """What reads the session: the open unit of work's transaction (its own writes seen),
    else the backend, once any commit a killed writer left half applied is finished (no
    read sees one)."""
    if backend.in_transaction(session_id) is None:
        settle(backend, session_id)
    return snapshot(backend, session_id)


def snapshot(backend: Backend, session_id: str) -> Reader:
    """What reads the session as one commit left it: the open unit of work's transaction,
    else the backend, without first finishing a commit a killed writer left half applied
    (a session document is written whole: a listing of many sessions takes no lock)."""
    tx = backend.in_transaction(session_id)
    return backend if tx is None else tx


def settle(backend: Backend, session_id: str) -> None:
    """Finish an interrupted commit before reading, so nothing is read from a half
    applied one (takes the lock only when one is pending; a session that does not
    exist has none)."""
    if not backend.pending(session_id):
        return
    try:
        with contextlib.suppress(NotFound), backend.transaction(session_id):
            pass
    except (StoreError, DataError) as exc:  # a full disk, a planted journal: read on
        log.warning(
            "an interrupted commit of %s could not be finished (%s): what is read now "
            "may hold only part of it; the next command that can write finishes it",
            session_id,
            exc,
        )
