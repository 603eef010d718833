"""What a new checkpoint must store: only what changed since the heads cache's checkpoint.

The heads cache says what the latest checkpoint or rollback refers to, per slot, with the
revision of the slot it saw: an unchanged slot costs nothing, a slot a turn appended to
costs its new messages, any other slot is chained onto the longest prefix already stored.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from pydantic import ValidationError

from agctl.base import schema
from agctl.base.errors import StoreError
from agctl.base.hashing import content_hash
from agctl.base.vocab import ZONES
from agctl.context.models import Message, Slot, utcnow
from agctl.storage.encoding import checked_value, encode_record
from agctl.store.checkpoints.files import append_index, head, log, open_log
from agctl.store.checkpoints.pack import NO_PARENT, Log, common_prefix
from agctl.store.checkpoints.records import (
    VOLATILE_SESSION,
    Checkpoint,
    SlotEntry,
    checkpoint_id,
    messages_to_json,
    static_session,
    without_zones,
    zone_delta,
)
from agctl.store.work import reader

if TYPE_CHECKING:
    from agctl.storage.base import Backend
    from agctl.store.work import Work


class Pending:
    """A reference to a record of the batch being written, resolved once it is placed."""

    __slots__ = ("index",)

    def __init__(self, index: int) -> None:
        self.index = index


Ref = int | Pending


def _place(ref: Ref, offsets: list[int]) -> int:
    return offsets[ref.index] if isinstance(ref, Pending) else ref


class Batch:
    """The records of one append, each built once the offsets of those before it are known."""

    __slots__ = ("records",)

    def __init__(self) -> None:
        self.records: list[Callable[[list[int]], Any]] = []

    def add(self, build: Callable[[list[int]], Any]) -> Pending:
        self.records.append(build)
        return Pending(len(self.records) - 1)


class TurnHint(NamedTuple):
    """One slot as a turn holds it in memory (used when it is still at the stored
    revision, so it is not read again), and what the turn did to it: appended
    `appended` messages to revision `base_rev` (None: nothing is known of that)."""

    slot: Slot
    base_rev: int | None
    appended: int


# ---- the heads cache -------------------------------------------------------------------


def load_heads(backend: Backend, session_id: str, log_size: int) -> dict[str, Any]:
    """The heads cache, or an empty one when it is missing, damaged or not of this log."""
    raw = reader(backend, session_id).cache(session_id, "heads")
    if raw is None:
        return {"slots": {}}
    where = f"the heads cache of {session_id!r}"
    heads = checked_value(raw)
    if heads is None:
        log.warning("ignoring %s: damaged (its checksum fails)", where)
    elif _valid_heads(heads, log_size) and _describes(backend, session_id, heads):
        return heads  # type: ignore[no-any-return]
    else:
        log.warning("ignoring %s: it does not describe this log", where)
    return {"slots": {}}


def _describes(backend: Backend, session_id: str, heads: dict[str, Any]) -> bool:
    """Whether the log still holds, where the cache says, the record it was made after."""
    tail = heads.get("tail")
    if not (isinstance(tail, list) and len(tail) == 2 and isinstance(tail[0], int)):
        return False
    return bool(open_log(backend, session_id).line_digest(tail[0]) == tail[1])


def save_heads(work: Work, heads: dict[str, Any], history: Log, last: int) -> None:
    """Written in the transaction of the checkpoint it describes. `last` is the offset of
    the log's last record, whose fingerprint ties the cache to this log."""
    heads["tail"] = [last, history.line_digest(last)]
    tx = work.tx
    try:
        tx.write_cache("heads", encode_record(heads))
    except StoreError as exc:
        log.warning("checkpoint cache not updated: %s", exc)
        with contextlib.suppress(StoreError):
            tx.write_cache("heads", None)  # a stale cache must not outlive the log it describes


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
            version = entry["version"]
            if not isinstance(entry["doc_hash"], str) or not isinstance(version, int):
                return False
            if any(int(tip) >= log_size for tip, _ in entry["zones"]):
                return False
        return True
    except (KeyError, TypeError, ValueError, AttributeError, ValidationError):
        return False


# ---- create ----------------------------------------------------------------------------


def create(
    work: Work,
    *,
    label: str | None = None,
    auto: bool = False,
    hint: TurnHint | None = None,
    edit: str | None = None,
    loss: dict[str, Any] | None = None,
) -> Checkpoint:
    """Snapshot the session as it is now; only what is not stored yet is written.

    `hint` tells which messages a turn just appended, so that they alone are hashed,
    and which slot it wrote, which the record keeps (Checkpoint.slot); `edit` names the
    command about to change the session (an undoable edit); `loss` is the loss report
    of the compression the checkpoint is taken after. Written
    through the work's transaction but not as a change of the session (work.changing):
    a checkpoint is what precedes the change an undo returns from, never one itself.
    """
    backend, session_id = work.opened(), work.session_id
    history = open_log(backend, session_id)
    size = history.size()
    heads = load_heads(backend, session_id, size)
    parent = head(history)
    last = history.last()
    # The heads cache describes `parent` when it was written after the log's last
    # record: the new record's zones are then kept in the index as a delta from it.
    heads_zones = (
        {
            slot_id: [(tip, count) for tip, count in entry["zones"]]
            for slot_id, entry in heads["slots"].items()
        }
        if parent is not None and last is not None and heads.get("tail", [None])[0] == last[0]
        else None
    )
    session = work.load_session()
    batch = Batch()
    static = static_session(session)
    volatile = {k: v for k, v in session.model_dump(mode="json").items() if k in VOLATILE_SESSION}
    static_ref = _blob(batch, heads.get("session"), static)
    planned: dict[str, dict[str, Any]] = {}
    for slot_id in work.slot_ids():
        planned[slot_id] = _plan_slot(work, history, heads, batch, slot_id, hint)

    made: list[dict[str, Any]] = []

    def record(offsets: list[int]) -> dict[str, Any]:
        made.append(checkpoint_record(offsets))
        return {"c": made[-1]}

    def checkpoint_record(offsets: list[int]) -> dict[str, Any]:
        return {
            "schema_version": schema.format_version(schema.CURRENT["checkpoint"]),
            "turn_index": session.turn_count,
            "created_at": utcnow().isoformat().replace("+00:00", "Z"),
            "label": label,
            "auto": auto,
            "parent": parent,
            **({"slot": hint.slot.id} if hint is not None else {}),
            **({"edit": edit} if edit is not None else {}),
            **({"loss": loss} if loss is not None else {}),
            "session_static": _place(static_ref, offsets),
            "session_volatile": volatile,
            "slots": {
                slot_id: {
                    "doc": _place(plan["doc"], offsets),
                    "meta": plan["meta"],
                    "zones": [[_place(tip, offsets), count] for tip, count in plan["zones"]],
                }
                for slot_id, plan in planned.items()
            },
        }

    batch.add(record)
    offsets = history.append(batch.records)
    end = history.size()
    # The record as written (its bytes are this transaction's own: not read back).
    checkpoint = Checkpoint.model_validate(made[-1])
    checkpoint.id = checkpoint_id(offsets[-1])
    summary = checkpoint.summary(end)
    summary.digest = history.line_digest(offsets[-1])
    summary.checksum = history.line_checksums([(offsets[-1], end)]).get(offsets[-1])
    summary.zones = zone_delta(parent, heads_zones, checkpoint.zones())
    append_index(backend, session_id, summary)
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
    save_heads(work, heads, history, offsets[-1])
    log.info(
        "checkpoint written: %s/%s turn %d, %d bytes",
        session_id,
        checkpoint.id,
        checkpoint.turn_index,
        end - size,
    )
    return checkpoint


def _blob(batch: Batch, known: dict[str, Any] | None, data: dict[str, Any]) -> Ref:
    digest = content_hash(data)
    if known and known.get("hash") == digest:
        return int(known["ref"])
    return batch.add(lambda offsets: {"b": digest, "d": data})


def _plan_slot(
    work: Work,
    history: Log,
    heads: dict[str, Any],
    batch: Batch,
    slot_id: str,
    hint: TurnHint | None,
) -> dict[str, Any]:
    """What one slot's entry will hold, adding to `batch` only what is new."""
    known = heads["slots"].get(slot_id)
    version = work.tx.slot_rev(work.session_id, slot_id)
    if known and version is not None and version == known.get("version"):
        return {
            "version": known["version"],
            "doc_hash": known["doc_hash"],
            "doc": known["doc"],
            "meta": known["meta"],
            "zones": [tuple(z) for z in known["zones"]],
        }
    slot = None
    if hint is not None and hint.slot.id == slot_id and hint.slot.rev == version:
        slot = hint.slot
    if slot is None:
        slot = work.tx.load_slot(work.session_id, slot_id)
    document = without_zones(slot)
    meta = slot.meta.model_dump(mode="json")
    doc_ref = _blob(
        batch, {"hash": known["doc_hash"], "ref": known["doc"]} if known else None, document
    )
    appended_to = (
        hint.appended
        if hint is not None
        and hint.slot.id == slot_id
        and known is not None
        and hint.base_rev is not None
        and hint.base_rev == known.get("version")
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
                ref, _ = _extend(batch, tip, new)
                zones.append((ref, len(messages)))
                continue
        dumped = messages_to_json(messages)
        zones.append(_store_zone(history, heads, batch, slot_id, position, dumped))
    return {
        "version": version,
        "doc_hash": content_hash(document),
        "doc": doc_ref,
        "meta": meta,
        "zones": zones,
    }


def _extend(
    batch: Batch,
    tip: Ref,
    messages: Sequence[dict[str, Any]],
    hashes: Sequence[str] | None = None,
) -> tuple[Ref, int]:
    """Chain `messages` (whose content hashes are `hashes`, when known) after node `tip`;
    return the new tip."""
    parent: Ref = tip
    if hashes is None:
        hashes = [content_hash(message) for message in messages]
    for message, digest in zip(messages, hashes, strict=True):

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
    ref, _ = _extend(batch, tip_ref, messages[best:], hashes[best:])
    return ref, len(messages)
