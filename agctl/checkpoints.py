"""Checkpoints: snapshots of a whole session, rollback, diff and fork — in O(delta) space.

Everything lives under `sessions/<id>/checkpoints/` (the format is in docs/checkpoints.md):

    log            append-only records (agctl.pack): message nodes, document blobs and the
                   checkpoints that refer to them; a checkpoint's id is its offset there
    index.jsonl    one summary line per checkpoint, for listing; a cache that repairs
                   itself from the log
    heads.json     what the latest checkpoint refers to, per slot, with the version of the
                   slot file it saw; a cache that lets the next checkpoint skip unchanged
                   slots and store only new messages
    removed.json   ids of removed checkpoints

A checkpoint costs its new messages plus a small record; reading one walks only its own
chains, whatever the number of checkpoints.
"""

from __future__ import annotations

import contextlib
import difflib
import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, ClassVar

import orjson
from pydantic import Field, ValidationError

from agctl import schema
from agctl.errors import (
    AlreadyExists,
    CorruptDocument,
    DataError,
    InvalidInput,
    NotFound,
    StoreError,
    UsageError,
)
from agctl.fsio import (
    append_durably,
    current_version,
    make_dirs,
    read_bytes,
    remove_file,
    write_atomic,
)
from agctl.hashing import content_hash, data_hash, line_sum
from agctl.ids import BASE32_ALPHABET, resolve_prefix, validate_id
from agctl.models import Document, Message, Model, Session, Slot, message_list_adapter, utcnow
from agctl.pack import (
    NO_PARENT,
    Log,
    NoRecord,
    checked_value,
    common_prefix,
    encode_record,
)
from agctl.storage.file import layout
from agctl.store import Store
from agctl.validation import validation_summary
from agctl.vocab import ZONES

log = logging.getLogger("agctl.checkpoint")

# Session fields that change with every turn are kept in each checkpoint record; the
# rest of the session document is a blob, stored again only when it changes.
VOLATILE_SESSION = frozenset({"updated_at", "current_slot", "turn_count", "cost"})

schema.CURRENT.setdefault("checkpoint", (1, 0))
schema.MIGRATIONS.setdefault("checkpoint", [])


def checkpoint_id(offset: int) -> str:
    """A checkpoint's id: its offset in the log, in base32, at least four characters."""
    digits = ""
    while True:
        offset, digit = divmod(offset, 32)
        digits = BASE32_ALPHABET[digit] + digits
        if not offset:
            break
    return digits.rjust(4, "0")


def checkpoint_offset(identifier: str) -> int:
    value = 0
    for char in identifier:
        digit = BASE32_ALPHABET.find(char)
        if digit < 0:
            raise NotFound(f"checkpoint {identifier!r} not found")
        value = value * 32 + digit
    return value


class SlotEntry(Model):
    doc: int
    meta: dict[str, Any]
    zones: list[tuple[int, int]]  # (tip offset, node count) for each of ZONES


class Checkpoint(Document):
    """The record of one checkpoint in the log."""

    kind: ClassVar[str] = "checkpoint"
    id: str = ""
    turn_index: int
    created_at: datetime = Field(default_factory=utcnow)
    label: str | None = None
    auto: bool = False
    # The checkpoint the session descended from when this one was taken: the newest
    # checkpoint then, or the target of the latest rollback. Undo follows these links.
    parent: int | None = None
    # The command a checkpoint was written before ("msg clear"): it undoes that edit, and
    # `turn undo`, which returns to the state after a turn, passes over it.
    edit: str | None = None
    session_static: int
    session_volatile: dict[str, Any]
    slots: dict[str, SlotEntry]

    def summary(self, end: int = 0) -> CheckpointSummary:
        return CheckpointSummary(
            id=self.id,
            offset=checkpoint_offset(self.id),
            end=end,
            turn_index=self.turn_index,
            created_at=self.created_at,
            label=self.label,
            auto=self.auto,
            edit=self.edit,
            current_slot=str(self.session_volatile.get("current_slot", "")),
            slot_count=len(self.slots),
            message_count=sum(count for entry in self.slots.values() for _, count in entry.zones),
        )


class CheckpointSummary(Model):
    id: str
    offset: int
    end: int
    # The record's line fingerprint (Log.line_digest): an index line whose record no
    # longer reads the same (a log cut short and grown again) is dropped and rebuilt.
    digest: str | None = None
    turn_index: int
    created_at: datetime
    label: str | None = None
    auto: bool = False
    edit: str | None = None
    current_slot: str = ""
    slot_count: int = 0
    message_count: int = 0


@dataclass
class SessionState:
    """A whole session in memory: the session document and every slot."""

    session: Session
    slots: dict[str, Slot]


@dataclass
class Pending:
    """A reference to a record of the batch being written, resolved once it is placed."""

    index: int


Ref = int | Pending


def _place(ref: Ref, offsets: list[int]) -> int:
    return offsets[ref.index] if isinstance(ref, Pending) else ref


@dataclass
class Batch:
    records: list[Callable[[list[int]], Any]] = field(default_factory=list)

    def add(self, build: Callable[[list[int]], Any]) -> Pending:
        self.records.append(build)
        return Pending(len(self.records) - 1)


@dataclass
class TurnHint:
    """What a turn just did to one slot: appended `appended` messages to a known version."""

    slot: Slot
    base_version: tuple[int, int, int] | None
    appended: int


class Checkpointer:
    """Create, list, read, diff, roll back to, fork from and remove checkpoints."""

    def __init__(self, store: Store) -> None:
        self.store = store

    # ---- paths and caches ----------------------------------------------------------

    def directory(self, session_id: str) -> Path:
        return self.store.session_subdir(session_id, layout.CHECKPOINTS)

    def _path(self, session_id: str, where: Callable[[Path], Path]) -> Path:
        """A file of the session's checkpoints (`where` is one of layout's), its folder
        checked first."""
        self.directory(session_id)
        return where(self.store.session_dir(session_id))

    def _log(self, session_id: str) -> Log:
        return Log(self._path(session_id, layout.checkpoint_log))

    def _load_heads(self, session_id: str, log_size: int) -> dict[str, Any]:
        """The heads cache, or an empty one when it is missing, damaged or not of this log."""
        path = self._path(session_id, layout.checkpoint_heads)
        try:
            heads = checked_value(read_bytes(path, "heads"))
        except NotFound:
            return {"slots": {}}
        if heads is None:
            log.warning("ignoring %s: damaged (its checksum fails)", path)
        elif _valid_heads(heads, log_size) and self._describes(session_id, heads):
            return heads  # type: ignore[no-any-return]
        else:
            log.warning("ignoring %s: it does not describe this log", path)
        return {"slots": {}}

    def _describes(self, session_id: str, heads: dict[str, Any]) -> bool:
        """Whether the log still holds, where the cache says, the record it was made after."""
        tail = heads.get("tail")
        if not (isinstance(tail, list) and len(tail) == 2 and isinstance(tail[0], int)):
            return False
        return bool(self._log(session_id).line_digest(tail[0]) == tail[1])

    def _save_heads(self, session_id: str, heads: dict[str, Any], history: Log, last: int) -> None:
        """Best effort: a cache the log can do without (a full or read-only disk is no error
        once the checkpoint itself is in the log). `last` is the offset of the log's last
        record, whose fingerprint ties the cache to this log."""
        path = self._path(session_id, layout.checkpoint_heads)
        heads["tail"] = [last, history.line_digest(last)]
        try:
            write_atomic(path, encode_record(heads), durable=False)
        except StoreError as exc:
            log.warning("checkpoint cache not updated: %s", exc)
            with contextlib.suppress(OSError):
                path.unlink()  # a stale cache must not outlive the log it describes

    def _removed(self, session_id: str) -> set[str]:
        path = self._path(session_id, layout.removed_checkpoints)
        try:
            return set(orjson.loads(read_bytes(path)))
        except NotFound:
            return set()
        except (orjson.JSONDecodeError, TypeError) as exc:
            raise CorruptDocument(path, str(exc)) from None

    # ---- create --------------------------------------------------------------------

    def create(
        self,
        session_id: str,
        *,
        label: str | None = None,
        auto: bool = False,
        hint: TurnHint | None = None,
        edit: str | None = None,
    ) -> Checkpoint:
        """Snapshot the session as it is now; only what is not stored yet is written.

        `hint` tells which messages a turn just appended, so that they alone are hashed;
        `edit` names the command about to change the session (see Store.undoable).
        """
        with self.store.lock(session_id):
            make_dirs(self.directory(session_id))
            history = self._log(session_id)
            size = history.size()
            heads = self._load_heads(session_id, size)
            parent = self._head(history)
            session = self.store.load_session(session_id)
            batch = Batch()
            static = _static_session(session)
            volatile = {
                k: v for k, v in session.model_dump(mode="json").items() if k in VOLATILE_SESSION
            }
            static_ref = self._blob(batch, heads.get("session"), static)
            planned: dict[str, dict[str, Any]] = {}
            for slot_id in self.store.slot_ids(session_id):
                planned[slot_id] = self._plan_slot(session_id, history, heads, batch, slot_id, hint)

            def record(offsets: list[int]) -> dict[str, Any]:
                return {
                    "c": {
                        "schema_version": schema.format_version(schema.CURRENT["checkpoint"]),
                        "turn_index": session.turn_count,
                        "created_at": utcnow().isoformat().replace("+00:00", "Z"),
                        "label": label,
                        "auto": auto,
                        "parent": parent,
                        **({"edit": edit} if edit is not None else {}),
                        "session_static": _place(static_ref, offsets),
                        "session_volatile": volatile,
                        "slots": {
                            slot_id: {
                                "doc": _place(plan["doc"], offsets),
                                "meta": plan["meta"],
                                "zones": [
                                    [_place(tip, offsets), count] for tip, count in plan["zones"]
                                ],
                            }
                            for slot_id, plan in planned.items()
                        },
                    }
                }

            batch.add(record)
            offsets = history.append(batch.records)
            end = history.size()
            checkpoint = self._checkpoint(history, offsets[-1])
            summary = checkpoint.summary(end)
            summary.digest = history.line_digest(offsets[-1])
            self._append_index(session_id, summary)
            heads = {
                "end": end,
                "session": {"hash": content_hash(static), "ref": checkpoint.session_static},
                "slots": {
                    slot_id: {
                        "version": plan["version"],
                        "doc_hash": plan["doc_hash"],
                        **checkpoint.slots[slot_id].model_dump(mode="json"),
                    }
                    for slot_id, plan in planned.items()
                },
            }
            self._save_heads(session_id, heads, history, offsets[-1])
        log.info(
            "checkpoint written: %s/%s turn %d, %d bytes",
            session_id,
            checkpoint.id,
            checkpoint.turn_index,
            end - size,
        )
        return checkpoint

    @staticmethod
    def _head(history: Log) -> int | None:
        """The checkpoint the live session descends from: the last checkpoint record, or
        the target of a rollback written after it."""
        last = history.last()
        if last is None:
            return None
        offset, record = last
        if "r" in record:
            return int(record["r"])
        return offset if "c" in record else None

    @staticmethod
    def _blob(batch: Batch, known: dict[str, Any] | None, data: dict[str, Any]) -> Ref:
        digest = content_hash(data)
        if known and known.get("hash") == digest:
            return int(known["ref"])
        return batch.add(lambda offsets: {"b": digest, "d": data})

    def _plan_slot(
        self,
        session_id: str,
        history: Log,
        heads: dict[str, Any],
        batch: Batch,
        slot_id: str,
        hint: TurnHint | None,
    ) -> dict[str, Any]:
        """What one slot's entry will hold, adding to `batch` only what is new."""
        known = heads["slots"].get(slot_id)
        path = layout.slot_document(self.store.session_dir(session_id), slot_id)
        version = current_version(path)
        if known and version is not None and list(version) == known.get("version"):
            return {
                "version": known["version"],
                "doc_hash": known["doc_hash"],
                "doc": known["doc"],
                "meta": known["meta"],
                "zones": [tuple(z) for z in known["zones"]],
            }
        slot = None
        if hint is not None and hint.slot.id == slot_id and hint.slot._version == version:
            slot = hint.slot
        if slot is None:
            slot = self.store.load_slot(session_id, slot_id)
        document = _without_zones(slot)
        meta = slot.meta.model_dump(mode="json")
        doc_ref = self._blob(
            batch, {"hash": known["doc_hash"], "ref": known["doc"]} if known else None, document
        )
        appended_to = (
            hint.appended
            if hint is not None
            and hint.slot.id == slot_id
            and known is not None
            and hint.base_version is not None
            and list(hint.base_version) == known.get("version")
            else None
        )
        zones: list[tuple[Ref, int]] = []
        for position, zone in enumerate(ZONES):
            messages: list[Message] = getattr(slot, zone)
            if appended_to is not None and known is not None:
                tip, count = known["zones"][position]
                extra = appended_to if zone == "messages" else 0
                if len(messages) == count + extra:
                    new = messages_to_json(messages[count:])
                    ref, _ = self._extend(batch, tip, new)
                    zones.append((ref, len(messages)))
                    continue
            dumped = messages_to_json(messages)
            zones.append(self._store_zone(history, heads, batch, slot_id, position, dumped))
        return {
            "version": list(version) if version else None,
            "doc_hash": content_hash(document),
            "doc": doc_ref,
            "meta": meta,
            "zones": zones,
        }

    @staticmethod
    def _extend(batch: Batch, tip: Ref, messages: Sequence[dict[str, Any]]) -> tuple[Ref, int]:
        """Chain `messages` after node `tip`; return the new tip."""
        parent: Ref = tip
        for message in messages:
            digest = content_hash(message)

            def node(
                offsets: list[int],
                parent: Ref = parent,
                digest: str = digest,
                message: dict[str, Any] = message,
            ) -> dict[str, Any]:
                return {"h": digest, "p": _place(parent, offsets), "m": message}

            parent = batch.add(node)
        return parent, len(messages)

    def _store_zone(
        self,
        history: Log,
        heads: dict[str, Any],
        batch: Batch,
        slot_id: str,
        position: int,
        messages: list[dict[str, Any]],
    ) -> tuple[Ref, int]:
        """Chain a zone onto the longest stored prefix among the latest checkpoint's zones."""
        if not messages:
            return NO_PARENT, 0
        hashes = [content_hash(m) for m in messages]
        same: list[tuple[int, int]] = []
        others: list[tuple[int, int]] = []
        for other_id, entry in heads["slots"].items():
            for other_position, (tip, count) in enumerate(entry["zones"]):
                mine = other_id == slot_id and other_position == position
                (same if mine else others).append((tip, count))
        best_nodes: list[tuple[str, int]] = []
        best = 0
        for tip, count in [*same, *others]:
            if not count:
                continue
            nodes = [(digest, offset) for digest, offset, _ in history.chain(tip, count)]
            length = common_prefix(hashes, [digest for digest, _ in nodes])
            if length > best:
                best, best_nodes = length, nodes
                if best == len(hashes):
                    break
        tip_ref: Ref = best_nodes[best - 1][1] if best else NO_PARENT
        ref, _ = self._extend(batch, tip_ref, messages[best:])
        return ref, len(messages)

    # ---- read ----------------------------------------------------------------------

    def _checkpoint(self, history: Log, offset: int) -> Checkpoint:
        record = history.read(offset)
        data = record.get("c")
        if not isinstance(data, dict):
            raise NotFound(f"no checkpoint {checkpoint_id(offset)!r} in {history.path}")
        try:
            checkpoint = Checkpoint.model_validate(data)
        except ValidationError as exc:
            summary = validation_summary(exc, "record")
            raise CorruptDocument(history.path, f"checkpoint at byte {offset}: {summary}") from None
        checkpoint.id = checkpoint_id(offset)
        return checkpoint

    def _append_index(self, session_id: str, summary: CheckpointSummary) -> None:
        """Best effort: the index is rebuilt from the log when it is behind."""
        line = encode_record(summary.model_dump(mode="json"))
        path = self._path(session_id, layout.checkpoint_index)
        try:
            append_durably(path, lambda offset: line, durable=False)
        except StoreError as exc:
            log.warning("checkpoint index not updated: %s", exc)

    def summaries(self, session_id: str) -> list[CheckpointSummary]:
        """Every checkpoint, newest first (from the index, completed from the log)."""
        self.store.load_session(session_id)
        history = self._log(session_id)
        found: dict[int, CheckpointSummary] = {}
        try:
            index = self._path(session_id, layout.checkpoint_index)
            lines = read_bytes(index, "checkpoint index").splitlines()
        except NotFound:
            lines = []
        size = history.size()
        damaged = False
        indexed: list[CheckpointSummary] = []
        for line in lines:
            try:
                summary = CheckpointSummary.model_validate(checked_value(line))
            except ValidationError:
                damaged = True  # garbled, edited (its checksum fails), or of an old format
                continue
            if summary.end <= size:
                indexed.append(summary)
        digests = history.line_digests([s.offset for s in indexed])
        for summary in indexed:
            if summary.digest is None or digests.get(summary.offset) != summary.digest:
                damaged = True  # not this log's record (cut short and grown again?)
                continue
            found[summary.offset] = summary
        # A damaged line may hide any checkpoint: then the whole log is scanned again.
        indexed_end = 0 if damaged else max((s.end for s in found.values()), default=0)
        if damaged:
            found = {}
            self._drop_index(session_id)
        if indexed_end < size:
            problems: list[CorruptDocument] = []
            for offset, end, record in history.scan(indexed_end, problems):
                if "c" in record and offset not in found:
                    try:
                        summary = self._checkpoint(history, offset).summary(end)
                    except DataError as exc:
                        log.warning("skipping %s", exc)
                        continue
                    summary.digest = history.line_digest(offset)
                    found[offset] = summary
                    self._append_index(session_id, summary)
            for problem in problems:
                log.warning("skipping %s ('agctl ckpt verify' checks the whole log)", problem)
        removed = self._removed(session_id)
        return sorted(
            (s for s in found.values() if s.id not in removed),
            key=lambda s: s.offset,
            reverse=True,
        )

    def _drop_index(self, session_id: str) -> None:
        """Remove an index that disagrees with the log; the listing rebuilds it."""
        try:
            remove_file(self._path(session_id, layout.checkpoint_index))
        except StoreError as exc:
            log.warning("checkpoint index not rebuilt: %s", exc)

    def ids(self, session_id: str) -> list[str]:
        return [s.id for s in self.summaries(session_id)]

    def resolve(self, session_id: str, prefix: str) -> str:
        validate_id(prefix, "checkpoint")
        if len(prefix) >= 4 and prefix not in self._removed(session_id):
            try:
                self.load(session_id, prefix)
                return prefix
            except NotFound:
                pass
        return resolve_prefix("checkpoint", prefix, self.ids(session_id))

    def load(self, session_id: str, identifier: str) -> Checkpoint:
        """The checkpoint with this exact id, read straight from its offset."""
        history = self._log(session_id)
        offset = checkpoint_offset(identifier)
        if (
            checkpoint_id(offset) != identifier
            or offset >= history.size()
            or identifier in self._removed(session_id)
        ):
            raise NotFound(f"checkpoint {identifier!r} not found in session {session_id!r}")
        try:
            return self._checkpoint(history, offset)
        except NoRecord:
            raise NotFound(f"checkpoint {identifier!r} not found") from None
        except (CorruptDocument, NotFound) as exc:
            # A record starts there but fails its checksum (it cannot be told from a
            # checkpoint), or the index knew a checkpoint there: damaged, not absent.
            damaged = isinstance(exc, CorruptDocument) and history.checked()
            if damaged or identifier in self._indexed_ids(session_id):
                raise CorruptDocument(
                    history.path, f"checkpoint {identifier} (byte {offset}) is damaged"
                ) from None
            raise NotFound(f"checkpoint {identifier!r} not found") from None

    def _indexed_ids(self, session_id: str) -> set[str]:
        ids: set[str] = set()
        try:
            lines = read_bytes(self._path(session_id, layout.checkpoint_index)).splitlines()
        except NotFound:
            return ids
        for line in lines:
            with contextlib.suppress(TypeError, KeyError):
                ids.add(str(checked_value(line)["id"]))
        return ids

    def state(self, session_id: str, checkpoint: Checkpoint) -> SessionState:
        """Rebuild the whole session as it was at `checkpoint`; any record it needs that
        fails its checksum or hash is an error naming the checkpoint, never a different
        state."""
        history = self._log(session_id)
        slots: dict[str, Slot] = {}
        try:
            for slot_id, entry in checkpoint.slots.items():
                document = dict(history.blob(entry.doc))
                document["meta"] = entry.meta
                for zone, (tip, count) in zip(ZONES, entry.zones, strict=True):
                    document[zone] = [data for _, _, data in history.chain(tip, count)]
                slots[slot_id] = _validate(Slot, document, history.path, checkpoint.id)
            static = history.blob(checkpoint.session_static)
        except CorruptDocument as exc:
            if exc.reason.startswith("checkpoint "):
                raise
            raise CorruptDocument(
                exc.path, f"checkpoint {checkpoint.id} cannot be restored: {exc.reason}"
            ) from None
        # A session imported under another id keeps its log: the id is the one it has now.
        session_doc = {**static, **checkpoint.session_volatile, "id": session_id}
        session = _validate(Session, session_doc, history.path, checkpoint.id)
        return SessionState(session=session, slots=slots)

    def live_state(self, session_id: str) -> SessionState:
        session = self.store.load_session(session_id)
        slots = {slot.id: slot for slot in self.store.list_slots(session_id)}
        return SessionState(session=session, slots=slots)

    def matching_live(self, session_id: str, summaries: Sequence[CheckpointSummary]) -> set[str]:
        """The ids among `summaries` of the checkpoints that hold the live state (a
        rollback to one would change nothing but timestamps).

        Cheap: the summaries rule out most checkpoints without reading them; a slot file
        not replaced since the latest checkpoint or rollback (the heads cache says) is
        compared by its references alone; only other slots are read and hashed. No
        checkpoint is rebuilt, and a damaged one matches nothing.
        """
        session = self.store.load_session(session_id)
        slot_ids = self.store.slot_ids(session_id)
        candidates = [
            s
            for s in summaries
            if (s.turn_index, s.current_slot, s.slot_count)
            == (session.turn_count, session.current_slot, len(slot_ids))
        ]
        if not candidates:
            return set()
        history = self._log(session_id)
        self.store.session_subdir(session_id, layout.SLOTS)
        session_dir = self.store.session_dir(session_id)
        unchanged = {
            slot_id: {k: known[k] for k in ("doc", "meta", "zones")}
            for slot_id, known in self._load_heads(session_id, history.size())["slots"].items()
            if slot_id in slot_ids
            and list(current_version(layout.slot_document(session_dir, slot_id)) or ())
            == known.get("version")
        }
        live = _LiveHashes(self.store, session, slot_ids, unchanged)
        matched: set[str] = set()
        for summary in candidates:
            try:
                if live.held_by(history, self._checkpoint(history, summary.offset)):
                    matched.add(summary.id)
            except DataError:
                continue  # `ckpt verify` is what reports it
        return matched

    # ---- rollback, fork, undo -------------------------------------------------------

    def rollback(self, session_id: str, identifier: str) -> tuple[Checkpoint, Checkpoint]:
        """Make the session exactly what it was; the replaced state is checkpointed first.

        Returns (the checkpoint restored, the checkpoint of the state replaced).
        """
        with self.store.lock(session_id):
            target = self.load(session_id, identifier)
            state = self.state(session_id, target)
            saved = self.create(session_id, label=f"before rollback to {target.id}", auto=True)
            journal = layout.journal(self.store.session_dir(session_id), layout.RESTORE_JOURNAL)
            write_atomic(journal, orjson.dumps({"checkpoint": target.id}))
            self._restore(session_id, target, state)
            remove_file(journal)
        log.info("rollback: %s to %s (turn %d)", session_id, target.id, target.turn_index)
        return target, saved

    def _restore(self, session_id: str, target: Checkpoint, state: SessionState) -> None:
        self.store.replace_state(state.session, list(state.slots.values()))
        history = self._log(session_id)
        (last,) = history.append([{"r": checkpoint_offset(target.id)}])
        heads = {
            "end": history.size(),
            "session": {
                "hash": content_hash(_static_session(state.session)),
                "ref": target.session_static,
            },
            "slots": {
                slot_id: {
                    "version": list(state.slots[slot_id]._version or ()),
                    "doc_hash": content_hash(_without_zones(state.slots[slot_id])),
                    **entry.model_dump(mode="json"),
                }
                for slot_id, entry in target.slots.items()
            },
        }
        self._save_heads(session_id, heads, history, last)

    def fork(self, session_id: str, identifier: str, new_id: str | None = None) -> Session:
        """A new child session starting from the checkpoint; the original is untouched."""
        from agctl.ids import new_session_id

        if new_id is not None:
            validate_id(new_id, "session")
            if new_id in self.store.session_ids():
                raise AlreadyExists(f"session {new_id!r} already exists")
        target = self.load(session_id, identifier)
        state = self.state(session_id, target)
        now = utcnow()
        session = state.session.model_copy(
            update={
                "id": new_id or new_session_id(),
                "parent_id": session_id,
                "created_at": now,
                "updated_at": now,
            }
        )
        self.store.materialize_session(session, list(state.slots.values()))
        log.info("fork: %s from %s/%s", session.id, session_id, target.id)
        return session

    def _lineage(self, session_id: str) -> Iterator[Checkpoint]:
        """The checkpoints the live session descends from, newest first (removed ones too:
        their links still lead on)."""
        history = self._log(session_id)
        offset = self._head(history)
        while offset is not None:
            checkpoint = self._checkpoint(history, offset)
            yield checkpoint
            offset = checkpoint.parent

    def undo_targets(self, session_id: str, turns: int) -> dict[int, Checkpoint]:
        """What `undo` would restore for each of the last `turns` turns, by the turn it
        returns to: in the session's own history, the newest checkpoint at that turn that
        is not removed and was not written before an edit."""
        current = self.store.load_session(session_id).turn_count
        wanted = set(range(max(current - turns, 0), current))
        if not wanted:
            return {}
        removed = self._removed(session_id)
        found: dict[int, Checkpoint] = {}
        for checkpoint in self._lineage(session_id):
            if checkpoint.turn_index < min(wanted):
                break
            turn = checkpoint.turn_index
            usable = checkpoint.edit is None and checkpoint.id not in removed
            if turn in wanted and turn not in found and usable:
                found[turn] = checkpoint
                if len(found) == len(wanted):
                    break
        return found

    def checkpoint_at_turn(self, session_id: str, turn: int) -> Checkpoint:
        """The checkpoint at `turn` in the current session's own history (its lineage);
        a checkpoint written before an edit is not one: it holds what the edit replaced."""
        removed = self._removed(session_id)
        for checkpoint in self._lineage(session_id):
            usable = checkpoint.edit is None and checkpoint.id not in removed
            if checkpoint.turn_index == turn and usable:
                return checkpoint
            if checkpoint.turn_index < turn:
                break
        raise NotFound(
            f"no checkpoint of session {session_id!r} at turn {turn} "
            "(automatic checkpoints may have been off)"
        )

    def needs_baseline(self, session_id: str) -> bool:
        """Whether a turn must checkpoint the state it starts from to be undoable: the
        session has no checkpoint yet, or it was edited since its latest one (which then
        holds the state before the edit, not the state the turn starts from)."""
        history = self._log(session_id)
        head = self._head(history) if history.size() else None
        if head is None:
            return True
        record = history.read(head).get("c")
        return not isinstance(record, dict) or record.get("edit") is not None

    def undo(self, session_id: str, turns: int = 1) -> tuple[Checkpoint, Checkpoint]:
        """Roll back the last `turns` turns of the session's own history."""
        if turns < 1:
            raise UsageError("the number of turns to undo must be at least 1")
        with self.store.lock(session_id):
            current = self.store.load_session(session_id).turn_count
            if turns > current:
                raise NotFound(f"session {session_id!r} has only {current} turns to undo")
            target = self.checkpoint_at_turn(session_id, current - turns)
            return self.rollback(session_id, target.id)

    # ---- verify --------------------------------------------------------------------

    def verify(self, session_id: str) -> LogReport:
        """Check every record of the session's log (checksum, hash, references) and that
        every checkpoint can be rebuilt from it, in one pass over the log."""
        self.store.load_session(session_id)
        return self.verify_log(session_id, self._log(session_id))

    def verify_log(self, session_id: str, history: Log) -> LogReport:
        """`verify` for any log file (one being imported is checked before it is placed)."""
        report = LogReport(session=session_id, path=str(history.path), bytes=history.size())
        report.checksums = history.checked()
        problems: list[CorruptDocument] = []
        depth: dict[int, int] = {}
        blobs: set[int] = set()
        checkpoints: list[tuple[int, dict[str, Any]]] = []
        for offset, _end, record in history.scan(0, problems):
            report.records += 1
            if "h" in record:
                parent = record.get("p")
                data = record.get("m")
                if not isinstance(data, dict) or content_hash(data) != record["h"]:
                    report.problems.append(f"byte {offset}: node does not match its hash")
                elif parent == NO_PARENT:
                    depth[offset] = 1
                elif isinstance(parent, int) and parent in depth:
                    depth[offset] = depth[parent] + 1
                else:
                    report.problems.append(f"byte {offset}: node's parent {parent} is no node")
            elif "b" in record:
                data = record.get("d")
                if isinstance(data, dict) and content_hash(data) == record["b"]:
                    blobs.add(offset)
                else:
                    report.problems.append(f"byte {offset}: blob does not match its hash")
            elif "c" in record:
                checkpoints.append((offset, record))
        report.problems[:0] = [problem.reason for problem in problems]
        torn_at, torn = history.torn_tail()
        if torn:
            # A crash leaves a prefix of a line; a whole record followed by one more byte
            # is a line whose newline was changed.
            body, sep, digest = torn[:-1].rpartition(b"\t")
            if sep and digest == line_sum(body):
                report.problems.append(
                    f"byte {torn_at}: the newline ending the last record is damaged"
                )
            else:
                report.torn = len(torn)
        if not report.checksums:
            report.unverifiable = report.records
        for offset, _record in checkpoints:
            identifier = checkpoint_id(offset)
            report.checkpoints += 1
            try:
                checkpoint = self._checkpoint(history, offset)
            except DataError as exc:
                report.bad_checkpoints.append({"id": identifier, "reason": str(exc)})
                continue
            reason = _broken_reference(checkpoint, depth, blobs)
            if reason:
                report.bad_checkpoints.append({"id": identifier, "reason": reason})
        return report

    # ---- export and import -------------------------------------------------------

    def export_history(self, session_id: str) -> CheckpointHistory:
        """The session's checkpoint log as it is, verified (a damaged one is refused)."""
        with self.store.lock(session_id):
            history = self._log(session_id)
            report = self.verify(session_id)
            if not report.ok:
                reasons = report.problems + [b["reason"] for b in report.bad_checkpoints]
                raise CorruptDocument(
                    history.path,
                    f"the checkpoint log is damaged ({reasons[0]}); 'agctl ckpt verify' "
                    "says more, and an export without --checkpoints leaves it behind",
                )
            try:
                data = read_bytes(history.path, "checkpoint log")
            except NotFound:
                data = b""
            data = data[: len(data) - report.torn]
            removed = sorted(self._removed(session_id))
        try:
            records = data.decode("utf-8").split("\n")[:-1]
        except UnicodeDecodeError:
            raise CorruptDocument(history.path, "the checkpoint log is not UTF-8") from None
        return CheckpointHistory(records=records, digest=data_hash(data), removed=removed)

    def verify_import(self, session_id: str, directory: Path) -> None:
        """Refuse an imported log, placed in a staged session `directory`, that does not
        verify (raises InvalidInput naming the first problem)."""
        report = self.verify_log(session_id, Log(layout.checkpoint_log(directory)))
        reasons = report.problems + [
            f"checkpoint {b['id']}: {b['reason']}" for b in report.bad_checkpoints
        ]
        if report.torn:
            reasons.append("its last record is cut short")
        if reasons:
            raise InvalidInput(f"the exported checkpoint log does not verify: {reasons[0]}")

    # ---- remove --------------------------------------------------------------------

    def remove(self, session_id: str, identifiers: Sequence[str]) -> list[str]:
        """Remove checkpoints; the history they share with others stays."""
        with self.store.lock(session_id):
            live = set(self.ids(session_id))
            for identifier in identifiers:
                if identifier not in live:
                    raise NotFound(f"checkpoint {identifier!r} not found")
            removed = sorted(self._removed(session_id) | set(identifiers))
            write_atomic(self._path(session_id, layout.removed_checkpoints), orjson.dumps(removed))
        return list(identifiers)

    def prune(self, session_id: str, keep: int, *, everything: bool = False) -> Pruned:
        """Keep the newest `keep` checkpoints and, unless `everything`, the ones `undo`
        needs for the last `keep` turns; remove the rest."""
        with self.store.lock(session_id):
            summaries = self.summaries(session_id)
            newest = [s.id for s in summaries[:keep]]
            protected = (
                set()
                if everything or not keep
                else {c.id for c in self.undo_targets(session_id, keep).values()}
            )
            for_undo = [s.id for s in summaries[keep:] if s.id in protected]
            doomed = [s.id for s in summaries[keep:] if s.id not in protected]
            if doomed:
                self.remove(session_id, doomed)
            return Pruned(removed=doomed, kept=newest, kept_for_undo=for_undo)

    # ---- diff ----------------------------------------------------------------------

    def diff(self, session_id: str, a: str, b: str | None = None) -> dict[str, Any]:
        """What changed from checkpoint `a` to checkpoint `b` (default: the live state)."""
        old = self.state(session_id, self.load(session_id, a))
        new = (
            self.state(session_id, self.load(session_id, b))
            if b is not None
            else self.live_state(session_id)
        )
        return diff_states(old, new, a, b or "live")


class CheckpointHistory(Model):
    """A session's checkpoint log in an export: its records verbatim, one a line (so each
    checkpoint keeps its offset, which is its id), and the ids of removed checkpoints.
    The caches beside the log (index, heads) are rebuilt where it is imported."""

    records: list[str] = Field(description="The log's lines, without their newlines.")
    digest: str = Field(description="BLAKE2b (16 bytes, hex) of the log's bytes.")
    removed: list[str] = Field(default_factory=list, description="Removed checkpoint ids.")

    def log_bytes(self) -> bytes:
        data = b"".join(record.encode() + b"\n" for record in self.records)
        if data_hash(data) != self.digest:
            raise InvalidInput(
                "the exported checkpoint log does not match its digest (changed or cut short)"
            )
        return data


@dataclass
class Pruned:
    """What `prune` removed, and what it kept: the newest, and what `undo` still needs."""

    removed: list[str]
    kept: list[str]
    kept_for_undo: list[str]

    def to_dict(self) -> dict[str, list[str]]:
        return {"removed": self.removed, "kept": self.kept, "kept_for_undo": self.kept_for_undo}


@dataclass
class LogReport:
    """What `ckpt verify` found in one session's checkpoint log."""

    session: str
    path: str
    bytes: int = 0
    records: int = 0
    checkpoints: int = 0
    # False for a log written before checksums: its records are readable, unverifiable.
    checksums: bool = True
    unverifiable: int = 0
    # Bytes of a last record cut short by a crash: harmless, sealed by the next append.
    torn: int = 0
    problems: list[str] = field(default_factory=list)
    bad_checkpoints: list[dict[str, str]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems and not self.bad_checkpoints

    def to_dict(self) -> dict[str, Any]:
        return {
            "session": self.session,
            "path": self.path,
            "ok": self.ok,
            "bytes": self.bytes,
            "records": self.records,
            "checkpoints": self.checkpoints,
            "checksums": self.checksums,
            "unverifiable": self.unverifiable,
            "torn": self.torn,
            "problems": self.problems,
            "bad_checkpoints": self.bad_checkpoints,
        }


def _broken_reference(checkpoint: Checkpoint, depth: dict[int, int], blobs: set[int]) -> str:
    """Why `checkpoint` cannot be rebuilt from the records found, or "" if it can."""
    if checkpoint.session_static not in blobs:
        return f"its session document (byte {checkpoint.session_static}) is not a sound blob"
    for slot_id, entry in checkpoint.slots.items():
        if entry.doc not in blobs:
            return f"slot {slot_id!r}: its document (byte {entry.doc}) is not a sound blob"
        for zone, (tip, count) in zip(ZONES, entry.zones, strict=True):
            if (tip, count) == (NO_PARENT, 0):
                continue
            if depth.get(tip) != count:
                return f"slot {slot_id!r}: its {zone} zone ({count} at byte {tip}) is broken"
    return ""


def _valid_heads(heads: Any, log_size: int) -> bool:
    """Whether a heads cache has the shape the checkpointer relies on, within the log."""
    try:
        if not (isinstance(heads, dict) and 0 <= int(heads["end"]) <= log_size):
            return False
        session = heads.get("session")
        if session is not None and not (
            isinstance(session["hash"], str) and int(session["ref"]) < log_size
        ):
            return False
        for entry in heads["slots"].values():
            SlotEntry.model_validate(entry)
            if not isinstance(entry["doc_hash"], str) or not isinstance(entry["version"], list):
                return False
            if any(int(tip) >= log_size for tip, _ in entry["zones"]):
                return False
        return True
    except (KeyError, TypeError, ValueError, AttributeError, ValidationError):
        return False


class _LiveHashes:
    """The live session as checkpoint records keep it (content hashes, or the references
    of a slot unchanged since the heads cache), each slot read and hashed once at most."""

    def __init__(
        self,
        store: Store,
        session: Session,
        slot_ids: Sequence[str],
        unchanged: dict[str, dict[str, Any]],
    ) -> None:
        self.store = store
        self.session = session
        self.slot_ids = set(slot_ids)
        self.unchanged = unchanged
        document = session.model_dump(mode="json")
        self.volatile = _untimed({k: v for k, v in document.items() if k in VOLATILE_SESSION})
        self.static = content_hash(_static_session(session))
        self._slots: dict[str, tuple[Slot, list[list[str]]]] = {}

    def _slot(self, slot_id: str) -> tuple[Slot, list[list[str]]]:
        if slot_id not in self._slots:
            slot = self.store.load_slot(self.session.id, slot_id)
            zones = [
                [content_hash(m) for m in messages_to_json(getattr(slot, zone))] for zone in ZONES
            ]
            self._slots[slot_id] = slot, zones
        return self._slots[slot_id]

    def held_by(self, history: Log, checkpoint: Checkpoint) -> bool:
        if _untimed(checkpoint.session_volatile) != self.volatile:
            return False
        if checkpoint.slots.keys() != self.slot_ids:
            return False
        if history.read(checkpoint.session_static).get("b") != self.static:
            return False
        for slot_id, entry in checkpoint.slots.items():
            if self.unchanged.get(slot_id) == entry.model_dump(mode="json"):
                continue  # the very references of the slot file as it is
            slot, zones = self._slot(slot_id)
            if _untimed(entry.meta) != _untimed(slot.meta.model_dump(mode="json")):
                return False
            if history.read(entry.doc).get("b") != content_hash(_without_zones(slot)):
                return False
            for (tip, count), hashes in zip(entry.zones, zones, strict=True):
                if count != len(hashes):
                    return False
                if [digest for digest, _, _ in history.chain(tip, count)] != hashes:
                    return False
        return True


def _untimed(document: dict[str, Any]) -> dict[str, Any]:
    """A document without its update time, which every write stamps."""
    return {k: v for k, v in document.items() if k != "updated_at"}


def _static_session(session: Session) -> dict[str, Any]:
    document = session.model_dump(mode="json")
    return {k: v for k, v in document.items() if k not in VOLATILE_SESSION}


def _without_zones(slot: Slot) -> dict[str, Any]:
    """The slot document without its zones and meta: what a doc blob holds."""
    return slot.model_dump(mode="json", exclude={*ZONES, "meta"})


def messages_to_json(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """Messages as stored in a slot document, in one serialiser call."""
    return message_list_adapter().dump_python(list(messages), mode="json")  # type: ignore[no-any-return]


def _validate(model: type[Document], data: dict[str, Any], path: Path, identifier: str) -> Any:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        summary = validation_summary(exc, "document")
        reason = f"checkpoint {identifier}: cannot rebuild the {model.kind}: {summary}"
        raise CorruptDocument(path, reason) from None


def finish_restore(store: Store, session_id: str) -> None:
    """Complete a rollback that was interrupted (called with the session lock held)."""
    checkpointer = Checkpointer(store)
    journal = layout.journal(store.session_dir(session_id), layout.RESTORE_JOURNAL)
    try:
        target_id = str(orjson.loads(read_bytes(journal, "restore journal"))["checkpoint"])
        target = checkpointer.load(session_id, target_id)
    except (orjson.JSONDecodeError, KeyError, TypeError, NotFound) as exc:
        log.warning("dropping an unusable restore journal %s: %s", journal, exc)
        remove_file(journal)
        return
    log.warning("finishing an interrupted rollback of %s to %s", session_id, target_id)
    checkpointer._restore(session_id, target, checkpointer.state(session_id, target))
    remove_file(journal)


# ---- diff ----------------------------------------------------------------------------


def _preview(message: dict[str, Any]) -> str:
    content = message.get("content")
    if content is None:
        text = ""
    else:
        text = content if isinstance(content, str) else orjson.dumps(content).decode()
    if not text and message.get("tool_calls"):
        text = ", ".join(c["function"]["name"] + "()" for c in message["tool_calls"])
    flat = " ".join(str(text).split())
    return flat if len(flat) <= 70 else flat[:69] + "…"


def _flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(data, dict):
        flat: dict[str, Any] = {}
        for key, value in data.items():
            flat.update(_flatten(value, f"{prefix}{key}."))
        return flat
    return {prefix[:-1]: data}


def _zone_diff(old: list[dict[str, Any]], new: list[dict[str, Any]]) -> dict[str, Any]:
    old_hashes = [content_hash(m) for m in old]
    new_hashes = [content_hash(m) for m in new]
    added: list[dict[str, Any]] = []
    removed: list[dict[str, Any]] = []
    changed: list[dict[str, Any]] = []
    matcher = difflib.SequenceMatcher(a=old_hashes, b=new_hashes, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        if tag == "replace" and i2 - i1 == j2 - j1:
            for i, j in zip(range(i1, i2), range(j1, j2), strict=True):
                changed.append(
                    {
                        "index": j,
                        "role": new[j].get("role"),
                        "old": _preview(old[i]),
                        "new": _preview(new[j]),
                    }
                )
            continue
        for i in range(i1, i2):
            removed.append({"index": i, "role": old[i].get("role"), "text": _preview(old[i])})
        for j in range(j1, j2):
            added.append({"index": j, "role": new[j].get("role"), "text": _preview(new[j])})
    return {"added": added, "removed": removed, "changed": changed}


def _tokens(slot: Slot) -> int:
    return sum(m.token_count() for zone in ZONES for m in getattr(slot, zone))


def diff_states(
    old: SessionState, new: SessionState, old_name: str, new_name: str
) -> dict[str, Any]:
    """Per slot: config changes, messages added/removed/changed per zone, token delta."""
    changed: dict[str, Any] = {}
    for slot_id in sorted(old.slots.keys() & new.slots.keys()):
        before, after = old.slots[slot_id], new.slots[slot_id]
        entry: dict[str, Any] = {}
        old_config = _flatten(before.model_dump(mode="json")["config"])
        new_config = _flatten(after.model_dump(mode="json")["config"])
        config = {
            k: [old_config.get(k), new_config.get(k)]
            for k in sorted(old_config.keys() | new_config.keys())
            if old_config.get(k) != new_config.get(k)
        }
        if config:
            entry["config"] = config
        for zone in ZONES:
            zone_diff = _zone_diff(
                [m.model_dump(mode="json") for m in getattr(before, zone)],
                [m.model_dump(mode="json") for m in getattr(after, zone)],
            )
            if any(zone_diff.values()):
                entry[zone] = zone_diff
        delta = _tokens(after) - _tokens(before)
        if entry or delta:
            entry["tokens"] = delta
            changed[slot_id] = entry
    old_memory, new_memory = old.session.memory, new.session.memory
    memory = {
        "added": {k: new_memory[k] for k in sorted(new_memory.keys() - old_memory.keys())},
        "removed": {k: old_memory[k] for k in sorted(old_memory.keys() - new_memory.keys())},
        "changed": {
            k: [old_memory[k], new_memory[k]]
            for k in sorted(old_memory.keys() & new_memory.keys())
            if old_memory[k] != new_memory[k]
        },
    }
    old_tokens = sum(_tokens(s) for s in old.slots.values())
    new_tokens = sum(_tokens(s) for s in new.slots.values())
    return {
        "from": old_name,
        "to": new_name,
        "slots": {
            "created": sorted(new.slots.keys() - old.slots.keys()),
            "deleted": sorted(old.slots.keys() - new.slots.keys()),
            "changed": changed,
        },
        "current_slot": [old.session.current_slot, new.session.current_slot],
        "turn_count": [old.session.turn_count, new.session.turn_count],
        "memory": memory,
        "tokens": new_tokens - old_tokens,
    }
