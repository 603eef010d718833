"""A compression's loss report is kept with its checkpoint by every backend, as written."""

from __future__ import annotations

from agctl.context.models import Message
from agctl.store import Store
from agctl.store.checkpointer import Checkpointer
from agctl.turn.compress import compress

FOLDED = [
    Message(role="user", content="Always log to var/log/app, ticket ABC-123."),
    Message(role="assistant", content="See https://example.org/guide, limit 4096."),
]


def test_every_backend_keeps_the_report_with_the_checkpoint(store: Store) -> None:
    store.create_session("s")
    kept = [Message(role="user", content="next"), Message(role="assistant", content="ok")]
    store.update_slot("s", None, lambda s: s.messages.extend([*FOLDED, *kept]))
    result = compress(store, "s", None, strategy="truncate", keep_recent=2)
    assert result.loss is not None and result.after is not None
    checkpointer = Checkpointer(store)
    stored = checkpointer.load("s", result.after).loss
    assert stored is not None
    assert stored.model_dump(mode="json") == {
        "slot": "default",
        "strategy": "truncate",
        **result.loss.to_dict(),
    }
    assert stored.items == {
        "instructions": ["Always log to var/log/app, ticket ABC-123."],
        "urls": ["https://example.org/guide"],
        "paths": ["var/log/app"],
        "ids": ["ABC-123"],
        "numbers": ["4096"],
    }
    summaries = checkpointer.summaries("s")
    assert [s.label for s in summaries] == ["after compression", "before compression"]
    assert checkpointer.load("s", summaries[1].id).loss is None
