"""Reading checkpoints: the listing, lookup by id, a whole session rebuilt from one, and
which checkpoints hold the live state."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from agctl.base.errors import CorruptDocument, DataError, NotFound
from agctl.base.hashing import content_hash
from agctl.base.ids import resolve_prefix, validate_id
from agctl.base.validation import validation_summary
from agctl.base.vocab import ZONES
from agctl.context.models import Document, Session, Slot
from agctl.storage.encoding import checked_value
from agctl.store.checkpoints.files import (
    append_index,
    drop_index,
    indexed_ids,
    log,
    open_log,
    read_checkpoint,
    removed_ids,
)
from agctl.store.checkpoints.pack import Log, NoRecord
from agctl.store.checkpoints.planner import load_heads
from agctl.store.checkpoints.records import (
    VOLATILE_SESSION,
    Checkpoint,
    CheckpointSummary,
    SessionState,
    checkpoint_id,
    checkpoint_offset,
    messages_to_json,
    static_session,
    untimed,
    without_zones,
    zone_delta,
)
from agctl.store.work import reader

if TYPE_CHECKING:
    from agctl.storage.base import Backend, Reader


def summaries(backend: Backend, session_id: str) -> list[CheckpointSummary]:
    """Every checkpoint, newest first (from the index, completed from the log)."""
    removed = removed_ids(backend, session_id)
    return sorted(
        (s for s in _indexed(backend, session_id).values() if s.id not in removed),
        key=lambda s: s.offset,
        reverse=True,
    )


def _indexed(backend: Backend, session_id: str) -> dict[int, CheckpointSummary]:
    """The summary of every checkpoint record of the log, removed or not, by offset: the
    index's lines that still name their records, completed (or rebuilt) from the log."""
    read = reader(backend, session_id)
    read.load_session(session_id)
    history = open_log(backend, session_id)
    found: dict[int, CheckpointSummary] = {}
    lines = (read.cache(session_id, "index") or b"").splitlines()
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
    # A line that has its record's checksum is checked against the record's last bytes;
    # one of before that, against the digest of the whole record.
    checksums = history.line_checksums(
        [(s.offset, s.end) for s in indexed if s.checksum is not None]
    )
    digests = history.line_digests([s.offset for s in indexed if s.checksum is None])
    for summary in indexed:
        if summary.checksum is not None:
            sound = checksums.get(summary.offset) == summary.checksum
        else:
            sound = summary.digest is not None and digests.get(summary.offset) == summary.digest
        if not sound:
            damaged = True  # not this log's record (cut short and grown again?)
            continue
        found[summary.offset] = summary
    # A damaged line may hide any checkpoint: then the whole log is scanned again.
    indexed_end = 0 if damaged else max((s.end for s in found.values()), default=0)
    if damaged:
        found = {}
        drop_index(backend, session_id)
    if indexed_end < size:
        problems: list[CorruptDocument] = []
        previous: tuple[int, dict[str, list[tuple[int, int]]]] | None = None
        for offset, end, record in history.scan(indexed_end, problems):
            if "c" in record and offset not in found:
                try:
                    checkpoint = read_checkpoint(history, offset)
                except DataError as exc:
                    log.warning("skipping %s", exc)
                    continue
                summary = checkpoint.summary(end)
                summary.digest = history.line_digest(offset)
                summary.checksum = history.line_checksums([(offset, end)]).get(offset)
                zones = checkpoint.zones()
                before = previous[1] if previous and previous[0] == checkpoint.parent else None
                summary.zones = zone_delta(checkpoint.parent, before, zones)
                previous = offset, zones
                found[offset] = summary
                append_index(backend, session_id, summary)
        for problem in problems:
            log.warning("skipping %s ('agctl ckpt verify' checks the whole log)", problem)
    return found


def zones_at(
    backend: Backend, session_id: str, offsets: Sequence[int]
) -> dict[int, dict[str, list[tuple[int, int]]]]:
    """Each slot's zones (tip, count) at each checkpoint of `offsets`, from the index's
    zone deltas: a checkpoint whose line has none (an index of before them) is read from
    the log, raw (validating thousands of records as models costs seconds)."""
    indexed = _indexed(backend, session_id)
    history = open_log(backend, session_id)
    known: dict[int, dict[str, list[tuple[int, int]]]] = {}
    wanted = set(offsets)
    # Oldest first: a delta's base is an earlier record, its zones known by then.
    for offset in sorted(o for o in indexed if o <= max(wanted, default=-1)):
        delta = _delta(indexed[offset].zones)
        if delta is None:
            if offset in wanted:
                known[offset] = record_zones(history, offset)
            continue
        start, changed, deleted = delta
        base = None if start is None else known.get(start)
        if start is not None and base is None:
            base = known[start] = record_zones(history, start)
        state = dict(base or {})
        for slot_id in deleted:
            state.pop(slot_id, None)
        added = changed.keys() - state.keys()
        state.update(changed)
        # A record holds its slots in id order (Backend.slot_ids).
        known[offset] = dict(sorted(state.items())) if added or deleted else state
    return {o: known[o] if o in known else record_zones(history, o) for o in offsets}


def _delta(
    value: dict[str, Any] | None,
) -> tuple[int | None, dict[str, list[tuple[int, int]]], list[str]] | None:
    """An index line's zone delta (records.zone_delta) as (base, changed, deleted), or
    None when it has none or none of that shape (the record is read instead)."""
    if value is None:
        return None
    try:
        base = value["base"]
        changed = {
            str(slot_id): [(int(tip), int(count)) for tip, count in zones]
            for slot_id, zones in value["changed"].items()
        }
        deleted = [str(slot_id) for slot_id in value["deleted"]]
    except (KeyError, TypeError, ValueError, AttributeError):
        return None
    if base is not None and type(base) is not int:
        return None
    return base, changed, deleted


def record_zones(history: Log, offset: int) -> dict[str, list[tuple[int, int]]]:
    """Each slot's zones in the checkpoint record at `offset`, read as stored and checked
    only where it is used."""
    record = history.read(offset).get("c")
    slots = record.get("slots") if isinstance(record, dict) else None
    if not isinstance(slots, dict):
        raise CorruptDocument(history.path, f"no checkpoint record at byte {offset}")
    found: dict[str, list[tuple[int, int]]] = {}
    for slot_id, entry in slots.items():
        zones = entry.get("zones") if isinstance(entry, dict) else None
        if not isinstance(zones, list) or not all(
            isinstance(zone, list) and len(zone) == 2 and all(type(n) is int for n in zone)
            for zone in zones
        ):
            raise CorruptDocument(history.path, f"checkpoint record at byte {offset} is malformed")
        found[str(slot_id)] = [(tip, count) for tip, count in zones]
    return found


def ids(backend: Backend, session_id: str) -> list[str]:
    return [s.id for s in summaries(backend, session_id)]


def resolve(backend: Backend, session_id: str, prefix: str) -> str:
    validate_id(prefix, "checkpoint")
    if len(prefix) >= 4 and prefix not in removed_ids(backend, session_id):
        try:
            load(backend, session_id, prefix)
            return prefix
        except NotFound:
            pass
    return resolve_prefix("checkpoint", prefix, ids(backend, session_id))


def load(backend: Backend, session_id: str, identifier: str) -> Checkpoint:
    """The checkpoint with this exact id, read straight from its offset."""
    history = open_log(backend, session_id)
    offset = checkpoint_offset(identifier)
    if (
        checkpoint_id(offset) != identifier
        or offset >= history.size()
        or identifier in removed_ids(backend, session_id)
    ):
        raise NotFound(f"checkpoint {identifier!r} not found in session {session_id!r}")
    try:
        return read_checkpoint(history, offset)
    except NoRecord:
        raise NotFound(f"checkpoint {identifier!r} not found") from None
    except (CorruptDocument, NotFound) as exc:
        # A record starts there but fails its checksum (it cannot be told from a
        # checkpoint), or the index knew a checkpoint there: damaged, not absent.
        damaged = isinstance(exc, CorruptDocument) and history.checked()
        if damaged or identifier in indexed_ids(backend, session_id):
            raise CorruptDocument(
                history.path, f"checkpoint {identifier} (byte {offset}) is damaged"
            ) from None
        raise NotFound(f"checkpoint {identifier!r} not found") from None


def state(backend: Backend, session_id: str, checkpoint: Checkpoint) -> SessionState:
    """Rebuild the whole session as it was at `checkpoint`; any record it needs that
    fails its checksum or hash is an error naming the checkpoint, never a different
    state."""
    history = open_log(backend, session_id)
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


def _validate(model: type[Document], data: dict[str, Any], where: str, identifier: str) -> Any:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        summary = validation_summary(exc, "document")
        reason = f"checkpoint {identifier}: cannot rebuild the {model.kind}: {summary}"
        raise CorruptDocument(where, reason) from None


def live_state(backend: Backend, session_id: str) -> SessionState:
    read = reader(backend, session_id)
    session = read.load_session(session_id)
    slots = {slot_id: read.load_slot(session_id, slot_id) for slot_id in read.slot_ids(session_id)}
    return SessionState(session=session, slots=slots)


def matching_live(
    backend: Backend, session_id: str, summaries: Sequence[CheckpointSummary]
) -> set[str]:
    """The ids among `summaries` of the checkpoints that hold the live state (a
    rollback to one would change nothing but timestamps).

    Cheap: the summaries (turn, current slot, slots, messages) rule out most checkpoints
    without reading them; a slot file not replaced since the latest checkpoint or
    rollback (the heads cache says) is compared by its references alone; only other
    slots are read and hashed. No checkpoint is rebuilt, and a damaged one matches
    nothing.
    """
    read = reader(backend, session_id)
    session = read.load_session(session_id)
    slot_ids = read.slot_ids(session_id)
    candidates = [
        s
        for s in summaries
        if (s.turn_index, s.current_slot, s.slot_count)
        == (session.turn_count, session.current_slot, len(slot_ids))
    ]
    if not candidates:
        return set()
    history = open_log(backend, session_id)
    unchanged = {
        slot_id: {k: known[k] for k in ("doc", "meta", "zones")}
        for slot_id, known in load_heads(backend, session_id, history.size())["slots"].items()
        if slot_id in slot_ids and read.slot_rev(session_id, slot_id) == known.get("version")
    }
    live = _LiveHashes(read, session, slot_ids, unchanged)
    # A match holds as many messages as the live slots do (the summaries count them all).
    total = live.message_count()
    matched: set[str] = set()
    for summary in (s for s in candidates if s.message_count == total):
        try:
            if live.held_by(history, read_checkpoint(history, summary.offset)):
                matched.add(summary.id)
        except DataError:
            continue  # `ckpt verify` is what reports it
    return matched


class _LiveHashes:
    """The live session as checkpoint records keep it (content hashes, or the references
    of a slot unchanged since the heads cache), each slot read and hashed once at most."""

    def __init__(
        self,
        read: Reader,
        session: Session,
        slot_ids: Sequence[str],
        unchanged: dict[str, dict[str, Any]],
    ) -> None:
        self.read = read
        self.session = session
        self.slot_ids = set(slot_ids)
        self.unchanged = unchanged
        document = session.model_dump(mode="json")
        self.volatile = untimed({k: v for k, v in document.items() if k in VOLATILE_SESSION})
        self.static = content_hash(static_session(session))
        self._slots: dict[str, tuple[Slot, list[list[str]]]] = {}

    def _slot(self, slot_id: str) -> tuple[Slot, list[list[str]]]:
        if slot_id not in self._slots:
            slot = self.read.load_slot(self.session.id, slot_id)
            zones = [
                [content_hash(m) for m in messages_to_json(getattr(slot, zone))] for zone in ZONES
            ]
            self._slots[slot_id] = slot, zones
        return self._slots[slot_id]

    def message_count(self) -> int:
        """The live slots' messages, every zone: counted from the references of a slot
        unchanged since the heads cache, from the slot (read once) otherwise."""
        total = 0
        for slot_id in self.slot_ids:
            known = self.unchanged.get(slot_id)
            if known is not None:
                total += sum(count for _, count in known["zones"])
            else:
                total += sum(len(hashes) for hashes in self._slot(slot_id)[1])
        return total

    def held_by(self, history: Log, checkpoint: Checkpoint) -> bool:
        if untimed(checkpoint.session_volatile) != self.volatile:
            return False
        if checkpoint.slots.keys() != self.slot_ids:
            return False
        if history.read(checkpoint.session_static).get("b") != self.static:
            return False
        for slot_id, entry in checkpoint.slots.items():
            if self.unchanged.get(slot_id) == entry.model_dump(mode="json"):
                continue  # the very references of the slot file as it is
            slot, zones = self._slot(slot_id)
            if untimed(entry.meta) != untimed(slot.meta.model_dump(mode="json")):
                return False
            if history.read(entry.doc).get("b") != content_hash(without_zones(slot)):
                return False
            for (tip, count), hashes in zip(entry.zones, zones, strict=True):
                if count != len(hashes):
                    return False
                if [digest for digest, _, _ in history.chain(tip, count)] != hashes:
                    return False
        return True
