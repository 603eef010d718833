"""Turns sent again on a branch of their own (agctl.turn.branches): the slot they came
from is never changed, the new slot holds the messages before the prompt, and a failed
send leaves the new slot with its draft."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from helpers import OPTIONS

from agctl.base.errors import ProviderError, UsageError
from agctl.providers.base import ChatRequest, Event
from agctl.providers.offline import OfflineProvider
from agctl.store import Store
from agctl.turn.branches import branch_name, compare_slots, edit_turn, retry_turn
from agctl.turn.send import send_turn


@pytest.fixture
def talked(store: Store) -> str:
    sid = store.create_session("s").id
    for prompt in ("one", "two"):
        send_turn(store, sid, prompt, OfflineProvider(), OPTIONS)
    return sid


def texts(store: Store, sid: str, slot: str) -> list[str]:
    return [m.text() for m in store.load_slot(sid, slot).messages]


def test_a_retry_sends_the_last_prompt_again_on_a_new_current_slot(
    store: Store, talked: str
) -> None:
    before = texts(store, talked, "default")
    result = retry_turn(store, talked, OfflineProvider(), OPTIONS)
    assert result.slot_id == "default-retry-1"
    assert store.load_session(talked).current_slot == "default-retry-1"
    assert texts(store, talked, "default") == before  # the old reply kept
    again = texts(store, talked, "default-retry-1")
    assert again[:3] == before[:3] and again[3] != before[3]
    assert retry_turn(store, talked, OfflineProvider(), OPTIONS).slot_id == "default-retry-2"


def test_an_edit_replaces_a_prompt_and_drops_what_followed_it(store: Store, talked: str) -> None:
    result = edit_turn(store, talked, 0, "uno", OfflineProvider(), OPTIONS)
    assert result.slot_id == "default-edit-1"
    assert texts(store, talked, "default-edit-1")[0] == "uno"
    assert len(texts(store, talked, "default-edit-1")) == 2
    with pytest.raises(UsageError, match="not a prompt but the assistant's"):
        edit_turn(store, talked, 1, "x", OfflineProvider(), OPTIONS)
    assert "default-edit-2" not in store.slot_ids(talked)  # refused before any slot


def test_compare_slots_shows_the_replies_that_differ(store: Store, talked: str) -> None:
    retry_turn(store, talked, OfflineProvider(), OPTIONS)
    diff = compare_slots(store, talked)
    assert (diff.a, diff.b, diff.shared) == ("default", "default-retry-1", 3)
    assert [line[0] for line in diff.lines if line[:1] in "+-" and line[:3] not in "---+++"] == [
        "-",
        "+",
    ]
    with pytest.raises(UsageError, match="was not derived"):
        compare_slots(store, talked, None, "default")


def test_a_branch_name_is_counted_from_its_root() -> None:
    assert branch_name({"a-retry-1"}, "a-retry-1", "retry") == "a-retry-2"
    assert branch_name(set(), "a-edit-3", "retry") == "a-retry-1"


def test_a_branch_is_derived_with_the_messages_before_its_prompt(store: Store, talked: str) -> None:
    """What the new slot records it was derived with (slot merge counts the rest as
    added) is its parent's first messages before the prompt, not the whole parent."""
    from agctl.base.hashing import message_hashes

    retry_turn(store, talked, OfflineProvider(), OPTIONS)
    parent = store.load_slot(talked, "default")
    branch = store.load_slot(talked, "default-retry-1")
    assert branch.meta.branch == message_hashes(parent.messages[:2])
    assert branch.meta.parent_id == "default"


def test_only_a_full_copy_keeps_the_first_messages(store: Store, talked: str) -> None:
    with pytest.raises(UsageError, match="only a full copy"):
        store.derive_slot(talked, "x", strategy="focused", upto=1)
    assert "x" not in store.slot_ids(talked)


class Down:
    """A provider whose every request fails."""

    name = "down"

    def stream(self, request: ChatRequest) -> Iterator[Event]:
        raise ProviderError("the model is down")
        yield  # a generator, as a provider's stream is


def test_a_failed_retry_changes_nothing_but_its_new_slot(store: Store, talked: str) -> None:
    """The current slot stays (so a retry again retries the same reply), and the new
    slot keeps the prompt as its draft, said in the error."""
    before = texts(store, talked, "default")
    with pytest.raises(ProviderError) as failed:
        retry_turn(store, talked, Down(), OPTIONS)  # type: ignore[arg-type]
    assert "--resume-draft --slot default-retry-1" in "\n".join(failed.value.__notes__)
    assert store.load_session(talked).current_slot == "default"
    assert texts(store, talked, "default") == before
    assert store.load_draft(talked, "default-retry-1").prompt == "two"
    again = retry_turn(store, talked, OfflineProvider(), OPTIONS)
    assert (again.slot_id, texts(store, talked, "default-retry-2")[2]) == ("default-retry-2", "two")


def test_a_branch_of_a_slot_with_a_long_name_is_a_valid_id(store: Store, talked: str) -> None:
    """The root is cut to fit: `turn retry` on a 125-character slot is not refused for an
    id the user never typed."""
    from agctl.base.ids import MAX_ID_LENGTH, validate_id

    long = "x" * (MAX_ID_LENGTH - 3)
    store.create_slot(talked, long, make_current=True)
    send_turn(store, talked, "hi", OfflineProvider(), OPTIONS)
    first = retry_turn(store, talked, OfflineProvider(), OPTIONS).slot_id
    second = retry_turn(store, talked, OfflineProvider(), OPTIONS).slot_id
    assert first.endswith("-retry-1") and second.endswith("-retry-2")
    for name in (first, second):
        assert len(name) == MAX_ID_LENGTH and validate_id(name) == name
    assert branch_name({first}, long, "retry") == second
