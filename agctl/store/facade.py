"""The Store: what users import (`from agctl import Store`) — one storage backend (the file
backend by default, the memory backend for tests and scripts), its transactions and reads,
and one method for each rule of the session, slot and draft rules below it
(agctl.store.sessions, .slots, .drafts), which decide: the Store opens what a rule works
on and makes one call down.

Every change to a session runs in one unit of work (`Store.work`, agctl.store.work): one
transaction of the backend, the session's exclusive lock held, everything written in it
visible together or not at all, handed down to the rules, which never call back up.
Transactions nest; the outermost commits. Readers take no lock.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from agctl.base.errors import AgctlError, StoreError
from agctl.base.fsio import read_bytes, write_atomic
from agctl.storage.base import lock_timeout
from agctl.storage.factory import StoreChoice, choose_store, file_choice, open_backend
from agctl.storage.file import layout
from agctl.storage.file.backend import FileBackend
from agctl.store import drafts, slots
from agctl.store.work import Work, reader, settle, snapshot, work_on

if TYPE_CHECKING:
    from agctl.base.vocab import DeriveStrategy, SlotMode
    from agctl.context.models import Draft, Message, Session, Slot
    from agctl.storage.base import Backend, Reader, Tx
    from agctl.store.sessions import Destroyed, Removal, Replaced, SessionInfo

log = logging.getLogger("agctl.store")


# Data dirs already warned about in this process; the note that says so across processes.
WARNED_NOTE = ".loose-modes-warned"
_warned_loose: set[str] = set()
T = TypeVar("T")


class Store:
    """Sessions, slots, messages and memory, kept by one backend.

    `Store(root)` keeps them as files under `root`; `Store(url=URL)` in the store URL
    names (a directory, file://, postgresql://: agctl.storage.urls), with `root` as the
    machine-local data dir; `Store()` in the store the user chose (AGCTL_STORE, the
    config's store.url, else the data dir: agctl.storage.factory), as the command line
    does; `Store(backend=MemoryBackend())` keeps them in memory. `sync="end"` (file
    backend) commits without an fsync each time, until `flush()`; `patient=False`
    tries a shared store's server once rather than waiting it out (TAB completion).
    """

    def __init__(
        self,
        root: Path | str | None = None,
        *,
        url: str | None = None,
        schema: str | None = None,
        choice: StoreChoice | None = None,
        backend: Backend | None = None,
        sync: str = "per-turn",
        patient: bool = True,
    ) -> None:
        if backend is None:
            if choice is None and url is None and root is not None:
                choice = file_choice(Path(root))
            elif choice is None:
                local = Path(root) if root is not None else None
                choice = choose_store(url, origin="store URL", data_dir=local, schema=schema)
            log.debug("store: %s (%s)", choice.spec.shown, choice.origin)
            backend = open_backend(choice, sync=sync, patient=patient)
        self.backend: Backend = backend
        self.choice = choice
        self.files: FileBackend | None = backend if isinstance(backend, FileBackend) else None
        self.root: Path | None = self.files.root if self.files is not None else None
        # This machine's data dir: the file store's root, or what a shared store keeps
        # locally (the current-session pointer); tools never run in it. None in memory.
        self.local_dir: Path | None = choice.local_dir if choice is not None else self.root
        # Session id -> the command whose first change is to be checkpointed (undoable).
        self._pending_edits: dict[str, str] = {}
        if os.environ.get("AGCTL_LOCK_TIMEOUT"):
            lock_timeout()  # a bad value is an error now, not only when a lock is busy
        if self.files is not None:
            self._warn_if_loose(self.files.root)

    @property
    def shown(self) -> str:
        """The store as messages and JSON name it: its directory, or its URL without a
        password."""
        if self.choice is not None:
            return self.choice.spec.shown
        return str(self.root) if self.root is not None else "memory"

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

    # ---- transactions ----------------------------------------------------------------

    @contextlib.contextmanager
    def transaction(self, session_id: str) -> Iterator[Tx]:
        """One unit of work on the session (see the module docstring)."""
        with self.backend.transaction(session_id) as tx:
            yield tx

    lock = transaction

    @contextlib.contextmanager
    def work(self, session_id: str) -> Iterator[Work]:
        """A unit of work on the session (agctl.store.work), to hand down to the rules: its
        transaction, and before its first change the undo checkpoint of the command
        `undoable` names, if one is pending."""
        with work_on(self.backend, session_id, self._undo_checkpoint) as work:
            yield work

    def _undo_checkpoint(self, work: Work) -> None:
        command = self._pending_edits.pop(work.session_id, None)
        if command is not None:
            from agctl.store.checkpoints.planner import create

            create(work, label=f"before {command}", auto=True, edit=command)

    def reader(self, session_id: str) -> Reader:
        """The open transaction on the session (its own writes seen), else the backend,
        once any commit a killed writer left half applied is finished: no read sees one."""
        return reader(self.backend, session_id)

    def close(self) -> None:
        """Release what the backend holds open (a PostgreSQL store's connections); the
        store opens them again if used after."""
        close = getattr(self.backend, "close", None)
        if close is not None:
            close()

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

    def pending_recovery(self, session_id: str) -> bool:
        return self.backend.pending(session_id)

    def settle(self, session_id: str) -> None:
        """Finish an interrupted commit before reading (agctl.store.work.settle)."""
        settle(self.backend, session_id)

    # ---- reads and whole-session writes ---------------------------------------------

    def session_ids(self) -> list[str]:
        return self.backend.session_ids()

    def current_session_id(self) -> str | None:
        """The session commands use when none is named, if one is selected."""
        return self.backend.current_session_id()

    def set_current_session(self, session_id: str | None) -> None:
        """Select the session commands use when none is named (None: no session)."""
        self.backend.set_current_session(session_id)

    def resolve_session(self, prefix: str) -> str:
        """Resolve a session id or a unique prefix of one. A whole id is looked up on its
        own, never by listing every session (a shared store may hold thousands)."""
        from agctl.store import sessions

        return sessions.resolve_session(self.backend, prefix)

    def load_session(self, session_id: str) -> Session:
        return snapshot(self.backend, session_id).load_session(session_id)

    def slot_ids(self, session_id: str) -> list[str]:
        return self.reader(session_id).slot_ids(session_id)

    def load_slot(
        self, session_id: str, slot_id: str | None = None, *, reuse: Slot | None = None
    ) -> Slot:
        """The slot, parsed; `reuse` (an unmodified copy read or written earlier) is returned
        instead when the stored slot is still at its revision."""
        slot_id = self.resolve_slot(session_id, slot_id)  # (settled below, once)
        return self.reader(session_id).load_slot(session_id, slot_id, reuse=reuse)

    def slot_document(self, session_id: str, slot_id: str) -> dict[str, Any] | None:
        """A slot as stored, parsed but not validated, for readers that scan many (search);
        None when only a validated read can tell what it holds (read it with load_slot)."""
        if self.files is None:
            return None
        self.settle(session_id)
        return self.files.slot_document(session_id, slot_id)

    def materialize_session(
        self,
        session: Session,
        slots: Sequence[Slot],
        *,
        checkpoint_log: bytes = b"",
        removed: Sequence[str] = (),
        drawn_id: bool = False,
    ) -> Session:
        """Write a new session with these slots (and checkpoint history), all or nothing;
        the session written. `drawn_id`: its id was drawn (new_session_id), not given, so
        one that another process drew in the same second is drawn again, not refused."""
        from agctl.store import sessions

        return sessions.materialize(
            self.backend, session, slots, drawn_id, checkpoint_log=checkpoint_log, removed=removed
        )

    def replace_state(self, session: Session, slots: Sequence[Slot]) -> None:
        """Make the session exactly `session` with exactly `slots`, in one transaction.
        Documents are written as given — no timestamps are touched."""
        from agctl.store import sessions

        with self.work(session.id) as work:
            sessions.replace_state(work, session, slots)

    # ---- sessions (agctl.store.sessions) ----------------------------------------------------

    def list_sessions(self, problems: list[AgctlError] | None = None) -> list[SessionInfo]:
        """Every session, oldest first, with its children and whether its parent is gone."""
        from agctl.store import sessions

        return sessions.list_sessions(self.backend, problems)

    def children(self, session_id: str) -> list[str]:
        """Ids of the sessions whose parent is `session_id` (unreadable sessions skipped)."""
        from agctl.store import sessions

        return sessions.children(self.backend, session_id)

    def create_session(
        self,
        session_id: str | None = None,
        *,
        system_prompt: str | None = None,
        parent_id: str | None = None,
        title: str | None = None,
        profile: str | None = None,
        model: str | None = None,
        slot_mode: SlotMode | None = None,
    ) -> Session:
        """Create a session with its `default` slot (in `slot_mode` if given), all or
        nothing."""
        from agctl.store import sessions

        with self._chats_forgotten(*([session_id] if session_id else [])):  # left over
            return sessions.create_session(
                self.backend,
                session_id,
                system_prompt=system_prompt,
                parent_id=parent_id,
                title=title,
                profile=profile,
                model=model,
                slot_mode=slot_mode,
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
        slot_mode: SlotMode | None = None,
    ) -> Replaced:
        """A new session `session_id`, in place of the one of that id if there is one."""
        from agctl.store import sessions

        with self._chats_forgotten(session_id):
            return sessions.replace_session(
                self.backend,
                session_id,
                recursive=recursive,
                orphan=orphan,
                system_prompt=system_prompt,
                parent_id=parent_id,
                title=title,
                profile=profile,
                model=model,
                slot_mode=slot_mode,
            )

    def update_session(self, session_id: str, change: Callable[[Session], T]) -> T:
        """Apply `change` to the session document in a transaction and write it back."""
        with self.work(session_id) as work:
            return slots.update_session(work, change)

    def check_parent(self, session_id: str, parent_id: str | None) -> None:
        """Refuse a parent link that would make a loop: `parent_id` or one of its
        ancestors is `session_id` itself (exit 5)."""
        from agctl.store import sessions

        sessions.check_parent(self.backend, session_id, parent_id)

    def parent(self, session_id: str) -> str | None:
        """The parent's id, or None when there is none or it was destroyed (an orphan)."""
        from agctl.store import sessions

        return sessions.parent(snapshot(self.backend, session_id), session_id)

    def destroy_session(
        self, session_id: str, *, recursive: bool = False, orphan: bool = False
    ) -> Destroyed:
        """Remove a session, and with `recursive` its descendants."""
        from agctl.store import sessions

        with self._chats_forgotten():
            return sessions.destroy_session(
                self.backend, session_id, recursive=recursive, orphan=orphan
            )

    def remove_sessions(
        self, prefixes: Sequence[str], *, recursive: bool = False, orphan: bool = False
    ) -> Removal:
        """Destroy the sessions `prefixes` name (agctl.store.sessions.remove_sessions)."""
        from agctl.store import sessions

        with self._chats_forgotten():
            return sessions.remove_sessions(
                self.backend, prefixes, recursive=recursive, orphan=orphan
            )

    @contextlib.contextmanager
    def _chats_forgotten(self, *session_ids: str) -> Iterator[None]:
        """The chat histories of the sessions the block destroys (those destroyed before
        it failed too) and, once it succeeded, of `session_ids` (replaced or new)."""
        before = set(self.session_ids()) if self.local_dir is not None else set()
        try:
            yield
            self.forget_chats(session_ids)
        finally:
            if before:
                self.forget_chats(sorted(before - set(self.session_ids())))

    def forget_chats(self, session_ids: Sequence[str]) -> None:
        """Remove the chat histories of sessions destroyed or replaced: a new session of
        the same id must not recall what was typed on the old one (a password)."""
        if self.local_dir is None:
            return
        for session_id in session_ids:
            path = layout.chat_history(self.local_dir, session_id)
            try:
                path.unlink(missing_ok=True)
            except OSError as exc:
                log.warning("could not remove the chat history %s: %s", path, exc.strerror)

    def memory_set(self, session_id: str, key: str, value: str) -> None:
        """Set a memory key of the session."""
        from agctl.store import sessions

        with self.work(session_id) as work:
            sessions.memory_set(work, key, value)

    def memory_get(self, session_id: str, key: str) -> str:
        """A memory key's value (NotFound when it is not set)."""
        from agctl.store import sessions

        return sessions.memory_get(snapshot(self.backend, session_id), session_id, key)

    def memory_remove(self, session_id: str, key: str) -> str:
        """Remove a memory key and return its value (NotFound when it is not set)."""
        from agctl.store import sessions

        with self.work(session_id) as work:
            return sessions.memory_remove(work, key)

    def configure_session(self, session_id: str, changes: Mapping[str, Any]) -> Session:
        """Change session settings (validated): title, system_prompt, profile, model,
        memory_in_context, auto_compress."""
        from agctl.store import sessions

        with self.work(session_id) as work:
            return sessions.configure_session(work, changes)

    def set_session_setting(self, session_id: str, key: str, text: str) -> Session:
        """Change one session setting from its text on a command line (see
        agctl.config.settings.session_setting_from_text)."""
        from agctl.store import sessions

        with self.work(session_id) as work:
            return sessions.set_session_setting(work, key, text)

    # ---- slots (agctl.store.slots) ----------------------------------------------------------

    def resolve_slot(self, session_id: str, slot_id: str | None) -> str:
        """The given slot id, or the session's current slot when None."""
        return slots.resolve_slot(snapshot(self.backend, session_id), session_id, slot_id)

    def list_slots(self, session_id: str) -> list[Slot]:
        """Every slot of the session, parsed, in id order."""
        return slots.list_slots(self.reader(session_id), session_id)

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
        """Create a slot; with `immutable` messages it is a static slot."""
        with self.work(session_id) as work:
            return slots.create_slot(
                work,
                slot_id,
                mode=mode,
                focus=focus,
                immutable=immutable,
                make_current=make_current,
            )

    def derive_slot(
        self,
        session_id: str,
        slot_id: str,
        *,
        source: str | None = None,
        strategy: DeriveStrategy = "full",
        focus: Mapping[str, Any] | None = None,
        make_current: bool = False,
        upto: int | None = None,
    ) -> Slot:
        """A new slot from `source` (default: current): a full copy (of its first `upto`
        messages only, when given), or its focused view."""
        with self.work(session_id) as work:
            return slots.derive_slot(
                work,
                slot_id,
                source=source,
                strategy=strategy,
                focus=focus,
                make_current=make_current,
                upto=upto,
            )

    def use_slot(self, session_id: str, slot_id: str) -> Session:
        """Make `slot_id` the session's current slot."""
        with self.work(session_id) as work:
            return slots.use_slot(work, slot_id)

    def update_slot(
        self,
        session_id: str,
        slot_id: str | None,
        change: Callable[[Slot], T],
        *,
        base: Slot | None = None,
    ) -> T:
        """Apply `change` to a slot in a transaction and write it back whole."""
        with self.work(session_id) as work:
            return slots.update_slot(work, slot_id, change, base=base)

    def append_messages(self, session_id: str, slot: Slot, messages: Sequence[Message]) -> None:
        """Append `messages` to `slot` (as loaded in the caller's transaction) without
        writing its earlier messages again."""
        with self.work(session_id) as work:
            slots.append_messages(work, slot, messages)

    def set_mode(
        self,
        session_id: str,
        slot_id: str | None,
        mode: str,
        *,
        focus: Mapping[str, Any] | None = None,
    ) -> Slot:
        """Change a slot's mode (and focused settings); messages are never touched."""
        with self.work(session_id) as work:
            return slots.set_mode(work, slot_id, mode, focus=focus)

    def delete_slot(self, session_id: str, slot_id: str) -> Session:
        """Delete a slot (never `default`, never the last); a deleted current slot falls back."""
        with self.work(session_id) as work:
            return slots.delete_slot(work, slot_id)

    def configure_slot(
        self, session_id: str, slot_id: str | None, changes: Mapping[str, Any]
    ) -> Slot:
        """Change slot settings (validated): auto_compress, budget (None: auto)."""
        with self.work(session_id) as work:
            return slots.configure_slot(work, slot_id, changes)

    def set_budget(
        self,
        session_id: str,
        slot_id: str | None,
        changes: Mapping[str, Any] | None,
        *,
        window: int,
        model: str,
    ) -> Slot:
        """Change some parts of a slot's budget (None: back to auto), checked against the
        model's `window`."""
        from agctl.context.budget import set_budget

        with self.work(session_id) as work:
            return set_budget(work, slot_id, changes, window=window, model=model)

    # ---- drafts (agctl.store.drafts) --------------------------------------------------------

    def draft_slots(self, session_id: str) -> list[str]:
        """The slots that have a draft (a slot removed since included), sorted. Raises
        CorruptDocument for a damaged legacy draft.json, whose slot cannot be known."""
        return drafts.draft_slots(self.backend, session_id)

    def save_draft(self, session_id: str, draft: Draft) -> Path | None:
        """Keep a prompt whose turn failed, as its slot's draft, so it can be sent again: in
        the store, or on this machine when a shared store cannot take it (its server down):
        then where it is."""
        return drafts.save_draft(self.backend, session_id, draft)

    def load_draft(self, session_id: str, slot_id: str) -> Draft:
        """The slot's draft, as kept (NotFound when it has none): the newer of the store's
        and the one kept on this machine."""
        return drafts.load_draft(self.backend, session_id, slot_id)

    def clear_draft(
        self,
        session_id: str,
        slot_id: str,
        *,
        before: datetime | None = None,
        own: datetime | None = None,
    ) -> bool:
        """Drop the slot's draft (a damaged one too); with `before`, only one kept before
        that moment (a turn on the slot that started then supersedes it, and a damaged
        draft is left for 'agctl draft show' to report), or the one kept at `own` (the
        turn's own step log). Returns whether one was dropped. Without `before`, the one
        kept on this machine goes too (with it, the turn drops that once committed)."""
        by = drafts.Superseding(before, own) if before is not None else None
        return drafts.clear_draft(self.backend, session_id, slot_id, by)

    def clear_legacy_draft(self, session_id: str) -> None:
        """Remove a damaged legacy draft.json (a readable one is adopted, never removed)."""
        drafts.clear_legacy_draft(self.backend, session_id)
