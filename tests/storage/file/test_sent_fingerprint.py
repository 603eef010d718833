"""A turn renews its slot's sent-request fingerprint (meta.sent, agctl.context.cache) by appending,
never by writing the slot's document again: the file backend's own layout, so it lives
here (tests/lib may not poke the data dir's files)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from agctl.context.cache import sent_marks
from agctl.providers.base import ChatRequest, Event
from agctl.providers.offline import OfflineProvider
from agctl.storage.file import layout
from agctl.store import Store
from agctl.turn.send import TurnOptions, send_turn

OPTIONS = TurnOptions(model="offline", checkpoint=False)


class Keeping:
    """The offline provider, keeping the requests it answers."""

    name = "offline"

    def __init__(self) -> None:
        self.requests: list[ChatRequest] = []
        self.provider = OfflineProvider()

    def stream(self, request: ChatRequest) -> Iterator[Event]:
        self.requests.append(request)
        return self.provider.stream(request)


def test_a_turn_keeps_its_fingerprint_by_appending_not_by_rewriting_the_slot(
    tmp_path: Path,
) -> None:
    """The fingerprint travels in the line the turn appends to the slot's log, so the
    slot's document is not written again, however long the slot (a turn's work is what it
    adds), and a later process reads the last turn's marks."""
    store = Store(tmp_path / "data")
    store.create_session("s", system_prompt="You are terse.")
    send_turn(store, "s", "first", Keeping(), OPTIONS)
    document = layout.slot_document(store.session_dir("s"), "default")
    before = document.read_bytes()
    provider = Keeping()
    for text in ("second", "third"):
        send_turn(store, "s", text, provider, OPTIONS)
    assert document.read_bytes() == before
    assert len(layout.slot_log(document).read_bytes().splitlines()) == 3  # one a turn
    sent = Store(store.root).load_slot("s").meta.sent
    assert sent == sent_marks(provider.requests[-1])
    assert sent is not None and sent["messages"] == 6  # system, three inputs, two replies
