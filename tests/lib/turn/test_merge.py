"""Merging a derived slot back: what it brings, what it records, what it refuses."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from helpers import LONG, add, data_dir_files, dumps, file_only, msg

from agctl.base.errors import Conflict, ReadonlySlot, UsageError
from agctl.base.hashing import message_hashes
from agctl.context.models import Message
from agctl.providers.base import ChatRequest, Event
from agctl.providers.offline import OfflineProvider
from agctl.store import Store
from agctl.turn.compress import compress
from agctl.turn.merge import added_since_branch, merge_slots
from agctl.turn.send import TurnOptions, send_turn

OPTIONS = TurnOptions(model="offline")


@pytest.fixture
def branched(store: Store) -> Store:
    """default: u1 a1; branch 'b' derived from it (full) adds u2 a2; default then adds u3 a3."""
    store.create_session("s")
    add(store, "s", None, msg("user", "u1"), msg("assistant", "a1"))
    store.derive_slot("s", "b")
    add(store, "s", "b", msg("user", "u2"), msg("assistant", "a2"))
    add(store, "s", None, msg("user", "u3"), msg("assistant", "a3"))
    return store


def test_merge_append_copies_what_the_branch_added(branched: Store) -> None:
    added = branched.load_slot("s", "b").messages[2:]

    result = merge_slots(branched, "s", "b")

    assert (result.target, result.merged, result.appended, result.skipped) == ("default", 2, 2, 0)
    target = branched.load_slot("s")
    assert [m.text() for m in target.messages] == ["u1", "a1", "u3", "a3", "u2", "a2"]
    assert dumps(target.messages[4:]) == dumps(added)
    (record,) = target.meta.merges
    assert (record.source, record.strategy, record.added) == ("b", "append", 2)
    assert record.hashes == message_hashes(added)


@file_only
def test_merge_twice_adds_nothing_and_writes_nothing(branched: Store) -> None:
    merge_slots(branched, "s", "b")
    before = data_dir_files(branched.root)

    again = merge_slots(branched, "s", "b", strategy="summary", provider=OfflineProvider())

    assert (again.merged, again.appended, again.skipped) == (0, 0, 2)
    assert data_dir_files(branched.root) == before


def test_merge_after_more_work_brings_only_the_new_messages(branched: Store) -> None:
    merge_slots(branched, "s", "b")
    add(branched, "s", "b", msg("user", "u4"))

    result = merge_slots(branched, "s", "b")

    assert (result.merged, result.skipped) == (1, 2)
    target = branched.load_slot("s")
    assert [m.text() for m in target.messages] == ["u1", "a1", "u3", "a3", "u2", "a2", "u4"]
    assert [(r.added, len(r.hashes)) for r in target.meta.merges] == [(2, 2), (1, 1)]


def test_merge_summary_appends_one_offline_summary(branched: Store) -> None:
    added = branched.load_slot("s", "b").messages[2:]

    result = merge_slots(branched, "s", "b", strategy="summary", provider=OfflineProvider())

    assert (result.merged, result.appended) == (2, 1)
    target = branched.load_slot("s")
    assert [m.text() for m in target.messages[:4]] == ["u1", "a1", "u3", "a3"]
    (summary,) = target.messages[4:]
    assert summary.role == "system"
    assert summary.text() == (
        "From branch b: Extract of 2 earlier messages (2 of 2 sentences, verbatim):\n"
        "[user] u2\n[assistant] a2"
    )
    (record,) = target.meta.merges
    assert (record.source, record.strategy, record.added) == ("b", "summary", 1)
    assert record.hashes == message_hashes(added)


class Meanwhile(OfflineProvider):
    """Runs `change` while it writes the summary: another command's work landing then."""

    def __init__(self, change: Callable[[], None]) -> None:
        super().__init__()
        self.change = change

    def stream(self, request: ChatRequest) -> Iterator[Event]:
        self.change()
        return super().stream(request)


def test_a_merge_is_refused_on_a_target_deleted_and_made_again_meanwhile(
    branched: Store,
) -> None:
    branched.derive_slot("s", "t", source="b")
    branched.derive_slot("s", "c", source="t")
    add(branched, "s", "c", msg("user", "u5"))

    def remake() -> None:
        branched.delete_slot("s", "t")
        branched.create_slot("s", "t")
        add(branched, "s", "t", msg("user", "u1"))

    with pytest.raises(Conflict, match=r"deleted and made again\): the merge, computed from"):
        merge_slots(branched, "s", "c", strategy="summary", provider=Meanwhile(remake))

    target = branched.load_slot("s", "t")
    assert [m.text() for m in target.messages] == ["u1"] and target.meta.merges == []


def test_a_merge_keeps_what_was_appended_to_its_target_meanwhile(branched: Store) -> None:
    def append() -> None:
        add(branched, "s", "default", msg("user", "u4"))

    merge_slots(branched, "s", "b", strategy="summary", provider=Meanwhile(append))

    texts = [m.text() for m in branched.load_slot("s", "default").messages]
    assert texts[:5] == ["u1", "a1", "u3", "a3", "u4"]
    assert texts[5].startswith("From branch b: ")


def test_merge_from_a_focused_derive(store: Store) -> None:
    store.create_session("s")
    parent = [msg("system", "Rules.")] + [msg("user", f"m{i}") for i in range(8)]
    add(store, "s", None, *parent)
    derived = store.derive_slot(
        "s", "f", strategy="focused", focus={"recent_messages": 3, "stride": 1}
    )
    assert [m.text() for m in derived.messages] == ["Rules.", "m5", "m6", "m7"]
    add(store, "s", "f", msg("user", "x1"), msg("assistant", "x2"))
    assert [
        m.text() for m in added_since_branch(store.load_slot("s", "f"), store.load_slot("s"))
    ] == [
        "x1",
        "x2",
    ]

    result = merge_slots(store, "s", "f")

    assert result.merged == 2
    target = store.load_slot("s")
    assert dumps(target.messages[:9]) == dumps(parent)
    assert [m.text() for m in target.messages[9:]] == ["x1", "x2"]


@file_only
def test_merge_into_a_readonly_slot_is_refused(branched: Store) -> None:
    branched.set_mode("s", None, "readonly")
    before = data_dir_files(branched.root)
    with pytest.raises(ReadonlySlot):
        merge_slots(branched, "s", "b")
    with pytest.raises(ReadonlySlot):
        merge_slots(branched, "s", "b", strategy="summary", provider=OfflineProvider())
    assert data_dir_files(branched.root) == before


def test_merge_needs_a_target(branched: Store) -> None:
    with pytest.raises(UsageError, match="not derived") as caught:
        merge_slots(branched, "s", "default")
    assert caught.value.hint == "give --into SLOT"
    with pytest.raises(UsageError, match="itself"):
        merge_slots(branched, "s", "b", "b")


def test_merge_after_the_branch_was_compressed_keeps_everything_it_still_has(
    branched: Store,
) -> None:
    added = [msg("user" if i % 2 == 0 else "assistant", text) for i, text in enumerate(LONG[:8])]
    add(branched, "s", "b", *added)
    compress(branched, "s", "b", strategy="truncate", keep_recent=4)
    assert dumps(branched.load_slot("s", "b").messages) == dumps(added[-4:])

    merge_slots(branched, "s", "b")

    assert dumps(branched.load_slot("s").messages[4:]) == dumps(added[-4:])


def test_merge_after_the_branch_removed_an_inherited_message(branched: Store) -> None:
    branched.update_slot("s", "b", lambda slot: slot.remove(0))
    added = branched.load_slot("s", "b").messages[1:]
    assert [m.text() for m in added] == ["u2", "a2"]

    merge_slots(branched, "s", "b")

    assert [m.text() for m in branched.load_slot("s").messages] == [
        "u1",
        "a1",
        "u3",
        "a3",
        "u2",
        "a2",
    ]


def test_merge_ignores_what_the_target_dropped_since(store: Store) -> None:
    store.create_session("s")
    for text in ("q1", "q2", "q3"):
        send_turn(store, "s", text, OfflineProvider(), OPTIONS)
    store.derive_slot("s", "branch")
    send_turn(
        store, "s", "only in branch", OfflineProvider(), TurnOptions(model="x", slot="branch")
    )
    store.update_slot("s", None, lambda slot: slot.retain({"assistant"}))
    result = merge_slots(store, "s", "branch")
    assert result.merged == 2
    texts = [m.text() for m in store.load_slot("s").messages]
    assert texts.count("q1") == 0 and "only in branch" in texts


def test_messages_keep_their_shape_through_a_merge(store: Store) -> None:
    store.create_session("s")
    store.derive_slot("s", "b")
    call = Message(role="assistant", tool_calls=[{"id": "c", "function": {"name": "f"}}])
    store.update_slot("s", "b", lambda slot: slot.append(call))
    merge_slots(store, "s", "b")
    assert store.load_slot("s").messages[-1].tool_calls == call.tool_calls
