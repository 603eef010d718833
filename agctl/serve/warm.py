"""What a warm `agctl serve` keeps between the turns of a slot: the slot as its last turn
committed it, handed to the next turn on it as send_turn's `reuse`. The store gives it
back unparsed when nobody wrote the slot since (its revision, and on files its file's
stat, say so), else reads it again: a 1,000-message slot is not parsed at every turn
(4 ms), and what a turn sends is what it would send from a slot read afresh."""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agctl.context.models import Slot
    from agctl.store import Store

# How many slots a server keeps (the most recently used): a slot of 1,000 messages holds
# a few MB.
KEPT_SLOTS = 32


class WarmSlots:
    """The slots the last turns committed, by session and slot id. A request takes its
    slot out, so no two requests ever hold the same one (a turn changes the slot it is
    given); the turn's committed slot is put back once it succeeds."""

    def __init__(self, size: int = KEPT_SLOTS) -> None:
        self.size = size
        self._slots: OrderedDict[tuple[str, str], Slot] = OrderedDict()
        self._lock = threading.Lock()

    def take(self, session: str, slot: str) -> Slot | None:
        with self._lock:
            return self._slots.pop((session, slot), None)

    def keep(self, session: str, slot: Slot) -> None:
        with self._lock:
            self._slots[(session, slot.id)] = slot
            self._slots.move_to_end((session, slot.id))
            while len(self._slots) > self.size:
                self._slots.popitem(last=False)


_by_store: weakref.WeakKeyDictionary[Store, WarmSlots] = weakref.WeakKeyDictionary()
_by_store_lock = threading.Lock()


def warm_slots(store: Store) -> WarmSlots:
    """The slots kept for `store`, for as long as it is open in this process."""
    with _by_store_lock:
        kept = _by_store.get(store)
        if kept is None:
            kept = _by_store[store] = WarmSlots()
        return kept
