"""The journal of a turn that older agctl left in the session dir."""

from __future__ import annotations

import json

import pytest

from agctl.models import Message
from agctl.store import Store
from agctl.turns import TurnOptions

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
