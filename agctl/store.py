"""The embedded file store: sessions and their slots as plain JSON documents.

Layout (see DESIGN.md, "Storage"):

    <root>/current-session                the id chosen with `session use`
    <root>/sessions/<session-id>/session.json
    <root>/sessions/<session-id>/slots/<slot-id>.json
    <root>/sessions/<session-id>/.lock    flock target for every read-modify-write

Every write replaces a whole document atomically; every change to a session runs under
its lock, so parallel processes never lose an update. Readers take no lock.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import shutil
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

from pydantic import ValidationError

from agctl.errors import (
    AgctlError,
    AlreadyExists,
    Conflict,
    CorruptDocument,
    DataError,
    HasChildren,
    InvalidId,
    InvalidInput,
    NotFound,
    ProtectedSlot,
    SchemaTooNew,
    StoreError,
    UsageError,
)
from agctl.fsio import (
    DEFAULT_LOCK_TIMEOUT,
    TEMP_SUFFIX,
    check_dir,
    current_version,
    exchange_paths,
    exclusive_lock,
    fsync_dir,
    holds_lock,
    make_dirs,
    open_regular,
    read_bytes,
    read_versioned,
    remove_file,
    write_atomic,
)
from agctl.hashing import message_hashes
from agctl.ids import new_session_id, resolve_prefix, validate_id
from agctl.models import (
    Document,
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
from agctl.storage.file import layout
from agctl.validation import validation_summary
from agctl.view import focused_messages
from agctl.vocab import (
    DERIVE_STRATEGIES,
    SESSION_SETTINGS,
    SLOT_MODES,
    SLOT_SETTINGS,
    DeriveStrategy,
)

log = logging.getLogger("agctl.store")

DEFAULT_SLOT = "default"
# layout.RESTORE_JOURNAL is written before a rollback starts rewriting documents, removed
# when it is done; layout.TURN_JOURNAL while a turn commits (slot, then session). If one is
# found, the next writer finishes (or drops) what it describes first.
# A staging or trash dir older than this was left by a crash, not by a live process.
STALE_SECONDS = 600.0
# A temp file of an atomic write older than this was left by a killed writer.
STALE_TEMP_SECONDS = 300.0
# Data dirs already warned about in this process; the note that says so across processes.
WARNED_NOTE = ".loose-modes-warned"
_warned_loose: set[str] = set()
D = TypeVar("D", bound=Document)
T = TypeVar("T")


def default_data_dir() -> Path:
    """AGCTL_DATA_DIR, else the platform's user data dir for agctl."""
    env = os.environ.get("AGCTL_DATA_DIR")
    if env:
        return Path(env)
    import platformdirs

    return Path(platformdirs.user_data_dir("agctl"))


def _invalid_document(exc: ValidationError) -> str:
    return f"invalid document: {validation_summary(exc, 'document')}"


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


def stale_temp_files(session_dir: Path, owner: int, min_age: float) -> list[Path]:
    """Temp files of atomic writes under a session, older than `min_age` seconds and
    owned by `owner` (regular files only: a link is never followed or removed here)."""
    found: list[Path] = []
    for directory in (
        session_dir,
        *(session_dir / d for d in layout.SESSION_SUBDIRS),
    ):
        found += stale_temp_files_in(directory, owner, min_age)
    return found


def stale_temp_files_in(directory: Path, owner: int, min_age: float) -> list[Path]:
    """The stale temp files directly in `directory` (see stale_temp_files)."""
    import stat

    cutoff = time.time() - min_age
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return []
    found: list[Path] = []
    for entry in entries:
        if not (entry.name.startswith(".") and entry.name.endswith(TEMP_SUFFIX)):
            continue
        try:
            info = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if stat.S_ISREG(info.st_mode) and info.st_uid == owner and info.st_mtime < cutoff:
            found.append(Path(entry.path))
    return found


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


def lock_timeout() -> float:
    """AGCTL_LOCK_TIMEOUT, else the config's `lock_timeout`, else 30 seconds."""
    env = os.environ.get("AGCTL_LOCK_TIMEOUT")
    if env:
        try:
            value = float(env)
        except ValueError:
            value = -1.0
        if not value > 0 or value == float("inf"):
            raise UsageError(f"AGCTL_LOCK_TIMEOUT must be a number of seconds above 0, not {env!r}")
        return value
    from agctl.config import ConfigStore

    try:
        return ConfigStore().load().lock_timeout
    except AgctlError:
        return DEFAULT_LOCK_TIMEOUT  # the config cannot be read: its default


class Store:
    """Sessions, slots, messages and memory under one data directory."""

    def __init__(self, root: Path | str | None = None) -> None:
        self.root = Path(root) if root is not None else default_data_dir()
        self.sessions_dir = layout.sessions_dir(self.root)
        self._swept: set[str] = set()
        self._swept_leftovers = False
        self._real_dirs: set[Path] = set()
        # Session id -> the command whose first change is to be checkpointed (undoable).
        self._pending_edits: dict[str, str] = {}
        if os.environ.get("AGCTL_LOCK_TIMEOUT"):
            lock_timeout()  # a bad value is an error now, not only when a lock is busy
        self._warn_if_loose()

    def _warn_if_loose(self) -> None:
        """A data dir that others may read or write is used, but never silently: warned
        about once (a note in the data dir remembers the modes warned about; if they
        change, the warning comes again)."""
        key = str(self.root)
        if key in _warned_loose:
            return
        _warned_loose.add(key)
        loose = []
        for path in (self.root, self.sessions_dir):
            try:
                mode = os.stat(path).st_mode & 0o777
            except OSError:
                continue
            if mode & 0o077:
                loose.append(f"{path.name or path} {mode:03o}")
        if not loose:
            return
        note = self.root / WARNED_NOTE
        seen = ", ".join(loose)
        try:
            if read_bytes(note).decode("utf-8", "replace") == seen:
                return
        except AgctlError:
            pass
        log.warning(
            "%s is open to other users (%s): conversations should be private; "
            "'agctl doctor --fix' (or chmod -R go-rwx) closes it (said once)",
            self.root,
            seen,
        )
        with contextlib.suppress(AgctlError):
            write_atomic(note, seen.encode(), durable=False)

    # ---- paths and documents -------------------------------------------------------

    def session_dir(self, session_id: str) -> Path:
        """The session's directory; a link or a file in its place (or in place of
        `sessions/`) is refused, so nothing under a session is reached through a link."""
        path = layout.session_dir(self.root, validate_id(session_id, "session"))
        self._check_dir(self.sessions_dir)
        self._check_dir(path)
        return path

    def session_subdir(self, session_id: str, name: str) -> Path:
        path = self.session_dir(session_id) / name
        self._check_dir(path)
        return path

    def _check_dir(self, path: Path) -> None:
        """check_dir, once per process for a directory found real (a turn builds paths
        dozens of times; agctl's own directories are private, so not swapped meanwhile)."""
        if path not in self._real_dirs and check_dir(path):
            self._real_dirs.add(path)

    def _session_path(self, session_id: str) -> Path:
        return layout.session_document(self.session_dir(session_id))

    def _slot_path(self, session_id: str, slot_id: str) -> Path:
        self.session_subdir(session_id, layout.SLOTS)
        return layout.slot_document(self.session_dir(session_id), validate_id(slot_id, "slot"))

    @staticmethod
    def _read(path: Path, model: type[D], what: str) -> D:
        raw, version = read_versioned(path, what)
        try:
            document = model.model_validate_json(raw)
            document._version = version
            return document
        except SchemaTooNew as exc:
            raise SchemaTooNew(exc.kind, exc.found, exc.supported, path) from None
        except ValidationError as exc:
            if any(e["type"] == "json_invalid" for e in exc.errors()):
                raise CorruptDocument(path, "not valid JSON") from None
            raise CorruptDocument(path, _invalid_document(exc)) from None

    @staticmethod
    def _write(path: Path, document: Document) -> None:
        write_atomic(path, document.model_dump_json(indent=2).encode() + b"\n")
        document._version = current_version(path)

    @contextlib.contextmanager
    def lock(self, session_id: str) -> Iterator[None]:
        """Hold the session's exclusive lock; the session must exist once it is held."""
        path = self._session_path(session_id)
        if not os.path.lexists(path):
            raise NotFound(f"session {session_id!r} not found")
        lock_path = layout.lock_file(path.parent)
        outermost = not holds_lock(lock_path)
        with exclusive_lock(lock_path, lock_timeout):
            if not os.path.lexists(path):
                raise NotFound(f"session {session_id!r} was destroyed")
            if outermost:
                self._recover(session_id)
                self._sweep_temp_files(session_id)
            yield
        if outermost and not self._swept_leftovers:
            self._swept_leftovers = True
            self._sweep_leftovers()

    def _recover(self, session_id: str) -> None:
        """Finish what a killed writer left half done (called with the lock held)."""
        directory = self.session_dir(session_id)
        if self.trusted_journal(layout.journal(directory, layout.TURN_JOURNAL)):
            from agctl.turns import finish_turn

            finish_turn(self, session_id)
        if self.trusted_journal(layout.journal(directory, layout.RESTORE_JOURNAL)):
            from agctl.checkpoints import finish_restore

            finish_restore(self, session_id)

    @contextlib.contextmanager
    def undoable(self, session_id: str, command: str | None) -> Iterator[None]:
        """Make the edit done in this block undoable: the first change this store makes to
        the session in it is preceded, under the same lock, by a checkpoint labelled
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
        """Called, with the lock held, by every method that changes a session's documents."""
        command = self._pending_edits.pop(session_id, None)
        if command is not None:
            from agctl.checkpoints import Checkpointer

            label = f"before {command}"
            Checkpointer(self).create(session_id, label=label, auto=True, edit=command)

    def pending_recovery(self, session_id: str) -> bool:
        directory = self.session_dir(session_id)
        return any(os.path.lexists(layout.journal(directory, name)) for name in layout.JOURNALS)

    def settle(self, session_id: str) -> None:
        """Finish an interrupted commit or rollback before reading, so a view is never
        built from a half-restored session (takes the lock only when one is pending)."""
        if self.pending_recovery(session_id):
            with self.lock(session_id):
                pass

    def owner(self) -> int:
        """The uid that owns the data dir: the one whose files agctl trusts."""
        try:
            return os.stat(self.root).st_uid
        except OSError:
            return os.geteuid()

    def trusted_journal(self, path: Path) -> bool:
        """Whether a recovery journal exists and may be applied: a regular file, not a
        link, owned by the data dir's owner and writable by no one else. A journal
        planted by someone else is refused (exit 5) instead of being replayed."""
        try:
            fd = open_regular(path)
        except NotFound:
            return False
        try:
            info = os.fstat(fd)
        finally:
            os.close(fd)
        if info.st_uid != self.owner() or info.st_mode & 0o022:
            raise CorruptDocument(
                path,
                f"recovery journal owned by uid {info.st_uid} with mode "
                f"{info.st_mode & 0o777:03o}, not by the data dir's owner ({self.owner()}) "
                "with mode 600: not applied ('agctl doctor --fix' removes it)",
            )
        return True

    def _sweep_temp_files(self, session_id: str, min_age: float = STALE_TEMP_SECONDS) -> None:
        """Remove temp files of atomic writes that a killed writer left in this session
        (each may be a whole copy of a slot): once per process and session."""
        if session_id in self._swept:
            return
        self._swept.add(session_id)
        for path in stale_temp_files(self.session_dir(session_id), self.owner(), min_age):
            with contextlib.suppress(OSError):
                path.unlink()
                log.info("removed a stale temp file: %s", path)

    # ---- sessions ------------------------------------------------------------------

    def session_ids(self) -> list[str]:
        try:
            names = os.listdir(self.sessions_dir)
        except FileNotFoundError:
            return []
        except OSError as exc:
            check_dir(self.sessions_dir)  # a file or a link in its place: exit 5
            raise StoreError(f"cannot list {self.sessions_dir}: {exc.strerror}") from None
        return sorted(
            n
            for n in names
            if not n.startswith(".")
            and os.path.lexists(layout.session_document(layout.session_dir(self.root, n)))
        )

    def resolve_session(self, prefix: str) -> str:
        """Resolve a session id or a unique prefix of one."""
        return resolve_prefix("session", prefix, self.session_ids())

    def load_session(self, session_id: str) -> Session:
        return self._read(self._session_path(session_id), Session, f"session {session_id!r}")

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

        The new session is built aside and swapped in whole (under the old one's lock),
        so a failure leaves the old session as it was and a crash one or the other. A
        session with children is refused unless `recursive` (its descendants are
        destroyed) or `orphan` (its children are kept, detached: their parent would be a
        different session now).
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
        target = self.session_dir(sid)
        staging = self._stage(session, [self._new_slot(DEFAULT_SLOT)])
        swapped_out: Path | None = None  # where the old session is once the new one is in
        try:
            with self.lock(sid):
                if exchange_paths(staging, target):
                    swapped_out = staging
                else:
                    trash = layout.trash_dir(self.root, sid, secrets.token_hex(4))
                    os.rename(target, trash)
                    try:
                        os.rename(staging, target)
                    except OSError:
                        os.rename(trash, target)
                        raise
                    swapped_out = trash
                fsync_dir(self.sessions_dir)
        except OSError as exc:
            raise StoreError(f"cannot replace session {sid!r}: {exc.strerror}") from exc
        finally:
            shutil.rmtree(staging if swapped_out is None else swapped_out, ignore_errors=True)
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
        files: Mapping[str, bytes] | None = None,
        check: Callable[[Path], None] | None = None,
    ) -> None:
        """Write a new session with these slots: built aside, then renamed into place whole.

        `files` are more files for the session's directory (relative path: bytes), and
        `check` looks at the staged directory before it is placed (an error stops it).
        """
        target = self.session_dir(session.id)
        if target.exists():
            raise AlreadyExists(f"session {session.id!r} already exists")
        staging = self._stage(session, slots, files or {}, check)
        try:
            os.rename(staging, target)
        except OSError as exc:
            shutil.rmtree(staging, ignore_errors=True)
            if target.exists():
                raise AlreadyExists(f"session {session.id!r} already exists") from exc
            raise StoreError(f"cannot create session {session.id!r}: {exc.strerror}") from exc
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        fsync_dir(self.sessions_dir)

    def _stage(
        self,
        session: Session,
        slots: Sequence[Slot],
        files: Mapping[str, bytes] | None = None,
        check: Callable[[Path], None] | None = None,
    ) -> Path:
        """A session directory holding these documents, built (and synced) aside under
        `sessions/`, ready to be renamed into place."""
        self._sweep_leftovers()
        try:
            make_dirs(self.sessions_dir)
            check_dir(self.sessions_dir)
            staging = layout.staging_dir(self.root, session.id, secrets.token_hex(4))
            make_dirs(layout.slots_dir(staging))
        except OSError as exc:
            raise StoreError(
                f"cannot create session in {self.sessions_dir}: {exc.strerror}"
            ) from exc
        try:
            for slot in slots:
                self._write(layout.slot_document(staging, validate_id(slot.id, "slot")), slot)
            self._write(layout.session_document(staging), session)
            for name, data in (files or {}).items():
                make_dirs((staging / name).parent)
                write_atomic(staging / name, data)
            if check is not None:
                check(staging)
            fsync_dir(staging)
        except OSError as exc:
            shutil.rmtree(staging, ignore_errors=True)
            raise StoreError(f"cannot create session {session.id!r}: {exc.strerror}") from exc
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        return staging

    def replace_state(self, session: Session, slots: Sequence[Slot]) -> None:
        """Make the session exactly `session` with exactly `slots` (the caller holds the lock).

        Documents are written as given — no timestamps are touched — slots first, slots
        that are not in `slots` removed, the session document last.
        """
        keep = {slot.id for slot in slots}
        self._before_change(session.id)
        for slot in slots:
            self._write(self._slot_path(session.id, slot.id), slot)
        for slot_id in self.slot_ids(session.id):
            if slot_id not in keep:
                remove_file(self._slot_path(session.id, slot_id))
        self._write(self._session_path(session.id), session)

    def _sweep_leftovers(self, min_age: float = STALE_SECONDS) -> None:
        """Remove staging and trash dirs that a crashed create or destroy left behind."""
        try:
            entries = list(os.scandir(self.sessions_dir))
        except FileNotFoundError:
            return
        cutoff = time.time() - min_age
        owner = self.owner()
        for entry in entries:
            if not layout.is_leftover(entry.name):
                continue
            with contextlib.suppress(FileNotFoundError):  # another process got there first
                info = entry.stat(follow_symlinks=False)
                if (
                    info.st_mtime < cutoff
                    and info.st_uid == owner
                    and entry.is_dir(follow_symlinks=False)
                ):
                    shutil.rmtree(entry.path, ignore_errors=True)

    def update_session(self, session_id: str, change: Callable[[Session], T]) -> T:
        """Apply `change` to the session document under its lock and write it back."""
        with self.lock(session_id):
            session = self.load_session(session_id)
            result = change(session)
            session.updated_at = utcnow()
            self._before_change(session_id)
            self._write(self._session_path(session_id), session)
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
            self._remove_session_dir(sid)
        if self.current_session_id() in doomed:
            self.set_current_session(None)
        return Destroyed(destroyed=doomed, orphaned=[] if recursive else children)

    def _remove_session_dir(self, session_id: str) -> None:
        with self.lock(session_id):
            trash = layout.trash_dir(self.root, session_id, secrets.token_hex(4))
            try:
                os.rename(self.session_dir(session_id), trash)
            except OSError as exc:
                raise StoreError(f"cannot remove session {session_id!r}: {exc.strerror}") from exc
            fsync_dir(self.sessions_dir)
        shutil.rmtree(trash, ignore_errors=True)
        log.info("session destroyed: %s", session_id)

    # ---- the current-session pointer --------------------------------------------------

    @property
    def _current_path(self) -> Path:
        return layout.current_pointer(self.root)

    def current_session_id(self) -> str | None:
        try:
            value = read_bytes(self._current_path, "current-session pointer").decode().strip()
        except NotFound:
            return None
        except UnicodeDecodeError:
            raise CorruptDocument(self._current_path, "not UTF-8 text") from None
        return value or None

    def set_current_session(self, session_id: str | None) -> None:
        if session_id is None:
            remove_file(self._current_path)
            return
        self.load_session(session_id)
        make_dirs(self.root)
        write_atomic(self._current_path, session_id.encode() + b"\n")

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
        directory = self.session_subdir(session_id, layout.SLOTS)
        try:
            names = os.listdir(directory)
        except FileNotFoundError:
            raise NotFound(f"session {session_id!r} not found") from None
        return layout.document_ids(names)

    def resolve_slot(self, session_id: str, slot_id: str | None) -> str:
        """The given slot id, or the session's current slot when None."""
        if slot_id is None:
            return self.load_session(session_id).current_slot
        return validate_id(slot_id, "slot")

    def load_slot(
        self, session_id: str, slot_id: str | None = None, *, reuse: Slot | None = None
    ) -> Slot:
        """The slot, parsed; `reuse` (an unmodified copy read or written earlier) is returned
        instead when the file has not been replaced since."""
        slot_id = self.resolve_slot(session_id, slot_id)
        path = self._slot_path(session_id, slot_id)
        fresh = reuse is not None and reuse.id == slot_id and reuse._version is not None
        if fresh and reuse is not None and reuse._version == current_version(path):
            return reuse
        if not path.exists() and not path.is_symlink():
            self.load_session(session_id)
            raise NotFound(f"slot {slot_id!r} not found in session {session_id!r}")
        return self._read(path, Slot, f"slot {slot_id!r}")

    def slot_bytes(self, session_id: str, slot_id: str) -> bytes:
        """A slot document as stored, unparsed: for readers that scan many (search)."""
        return read_bytes(self._slot_path(session_id, slot_id), f"slot {slot_id!r}")

    def list_slots(self, session_id: str) -> list[Slot]:
        return [self.load_slot(session_id, s) for s in self.slot_ids(session_id)]

    def _insert_slot(self, session_id: str, slot: Slot, make_current: bool) -> Slot:
        path = self._slot_path(session_id, slot.id)
        if path.exists():
            raise AlreadyExists(f"slot {slot.id!r} already exists in session {session_id!r}")
        self._before_change(session_id)
        self._write(path, slot)
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
        with self.lock(session_id):
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
        with self.lock(session_id):
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
        with self.lock(session_id):
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
        """Apply `change` to a slot under the session lock and write it back atomically.

        If `change` raises (a readonly slot, a bad index), nothing is written. `base` is an
        unmodified copy of the slot read earlier: when the file has not been replaced since,
        it is used instead of reading and parsing the file again.
        """
        with self.lock(session_id):
            slot_id = slot_id or (base.id if base else None)
            path = self._slot_path(session_id, self.resolve_slot(session_id, slot_id))
            if base is not None and base._version and base._version == current_version(path):
                slot = base
            else:
                slot = self.load_slot(session_id, slot_id)
            result = change(slot)
            slot.refresh_meta()
            self._before_change(session_id)
            self._write(self._slot_path(session_id, slot.id), slot)
            return result

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
        with self.lock(session_id):
            slots = self.slot_ids(session_id)
            if slot_id not in slots:
                raise NotFound(f"slot {slot_id!r} not found in session {session_id!r}")
            if len(slots) == 1:
                raise ProtectedSlot(f"slot {slot_id!r} is the last slot of {session_id!r}")
            session = self.load_session(session_id)
            falls_back = session.current_slot == slot_id
            if falls_back and DEFAULT_SLOT not in slots:
                raise Conflict(f"slot {slot_id!r} is current and there is no default slot")
            self._before_change(session_id)
            if falls_back:

                def fall_back(s: Session) -> Session:
                    s.current_slot = DEFAULT_SLOT
                    return s

                session = self.update_session(session_id, fall_back)
            remove_file(self._slot_path(session_id, slot_id))
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
    # One file per slot, drafts/<slot>.json, so a failed turn on one slot never replaces
    # another slot's draft. A data dir written before kept one draft.json per session: it
    # is adopted as the draft of the slot it names the first time drafts are touched.

    def _drafts_dir(self, session_id: str) -> Path:
        return self.session_subdir(session_id, layout.DRAFTS)

    def _draft_path(self, session_id: str, slot_id: str) -> Path:
        self._drafts_dir(session_id)
        return layout.draft_document(self.session_dir(session_id), validate_id(slot_id, "slot"))

    def _adopt_legacy_draft(self, session_id: str) -> CorruptDocument | None:
        """Move a legacy draft.json to drafts/<its slot>.json under the session lock (the
        newer wins if that slot has a draft already); a damaged one stays, and is returned
        so that a listing can report it. A cheap stat when there is none."""
        legacy = layout.legacy_draft(self.session_dir(session_id))
        if not os.path.lexists(legacy):
            return None
        with self.lock(session_id):
            try:
                raw = read_bytes(legacy, "draft")
                draft = Draft.model_validate_json(raw)
                target = self._draft_path(session_id, draft.slot)
            except NotFound:
                return None  # adopted meanwhile by another process
            except CorruptDocument as exc:
                return exc
            except ValidationError as exc:
                return CorruptDocument(legacy, _invalid_document(exc))
            except InvalidId as exc:  # a slot name no file may have
                return CorruptDocument(legacy, str(exc))
            try:
                kept = Draft.model_validate_json(read_bytes(target, "draft"))
            except (NotFound, CorruptDocument, ValidationError):
                kept = None
            if kept is None or kept.created_at < draft.created_at:
                make_dirs(target.parent)
                write_atomic(target, raw)
            remove_file(legacy)
            log.info("legacy draft.json adopted as the draft of slot %s", draft.slot)
        return None

    def draft_slots(self, session_id: str) -> list[str]:
        """The slots that have a draft (a slot removed since included), sorted. Raises
        CorruptDocument for a damaged legacy draft.json, whose slot cannot be known."""
        damage = self._adopt_legacy_draft(session_id)
        if damage is not None:
            raise damage
        try:
            names = os.listdir(self._drafts_dir(session_id))
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise StoreError(f"cannot list {self._drafts_dir(session_id)}: {exc}") from exc
        return layout.document_ids(names)

    def save_draft(self, session_id: str, draft: Draft) -> Path:
        """Keep a prompt whose turn failed, as its slot's draft, so it can be sent again."""
        with self.lock(session_id):
            self._adopt_legacy_draft(session_id)
            path = self._draft_path(session_id, draft.slot)
            make_dirs(path.parent)
            write_atomic(path, draft.model_dump_json(indent=2).encode() + b"\n")
        return path

    def load_draft(self, session_id: str, slot_id: str) -> Draft:
        self._adopt_legacy_draft(session_id)
        path = self._draft_path(session_id, slot_id)
        try:
            return Draft.model_validate_json(read_bytes(path, "draft"))
        except NotFound:
            raise NotFound(f"slot {slot_id!r} of session {session_id!r} has no draft") from None
        except ValidationError as exc:
            raise CorruptDocument(path, _invalid_document(exc)) from None

    def clear_draft(self, session_id: str, slot_id: str, *, before: datetime | None = None) -> bool:
        """Drop the slot's draft (a damaged one too); with `before`, only one kept before
        that moment (a turn on the slot that started then supersedes it, and a damaged
        draft is left for 'agctl draft show' to report). Returns whether one was dropped.

        Read, compared and removed under the session lock, so a draft another process
        keeps meanwhile is never removed unseen."""
        with self.lock(session_id):
            self._adopt_legacy_draft(session_id)
            path = self._draft_path(session_id, slot_id)
            if not os.path.lexists(path):
                return False
            if before is not None:
                try:
                    draft = Draft.model_validate_json(read_bytes(path, "draft"))
                except (NotFound, CorruptDocument, ValidationError):
                    return False
                if draft.created_at >= before:
                    return False
            remove_file(path)
        if before is not None:
            log.info("draft of slot %s dropped: a later turn on it superseded it", slot_id)
        return True

    def clear_legacy_draft(self, session_id: str) -> None:
        """Remove a damaged legacy draft.json (a readable one is adopted, never removed)."""
        with self.lock(session_id):
            if self._adopt_legacy_draft(session_id) is not None:
                remove_file(layout.legacy_draft(self.session_dir(session_id)))

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
