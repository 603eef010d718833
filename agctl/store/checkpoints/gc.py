"""Reclaiming what removed checkpoints alone reached: the log written again, holding only
what the live checkpoints need, in one transaction of the session.

Ids are offsets, so they move: every offset inside a kept record is remapped, the
removed set and the caches are dropped, and the ids a draft's error names are rewritten.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agctl.base.errors import CorruptDocument, NotFound
from agctl.base.hashing import content_hash
from agctl.storage.encoding import encode_record
from agctl.store.checkpoints.files import head, log, removed_ids
from agctl.store.checkpoints.pack import HEADER, NO_PARENT, BytesLog, Log
from agctl.store.checkpoints.planner import load_heads, save_heads
from agctl.store.checkpoints.reader import summaries
from agctl.store.checkpoints.records import checkpoint_id

if TYPE_CHECKING:
    from agctl.store.work import Work

# The label `ckpt rollback` gives the checkpoint of the state it replaces.
_ROLLBACK_LABEL = re.compile(r"before rollback to ([0-9a-z]+)")
# How a draft's error names a checkpoint (the originals of a compression).
_NAMED = re.compile(r"(checkpoint )([0-9a-z]{4,})\b")
# A record that is neither a checkpoint nor a rollback, ending a log whose live session
# descends from no live checkpoint (agctl.store.checkpoints.files.head reads it as none).
_NO_HEAD = {"b": content_hash({}), "d": {}}


@dataclass
class GcReport:
    """What `gc` did to one session's log (or would do, with `dry_run`)."""

    session: str
    rewritten: bool = False
    dry_run: bool = False
    bytes_before: int = 0
    bytes_after: int = 0
    records_before: int = 0
    records_after: int = 0
    checkpoints_dropped: int = 0
    nodes_dropped: int = 0
    blobs_dropped: int = 0
    rollbacks_dropped: int = 0
    drafts_updated: int = 0
    ids: dict[str, str] = field(default_factory=dict)  # old id -> new id, live ones

    @property
    def reclaimed(self) -> int:
        return self.bytes_before - self.bytes_after

    def to_dict(self) -> dict[str, Any]:
        return {
            "session": self.session,
            "rewritten": self.rewritten,
            "dry_run": self.dry_run,
            "bytes_before": self.bytes_before,
            "bytes_after": self.bytes_after,
            "reclaimed": self.reclaimed,
            "records_before": self.records_before,
            "records_after": self.records_after,
            "checkpoints_dropped": self.checkpoints_dropped,
            "nodes_dropped": self.nodes_dropped,
            "blobs_dropped": self.blobs_dropped,
            "rollbacks_dropped": self.rollbacks_dropped,
            "drafts_updated": self.drafts_updated,
            "ids": self.ids,
        }


def gc(work: Work, *, dry_run: bool = False) -> GcReport:
    """Write the session's log again with only what its live checkpoints reach, in the
    work's transaction; a log with nothing to reclaim is left as it is, byte for byte."""
    from agctl.store.checkpoints.verify import verified_log, verify, verify_log

    backend, session_id, tx = work.backend, work.session_id, work.tx
    history, data, _ = verified_log(backend, session_id, "; nothing was reclaimed")
    plan = _Plan(history, data, removed_ids(backend, session_id))
    new = plan.build()
    result = plan.report(session_id, new)
    result.dry_run = dry_run
    if new == data or not plan.dropped():
        return GcReport(
            session_id,
            dry_run=dry_run,
            bytes_before=len(data),
            bytes_after=len(data),
            records_before=len(plan.records),
            records_after=len(plan.records),
            ids={i: i for i in result.ids},
        )
    rebuilt = Log(BytesLog(new, f"{history.path} (rewritten)"))
    check = verify_log(session_id, rebuilt)
    if not check.ok or check.torn:
        reasons = check.problems + [b["reason"] for b in check.bad_checkpoints]
        raise CorruptDocument(history.path, f"the rewritten log does not verify: {reasons}")
    plan.same_states(rebuilt)
    if dry_run:
        return result
    heads = plan.moved_heads(load_heads(backend, session_id, len(data)), len(new))
    history.replace(new)
    tx.set_removed_checkpoints(())
    tx.write_cache("index", None)
    if heads is None:
        tx.write_cache("heads", None)
    else:
        last = history.last()
        save_heads(work, heads, history, last[0] if last else 0)
    result.drafts_updated = _remap_drafts(work, plan.old_ids, result.ids)
    summaries(backend, session_id)  # the index, rebuilt in this transaction
    after = verify(backend, session_id)
    if not after.ok:  # pragma: no cover - the same bytes verified above
        raise CorruptDocument(history.path, "the rewritten log does not verify")
    result.rewritten = True
    log.info(
        "gc: %s %d -> %d bytes, %d checkpoint(s) dropped",
        session_id,
        result.bytes_before,
        result.bytes_after,
        result.checkpoints_dropped,
    )
    return result


class _Plan:
    """The old log read once: which records the live checkpoints reach, and the new log."""

    def __init__(self, history: Log, data: bytes, removed: set[str]) -> None:
        self.history = history
        self.data = data
        self.checked = history.checked()
        # offset -> (record, its line as stored)
        self.records: dict[int, tuple[dict[str, Any], bytes]] = {}
        for offset, end, record in history.scan(0):
            self.records[offset] = (record, data[offset:end])
        self.checkpoints = {o for o, (r, _) in self.records.items() if "c" in r}
        self.live = {o for o in self.checkpoints if checkpoint_id(o) not in removed}
        self.reached = self._reach()
        self.head = self.nearest_live(head(history)) if data else None
        self.offsets: dict[int, int] = {}  # old offset -> new offset, of records kept

    def _reach(self) -> set[int]:
        """Every record a live checkpoint needs: itself, its blobs, its zones' nodes."""
        reached: set[int] = set()
        for offset in self.live:
            record = self.records[offset][0]["c"]
            reached.add(offset)
            reached.add(int(record["session_static"]))
            for entry in record["slots"].values():
                reached.add(int(entry["doc"]))
                for tip, count in entry["zones"]:
                    node = int(tip)
                    for _ in range(int(count)):
                        if node == NO_PARENT or node in reached:
                            break
                        reached.add(node)
                        node = int(self.records[node][0]["p"])
        return reached

    def nearest_live(self, offset: int | None) -> int | None:
        """The checkpoint itself if live, else its nearest live ancestor (undo passes
        over removed checkpoints, so the lineage it follows stays the same)."""
        while offset is not None and offset not in self.live:
            if offset not in self.checkpoints:
                return None
            parent = self.records[offset][0]["c"].get("parent")
            offset = None if parent is None else int(parent)
        return offset

    def _new_id(self, old: str) -> str | None:
        from agctl.store.checkpoints.records import checkpoint_offset

        try:
            placed = self.offsets.get(checkpoint_offset(old))
        except NotFound:
            return None
        return None if placed is None else checkpoint_id(placed)

    def _remapped(self, record: dict[str, Any]) -> dict[str, Any] | None:
        """The record with its offsets moved (None: it is dropped)."""
        where = self.offsets
        if "h" in record:
            node_parent = int(record["p"])
            return {**record, "p": node_parent if node_parent == NO_PARENT else where[node_parent]}
        if "c" in record:
            old = record["c"]
            parent = self.nearest_live(old.get("parent"))
            slots = {
                slot_id: {
                    **entry,
                    "doc": where[int(entry["doc"])],
                    "zones": [
                        [tip if tip == NO_PARENT else where[int(tip)], count]
                        for tip, count in entry["zones"]
                    ],
                }
                for slot_id, entry in old["slots"].items()
            }
            new = {
                **old,
                "parent": None if parent is None else where[parent],
                "session_static": where[int(old["session_static"])],
                "slots": slots,
            }
            label = old.get("label")
            found = _ROLLBACK_LABEL.fullmatch(label) if isinstance(label, str) else None
            if found:
                moved = self._new_id(found.group(1))
                new["label"] = (
                    f"before rollback to {moved}"
                    if moved
                    else "before rollback to a checkpoint since removed"
                )
            return {"c": new}
        if "r" in record:
            target = self.nearest_live(int(record["r"]))
            return None if target is None else {"r": where[target]}
        return record

    def build(self) -> bytes:
        """The new log: the header, then every kept record in its old order."""
        chunks: list[bytes] = []
        end = 0
        natural: int | None = None  # the head the records kept give (files.head)
        for offset, (record, line) in self.records.items():
            kept = "r" in record or offset in self.reached
            value = self._remapped(record) if kept else None
            if value is None:
                continue
            if not chunks:
                chunks.append(encode_record(HEADER))
                end = len(chunks[0])
            same = self.checked and offset == end and value == record
            encoded = line if same else encode_record(value)
            self.offsets[offset] = end
            chunks.append(encoded)
            end += len(encoded)
            natural = value["r"] if "r" in value else end - len(encoded) if "c" in value else None
        wanted = None if self.head is None else self.offsets[self.head]
        if chunks and natural != wanted:
            # The live session descends from what it did before: said by a record.
            chunks.append(encode_record(_NO_HEAD if wanted is None else {"r": wanted}))
        return b"".join(chunks)

    def dropped(self) -> bool:
        """Whether any record of the old log is left out of the new one."""
        return any(o not in self.offsets for o in self.records)

    @property
    def old_ids(self) -> set[str]:
        return {checkpoint_id(o) for o in self.checkpoints}

    def moved_heads(self, heads: dict[str, Any], size: int) -> dict[str, Any] | None:
        """The heads cache with its offsets moved, so the next checkpoint still costs only
        what changed; None when it names a record not kept (it is dropped then)."""
        where = self.offsets
        session = heads.get("session")
        if session is None or not heads.get("slots"):
            return None
        refs = [int(session["ref"])]
        for entry in heads["slots"].values():
            refs.append(int(entry["doc"]))
            refs += [int(tip) for tip, _ in entry["zones"] if tip != NO_PARENT]
        if any(ref not in where for ref in refs):
            return None
        return {
            "end": size,
            "session": {**session, "ref": where[int(session["ref"])]},
            "slots": {
                slot_id: {
                    **entry,
                    "doc": where[int(entry["doc"])],
                    "zones": [
                        [tip if tip == NO_PARENT else where[int(tip)], count]
                        for tip, count in entry["zones"]
                    ],
                }
                for slot_id, entry in heads["slots"].items()
            },
        }

    def report(self, session_id: str, new: bytes) -> GcReport:
        kinds = {"nodes": "h", "blobs": "b", "checkpoints": "c", "rollbacks": "r"}
        dropped = {
            name: sum(1 for o, (r, _) in self.records.items() if key in r and o not in self.offsets)
            for name, key in kinds.items()
        }
        return GcReport(
            session=session_id,
            bytes_before=len(self.data),
            bytes_after=len(new),
            records_before=len(self.records),
            records_after=max(new.count(b"\n") - 1, 0),
            checkpoints_dropped=dropped["checkpoints"],
            nodes_dropped=dropped["nodes"],
            blobs_dropped=dropped["blobs"],
            rollbacks_dropped=dropped["rollbacks"],
            ids={
                checkpoint_id(o): checkpoint_id(self.offsets[o])
                for o in sorted(self.live)
                if o in self.offsets
            },
        )

    def same_states(self, rebuilt: Log) -> None:
        """Every live checkpoint reads back the same from the new log: the same documents
        and messages (by hash), the same fields, its parent the one undo followed."""
        from agctl.store.checkpoints.files import read_checkpoint

        for offset in sorted(self.live):
            old = read_checkpoint(self.history, offset)
            new = read_checkpoint(rebuilt, self.offsets[offset])
            parent = self.nearest_live(old.parent)
            if new.parent != (None if parent is None else self.offsets[parent]):
                raise CorruptDocument(self.history.path, f"gc would move {old.id}'s parent")
            if _content(self.history, old) != _content(rebuilt, new):
                raise CorruptDocument(self.history.path, f"gc would change checkpoint {old.id}")


def _content(history: Log, checkpoint: Any) -> Any:
    """What a checkpoint restores, by hash: its fields, blobs and zones' messages."""
    slots = {
        slot_id: (
            content_hash(history.blob(entry.doc)),
            entry.meta,
            [[d for d, _, _ in history.chain(tip, count)] for tip, count in entry.zones],
        )
        for slot_id, entry in checkpoint.slots.items()
    }
    fields = checkpoint.model_dump(
        mode="json", exclude={"id", "label", "parent", "session_static", "slots"}
    )
    return fields, content_hash(history.blob(checkpoint.session_static)), slots


def _remap_drafts(work: Work, old: set[str], ids: dict[str, str]) -> int:
    """Rewrite the checkpoint ids (`old`, the live ones moved to `ids`) a draft's error
    names (a compression's originals)."""
    tx = work.tx
    updated = 0
    for slot_id in tx.draft_slots(work.session_id):
        try:
            draft = tx.load_draft(work.session_id, slot_id)
        except (NotFound, CorruptDocument):
            continue
        if not draft.error:
            continue

        def moved(found: re.Match[str]) -> str:
            name = found.group(2)
            if name not in old:
                return found.group(0)
            return f"checkpoint {ids[name]}" if name in ids else "a removed checkpoint"

        error = _NAMED.sub(moved, draft.error)
        if error != draft.error:
            draft.error = error
            tx.put_draft(draft)
            updated += 1
    return updated
