"""The stored shapes of checkpoints: ids, the log's checkpoint record, summaries.

The bottom of the package: it imports nothing of it, and everything of it may import it.
"""

from collections.abc import Sequence
from datetime import datetime
from typing import Annotated, Any, ClassVar, NamedTuple

from agctl.base import schema
from agctl.base.errors import NotFound
from agctl.base.ids import BASE32_ALPHABET
from agctl.base.vocab import ZONES
from agctl.context.models import (
    EAGER,
    Deferred,
    Document,
    Message,
    Model,
    Session,
    Slot,
    _optional,
    message_list_adapter,
    shared_field,
    utcnow,
)

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
    model_config = EAGER
    doc: int
    meta: dict[str, Any]
    zones: list[tuple[int, int]]  # (tip offset, node count) for each of ZONES


class CompressionLoss(Model):
    """The loss report of a compression (agctl.turn.loss), as its checkpoint keeps it."""

    slot: str
    strategy: str
    exact: bool = True
    replaced: bool = True
    # By kind of fact (instructions, urls, paths, ids, numbers): how many the folded
    # messages held, how many of them were lost, and those lost.
    found: dict[str, int]
    lost: dict[str, int]
    items: dict[str, list[str]]


def _compression_loss() -> type[CompressionLoss]:
    return CompressionLoss


class Checkpoint(Document):
    """The record of one checkpoint in the log."""

    kind: ClassVar[str] = "checkpoint"
    id: str = ""
    turn_index: int
    created_at: datetime = shared_field(default_factory=utcnow)
    label: str | None = None
    auto: bool = False
    # The checkpoint the session descended from when this one was taken: the newest
    # checkpoint then, or the target of the latest rollback. Undo follows these links.
    parent: int | None = None
    # The command a checkpoint was written before ("msg clear"): it undoes that edit, and
    # `turn undo`, which returns to the state after a turn, passes over it.
    edit: str | None = None
    # The slot the turn this checkpoint was taken for (before or after it) wrote, which
    # need not be the session's current slot (`turn send --slot`); left out of the
    # record while None: a checkpoint not taken for a turn has none.
    slot: str | None = _optional()
    # The loss report of the compression this checkpoint was taken after (agctl.turn.loss):
    # the facts folded and lost, by kind; left out of the record while None.
    # (Deferred: built when a record has one, not for every checkpoint a turn takes.)
    loss: Annotated[Any, Deferred(_compression_loss)] = _optional()
    session_static: int
    session_volatile: dict[str, Any]
    slots: dict[str, SlotEntry]

    def zones(self) -> dict[str, list[tuple[int, int]]]:
        """Each slot's (tip, count) for each of ZONES."""
        return {slot_id: list(entry.zones) for slot_id, entry in self.slots.items()}

    def summary(self, end: int = 0) -> "CheckpointSummary":
        return CheckpointSummary(
            id=self.id,
            offset=checkpoint_offset(self.id),
            end=end,
            turn_index=self.turn_index,
            created_at=self.created_at,
            label=self.label,
            auto=self.auto,
            edit=self.edit,
            slot=self.slot,
            current_slot=str(self.session_volatile.get("current_slot", "")),
            slot_count=len(self.slots),
            message_count=sum(count for entry in self.slots.values() for _, count in entry.zones),
        )


def zone_delta(
    base: int | None,
    before: dict[str, list[tuple[int, int]]] | None,
    after: dict[str, list[tuple[int, int]]],
) -> dict[str, Any]:
    """What the index keeps of a checkpoint's zones, so that a reader of many checkpoints'
    zones (the HTML session graph) never reads their records: each slot's zones (tip,
    count) where they differ from those `before` of the checkpoint at `base` (None when
    not known: then every slot), and the slots that one had and this has not. A plain
    dict, not a model: every turn writes one."""
    changed = after if before is None else {s: z for s, z in after.items() if before.get(s) != z}
    return {
        "base": None if before is None else base,
        # As the index reads back (JSON lists), so a summary equals its line read again.
        "changed": {s: [[tip, count] for tip, count in zones] for s, zones in changed.items()},
        "deleted": [] if before is None else sorted(before.keys() - after.keys()),
    }


class CheckpointSummary(Model):
    """A checkpoint as its record in the log says, and, for the index that caches it,
    how to check that line against the log and read zones without the record. That
    bookkeeping (excluded from dumps; `index_line` writes it) depends on how and when the
    index was built, so an export, which must be the same from every store, never has it."""

    id: str
    offset: int
    end: int
    # The record's line fingerprint (Log.line_digest): an index line whose record no
    # longer reads the same (a log cut short and grown again) is dropped and rebuilt.
    digest: str | None = shared_field(default=None, exclude=True)
    # The checksum the record's line ends with (Log.line_checksums): when the index line
    # has it, it is checked against the last bytes of the record alone, without reading
    # (and hashing) the whole record; `digest` stays for the readers that predate it.
    checksum: str | None = shared_field(default=None, exclude=True)
    # zone_delta's: its base is the checkpoint the index line was written after, known
    # when a turn writes it, often not when the log is scanned again.
    zones: dict[str, Any] | None = shared_field(default=None, exclude=True)
    turn_index: int
    created_at: datetime
    label: str | None = None
    auto: bool = False
    edit: str | None = None
    # Checkpoint.slot: left out of the index line while None, as of the record.
    slot: str | None = _optional()
    current_slot: str = ""
    slot_count: int = 0
    message_count: int = 0

    def index_line(self) -> dict[str, Any]:
        """The summary as the index keeps it: with its bookkeeping."""
        return {
            **self.model_dump(mode="json"),
            "digest": self.digest,
            "checksum": self.checksum,
            "zones": self.zones,
        }


class SessionState(NamedTuple):
    """A whole session in memory: the session document and every slot."""

    session: Session
    slots: dict[str, Slot]


def untimed(document: dict[str, Any]) -> dict[str, Any]:
    """A document without its update time, which every write stamps."""
    return {k: v for k, v in document.items() if k != "updated_at"}


def static_session(session: Session) -> dict[str, Any]:
    """The session document without its volatile fields: what a session blob holds."""
    document = session.model_dump(mode="json")
    return {k: v for k, v in document.items() if k not in VOLATILE_SESSION}


def without_zones(slot: Slot) -> dict[str, Any]:
    """The slot document without its zones and meta: what a doc blob holds."""
    return slot.model_dump(mode="json", exclude={*ZONES, "meta"})


def messages_to_json(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """Messages as stored in a slot document, in one serialiser call."""
    return message_list_adapter().dump_python(list(messages), mode="json")  # type: ignore[no-any-return]
