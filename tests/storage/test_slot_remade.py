"""A slot deleted and made again under its name while a writer waits on the model is
another slot, on every backend, though it holds the same messages and settings: a turn's
reply is not appended to it (SlotChanged) and a compression's summary is not written on it
(Conflict), both exit 4 with nothing written."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from helpers import add, msg

from agctl.base.errors import Conflict, SlotChanged
from agctl.providers.base import ChatRequest, Event
from agctl.providers.offline import OfflineProvider
from agctl.store import Store
from agctl.turn.compress import compress
from agctl.turn.send import TurnOptions, send_turn

SID = "s"
ROLES = ("user", "assistant")


class RemakesTheSlot(OfflineProvider):
    """The offline provider, which deletes slot `x` and derives it again from `default`
    while it answers: the same name, messages and settings, another slot."""

    def __init__(self, store: Store) -> None:
        super().__init__()
        self.store = store
        self.remade: dict[str, Any] = {}

    def stream(self, request: ChatRequest) -> Iterator[Event]:
        self.store.delete_slot(SID, "x")
        self.store.derive_slot(SID, "x", source="default")
        self.remade = self.store.load_slot(SID, "x").model_dump(mode="json")
        return super().stream(request)


@pytest.fixture
def derived(store: Store) -> Store:
    """Slot `x` derived from `default`, which holds eight messages."""
    store.create_session(SID)
    add(store, SID, None, *(msg(ROLES[i % 2], f"message {i}") for i in range(8)))
    store.derive_slot(SID, "x", source="default")
    return store


def test_a_turn_on_a_slot_remade_meanwhile_is_refused(derived: Store) -> None:
    provider = RemakesTheSlot(derived)

    with pytest.raises(SlotChanged, match=r"\(it was deleted and made again\)") as caught:
        send_turn(derived, SID, "question", provider, TurnOptions(model="offline", slot="x"))

    assert caught.value.exit_code == 4
    assert derived.load_slot(SID, "x").model_dump(mode="json") == provider.remade


def test_a_compression_of_a_slot_remade_meanwhile_is_refused(derived: Store) -> None:
    provider = RemakesTheSlot(derived)

    with pytest.raises(Conflict, match=r"\(it was deleted and made again\)") as caught:
        compress(derived, SID, "x", keep_recent=2, provider=provider)

    assert caught.value.exit_code == 4
    assert derived.load_slot(SID, "x").model_dump(mode="json") == provider.remade
