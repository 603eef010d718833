"""The Store: what users import (`from agctl import Store`) — sessions, slots, memory and
drafts, with their rules, over one storage backend (agctl.storage: the file backend by
default, the memory backend for tests and scripts).

Every change to a session runs in one transaction of the backend (`Store.transaction`,
also spelled `lock`): the session's exclusive lock is held, and everything written in it
becomes visible together or not at all. Transactions nest; the outermost commits.
Readers take no lock.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import ValidationError

from agctl.errors import (
    AgctlError,
    AlreadyExists,
    Conflict,
    CorruptDocument,
    DataError,
    HasChildren,
    InvalidInput,
    NotFound,
    ProtectedSlot,
    StoreError,
    UsageError,
)
from agctl.fsio import read_bytes, write_atomic
from agctl.hashing import message_hashes
from agctl.ids import new_session_id, resolve_prefix, validate_id
from agctl.models import (
    Draft,
    FocusedConfig,
    Message,
    Session,
    Slot,
    SlotConfig,
    SlotMeta,
    SlotSource,
    utcnow,
)
from agctl.storage.file.backend import FileBackend, lock_timeout
from agctl.validation import validation_summary
from agctl.view import focused_messages
from agctl.vocab import (
    DERIVE_STRATEGIES,
    SESSION_SETTINGS,
    SLOT_MODES,
    SLOT_SETTINGS,
    DeriveStrategy,
)

if TYPE_CHECKING:
    from agctl.storage.base import Backend, Reader, Tx

__all__ = ["DEFAULT_SLOT", "Destroyed", "Replaced", "SessionInfo", "Store", "lock_timeout"]

log = logging.getLogger("agctl.store")

DEFAULT_SLOT = "default"
# Data dirs already warned about in this process; the note that says so across processes.
WARNED_NOTE = ".loose-modes-warned"
_warned_loose: set[str] = set()
T = TypeVar("T")


def default_data_dir() -> Path:
    """AGCTL_DATA_DIR, else the platform's user data dir for agctl."""
    env = os.environ.get("AGCTL_DATA_DIR")
    if env:
        return Path(env)
    import platformdirs

    return Path(platformdirs.user_data_dir("agctl"))


def _check_mode(mode: str) -> None:
    if mode not in SLOT_MODES:
        raise UsageError(f"unknown slot mode {mode!r}; choose from {', '.join(SLOT_MODES)}")


def _focus(base: FocusedConfig, changes: Mapping[str, Any] | None) -> FocusedConfig:
    try:
        return base.updated(changes)
    except ValidationError as exc:
        raise UsageError(f"invalid focused settings: {validation_summary(exc)}") from None


def _in_cycles(parents: Mapping[str, str | None]) -> set[str]:
    """The sessions that lie on a loop of parent links (possible only in data written
    by hand or imported before imports checked): each walk over parents stops there."""
    looped: set[str] = set()
    done: set[str] = set()
    for start in parents:
        path: list[str] = []
        on_path: set[str] = set()
        node: str | None = start
        while node is not None and node in parents and node not in done:
            if node in on_path:
                looped.update(path[path.index(node) :])
                break
            path.append(node)
            on_path.add(node)
            node = parents[node]
        done.update(path)
    return looped


@dataclass
class SessionInfo:
    """A session as listed: the document plus what only the whole store knows."""

    session: Session
    children: list[str] = field(default_factory=list)
    orphan: bool = False
    # Its parent chain loops back (data written by hand, or imported before imports
    # checked): shown as a root, its parent link ignored by every walk.
    looped: bool = False


@dataclass
class Replaced:
    """What `replace_session` made, and what became of the old session's children."""

    session: Session
    replaced: bool
    destroyed: list[str] = field(default_factory=list)
    detached: list[str] = field(default_factory=list)


@dataclass
class Destroyed:
    """What `destroy_session` removed, and which children it left without a parent."""

    destroyed: list[str]
    orphaned: list[str]


class Store:
    """Sessions, slots, messages and memory, kept by one backend.

    `Store(root)` keeps them as files under `root` (default: AGCTL_DATA_DIR, else the
    user data dir); `Store(backend=MemoryBackend())` keeps them in memory. `sync="end"`
    (file backend) commits without an fsync each time, until `flush()`.
    """

    def __init__(
        self,
        root: Path | str | None = None,
        *,
        backend: Backend | None = None,
        sync: str = "per-turn",
    ) -> None:
        if backend is None:
            backend = FileBackend(Path(root) if root is not None else default_data_dir(), sync=sync)
        self.backend: Backend = backend
        self.files: FileBackend | None = backend if isinstance(backend, FileBackend) else None
        self.root: Path | None = self.files.root if self.files is not None else None
        # Session id -> the command whose first change is to be checkpointed (undoable).
        self._pending_edits: dict[str, str] = {}
        if os.environ.get("AGCTL_LOCK_TIMEOUT"):
            lock_timeout()  # a bad value is an error now, not only when a lock is busy
        if self.files is not None:
            self._warn_if_loose(self.files.root)

    @property
    def sessions_dir(self) -> Path:
        return self._files().sessions_dir

    def _files(self) -> FileBackend:
        if self.files is None:
            raise StoreError("this store keeps no files (it is not a file store)")
        return self.files

    def _warn_if_loose(self, root: Path) -> None:
        """A data dir that others may read or write is used, but never silently: warned
        about once (a note in the data dir remembers the modes warned about; if they
        change, the warning comes again)."""
        key = str(root)
        if key in _warned_loose:
            return
        _warned_loose.add(key)
        loose = []
        for path in (root, self._files().sessions_dir):
            try:
                mode = os.stat(path).st_mode & 0o777
            except OSError:
                continue
            if mode & 0o077:
                loose.append(f"{path.name or path} {mode:03o}")
        if not loose:
            return
        note = root / WARNED_NOTE
        seen = ", ".join(loose)
        try:
            if read_bytes(note).decode("utf-8", "replace") == seen:
                return
        except AgctlError:
            pass
        log.warning(
            "%s is open to other users (%s): conversations should be private; "
            "'agctl doctor --fix' (or chmod -R go-rwx) closes it (said once)",
            root,
            seen,
        )
        with contextlib.suppress(AgctlError):
            write_atomic(note, seen.encode(), durable=False)

    # ---- the file backend's places (its own tests, doctor, interchange) -----------

    def session_dir(self, session_id: str) -> Path:
        return self._files().session_dir(session_id)

    def owner(self) -> int:
        return self._files().owner()

    # ---- transactions ----------------------------------------------------------------

    @contextlib.contextmanager
    def transaction(self, session_id: str) -> Iterator[Tx]:
        """One unit of work on the session (see the module docstring)."""
        with self.backend.transaction(session_id) as tx:
            yield tx

    lock = transaction

    def reader(self, session_id: str) -> Reader:
        """The open transaction on the session (its own writes seen), else the backend,
        once any commit a killed writer left half applied is finished: no read sees one."""
        tx = self.backend.in_transaction(session_id)
        if tx is not None:
            return tx
        self.settle(session_id)
        return self.backend

    def current_tx(self, session_id: str) -> Tx:
        tx = self.backend.in_transaction(session_id)
        if tx is None:  # pragma: no cover - every writer opens one first
            raise StoreError(f"no transaction open on session {session_id!r}")
        return tx

    def flush(self) -> None:
        """Make durable what was committed without sync (`sync="end"`)."""
        flush = getattr(self.backend, "flush", None)
        if flush is not None:
            flush()

    @contextlib.contextmanager
    def synced_at_end(self) -> Iterator[None]:
        """Group the commits made in this block: each is atomic as always, but made
        durable only when the block ends (one sync instead of one a commit). A power
        failure meanwhile may lose what the block committed, never mix it."""
        files = self.files
        if files is None:
            yield
            return
        durable = files.durable
        files.durable = False
        try:
            yield
        finally:
            files.durable = durable
            self.flush()

    @contextlib.contextmanager
    def undoable(self, session_id: str, command: str | None) -> Iterator[None]:
        """Make the edit done in this block undoable: the first change this store makes to
        the session in it is preceded, in the same transaction, by a checkpoint labelled
        "before COMMAND" that `ckpt rollback` restores (no checkpoint when `command` is
        None). An edit refused before it writes (a bad index, a readonly slot) leaves no
        checkpoint; no lock is held meanwhile (a merge may wait for a model)."""
        if command is not None:
            self._pending_edits[session_id] = command
        try:
            yield
        finally:
            self._pending_edits.pop(session_id, None)

    def _before_change(self, session_id: str) -> None:
        """Called, in the transaction, by every method that changes a session's documents."""
        command = self._pending_edits.pop(session_id, None)
        if command is not None:
            from agctl.checkpoints import Checkpointer

            label = f"before {command}"
            Checkpointer(self).create(session_id, label=label, auto=True, edit=command)

    def pending_recovery(self, session_id: str) -> bool:
        return self.backend.pending(session_id)

    def settle(self, session_id: str) -> None:
        """Finish an interrupted commit before reading, so nothing is read from a half
        applied one (takes the lock only when one is pending; a session that does not
        exist has none)."""
        if not self.backend.pending(session_id):
            return
        try:
            with contextlib.suppress(NotFound), self.transaction(session_id):
                pass
        except (StoreError, DataError) as exc:  # a full disk, a planted journal: read on
            log.warning(
                "an interrupted commit of %s could not be finished (%s): what is read now "
                "may hold only part of it; the next command that can write finishes it",
                session_id,
                exc,
            )

    # ---- sessions ------------------------------------------------------------------

    def session_ids(self) -> list[str]:
        return self.backend.session_ids()

    def resolve_session(self, prefix: str) -> str:
        """Resolve a session id or a unique prefix of one."""
        return resolve_prefix("session", prefix, self.session_ids())

    def load_session(self, session_id: str) -> Session:
        return self.reader(session_id).load_session(session_id)

    def list_sessions(self, problems: list[AgctlError] | None = None) -> list[SessionInfo]:
        """Every session, oldest first, with its children and whether its parent is gone.

        A session that cannot be read raises, unless `problems` is given: then its error is
        appended there and the listing goes on without it.
        """
        infos: list[SessionInfo] = []
        for sid in self.session_ids():
            try:
                infos.append(SessionInfo(self.load_session(sid)))
            except (DataError, StoreError) as exc:
                if problems is None:
                    raise
                problems.append(exc)
        by_id = {info.session.id: info for info in infos}
        looped = _in_cycles({sid: info.session.parent_id for sid, info in by_id.items()})
        for info in infos:
            parent = info.session.parent_id
            if parent is None:
                continue
            if info.session.id in looped:
                info.looped = True
            elif parent in by_id:
                by_id[parent].children.append(info.session.id)
            else:
                info.orphan = True
        infos.sort(key=lambda i: (i.session.created_at, i.session.id))
        return infos

    def children(self, session_id: str) -> list[str]:
        """Ids of the sessions whose parent is `session_id` (unreadable sessions skipped)."""
        return sorted(
            info.session.id
            for info in self.list_sessions(problems=[])
            if info.session.parent_id == session_id
        )

    def create_session(
        self,
        session_id: str | None = None,
        *,
        system_prompt: str | None = None,
        parent_id: str | None = None,
        title: str | None = None,
        profile: str | None = None,
        model: str | None = None,
    ) -> Session:
        """Create a session with its `default` slot, all or nothing."""
        session = self._new_session(session_id, system_prompt, parent_id, title, profile, model)
        self.materialize_session(session, [self._new_slot(DEFAULT_SLOT)])
        log.info("session created: %s (parent %s)", session.id, session.parent_id or "-")
        return session

    def _new_session(
        self,
        session_id: str | None,
        system_prompt: str | None,
        parent_id: str | None,
        title: str | None,
        profile: str | None,
        model: str | None,
    ) -> Session:
        sid = new_session_id() if session_id is None else validate_id(session_id, "session")
        if parent_id is not None:
            parent_id = self.resolve_session(parent_id)
        return Session(
            id=sid,
            parent_id=parent_id,
            title=title,
            system_prompt=system_prompt,
            profile=profile,
            model=model,
        )

    def replace_session(
        self,
        session_id: str,
        *,
        recursive: bool = False,
        orphan: bool = False,
        system_prompt: str | None = None,
        parent_id: str | None = None,
        title: str | None = None,
        profile: str | None = None,
        model: str | None = None,
    ) -> Replaced:
        """A new session `session_id`, in place of the one of that id if there is one.

        The new session is built aside and swapped in whole, so a failure leaves the old
        session as it was and a crash one or the other. A session with children is
        refused unless `recursive` (its descendants are destroyed) or `orphan` (its
        children are kept, detached: their parent would be a different session now).
        """
        session = self._new_session(session_id, system_prompt, parent_id, title, profile, model)
        sid = session.id
        if sid not in self.session_ids():
            self.materialize_session(session, [self._new_slot(DEFAULT_SLOT)])
            log.info("session created: %s (parent %s)", sid, session.parent_id or "-")
            return Replaced(session, replaced=False)
        children = self.children(sid)
        if children and not (recursive or orphan):
            raise HasChildren(sid, children)
        self.check_parent(sid, session.parent_id)
        self.backend.replace_session(session, [self._new_slot(DEFAULT_SLOT)])
        log.info("session replaced: %s (parent %s)", sid, session.parent_id or "-")
        result = Replaced(session, replaced=True)
        for child in children:
            if recursive:
                result.destroyed += self.destroy_session(child, recursive=True).destroyed
            else:
                self.update_session(child, lambda s: setattr(s, "parent_id", None))
                result.detached.append(child)
        return result

    def materialize_session(
        self,
        session: Session,
        slots: Sequence[Slot],
        *,
        checkpoint_log: bytes = b"",
        removed: Sequence[str] = (),
        check: Callable[[Path], None] | None = None,
    ) -> None:
        """Write a new session with these slots (and checkpoint history), all or nothing;
        `check` looks at the staged session (file backend) before it is placed."""
        if isinstance(self.backend, FileBackend):
            self.backend.create_session(
                session, slots, checkpoint_log=checkpoint_log, removed=removed, check=check
            )
        else:
            self.backend.create_session(
                session, slots, checkpoint_log=checkpoint_log, removed=removed
            )

    def replace_state(self, session: Session, slots: Sequence[Slot]) -> None:
        """Make the session exactly `session` with exactly `slots`, in one transaction.
        Documents are written as given — no timestamps are touched."""
        with self.transaction(session.id) as tx:
            keep = {slot.id for slot in slots}
            self._before_change(session.id)
            for slot in slots:
                tx.put_slot(slot)
            for slot_id in tx.slot_ids(session.id):
                if slot_id not in keep:
                    tx.delete_slot(slot_id)
            tx.put_session(session)

    def update_session(self, session_id: str, change: Callable[[Session], T]) -> T:
        """Apply `change` to the session document in a transaction and write it back."""
        with self.transaction(session_id) as tx:
            session = tx.load_session(session_id)
            result = change(session)
            session.updated_at = utcnow()
            self._before_change(session_id)
            tx.put_session(session)
            return result

    def check_parent(self, session_id: str, parent_id: str | None) -> None:
        """Refuse a parent link that would make a loop: `parent_id` or one of its
        ancestors is `session_id` itself (exit 5)."""
        seen = {session_id}
        node = parent_id
        while node is not None:
            if node in seen:
                raise InvalidInput(
                    f"session {session_id!r} cannot have parent {parent_id!r}: "
                    f"the parent chain would loop through {node!r}"
                )
            seen.add(node)
            try:
                node = self.load_session(node).parent_id
            except (NotFound, DataError):  # an ancestor gone or unreadable ends the chain
                return

    def parent(self, session_id: str) -> str | None:
        """The parent's id, or None when there is none or it was destroyed (an orphan)."""
        parent_id = self.load_session(session_id).parent_id
        if parent_id is None or parent_id not in self.session_ids():
            return None
        return parent_id

    def destroy_session(
        self, session_id: str, *, recursive: bool = False, orphan: bool = False
    ) -> Destroyed:
        """Remove a session, and with `recursive` its descendants.

        A session with children is refused unless `recursive` (remove them too) or `orphan`
        (leave them, their parent gone).
        """
        if session_id not in self.session_ids():
            raise NotFound(f"session {session_id!r} not found")
        kids: dict[str, list[str]] = {}
        for info in self.list_sessions(problems=[]):
            parent = info.session.parent_id
            if parent is not None and not info.looped:  # a parent that may be unreadable
                kids.setdefault(parent, []).append(info.session.id)
        children = kids.get(session_id, [])
        if children and not (recursive or orphan):
            raise HasChildren(session_id, children)
        doomed: list[str] = []
        queue = [session_id]
        while queue:
            sid = queue.pop(0)
            if sid in doomed:  # a parent chain that loops (imported before it was refused)
                continue
            doomed.append(sid)
            if recursive:
                queue.extend(kids.get(sid, []))
        for sid in reversed(doomed):
            self.backend.destroy_session(sid)
            log.info("session destroyed: %s", sid)
        if self.current_session_id() in doomed:
            self.set_current_session(None)
        return Destroyed(destroyed=doomed, orphaned=[] if recursive else children)

    # ---- the current-session pointer --------------------------------------------------

    def current_session_id(self) -> str | None:
        return self.backend.current_session_id()

    def set_current_session(self, session_id: str | None) -> None:
        self.backend.set_current_session(session_id)

    # ---- slots ---------------------------------------------------------------------

    @staticmethod
    def _new_slot(
        slot_id: str,
        config: SlotConfig | None = None,
        immutable: Sequence[Message] = (),
        parent_id: str | None = None,
    ) -> Slot:
        slot = Slot(
            id=slot_id,
            config=config or SlotConfig(),
            meta=SlotMeta(parent_id=parent_id),
            immutable=list(immutable),
        )
        slot.refresh_meta()
        return slot

    def slot_ids(self, session_id: str) -> list[str]:
        return self.reader(session_id).slot_ids(session_id)

    def resolve_slot(self, session_id: str, slot_id: str | None) -> str:
        """The given slot id, or the session's current slot when None."""
        if slot_id is None:
            return self.load_session(session_id).current_slot
        return validate_id(slot_id, "slot")

    def load_slot(
        self, session_id: str, slot_id: str | None = None, *, reuse: Slot | None = None
    ) -> Slot:
        """The slot, parsed; `reuse` (an unmodified copy read or written earlier) is returned
        instead when the stored slot is still at its revision."""
        slot_id = self.resolve_slot(session_id, slot_id)
        return self.reader(session_id).load_slot(session_id, slot_id, reuse=reuse)

    def slot_bytes(self, session_id: str, slot_id: str) -> bytes | None:
        """A slot document as stored, unparsed, for readers that scan many (search); None
        when the slot is not one plain document (read it with load_slot then)."""
        if self.files is None:
            return None
        parts = self.files.slot_bytes(session_id, slot_id)
        return parts[0] if len(parts) == 1 else None

    def list_slots(self, session_id: str) -> list[Slot]:
        return [self.load_slot(session_id, s) for s in self.slot_ids(session_id)]

    def _insert_slot(self, session_id: str, slot: Slot, make_current: bool) -> Slot:
        tx = self.current_tx(session_id)
        if slot.id in tx.slot_ids(session_id):
            raise AlreadyExists(f"slot {slot.id!r} already exists in session {session_id!r}")
        self._before_change(session_id)
        tx.put_slot(slot)
        if make_current:
            self.use_slot(session_id, slot.id)
        return slot

    def create_slot(
        self,
        session_id: str,
        slot_id: str,
        *,
        mode: str = "full",
        focus: Mapping[str, Any] | None = None,
        immutable: Sequence[Message] = (),
        make_current: bool = False,
    ) -> Slot:
        """Create a slot; with `immutable` messages it is a static slot.

        `focus` sets the focused-mode settings (keep_system, recent_messages,
        summary_override) over the defaults.
        """
        validate_id(slot_id, "slot")
        _check_mode(mode)
        config = SlotConfig.model_validate(
            {
                "mode": mode,
                "focused": _focus(FocusedConfig(), focus),
                "source": SlotSource(kind="static" if immutable else "new"),
            }
        )
        with self.transaction(session_id):
            slot = self._new_slot(slot_id, config, immutable)
            return self._insert_slot(session_id, slot, make_current)

    def derive_slot(
        self,
        session_id: str,
        slot_id: str,
        *,
        source: str | None = None,
        strategy: DeriveStrategy = "full",
        focus: Mapping[str, Any] | None = None,
        make_current: bool = False,
    ) -> Slot:
        """A new slot from `source` (default: current): a full copy, or its focused view.

        `focus` changes the parent's focused-mode settings for the new slot.
        """
        validate_id(slot_id, "slot")
        if strategy not in DERIVE_STRATEGIES:
            choices = ", ".join(DERIVE_STRATEGIES)
            raise UsageError(f"unknown derive strategy {strategy!r}; choose from {choices}")
        with self.transaction(session_id):
            parent = self.load_slot(session_id, source)
            focused = _focus(parent.config.focused, focus)
            if strategy == "full":
                messages = list(parent.messages)
                mode = "focused" if parent.config.mode == "focused" else "full"
            else:
                messages = focused_messages(parent.messages, focused, with_summary=False)
                mode = "focused"
            config = parent.config.model_copy(
                update={
                    "mode": mode,
                    "focused": focused,
                    "source": SlotSource(kind="derived", parent_id=parent.id, strategy=strategy),
                }
            )
            slot = self._new_slot(slot_id, config, parent.immutable, parent_id=parent.id)
            slot.compressed = list(parent.compressed)
            slot.messages = messages
            slot.meta.branch = message_hashes(messages)
            slot.refresh_meta()
            self._insert_slot(session_id, slot, make_current)
        log.info("slot derived: %s/%s from %s (%s)", session_id, slot_id, parent.id, strategy)
        return slot

    def use_slot(self, session_id: str, slot_id: str) -> Session:
        """Make `slot_id` the session's current slot."""
        with self.transaction(session_id):
            self.load_slot(session_id, slot_id)

            def switch(session: Session) -> Session:
                session.current_slot = slot_id
                return session

            return self.update_session(session_id, switch)

    def update_slot(
        self,
        session_id: str,
        slot_id: str | None,
        change: Callable[[Slot], T],
        *,
        base: Slot | None = None,
    ) -> T:
        """Apply `change` to a slot in a transaction and write it back whole.

        If `change` raises (a readonly slot, a bad index), nothing is written. `base` is an
        unmodified copy of the slot read earlier: when the stored slot is still at its
        revision, it is used instead of reading and parsing it again.
        """
        with self.transaction(session_id) as tx:
            slot_id = slot_id or (base.id if base else None)
            slot = self.load_slot(session_id, slot_id, reuse=base)
            result = change(slot)
            slot.refresh_meta()
            self._before_change(session_id)
            tx.put_slot(slot)
            return result

    def append_messages(self, session_id: str, slot: Slot, messages: Sequence[Message]) -> None:
        """Append `messages` to `slot` (as loaded in the caller's transaction) without
        writing its earlier messages again."""
        tx = self.current_tx(session_id)
        slot.check_writable("append")
        slot.messages.extend(messages)
        slot.refresh_meta()
        self._before_change(session_id)
        tx.append_messages(slot, len(messages))

    def set_mode(
        self,
        session_id: str,
        slot_id: str | None,
        mode: str,
        *,
        focus: Mapping[str, Any] | None = None,
    ) -> Slot:
        """Change a slot's mode (and focused settings); messages are never touched."""
        _check_mode(mode)

        def change(slot: Slot) -> Slot:
            slot.config.focused = _focus(slot.config.focused, focus)
            slot.config.mode = mode  # type: ignore[assignment]
            return slot

        return self.update_slot(session_id, slot_id, change)

    def delete_slot(self, session_id: str, slot_id: str) -> Session:
        """Delete a slot (never `default`, never the last); a deleted current slot falls back."""
        validate_id(slot_id, "slot")
        if slot_id == DEFAULT_SLOT:
            raise ProtectedSlot(f"slot {DEFAULT_SLOT!r} cannot be deleted")
        with self.transaction(session_id) as tx:
            slots = tx.slot_ids(session_id)
            if slot_id not in slots:
                raise NotFound(f"slot {slot_id!r} not found in session {session_id!r}")
            if len(slots) == 1:
                raise ProtectedSlot(f"slot {slot_id!r} is the last slot of {session_id!r}")
            session = tx.load_session(session_id)
            falls_back = session.current_slot == slot_id
            if falls_back and DEFAULT_SLOT not in slots:
                raise Conflict(f"slot {slot_id!r} is current and there is no default slot")
            self._before_change(session_id)
            if falls_back:

                def fall_back(s: Session) -> Session:
                    s.current_slot = DEFAULT_SLOT
                    return s

                session = self.update_session(session_id, fall_back)
            tx.delete_slot(slot_id)
        log.info("slot deleted: %s/%s", session_id, slot_id)
        return session

    # ---- memory --------------------------------------------------------------------

    def memory_set(self, session_id: str, key: str, value: str) -> None:
        self.update_session(session_id, lambda s: s.memory.__setitem__(key, value))

    def memory_get(self, session_id: str, key: str) -> str:
        memory = self.load_session(session_id).memory
        if key not in memory:
            raise NotFound(f"memory key {key!r} not set in session {session_id!r}")
        return memory[key]

    def memory_remove(self, session_id: str, key: str) -> str:
        def remove(session: Session) -> str:
            if key not in session.memory:
                raise NotFound(f"memory key {key!r} not set in session {session_id!r}")
            return session.memory.pop(key)

        return self.update_session(session_id, remove)

    # ---- drafts --------------------------------------------------------------------
    # One per slot, so a failed turn on one slot never replaces another slot's draft.

    def _adopt_legacy_draft(self, session_id: str) -> CorruptDocument | None:
        """The file backend's draft.json of older agctl, adopted (see FileBackend)."""
        if self.files is None:
            return None
        return self.files.adopt_legacy_draft(session_id)

    def draft_slots(self, session_id: str) -> list[str]:
        """The slots that have a draft (a slot removed since included), sorted. Raises
        CorruptDocument for a damaged legacy draft.json, whose slot cannot be known."""
        damage = self._adopt_legacy_draft(session_id)
        if damage is not None:
            raise damage
        return self.reader(session_id).draft_slots(session_id)

    def save_draft(self, session_id: str, draft: Draft) -> None:
        """Keep a prompt whose turn failed, as its slot's draft, so it can be sent again."""
        self._adopt_legacy_draft(session_id)
        with self.transaction(session_id) as tx:
            tx.put_draft(draft)

    def load_draft(self, session_id: str, slot_id: str) -> Draft:
        self._adopt_legacy_draft(session_id)
        return self.reader(session_id).load_draft(session_id, slot_id)

    def clear_draft(self, session_id: str, slot_id: str, *, before: datetime | None = None) -> bool:
        """Drop the slot's draft (a damaged one too); with `before`, only one kept before
        that moment (a turn on the slot that started then supersedes it, and a damaged
        draft is left for 'agctl draft show' to report). Returns whether one was dropped.

        Read, compared and removed in one transaction, so a draft another process keeps
        meanwhile is never removed unseen."""
        self._adopt_legacy_draft(session_id)
        with self.transaction(session_id) as tx:
            validate_id(slot_id, "slot")
            if slot_id not in tx.draft_slots(session_id):
                return False
            if before is not None:
                try:
                    draft = tx.load_draft(session_id, slot_id)
                except (NotFound, CorruptDocument):
                    return False
                if draft.created_at >= before:
                    return False
            tx.delete_draft(slot_id)
        if before is not None:
            log.info("draft of slot %s dropped: a later turn on it superseded it", slot_id)
        return True

    def clear_legacy_draft(self, session_id: str) -> None:
        """Remove a damaged legacy draft.json (a readable one is adopted, never removed)."""
        if self.files is not None:
            self.files.remove_legacy_draft(session_id)

    # ---- settings ------------------------------------------------------------------

    def configure_session(self, session_id: str, changes: Mapping[str, Any]) -> Session:
        """Change session settings (validated): title, system_prompt, profile, model,
        memory_in_context, auto_compress."""
        unknown = set(changes).difference(SESSION_SETTINGS)
        if unknown:
            raise UsageError(
                f"unknown session setting {sorted(unknown)[0]!r}; "
                f"choose from {', '.join(sorted(SESSION_SETTINGS))}"
            )

        def apply(session: Session) -> Session:
            data = session.model_dump()
            data.update(changes)
            try:
                updated = Session.model_validate(data)
            except ValidationError as exc:
                raise UsageError(f"invalid session setting: {validation_summary(exc)}") from None
            for key in changes:
                setattr(session, key, getattr(updated, key))
            return session

        return self.update_session(session_id, apply)

    def configure_slot(
        self, session_id: str, slot_id: str | None, changes: Mapping[str, Any]
    ) -> Slot:
        """Change slot settings (validated): auto_compress, budget (None: auto)."""
        unknown = set(changes).difference(SLOT_SETTINGS)
        if unknown:
            raise UsageError(
                f"unknown slot setting {sorted(unknown)[0]!r}; "
                f"choose from {', '.join(sorted(SLOT_SETTINGS))}"
            )

        def apply(slot: Slot) -> Slot:
            data = slot.config.model_dump()
            data.update(changes)
            try:
                slot.config = SlotConfig.model_validate(data)
            except ValidationError as exc:
                raise UsageError(f"invalid slot setting: {validation_summary(exc)}") from None
            return slot

        return self.update_slot(session_id, slot_id, apply)
