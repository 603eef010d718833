"""The slot rules: ids and modes, the protected `default` slot, readonly slots, deriving a
slot from another, and slot settings.

A rule that changes a session takes the unit of work the Store opened (agctl.store.work) and
changes it through that; a rule that only reads takes a storage Reader. Neither reaches
back up to the Store: the Store's methods of the same names call down to them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypedDict, TypeVar

from pydantic import ValidationError

from agctl.base.errors import (
    AlreadyExists,
    Conflict,
    NotFound,
    ProtectedSlot,
    SlotChanged,
    SlotMoved,
    UsageError,
)
from agctl.base.hashing import message_hashes
from agctl.base.ids import validate_id
from agctl.base.validation import validation_summary
from agctl.base.vocab import DERIVE_STRATEGIES, SLOT_MODES, SLOT_SETTINGS, DeriveStrategy
from agctl.context.cache import slot_root
from agctl.context.models import (
    FocusedConfig,
    Message,
    Session,
    Slot,
    SlotConfig,
    SlotMeta,
    SlotSource,
    utcnow,
)
from agctl.context.view import focused_messages

if TYPE_CHECKING:
    from typing import Unpack

    from agctl.storage.base import Reader
    from agctl.store.work import Work

    # Only for the rules' signatures: no class is built when a turn imports this module.
    class NewSlot(TypedDict, total=False):
        """What a new slot may be given (create_slot)."""

        mode: str
        focus: Mapping[str, Any] | None
        immutable: Sequence[Message]
        make_current: bool

    class DerivedSlot(TypedDict, total=False):
        """What a slot derived from another may be given (derive_slot)."""

        source: str | None
        strategy: DeriveStrategy
        focus: Mapping[str, Any] | None
        make_current: bool
        upto: int | None


log = logging.getLogger("agctl.store")

DEFAULT_SLOT = "default"
T = TypeVar("T")


def _check_mode(mode: str) -> None:
    if mode not in SLOT_MODES:
        raise UsageError(f"unknown slot mode {mode!r}; choose from {', '.join(SLOT_MODES)}")


def _focus(base: FocusedConfig, changes: Mapping[str, Any] | None) -> FocusedConfig:
    try:
        return base.updated(changes)
    except ValidationError as exc:
        raise UsageError(f"invalid focused settings: {validation_summary(exc)}") from None


def new_slot(
    slot_id: str,
    config: SlotConfig | None = None,
    immutable: Sequence[Message] = (),
    parent_id: str | None = None,
) -> Slot:
    """A slot not yet stored, its meta computed (a new session's `default` slot too)."""
    slot = Slot(
        id=slot_id,
        config=config or SlotConfig(),
        meta=SlotMeta(parent_id=parent_id),
        immutable=list(immutable),
    )
    slot.refresh_meta()
    return slot


def resolve_slot(reader: Reader, session_id: str, slot_id: str | None) -> str:
    """The slot id given, checked, or the session's current slot when None."""
    if slot_id is None:
        return reader.load_session(session_id).current_slot
    return validate_id(slot_id, "slot")


def list_slots(reader: Reader, session_id: str) -> list[Slot]:
    """The session's slots, each parsed, in id order."""
    return [reader.load_slot(session_id, s) for s in reader.slot_ids(session_id)]


def _insert_slot(work: Work, slot: Slot, make_current: bool) -> Slot:
    if slot.id in work.slot_ids():
        raise AlreadyExists(f"slot {slot.id!r} already exists in session {work.session_id!r}")
    work.changing().put_slot(slot)
    if make_current:
        use_slot(work, slot.id)
    return slot


def create_slot(work: Work, slot_id: str, **given: Unpack[NewSlot]) -> Slot:
    """A new slot put in the work's session: static with `immutable` messages, else new.

    `focus` sets the focused-mode settings (keep_system, recent_messages,
    summary_override) over the defaults.
    """
    validate_id(slot_id, "slot")
    mode, immutable = given.get("mode", "full"), given.get("immutable", ())
    _check_mode(mode)
    config = SlotConfig.model_validate(
        {
            "mode": mode,
            "focused": _focus(FocusedConfig(), given.get("focus")),
            "source": SlotSource(kind="static" if immutable else "new"),
        }
    )
    slot = new_slot(slot_id, config, immutable)
    return _insert_slot(work, slot, given.get("make_current", False))


def derive_slot(work: Work, slot_id: str, **given: Unpack[DerivedSlot]) -> Slot:
    """A slot derived from `source` (None: the current slot): its full copy, or only what
    its focused view shows.

    `focus` changes the parent's focused-mode settings for the new slot; `upto` keeps only
    the parent's first `upto` messages (a full copy only: a reply regenerated, a prompt
    edited, on a branch of their own).
    """
    validate_id(slot_id, "slot")
    strategy = given.get("strategy", "full")
    if strategy not in DERIVE_STRATEGIES:
        choices = ", ".join(DERIVE_STRATEGIES)
        raise UsageError(f"unknown derive strategy {strategy!r}; choose from {choices}")
    parent = work.load_slot(given.get("source"))
    focused = _focus(parent.config.focused, given.get("focus"))
    upto = given.get("upto")
    if upto is not None and strategy != "full":
        raise UsageError("only a full copy can keep the first messages of its parent")
    if strategy == "full":
        messages = list(parent.messages[:upto])
        mode = "focused" if parent.config.mode == "focused" else "full"
    else:
        messages = focused_messages(parent.messages, focused, with_summary=False)
        mode = "focused"
    config = parent.config.model_copy(
        update={
            "mode": mode,
            "focused": focused,
            "source": SlotSource(
                kind="derived", parent_id=parent.id, strategy=strategy, root_id=slot_root(parent)
            ),
        }
    )
    slot = new_slot(slot_id, config, parent.immutable, parent_id=parent.id)
    slot.compressed = list(parent.compressed)
    slot.messages = messages
    slot.meta.branch = message_hashes(messages)
    if strategy == "full":  # its first request goes where the parent's last one is cached
        slot.meta.sent = parent.meta.sent
    slot.refresh_meta()
    _insert_slot(work, slot, given.get("make_current", False))
    log.info("slot derived: %s/%s from %s (%s)", work.session_id, slot_id, parent.id, strategy)
    return slot


def use_slot(work: Work, slot_id: str) -> Session:
    """Make `slot_id` the session's current slot."""
    work.load_slot(slot_id)

    def switch(session: Session) -> Session:
        session.current_slot = slot_id
        return session

    return update_session(work, switch)


def update_session(work: Work, change: Callable[[Session], T]) -> T:
    """Apply `change` to the session document and write it back."""
    session = work.load_session()
    result = change(session)
    session.updated_at = utcnow()
    work.changing().put_session(session)
    return result


def update_slot(
    work: Work,
    slot_id: str | None,
    change: Callable[[Slot], T],
    *,
    base: Slot | None = None,
) -> T:
    """Apply `change` to a slot in a transaction and write it back whole.

    If `change` raises (a readonly slot, a bad index), nothing is written. `base` is an
    unmodified copy of the slot read earlier: when the stored slot is still at its
    revision, it is used instead of reading and parsing it again.
    """
    slot = work.load_slot(slot_id or (base.id if base else None), reuse=base)
    result = change(slot)
    slot.refresh_meta()
    work.changing().put_slot(slot)
    return result


def append_messages(work: Work, slot: Slot, messages: Sequence[Message]) -> None:
    """Append `messages` to `slot` (as loaded in this work) without writing its earlier
    messages again."""
    slot.check_writable("append")
    slot.messages.extend(messages)
    slot.refresh_meta()
    work.changing().append_messages(slot, len(messages))


def append_turn(
    work: Work,
    seen: Slot,
    messages: Sequence[Message],
    *,
    sent: dict[str, Any] | None = None,
    if_unchanged: bool = False,
) -> tuple[Slot, int]:
    """Append a turn's messages to the slot its view was built from (`seen`, reused when
    the stored slot is still at its revision), marking what the request `sent`; the slot
    written and its revision before. Refused when the slot was changed since other than
    by appends (see check_only_appended), and with `if_unchanged` when it was written at
    all (see check_unchanged)."""
    if if_unchanged:
        check_unchanged(work, seen)
    slot = work.load_slot(seen.id, reuse=seen)
    slot.check_writable("send a turn")
    if slot is not seen:
        check_only_appended(seen, slot)
    base_rev = slot.rev
    if sent is not None:
        slot.meta.sent = sent
    append_messages(work, slot, messages)
    return slot, base_rev


def check_only_appended(seen: Slot, now: Slot) -> None:
    """Refuse to commit onto a slot that changed since the view was built, unless the
    change is only messages appended after what was seen (another turn's, which stays
    allowed and ordered). Raises SlotChanged."""
    what = changed_beyond_appends(seen, now)
    if what is not None:
        raise SlotChanged(now.id, what)


def changed_beyond_appends(seen: Slot, now: Slot) -> str | None:
    """What changed in the slot since `seen` was read, other than messages appended after
    those seen; None when nothing else did. A slot deleted and made again under its name
    is another slot, whatever it holds: its creation time tells them apart."""
    if now.meta.created_at != seen.meta.created_at:
        return "it was deleted and made again"
    if now.config != seen.config:
        return "its settings changed"
    for zone in ("immutable", "compressed"):
        if message_hashes(getattr(now, zone)) != message_hashes(getattr(seen, zone)):
            return f"its {zone} zone changed"
    if len(now.messages) < len(seen.messages):
        return "messages were removed"
    if message_hashes(now.messages[: len(seen.messages)]) != message_hashes(seen.messages):
        return "messages were edited or replaced"
    return None


def check_unchanged(work: Work, seen: Slot) -> None:
    """Refuse to commit onto a slot written at all since `seen` was read: its revision
    moved (through the storage interface only, so every backend fences alike). Raises
    SlotMoved for a change allowed by default (appends), SlotChanged for one refused
    anyway, NotFound when the slot is gone."""
    if work.tx.slot_rev(work.session_id, seen.id) == seen.rev:
        return
    now = work.load_slot(seen.id)
    check_only_appended(seen, now)
    appended = len(now.messages) - len(seen.messages)
    what = f"{appended} messages were appended" if appended else "it was written again"
    raise SlotMoved(now.id, what)


def set_mode(
    work: Work,
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

    return update_slot(work, slot_id, change)


def delete_slot(work: Work, slot_id: str) -> Session:
    """Delete a slot (never `default`, never the last); a deleted current slot falls back."""
    validate_id(slot_id, "slot")
    if slot_id == DEFAULT_SLOT:
        raise ProtectedSlot(f"slot {DEFAULT_SLOT!r} cannot be deleted")
    session_id = work.session_id
    slots = work.slot_ids()
    if slot_id not in slots:
        raise NotFound(f"slot {slot_id!r} not found in session {session_id!r}")
    if len(slots) == 1:
        raise ProtectedSlot(f"slot {slot_id!r} is the last slot of {session_id!r}")
    session = work.load_session()
    falls_back = session.current_slot == slot_id
    if falls_back and DEFAULT_SLOT not in slots:
        raise Conflict(f"slot {slot_id!r} is current and there is no default slot")
    tx = work.changing()
    if falls_back:

        def fall_back(s: Session) -> Session:
            s.current_slot = DEFAULT_SLOT
            return s

        session = update_session(work, fall_back)
    tx.delete_slot(slot_id)
    log.info("slot deleted: %s/%s", session_id, slot_id)
    return session


def configure_slot(work: Work, slot_id: str | None, changes: Mapping[str, Any]) -> Slot:
    """Change slot settings (validated): auto_compress, budget (None: auto),
    clear_tool_results (None: off; an object replaces the whole setting)."""
    unknown = set(changes).difference(SLOT_SETTINGS)
    if unknown:
        raise UsageError(
            f"unknown slot setting {sorted(unknown)[0]!r}; "
            f"choose from {', '.join(sorted(SLOT_SETTINGS))}"
        )

    if changes.get("clear_tool_results") is not None:
        changes = {**changes, "clear_tool_results": _clearing(changes["clear_tool_results"])}

    def apply(slot: Slot) -> Slot:
        data = slot.config.model_dump()
        data.update(changes)
        try:
            slot.config = SlotConfig.model_validate(data)
        except ValidationError as exc:
            raise UsageError(f"invalid slot setting: {validation_summary(exc)}") from None
        return slot

    return update_slot(work, slot_id, apply)


def _clearing(setting: object) -> dict[str, Any]:
    """A clear_tool_results setting, validated, with every field (a field it does not
    have is refused: a typo would otherwise be kept and do nothing)."""
    from agctl.context.clearing import ClearToolResults

    if isinstance(setting, dict):
        unknown = sorted(set(setting).difference(ClearToolResults.model_fields))
        if unknown:
            raise UsageError(
                f"clear_tool_results has no field {unknown[0]!r}; "
                f"choose from {', '.join(ClearToolResults.model_fields)}"
            )
    try:
        return ClearToolResults.model_validate(setting).model_dump(mode="json")
    except ValidationError as exc:
        raise UsageError(f"invalid slot setting: {validation_summary(exc)}") from None
