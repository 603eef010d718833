"""Checking a checkpoint log end to end, and carrying it in and out of an export."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic import Field

from agctl.base.errors import CorruptDocument, DataError, InvalidInput, NotFound
from agctl.base.hashing import content_hash, data_hash, line_sum
from agctl.base.vocab import ZONES
from agctl.context.models import Model, _empty_list
from agctl.store.checkpoints.files import open_log, read_checkpoint, removed_ids
from agctl.store.checkpoints.pack import NO_PARENT, BytesLog, Log
from agctl.store.checkpoints.records import Checkpoint, checkpoint_id
from agctl.store.work import reader

if TYPE_CHECKING:
    from agctl.storage.base import Backend


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


class CheckpointHistory(Model):
    """A session's checkpoint log in an export: its records verbatim, one a line (so each
    checkpoint keeps its offset, which is its id), and the ids of removed checkpoints.
    The caches beside the log (index, heads) are rebuilt where it is imported."""

    records: list[str] = Field(description="The log's lines, without their newlines.")
    digest: str = Field(description="BLAKE2b (16 bytes, hex) of the log's bytes.")
    removed: list[str] = Field(default_factory=_empty_list, description="Removed checkpoint ids.")

    def log_bytes(self) -> bytes:
        data = b"".join(record.encode() + b"\n" for record in self.records)
        if data_hash(data) != self.digest:
            raise InvalidInput(
                "the exported checkpoint log does not match its digest (changed or cut short)"
            )
        return data


def verify(backend: Backend, session_id: str) -> LogReport:
    """Check every record of the session's log (checksum, hash, references) and that
    every checkpoint can be rebuilt from it, in one pass over the log."""
    reader(backend, session_id).load_session(session_id)
    return verify_log(session_id, open_log(backend, session_id))


def verify_log(session_id: str, history: Log) -> LogReport:
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
            report.problems.append(f"byte {torn_at}: the newline ending the last record is damaged")
        else:
            report.torn = len(torn)
    if not report.checksums:
        report.unverifiable = report.records
    for offset, _record in checkpoints:
        identifier = checkpoint_id(offset)
        report.checkpoints += 1
        try:
            checkpoint = read_checkpoint(history, offset)
        except DataError as exc:
            report.bad_checkpoints.append({"id": identifier, "reason": str(exc)})
            continue
        reason = _broken_reference(checkpoint, depth, blobs)
        if reason:
            report.bad_checkpoints.append({"id": identifier, "reason": reason})
    return report


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


def verified_log(backend: Backend, session_id: str, refused: str) -> tuple[Log, bytes, LogReport]:
    """The session's checkpoint log, its bytes and its report, once verified: a damaged
    log is refused (exit 5), its message ending with `refused` (what is not done).
    Called in a transaction on the session."""
    history = open_log(backend, session_id)
    report = verify(backend, session_id)
    if not report.ok:
        reasons = report.problems + [b["reason"] for b in report.bad_checkpoints]
        raise CorruptDocument(
            history.path,
            f"the checkpoint log is damaged ({reasons[0]}); 'agctl ckpt verify' says more{refused}",
        )
    try:
        with history.storage.open() as handle:
            data = handle.read()
    except NotFound:
        data = b""
    return history, data, report


def export_history(backend: Backend, session_id: str) -> CheckpointHistory:
    """The session's checkpoint log as it is, verified (a damaged one is refused). Called
    in a transaction on the session, so the log and its removed ids are of one commit."""
    history, data, report = verified_log(
        backend, session_id, ", and an export without --checkpoints leaves it behind"
    )
    data = data[: len(data) - report.torn]
    removed = sorted(removed_ids(backend, session_id))
    try:
        records = data.decode("utf-8").split("\n")[:-1]
    except UnicodeDecodeError:
        raise CorruptDocument(history.path, "the checkpoint log is not UTF-8") from None
    return CheckpointHistory(records=records, digest=data_hash(data), removed=removed)


def verify_import(session_id: str, data: bytes) -> None:
    """Refuse an imported log that does not verify, before it is stored (raises
    InvalidInput naming the first problem)."""
    report = verify_log(session_id, Log(BytesLog(data, "the exported checkpoint log")))
    reasons = report.problems + [
        f"checkpoint {b['id']}: {b['reason']}" for b in report.bad_checkpoints
    ]
    if report.torn:
        reasons.append("its last record is cut short")
    if reasons:
        raise InvalidInput(f"the exported checkpoint log does not verify: {reasons[0]}")
