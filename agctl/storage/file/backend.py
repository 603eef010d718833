"""The file backend: sessions as plain JSON files under one data directory.

Layout in `layout.py`, a transaction in `tx.py`, the checkpoint log file in `log.py`.
Every change to a session runs under its lock (an flock on `.lock`) as one transaction,
committed through the session's redo journal (`journal.py`), so parallel processes never
lose an update and a crash leaves the old state or the new. Readers take no lock. A
live slot is its document plus an append-only log of the turns appended since it was
last written whole (`slotlog.py`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import shutil
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, TypeVar

import orjson
from pydantic import ValidationError

from agctl.base.errors import (
    AgctlError,
    AlreadyExists,
    Conflict,
    CorruptDocument,
    DamagedDraft,
    InvalidId,
    NotFound,
    StoreError,
)
from agctl.base.fsio import (
    TEMP_SUFFIX,
    append_durably,
    check_dir,
    exchange_paths,
    exclusive_lock,
    fsync_dir,
    make_dirs,
    read_bytes,
    read_pointer,
    remove_file,
    write_atomic,
    write_pointer,
)
from agctl.base.ids import validate_id
from agctl.context.models import Draft, Session, Slot
from agctl.storage.base import Backend, NewSession, OpenTxs, lock_timeout, next_rev
from agctl.storage.file import layout, slotlog
from agctl.storage.file.documents import (
    dump_document,
    invalid_document,
    parse_document,
)
from agctl.storage.file.journal import Journal, trusted_file
from agctl.storage.file.log import FileLog
from agctl.storage.file.tx import FileTx

log = logging.getLogger("agctl.store")

# A staging or trash dir older than this was left by a crash, not by a live process.
STALE_SECONDS = 600.0
# A temp file of an atomic write older than this was left by a killed writer.
STALE_TEMP_SECONDS = 300.0


def stale_temp_files(session_dir: Path, owner: int, min_age: float) -> list[Path]:
    """Temp files of atomic writes under a session, older than `min_age` seconds and
    owned by `owner` (regular files only: a link is never followed or removed here)."""
    found: list[Path] = []
    for directory in (session_dir, *(session_dir / d for d in layout.SESSION_SUBDIRS)):
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


def _stat_key(path: Path) -> tuple[int, int, int] | None:
    try:
        info = os.stat(path, follow_symlinks=False)
    except OSError:
        return None
    return (info.st_ino, info.st_mtime_ns, info.st_size)


# Where each cache file (documents.CACHE_FILES) is, from the session dir.
_CACHE_PATHS: dict[str, Callable[[Path], Path]] = {
    "heads": layout.checkpoint_heads,
    "index": layout.checkpoint_index,
}
T = TypeVar("T")


class FileBackend(Backend):
    """Sessions under `root` as plain files (see the module docstring and layout.py).

    `sync="end"` commits without fsyncing each transaction; `flush()` makes everything
    durable at once (a replay that can be run again if the machine fails meanwhile)."""

    def __init__(self, root: Path, *, sync: str = "per-turn") -> None:
        self.root = root
        self.sessions_dir = layout.sessions_dir(root)
        self.durable = sync != "end"
        self._real_dirs: set[Path] = set()
        self._session_dirs: dict[str, Path] = {}  # of ids validated, dirs found real
        self._journals: dict[str, Journal] = {}
        self._no_legacy: set[str] = set()
        self._slot_paths: dict[tuple[str, str], Path] = {}
        self._subdirs: dict[tuple[str, str], Path] = {}  # found real, of valid session ids
        self._slot_logs: dict[Path, Path] = {}  # a slot document's log file
        self._checkpoint_paths: dict[tuple[str, Callable[[Path], Path]], Path] = {}
        self._swept: set[str] = set()
        self._swept_leftovers = False
        self._txs: OpenTxs[FileTx] = OpenTxs()
        self._touched: set[str] = set()
        # A slot's rev, what its log's lines extend and what an append must extend,
        # without reading it again (while its files are as this backend left them).
        self._revs: dict[Path, slotlog.StoredSlot] = {}

    # ---- paths ---------------------------------------------------------------------

    def session_dir(self, session_id: str) -> Path:
        """The session's directory; a link or a file in its place (or in place of
        `sessions/`) is refused, so nothing under a session is reached through a link."""
        known = self._session_dirs.get(session_id)
        if known is not None:
            return known
        path = layout.session_dir(self.root, validate_id(session_id, "session"))
        self._check_dir(self.sessions_dir)
        self._check_dir(path)
        if path in self._real_dirs:  # found real once: agctl's own dirs are not swapped
            self._session_dirs[session_id] = path
        return path

    def _subdir(self, session_id: str, name: str) -> Path:
        known = self._subdirs.get((session_id, name))
        if known is not None:
            return known
        path = self.session_dir(session_id) / name
        self._check_dir(path)
        if path in self._real_dirs and session_id in self._session_dirs:
            self._subdirs[(session_id, name)] = path
        return path

    def _check_dir(self, path: Path) -> None:
        """check_dir, once per process for a directory found real (a turn builds paths
        dozens of times; agctl's own directories are private, so not swapped meanwhile)."""
        if path not in self._real_dirs and check_dir(path):
            self._real_dirs.add(path)

    def _session_path(self, session_id: str) -> Path:
        return layout.session_document(self.session_dir(session_id))

    def slot_path(self, session_id: str, slot_id: str) -> Path:
        """The slot's document (its log beside it), a link in place of `slots/` refused."""
        known = self._slot_paths.get((session_id, slot_id))
        if known is not None:
            return known
        slots = self._subdir(session_id, layout.SLOTS)
        path = layout.slot_document(self.session_dir(session_id), validate_id(slot_id, "slot"))
        if slots in self._real_dirs:
            self._slot_paths[(session_id, slot_id)] = path
        return path

    def _slot_keys(self, document: Path) -> tuple[Any, Any]:
        """The stats of a slot's document and log: what tells a version of it from another."""
        log_file = self._slot_logs.get(document)
        if log_file is None:
            log_file = self._slot_logs[document] = slotlog.log_path(document)
        return _stat_key(document), _stat_key(log_file)

    def draft_path(self, session_id: str, slot_id: str) -> Path:
        """The slot's draft, a link in place of `drafts/` refused."""
        self._subdir(session_id, layout.DRAFTS)
        return layout.draft_document(self.session_dir(session_id), validate_id(slot_id, "slot"))

    def checkpoint_path(self, session_id: str, where: Callable[[Path], Path]) -> Path:
        """A file of the session's checkpoints (`where`: a layout function of the session
        dir), a link in place of `checkpoints/` refused."""
        known = self._checkpoint_paths.get((session_id, where))
        if known is not None:
            return known
        self._subdir(session_id, layout.CHECKPOINTS)
        path = where(self.session_dir(session_id))
        if (session_id, layout.CHECKPOINTS) in self._subdirs:
            self._checkpoint_paths[(session_id, where)] = path
        return path

    def owner(self) -> int:
        """The uid that owns the data dir: the one whose files agctl trusts."""
        try:
            return os.stat(self.root).st_uid
        except OSError:
            return os.geteuid()

    def journal(self, session_id: str) -> Journal:
        known = self._journals.get(session_id)
        if known is None:
            directory = self.session_dir(session_id)
            path = layout.journal(directory, layout.JOURNAL)
            known = Journal(directory, path, self.owner())
            if session_id in self._session_dirs:  # a dir found real, its id valid
                self._journals[session_id] = known
        return known

    # ---- reads ---------------------------------------------------------------------

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

    def has_session(self, session_id: str) -> bool:
        return os.path.lexists(self._session_path(session_id))

    def consistent(self, session_id: str, read: Callable[[], T]) -> T:
        """`read` of a document written in place (the session, the heads cache), made
        between two equal marks of the journal with no commit pending: so it saw one
        commit's document whole. A commit at work is waited for (under the lock)."""
        if self.in_transaction(session_id) is not None:
            return read()  # under the lock: no commit at work but this one
        journal = self.journal(session_id)
        for _ in range(3):
            before = journal.mark()
            if journal.pending_at(before):
                break
            value = read()
            if journal.mark() == before:
                return value
        with self._locked(session_id):  # busy, or half applied: the writer finishes first
            with contextlib.suppress(AgctlError):  # refused (exit 5 on write) or impossible
                journal.recover()  # now (a full disk): what is there is read
            return read()

    def load_session(self, session_id: str) -> Session:
        path = self._session_path(session_id)

        def read() -> bytes:
            try:
                return read_bytes(path, f"session {session_id!r}")
            except NotFound:
                raise NotFound(f"session {session_id!r} not found") from None

        raw = self.consistent(session_id, read) if os.path.lexists(path) else read()
        return parse_document(raw, Session, path)

    def slot_ids(self, session_id: str) -> list[str]:
        directory = self._subdir(session_id, layout.SLOTS)
        try:
            names = os.listdir(directory)
        except FileNotFoundError:
            raise NotFound(f"session {session_id!r} not found") from None
        return layout.document_ids(names)

    def _missing_slot(self, session_id: str, slot_id: str) -> NotFound:
        self.load_session(session_id)
        return NotFound(f"slot {slot_id!r} not found in session {session_id!r}")

    def slot_rev(self, session_id: str, slot_id: str) -> int | None:
        path = self.slot_path(session_id, slot_id)
        keys = self._slot_keys(path)
        if keys[0] is None:
            return None
        known = self._revs.get(path)
        if known is not None and known.keys == keys:
            return known.rev
        return self.load_slot(session_id, slot_id).rev

    def load_slot(self, session_id: str, slot_id: str, *, reuse: Slot | None = None) -> Slot:
        path = self.slot_path(session_id, slot_id)
        if reuse is not None and reuse.id == slot_id:
            known = self._revs.get(path)
            keys = self._slot_keys(path)
            if known is not None and known.keys == keys and known.rev == reuse.rev:
                return reuse
        keys = self._slot_keys(path)
        try:
            raw = read_bytes(path, f"slot {slot_id!r}")
        except NotFound:
            raise self._missing_slot(session_id, slot_id) from None
        slot = parse_document(raw, Slot, path)
        base = slotlog.base_of(raw)
        slotlog.apply_lines(path, slot, base)
        if keys == self._slot_keys(path):
            self._revs[path] = slotlog.StoredSlot.of(slot, base, keys)
        return slot

    def stored(self, session_id: str, slot_id: str, rev: int) -> slotlog.StoredSlot:
        """The slot as stored at revision `rev` (read again if this backend has not seen
        it lately); Conflict when it is at another revision now."""
        path = self.slot_path(session_id, slot_id)
        known = self._revs.get(path)
        keys = self._slot_keys(path)
        if known is None or known.keys != keys:
            self.load_slot(session_id, slot_id)
            known = self._revs.get(path)
        if known is None or known.rev != rev:
            raise Conflict(f"slot {slot_id!r} changed since it was read (another writer?)")
        return known

    def slot_base(self, session_id: str, slot_id: str) -> str:
        """The digest of a slot document's bytes: what a line appended to its log names."""
        path = self.slot_path(session_id, slot_id)
        known = self._revs.get(path)
        if known is not None and known.keys[0] == _stat_key(path):
            return known.base
        return slotlog.base_of(read_bytes(path, f"slot {slot_id!r}"))

    def slot_document(self, session_id: str, slot_id: str) -> dict[str, Any] | None:
        """A slot as stored, parsed but not validated (see slotlog.raw_document): for
        readers that scan many slots (search)."""
        path = self.slot_path(session_id, slot_id)
        try:
            document = read_bytes(path, f"slot {slot_id!r}")
        except NotFound:
            raise self._missing_slot(session_id, slot_id) from None
        try:
            log_lines: bytes | None = read_bytes(slotlog.log_path(path), f"slot {slot_id!r}")
        except NotFound:
            log_lines = None
        return slotlog.raw_document(document, log_lines)

    def remember(self, session_id: str, slot: Slot, base: str) -> None:
        """Note the stored state of a slot just written, for a cheap `reuse` later."""
        path = self.slot_path(session_id, slot.id)
        keys = self._slot_keys(path)
        self._revs[path] = slotlog.StoredSlot.of(slot, base, keys)

    def draft_slots(self, session_id: str) -> list[str]:
        try:
            names = os.listdir(self._subdir(session_id, layout.DRAFTS))
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise StoreError(f"cannot list drafts of {session_id!r}: {exc}") from exc
        return layout.document_ids(names)

    def load_draft(self, session_id: str, slot_id: str) -> Draft:
        path = self.draft_path(session_id, slot_id)
        try:
            return Draft.model_validate_json(read_bytes(path, "draft"))
        except NotFound:
            raise NotFound(f"slot {slot_id!r} of session {session_id!r} has no draft") from None
        except ValidationError as exc:
            raise DamagedDraft(path, invalid_document(exc), slot_id) from None
        except CorruptDocument as exc:
            raise DamagedDraft(exc.path, exc.reason, slot_id) from None

    def checkpoint_log(self, session_id: str) -> FileLog:
        return FileLog(self.checkpoint_path(session_id, layout.checkpoint_log))

    def removed_checkpoints(self, session_id: str) -> set[str]:
        where = self.checkpoint_path(session_id, layout.removed_checkpoints)
        try:
            return set(orjson.loads(read_bytes(where)))
        except NotFound:
            return set()
        except (orjson.JSONDecodeError, TypeError) as exc:
            raise CorruptDocument(where, str(exc)) from None

    def cache_path(self, session_id: str, name: str) -> Path:
        return self.checkpoint_path(session_id, _CACHE_PATHS[name])

    def cache(self, session_id: str, name: str) -> bytes | None:
        where = self.cache_path(session_id, name)

        def read() -> bytes | None:
            try:
                return read_bytes(where, name)
            except NotFound:
                return None

        if name != "heads":
            return read()
        raw = self.consistent(session_id, read)
        return None if raw is None else raw.rstrip(b" ")  # the padding of a write in place

    def write_cache(
        self, session_id: str, name: str, data: bytes | None, *, append: bool = False
    ) -> None:
        """Best effort and lock-free, for a reader that found a cache behind."""
        where = self.cache_path(session_id, name)
        if data is None:
            remove_file(where)
        elif not os.path.isdir(where.parent):
            return
        elif append:
            append_durably(where, lambda offset: data, durable=False)
        else:
            write_atomic(where, data, durable=False)

    def pending(self, session_id: str) -> bool:
        return self.journal(session_id).pending()

    # ---- transactions --------------------------------------------------------------

    def in_transaction(self, session_id: str) -> FileTx | None:
        return self._txs.get(session_id)

    def transaction(self, session_id: str) -> AbstractContextManager[FileTx]:
        return self._txs.nested(session_id, lambda: self._begin(session_id))

    @contextlib.contextmanager
    def _begin(self, session_id: str) -> Iterator[FileTx]:
        """A Tx under the session's lock, after recovering what a crash left; its writes
        committed as one record of the session's journal."""
        path = self._session_path(session_id)
        if not os.path.lexists(path):
            raise NotFound(f"session {session_id!r} not found")
        with exclusive_lock(layout.lock_file(path.parent), lock_timeout):
            if not os.path.lexists(path):
                raise NotFound(f"session {session_id!r} was destroyed")
            journal = self.journal(session_id)
            journal.recover()
            self._drop_legacy_journals(session_id)
            self._sweep_temp_files(session_id)
            tx = FileTx(self, session_id)
            try:
                yield tx
            except BaseException:
                tx.aborted()
                raise
            ops = tx.ops()
            if ops:
                journal.commit(ops, durable=self.durable)
                self._touched.add(session_id)
                tx.committed()
        if not self._swept_leftovers:
            self._swept_leftovers = True
            self.sweep_leftovers()

    def _drop_legacy_journals(self, session_id: str) -> None:
        """The per-operation journals of agctl before the redo journal: not replayed (an
        upgrade in the middle of a crashed commit is the only way to have one); a
        trusted one is removed with a warning, an untrusted one refused (exit 5)."""
        if session_id in self._no_legacy:
            return
        directory = self.session_dir(session_id)
        for name in layout.LEGACY_JOURNALS:
            path = layout.journal(directory, name)
            if trusted_file(path, self.owner()):
                log.warning(
                    "%s: a journal of an older agctl's interrupted commit, not replayed; "
                    "check the session's turn count and cost ('agctl session show')",
                    path,
                )
                remove_file(path)
        self._no_legacy.add(session_id)  # only an older agctl writes them: checked once

    def trusted_journal(self, path: Path) -> bool:
        """Whether a journal exists and may be applied (see journal.trusted_file)."""
        return trusted_file(path, self.owner())

    def flush(self) -> None:
        """Make every transaction committed without sync durable (sync="end")."""
        for session_id in sorted(self._touched):
            with contextlib.suppress(NotFound), self._locked(session_id):
                self.journal(session_id).flush()
        self._touched.clear()

    @contextlib.contextmanager
    def _locked(self, session_id: str) -> Iterator[None]:
        path = self._session_path(session_id)
        if not os.path.lexists(path):
            raise NotFound(f"session {session_id!r} not found")
        with exclusive_lock(layout.lock_file(path.parent), lock_timeout):
            yield

    def _sweep_temp_files(self, session_id: str, min_age: float = 0.0) -> None:
        """Remove temp files that a killed writer left in this session (each may be a whole
        copy of a slot): once per backend and session, with its lock held (every write
        into a session dir is made under it, so none is another writer's)."""
        if session_id in self._swept:
            return
        self._swept.add(session_id)
        for path in stale_temp_files(self.session_dir(session_id), self.owner(), min_age):
            with contextlib.suppress(OSError):
                path.unlink()
                log.info("removed a stale temp file: %s", path)

    def sweep_leftovers(self, min_age: float = STALE_SECONDS) -> None:
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

    # ---- whole sessions ------------------------------------------------------------

    def _create(self, new: NewSession) -> None:
        """Write a new session: built aside, then renamed into place whole."""
        session = new.session
        target = self.session_dir(session.id)
        if target.exists():
            raise AlreadyExists(f"session {session.id!r} already exists")
        staging = self._stage(session, new.slots, new.checkpoint_log, sorted(new.removed))
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
        checkpoint_log: bytes = b"",
        removed: Sequence[str] = (),
    ) -> Path:
        """A session directory holding these documents, built (and synced) aside under
        `sessions/`, ready to be renamed into place."""
        self.sweep_leftovers()
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
                slot.rev = next_rev(None)
                path = layout.slot_document(staging, validate_id(slot.id, "slot"))
                write_atomic(path, dump_document(slot))
            session.rev = next_rev(None)
            write_atomic(layout.session_document(staging), dump_document(session))
            if checkpoint_log or removed:
                make_dirs(layout.checkpoints_dir(staging))
            if checkpoint_log:
                write_atomic(layout.checkpoint_log(staging), checkpoint_log)
            if removed:
                write_atomic(layout.removed_checkpoints(staging), orjson.dumps(list(removed)))
            fsync_dir(staging)
        except OSError as exc:
            shutil.rmtree(staging, ignore_errors=True)
            raise StoreError(f"cannot create session {session.id!r}: {exc.strerror}") from exc
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        return staging

    def replace_session(self, session: Session, slots: Sequence[Slot]) -> None:
        """Swap the session of this id for a new one (built aside, swapped in whole under
        the old one's lock), so a failure leaves the old as it was and a crash one or the
        other."""
        sid = session.id
        self._txs.refuse(sid, "replace")
        target = self.session_dir(sid)
        staging = self._stage(session, slots)
        swapped_out: Path | None = None  # where the old session is once the new one is in
        try:
            with self._locked(sid):
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

    def destroy_session(self, session_id: str) -> None:
        self._txs.refuse(session_id, "destroy")
        with self._locked(session_id):
            trash = layout.trash_dir(self.root, session_id, secrets.token_hex(4))
            try:
                os.rename(self.session_dir(session_id), trash)
            except OSError as exc:
                raise StoreError(f"cannot remove session {session_id!r}: {exc.strerror}") from exc
            fsync_dir(self.sessions_dir)
        shutil.rmtree(trash, ignore_errors=True)

    # ---- the current-session pointer -----------------------------------------------

    def current_session_id(self) -> str | None:
        return read_pointer(layout.current_pointer(self.root))

    def set_current_session(self, session_id: str | None) -> None:
        if session_id is not None:
            self.load_session(session_id)
        write_pointer(layout.current_pointer(self.root), session_id)

    # ---- legacy --------------------------------------------------------------------

    def adopt_legacy_draft(self, session_id: str) -> CorruptDocument | None:
        """Move the one draft.json of older agctl to drafts/<its slot>.json, in a
        transaction (the newer wins if that slot has a draft already); a damaged one stays,
        and is returned so that a listing can report it. A cheap stat when there is none."""
        legacy = layout.legacy_draft(self.session_dir(session_id))
        if not os.path.lexists(legacy):
            return None
        with self.transaction(session_id) as tx:
            try:
                draft = Draft.model_validate_json(read_bytes(legacy, "draft"))
                validate_id(draft.slot, "slot")
            except NotFound:
                return None  # adopted meanwhile by another process
            except CorruptDocument as exc:
                return exc
            except ValidationError as exc:
                return CorruptDocument(legacy, invalid_document(exc))
            except InvalidId as exc:  # a slot name no file may have
                return CorruptDocument(legacy, str(exc))
            try:
                kept: Draft | None = tx.load_draft(session_id, draft.slot)
            except (NotFound, CorruptDocument):
                kept = None
            if kept is None or kept.created_at < draft.created_at:
                tx.put_draft(draft)
            tx.drop_legacy_draft()
            log.info("legacy draft.json adopted as the draft of slot %s", draft.slot)
        return None

    def remove_legacy_draft(self, session_id: str) -> None:
        """Remove a damaged legacy draft.json (a readable one is adopted, never removed)."""
        with self.transaction(session_id) as tx:
            if self.adopt_legacy_draft(session_id) is not None:
                tx.drop_legacy_draft()
