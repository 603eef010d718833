"""A transaction of the file backend: its writes held, and read back, until it commits
as one record of the session's redo journal."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Protocol

import orjson

from agctl.base.errors import Conflict, CorruptDocument, InvalidId, NotFound, StoreError
from agctl.base.fsio import TEMP_SUFFIX, make_dirs
from agctl.base.ids import validate_id
from agctl.base.vocab import ZONES
from agctl.context.models import Document, Draft, Session, Slot, SlotConfig, SlotMeta
from agctl.storage.base import Reader, next_rev
from agctl.storage.file import layout, slotlog
from agctl.storage.file.documents import CACHE_FILES, LARGE_PUT, dump_document
from agctl.storage.file.journal import Op, pack_data
from agctl.storage.file.log import TxLog


class Files(Reader, Protocol):
    """What a FileTx is given of its backend (a FileBackend): the committed reads, where
    the session's files are (each path found through no link), what it knows of the
    slots as stored, and whether a commit is synced."""

    durable: bool

    def session_dir(self, session_id: str) -> Path: ...

    def slot_path(self, session_id: str, slot_id: str) -> Path: ...

    def draft_path(self, session_id: str, slot_id: str) -> Path: ...

    def checkpoint_path(self, session_id: str, where: Callable[[Path], Path]) -> Path: ...

    def cache_path(self, session_id: str, name: str) -> Path: ...

    def stored(self, session_id: str, slot_id: str, rev: int) -> slotlog.StoredSlot: ...

    def slot_base(self, session_id: str, slot_id: str) -> str: ...

    def remember(self, session_id: str, slot: Slot, base: str) -> None: ...


class FileTx:
    """One transaction of a FileBackend: writes are held, and read back, until commit."""

    def __init__(self, backend: Files, session_id: str) -> None:
        self.backend = backend
        self.session_id = session_id
        self._session: Session | None = None
        # slot id -> (slot, how it is written: "put", or "append" with what each unit
        # appended), or (None, "put", ()): delete
        self._slots: dict[str, tuple[Slot | None, str, slotlog.Appended]] = {}
        self._drafts: dict[str, Draft | None] = {}
        self._log: TxLog | None = None
        self._removed: list[str] | None = None
        self._caches: dict[str, bytes | None] = {}
        self._cache_appends: dict[str, bytearray] = {}
        self._written: list[tuple[Slot, str]] = []  # each slot written, with its base
        self._bumped: list[Document] = []  # documents given a revision of this Tx
        self._drop_legacy = False
        self._stored_session_rev: int | None = None
        # Units of work (savepoints) done so far, and the unit each staged document was
        # given its revision in: a document written again in a later unit gets a new one.
        self._unit = 0
        self._rev_units: dict[str, int] = {}

    def _check(self, session_id: str) -> None:
        if session_id != self.session_id:
            raise StoreError(
                f"a transaction of session {self.session_id!r} cannot touch {session_id!r}"
            )

    # ---- reads (own writes first) --------------------------------------------------

    def session_ids(self) -> list[str]:
        return self.backend.session_ids()

    def has_session(self, session_id: str) -> bool:
        return self.backend.has_session(session_id)

    def load_session(self, session_id: str) -> Session:
        if session_id == self.session_id and self._session is not None:
            return self._session
        session = self.backend.load_session(session_id)
        if session_id == self.session_id:
            self._stored_session_rev = session.rev  # read under the lock: the stored one
        return session

    def slot_ids(self, session_id: str) -> list[str]:
        ids = set(self.backend.slot_ids(session_id))
        if session_id == self.session_id:
            for slot_id, (slot, _, _) in self._slots.items():
                (ids.add if slot is not None else ids.discard)(slot_id)
        return sorted(ids)

    def load_slot(self, session_id: str, slot_id: str, *, reuse: Slot | None = None) -> Slot:
        if session_id == self.session_id and slot_id in self._slots:
            slot, _, _ = self._slots[slot_id]
            if slot is None:
                raise NotFound(f"slot {slot_id!r} not found in session {session_id!r}")
            return slot
        return self.backend.load_slot(session_id, slot_id, reuse=reuse)

    def slot_rev(self, session_id: str, slot_id: str) -> int | None:
        if session_id == self.session_id and slot_id in self._slots:
            slot = self._slots[slot_id][0]
            return None if slot is None else slot.rev
        return self.backend.slot_rev(session_id, slot_id)

    def draft_slots(self, session_id: str) -> list[str]:
        ids = set(self.backend.draft_slots(session_id))
        if session_id == self.session_id:
            for slot_id, draft in self._drafts.items():
                (ids.add if draft is not None else ids.discard)(slot_id)
        return sorted(ids)

    def load_draft(self, session_id: str, slot_id: str) -> Draft:
        if session_id == self.session_id and slot_id in self._drafts:
            draft = self._drafts[slot_id]
            if draft is None:
                raise NotFound(f"slot {slot_id!r} of session {session_id!r} has no draft")
            return draft
        return self.backend.load_draft(session_id, slot_id)

    def checkpoint_log(self, session_id: str | None = None) -> TxLog:
        self._check(session_id or self.session_id)
        if self._log is None:
            self._log = TxLog(self.backend.checkpoint_path(self.session_id, layout.checkpoint_log))
        return self._log

    def removed_checkpoints(self, session_id: str) -> set[str]:
        if session_id == self.session_id and self._removed is not None:
            return set(self._removed)
        return self.backend.removed_checkpoints(session_id)

    def cache(self, session_id: str, name: str) -> bytes | None:
        if session_id == self.session_id and name in self._caches:
            return self._caches[name]
        stored = self.backend.cache(session_id, name)
        if session_id == self.session_id and name in self._cache_appends:
            return (stored or b"") + bytes(self._cache_appends[name])
        return stored

    # ---- writes --------------------------------------------------------------------

    def _staged_rev(self, key: str, staged: int) -> int:
        """The revision of a document staged at `staged`: the same within one unit of
        work, the next one in a later unit (which may see a checkpoint of the first)."""
        if self._rev_units.get(key) == self._unit:
            return staged
        self._rev_units[key] = self._unit
        return next_rev(staged)

    def _slot_rev(self, slot_id: str) -> int:
        """The revision a slot written in this transaction gets (one per unit of work)."""
        known = self._slots.get(slot_id)
        key = f"slot:{slot_id}"
        if known is not None and known[0] is not None:
            return self._staged_rev(key, known[0].rev)
        self._rev_units[key] = self._unit
        if known is not None:
            return next_rev(None)
        return next_rev(self.backend.slot_rev(self.session_id, slot_id))

    def put_session(self, session: Session) -> None:
        self._check(validate_id(session.id, "session"))
        if self._session is None:
            stored = self._stored_session_rev
            if stored is None:
                try:
                    stored = self.backend.load_session(self.session_id).rev
                except NotFound:
                    stored = None
            session.rev = next_rev(stored)
            self._rev_units["session"] = self._unit
        else:
            session.rev = self._staged_rev("session", self._session.rev)
        self._session = session
        self._bumped.append(session)

    def put_slot(self, slot: Slot) -> None:
        validate_id(slot.id, "slot")
        slot.rev = self._slot_rev(slot.id)
        self._slots[slot.id] = (slot, "put", ())
        self._bumped.append(slot)

    def append_messages(self, slot: Slot, count: int) -> None:
        validate_id(slot.id, "slot")
        known = self._slots.get(slot.id)
        if known is not None:
            # Written in this transaction already: the whole slot goes as one write.
            if known[1] == "append" and known[0] is slot:
                slot.rev = self._slot_rev(slot.id)
                appended = known[2]
                if appended[-1][1] == slot.rev:  # the same unit: one line
                    appended = (*appended[:-1], (appended[-1][0] + count, slot.rev))
                else:
                    appended = (*appended, (count, slot.rev))
                self._slots[slot.id] = (slot, "append", appended)
            else:
                self.put_slot(slot)
            return
        stored = self.backend.stored(self.session_id, slot.id, slot.rev)
        problem = stored.extended_by(slot, count)
        if problem is not None:
            raise Conflict(f"slot {slot.id!r} cannot be appended to as given: {problem}")
        if slotlog.header_of(slot) != stored.header:
            self.put_slot(slot)  # its settings changed too: written whole
            return
        slot.rev = self._slot_rev(slot.id)
        self._slots[slot.id] = (slot, "append", ((count, slot.rev),))
        self._bumped.append(slot)

    def delete_slot(self, slot_id: str) -> None:
        validate_id(slot_id, "slot")
        self._slots[slot_id] = (None, "put", ())

    def put_draft(self, draft: Draft) -> None:
        self.backend.draft_path(self.session_id, draft.slot)  # a link in its way is refused
        self._drafts[draft.slot] = draft

    def delete_draft(self, slot_id: str) -> bool:
        validate_id(slot_id, "slot")
        try:
            self.load_draft(self.session_id, slot_id)
            existed = True
        except NotFound:
            existed = False
        except (CorruptDocument, InvalidId):
            existed = True
        self._drafts[slot_id] = None
        return existed

    def drop_legacy_draft(self) -> None:
        self._drop_legacy = True

    def set_removed_checkpoints(self, ids: Iterable[str]) -> None:
        self._removed = sorted(set(ids))

    def write_cache(self, name: str, data: bytes | None, *, append: bool = False) -> None:
        if name not in CACHE_FILES:
            raise StoreError(f"no cache {name!r}")
        if data is None or not append:
            self._caches[name] = data
            self._cache_appends.pop(name, None)
        elif name in self._caches:
            self._caches[name] = (self._caches[name] or b"") + data
        else:
            self._cache_appends.setdefault(name, bytearray()).extend(data)

    # ---- commit --------------------------------------------------------------------

    def ops(self) -> list[Op]:
        """The changes of this transaction as the journal's records hold them."""
        ops: list[Op] = []
        for slot_id, (slot, how, appended) in self._slots.items():
            name = f"{layout.SLOTS}/{slot_id}{layout.DOCUMENT}"
            log_name = slotlog.log_name(name)
            if slot is None:
                ops += [["del", name], ["del", log_name]]
            elif how == "append":
                path = self.backend.slot_path(self.session_id, slot_id)
                base = self.backend.slot_base(self.session_id, slot_id)
                ops.append(slotlog.append_op(path, log_name, slot, appended, base))
                self._written.append((slot, base))
            else:
                data = dump_document(slot)
                ops += [self._put(name, data), ["del", log_name]]
                self._written.append((slot, slotlog.base_of(data)))
        for slot_id, draft in self._drafts.items():
            name = f"{layout.DRAFTS}/{slot_id}{layout.DOCUMENT}"
            if draft is None:
                ops.append(["del", name])
            else:
                data = draft.model_dump_json(indent=2).encode() + b"\n"
                ops.append(self._put(name, data))
        if self._drop_legacy:
            ops.append(["del", layout.LEGACY_DRAFT])
        if self._log is not None:
            ops += self._log.ops(f"{layout.CHECKPOINTS}/{layout.LOG}", self._put)
        if self._removed is not None:
            data = orjson.dumps(self._removed)
            ops.append(["put", f"{layout.CHECKPOINTS}/{layout.REMOVED}", pack_data(data)])
        for name, cache in self._caches.items():
            where = f"{layout.CHECKPOINTS}/{CACHE_FILES[name]}"
            if cache is None:
                ops.append(["del", where])
            elif name == "heads":  # rewritten by every turn: in place
                ops.append(self._overwrite(where, cache))
            else:
                ops.append(["put", where, pack_data(cache)])
        for name, lines in self._cache_appends.items():
            path = self.backend.cache_path(self.session_id, name)
            try:
                offset = os.stat(path, follow_symlinks=False).st_size
            except FileNotFoundError:
                offset = 0
            where = f"{layout.CHECKPOINTS}/{CACHE_FILES[name]}"
            ops.append(["at", where, offset, pack_data(bytes(lines))])
        if self._session is not None:
            ops.append(self._overwrite(layout.SESSION, dump_document(self._session)))
        return ops

    def _overwrite(self, name: str, data: bytes) -> Op:
        """A small document every turn rewrites (the session, the heads cache): written in
        place over the old one when it fits in the file's size, padded with blanks (JSON
        allows them), which costs neither a rename nor new blocks (a full disk cannot
        fail it); else put whole, padded to the next 4 KiB so it fits in place again.
        Readers see one or the other: the backend reads these two with a check of the
        journal before and after (FileBackend.consistent)."""
        path = self.backend.session_dir(self.session_id) / name
        try:
            size = os.stat(path, follow_symlinks=False).st_size
        except FileNotFoundError:
            size = 0
        if 0 < len(data) <= size:
            return ["over", name, pack_data(data), size]
        padded = -(-len(data) // 4096) * 4096
        return self._put(name, data + b" " * (padded - len(data)))

    def _put(self, name: str, data: bytes) -> Op:
        """A put: inline in the journal, or for a large document a temp file written (and
        synced) first, which the journal's record then moves into place."""
        if len(data) < LARGE_PUT:
            return ["put", name, pack_data(data)]
        directory = self.backend.session_dir(self.session_id)
        target = directory / name
        make_dirs(target.parent)
        fd, temp = tempfile.mkstemp(
            dir=target.parent, prefix=f".{target.name}.", suffix=TEMP_SUFFIX
        )
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
                handle.flush()
                if self.backend.durable:
                    os.fsync(handle.fileno())
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.unlink(temp)
            raise StoreError(f"cannot write {target}: {exc.strerror}") from exc
        return ["mv", str(Path(temp).relative_to(directory)), name]

    @contextlib.contextmanager
    def savepoint(self) -> Iterator[None]:
        """A unit of work inside this transaction: if it fails, what it staged is undone
        and the transaction goes on from where it was; a document written after it gets
        a new revision. Messages are values (a unit replaces one, never changes it), so
        a zone is kept as the list of its messages."""
        saved = _Saved(self)
        self._unit += 1  # what was written before it is of another unit too
        try:
            yield
        except BaseException:
            saved.restore(self)
            raise
        finally:
            self._unit += 1

    def aborted(self) -> None:
        """Nothing of this Tx was written: its documents are at no stored revision."""
        for document in self._bumped:
            document.rev = 0

    def committed(self) -> None:
        for slot, base in self._written:
            self.backend.remember(self.session_id, slot, base)


class _SavedSlot:
    """A staged slot as a savepoint found it: its zones, header and revision."""

    __slots__ = ("config", "meta", "rev", "slot", "zones")

    def __init__(self, slot: Slot) -> None:
        self.slot = slot
        self.rev = slot.rev
        self.zones = {zone: list(getattr(slot, zone)) for zone in ZONES}
        self.config = slot.config.model_dump_json()
        self.meta = slot.meta.model_dump_json()

    def restore(self) -> None:
        slot = self.slot
        for zone, messages in self.zones.items():
            if getattr(slot, zone) != messages:
                setattr(slot, zone, messages)
        if slot.config.model_dump_json() != self.config:
            slot.config = SlotConfig.model_validate_json(self.config)
        if slot.meta.model_dump_json() != self.meta:
            slot.meta = SlotMeta.model_validate_json(self.meta)
        slot.rev = self.rev


class _Saved:
    """What a FileTx had staged when a savepoint began (see FileTx.savepoint)."""

    def __init__(self, tx: FileTx) -> None:
        session = tx._session
        self.session = None if session is None else (session.model_dump_json(), session.rev)
        self.slots = dict(tx._slots)
        self.slot_states = [_SavedSlot(slot) for slot, _, _ in tx._slots.values() if slot]
        self.drafts = dict(tx._drafts)
        self.log = tx._log
        self.log_state = None if tx._log is None else tx._log.state()
        self.removed = None if tx._removed is None else list(tx._removed)
        self.caches = dict(tx._caches)
        self.cache_appends = {name: len(data) for name, data in tx._cache_appends.items()}
        self.bumped = len(tx._bumped)
        self.drop_legacy = tx._drop_legacy
        self.stored_session_rev = tx._stored_session_rev
        self.rev_units = dict(tx._rev_units)

    def restore(self, tx: FileTx) -> None:
        if self.session is None:
            tx._session = None
        else:
            data, rev = self.session
            tx._session = Session.model_validate_json(data)
            tx._session.rev = rev
        for state in self.slot_states:
            state.restore()
        tx._slots = self.slots
        tx._drafts = self.drafts
        tx._log = self.log
        if self.log is not None and self.log_state is not None:
            self.log.rewind(self.log_state)
        tx._removed = self.removed
        tx._caches = self.caches
        appends: dict[str, bytearray] = {}
        for name, size in self.cache_appends.items():
            appends[name] = tx._cache_appends[name]
            del appends[name][size:]
        tx._cache_appends = appends
        for document in tx._bumped[self.bumped :]:
            if not any(document is state.slot for state in self.slot_states):
                document.rev = 0  # given a revision by the undone unit only: not stored
        del tx._bumped[self.bumped :]
        tx._drop_legacy = self.drop_legacy
        tx._stored_session_rev = self.stored_session_rev
        tx._rev_units = self.rev_units
