"""agctl.store.drafts.resumable_draft: which draft `turn send --resume-draft` sends, and
when not."""

from __future__ import annotations

import pytest

from agctl.base.errors import NotFound, StaleDraft
from agctl.context.models import Message
from agctl.store import Store
from agctl.store.drafts import new_draft, resumable_draft

SID = "s"


@pytest.fixture
def drafted(store: Store) -> Store:
    """A session whose 'default' slot has a draft kept from its current state."""
    store.create_session(SID)
    slot = store.load_slot(SID, None)
    store.save_draft(SID, new_draft(store.backend, SID, slot, "the question", "the model was down"))
    return store


def test_a_fresh_draft_is_resumable(drafted: Store) -> None:
    draft = resumable_draft(drafted.backend, SID)
    assert (draft.prompt, draft.slot) == ("the question", "default")
    assert resumable_draft(drafted.backend, SID, "default").prompt == "the question"


def test_a_draft_whose_slot_changed_is_refused_unless_forced(drafted: Store) -> None:
    message = Message(role="user", content="meanwhile")
    drafted.update_slot(SID, None, lambda slot: slot.append(message))
    with pytest.raises(StaleDraft):
        resumable_draft(drafted.backend, SID)
    assert resumable_draft(drafted.backend, SID, force=True).prompt == "the question"


def test_no_draft_for_the_slot_named(drafted: Store) -> None:
    with pytest.raises(NotFound, match="has no draft"):
        resumable_draft(drafted.backend, SID, "other")
