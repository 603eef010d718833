"""The journal of a turn that older agctl left in the session dir, and a turn cut after its
commit point, which the redo journal finishes."""

from __future__ import annotations

import json

import pytest
from helpers import dying_after_one_change

from agctl.context.models import Message
from agctl.providers.offline import OfflineProvider
from agctl.store import Store
from agctl.turn.send import TurnOptions, send_turn

OPTIONS = TurnOptions(model="offline")


@pytest.fixture
def sid(store: Store) -> str:
    session = store.create_session("s", system_prompt="Be brief.")
    store.update_slot(session.id, None, lambda s: s.append(Message(role="user", content="hi")))
    return session.id


def test_a_turn_journal_of_an_older_agctl_is_dropped(store: Store, sid: str) -> None:
    """An older agctl's turn.json (its turns were journalled apart): not replayed, but
    removed, with a warning, by the first writer of a later process."""
    journal = store.session_dir(sid) / "turn.json"
    journal.write_text(
        json.dumps(
            {
                "slot": "default",
                "message_count": 3,
                "last_hash": "0" * 32,
                "turn_before": 0,
                "model": "offline",
            }
        )
    )
    later = Store(store.root)
    later.memory_set(sid, "k", "v")
    assert not journal.exists()
    assert later.load_session(sid).turn_count == 0


def test_a_turn_cut_after_its_commit_point_is_completed_by_the_next_writer(
    store: Store, sid: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with dying_after_one_change():  # the slot's new messages are written, nothing else
        send_turn(store, sid, "cut short", OfflineProvider(), OPTIONS)
    fresh = Store(store.root)
    assert fresh.pending_recovery(sid)
    fresh.memory_set(sid, "next", "writer")  # any writer finishes the commit first
    session = fresh.load_session(sid)
    assert session.turn_count == 1 and session.cost.by_model["offline"].requests == 1
    assert fresh.load_slot(sid).messages[-2].text() == "cut short"
    assert len(fresh.load_slot(sid).messages) == 3, "the messages are appended once only"
    assert not fresh.pending_recovery(sid)
    fresh.memory_set(sid, "again", "once")
    assert fresh.load_session(sid).turn_count == 1, "accounted once only"
