"""Walking every session and slot of a store, for the commands that read them all
(`agctl search`, `agctl usage --since`): one place that decides what is walked, in which
order, and what becomes of a document that cannot be read.

Slots are read without a lock, as every reader does (writers replace files atomically).
A session or slot that cannot be read is reported and skipped: one damaged document
never stops a walk.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, TypeVar

from agctl.base.errors import AgctlError, NotFound
from agctl.base.ids import validate_id
from agctl.base.vocab import ZONES

if TYPE_CHECKING:
    from agctl.context.models import Message, Slot
    from agctl.store import Store

log = logging.getLogger("agctl.walk")

T = TypeVar("T")
ProblemHandler = Callable[[AgctlError], None]


def skip_with_warning(problem: AgctlError) -> None:
    """The default for a document a walk cannot read: a warning (on stderr in the CLI)."""
    log.warning("skipped %s", problem)


def walk(
    store: Store,
    read: Callable[[Store, str, str], T],
    *,
    session_id: str | None = None,
    slot_id: str | None = None,
    on_problem: ProblemHandler | None = None,
) -> Iterator[tuple[str, str, T]]:
    """(session id, slot id, what `read(store, session id, slot id)` made of the slot)
    for every readable slot, session by session (by id), slot by slot (by name), as each
    is read: `Store.load_slot` for the validated slot, or a faster scan of its bytes.

    `session_id` limits the walk to that session (one that cannot be listed raises),
    `slot_id` to the slot of that name (in one given session, a slot it does not have is
    NotFound). A session whose slots cannot be listed, or a slot that `read` fails on
    with an AgctlError, goes to `on_problem` (default: a warning) and is skipped.
    """
    report = on_problem or skip_with_warning
    if slot_id is not None:
        validate_id(slot_id, "slot")
    for sid in [session_id] if session_id is not None else store.session_ids():
        try:
            slots = store.slot_ids(sid)
        except AgctlError as exc:
            if session_id is not None:
                raise
            report(exc)
            continue
        if slot_id is not None:
            if slot_id not in slots and session_id is not None:
                raise NotFound(f"slot {slot_id!r} not found in session {sid!r}")
            slots = [slot_id] if slot_id in slots else []
        for sl in slots:
            try:
                value = read(store, sid, sl)
            except AgctlError as exc:
                report(exc)
                continue
            yield sid, sl, value


def slot_messages(slot: Slot) -> Iterator[tuple[str, int, Message]]:
    """(zone, index in the zone, message) of every message a slot holds, zone by zone."""
    for zone in ZONES:
        for index, message in enumerate(getattr(slot, zone)):
            yield zone, index, message
