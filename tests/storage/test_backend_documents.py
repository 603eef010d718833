"""Every backend keeps documents whole, refuses hostile ids and gives revisions."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from backend_docs import SID, dump, rich_draft, rich_session, rich_slot, seed, user

from agctl.base.errors import AlreadyExists, Conflict, InvalidId, NotFound
from agctl.context.models import Draft, Session, Slot
from agctl.storage.base import Backend

# ---- round trips -----------------------------------------------------------------------


def test_documents_read_back_whole_unknown_fields_kept(backend: Backend) -> None:
    session, slot, draft = rich_session(), rich_slot(), rich_draft()
    backend.create_session(session, [slot, Slot(id="empty")])
    with backend.transaction(SID) as tx:
        tx.put_draft(draft)

    assert dump(backend.load_session(SID)) == dump(session)
    assert dump(backend.load_slot(SID, "default")) == dump(slot)
    assert dump(backend.load_draft(SID, "default")) == dump(draft)
    loaded = backend.load_slot(SID, "default")
    assert loaded.model_extra == {"x_plugin": {"pinned": [1, 2]}}
    assert loaded.config.model_extra == {"x_color": "teal"}
    assert loaded.messages[0].model_extra == {"x_note": "kept verbatim"}
    calls = loaded.messages[1].tool_calls
    assert calls is not None and calls[0].function.arguments == '{"q": 1}'
    assert [len(loaded.immutable), len(loaded.compressed), len(loaded.messages)] == [1, 1, 4]
    assert backend.load_session(SID).model_extra == {"x_session": {"a": [1, None]}}


def test_a_loaded_document_is_a_copy(backend: Backend) -> None:
    seed(backend)
    slot = backend.load_slot(SID, "default")
    slot.messages.append(user("only in memory"))
    slot.config.mode = "readonly"
    session = backend.load_session(SID)
    session.memory["goal"] = "changed in memory"
    assert len(backend.load_slot(SID, "default").messages) == 4
    assert backend.load_slot(SID, "default").config.mode == "focused"
    assert backend.load_session(SID).memory == {"goal": "ship it"}


def test_ids_are_listed_sorted(backend: Backend) -> None:
    for sid in ("zeta", "alpha", "m-1"):
        backend.create_session(Session(id=sid), [Slot(id="b"), Slot(id="a"), Slot(id="c_2")])
    with backend.transaction("alpha") as tx:
        tx.put_draft(rich_draft("c_2"))
        tx.put_draft(rich_draft("a"))
    assert backend.session_ids() == ["alpha", "m-1", "zeta"]
    assert backend.slot_ids("zeta") == ["a", "b", "c_2"]
    assert backend.draft_slots("alpha") == ["a", "c_2"]
    assert backend.draft_slots("zeta") == []
    assert backend.has_session("m-1") and not backend.has_session("m-2")


def test_missing_documents_are_not_found(backend: Backend) -> None:
    seed(backend)
    with pytest.raises(NotFound, match="session 'nope' not found"):
        backend.load_session("nope")
    with pytest.raises(NotFound, match="session 'nope' not found"):
        backend.slot_ids("nope")
    with pytest.raises(NotFound, match="session 'nope' not found"):
        backend.load_slot("nope", "default")
    with pytest.raises(NotFound, match="slot 'gone' not found in session 's'"):
        backend.load_slot(SID, "gone")
    with pytest.raises(NotFound, match="slot 'default' of session 's' has no draft"):
        backend.load_draft(SID, "default")
    with pytest.raises(NotFound):
        backend.transaction("nope").__enter__()
    with pytest.raises(NotFound):
        backend.destroy_session("nope")
    with pytest.raises(NotFound):
        backend.set_current_session("nope")
    assert backend.slot_rev(SID, "gone") is None
    assert backend.slot_rev("nope", "default") is None


def test_a_deleted_slot_and_draft_are_gone(backend: Backend) -> None:
    seed(backend, SID, "other")
    with backend.transaction(SID) as tx:
        tx.put_draft(rich_draft("other"))
    with backend.transaction(SID) as tx:
        tx.delete_slot("other")
    assert backend.slot_ids(SID) == ["default"]
    assert backend.draft_slots(SID) == ["other"]  # a draft outlives its slot
    with backend.transaction(SID) as tx:
        assert tx.delete_draft("other") is True
        assert tx.delete_draft("other") is False
    assert backend.draft_slots(SID) == []


def test_sessions_are_created_replaced_and_destroyed(backend: Backend) -> None:
    seed(backend)
    with pytest.raises(AlreadyExists, match="session 's' already exists"):
        backend.create_session(Session(id=SID), [])
    assert backend.load_session(SID).title == "rich"

    backend.replace_session(Session(id=SID, title="new"), [Slot(id="fresh")])
    assert backend.load_session(SID).title == "new"
    assert backend.slot_ids(SID) == ["fresh"]

    backend.destroy_session(SID)
    assert backend.session_ids() == [] and not backend.has_session(SID)
    with pytest.raises(NotFound):
        backend.load_session(SID)


def test_the_current_session_is_kept(backend: Backend) -> None:
    seed(backend)
    seed(backend, "t")
    assert backend.current_session_id() is None
    backend.set_current_session("t")
    assert backend.current_session_id() == "t"
    backend.set_current_session(None)
    assert backend.current_session_id() is None
    assert backend.pending(SID) is False


# ---- hostile ids -----------------------------------------------------------------------

HOSTILE_IDS = ["../x", "a/b", ".", "", "a\0b", "x" * 300, "-x"]

Use = Callable[[Backend, str], Any]


def in_tx(action: Callable[[Any, str], Any]) -> Use:
    def use(backend: Backend, bad: str) -> Any:
        with backend.transaction(SID) as tx:
            return action(tx, bad)

    return use


USES: dict[str, Use] = {
    "has_session": lambda b, bad: b.has_session(bad),
    "load_session": lambda b, bad: b.load_session(bad),
    "slot_ids": lambda b, bad: b.slot_ids(bad),
    "load_slot/session": lambda b, bad: b.load_slot(bad, "default"),
    "load_slot/slot": lambda b, bad: b.load_slot(SID, bad),
    "slot_rev/session": lambda b, bad: b.slot_rev(bad, "default"),
    "slot_rev/slot": lambda b, bad: b.slot_rev(SID, bad),
    "draft_slots": lambda b, bad: b.draft_slots(bad),
    "load_draft/session": lambda b, bad: b.load_draft(bad, "default"),
    "load_draft/slot": lambda b, bad: b.load_draft(SID, bad),
    "checkpoint_log": lambda b, bad: b.checkpoint_log(bad).size(),
    "removed_checkpoints": lambda b, bad: b.removed_checkpoints(bad),
    "cache": lambda b, bad: b.cache(bad, "heads"),
    "transaction": lambda b, bad: b.transaction(bad).__enter__(),
    "in_transaction": lambda b, bad: b.in_transaction(bad),
    "create_session": lambda b, bad: b.create_session(Session(id=bad), [Slot(id="default")]),
    "create_session/slot": lambda b, bad: b.create_session(Session(id="t"), [Slot(id=bad)]),
    "replace_session": lambda b, bad: b.replace_session(Session(id=bad), []),
    "replace_session/slot": lambda b, bad: b.replace_session(Session(id=SID), [Slot(id=bad)]),
    "destroy_session": lambda b, bad: b.destroy_session(bad),
    "set_current_session": lambda b, bad: b.set_current_session(bad),
    "pending": lambda b, bad: b.pending(bad),
    "tx.load_slot": in_tx(lambda tx, bad: tx.load_slot(SID, bad)),
    "tx.put_session": in_tx(lambda tx, bad: tx.put_session(Session(id=bad))),
    "tx.put_slot": in_tx(lambda tx, bad: tx.put_slot(Slot(id=bad))),
    "tx.append_messages": in_tx(lambda tx, bad: tx.append_messages(Slot(id=bad), 0)),
    "tx.delete_slot": in_tx(lambda tx, bad: tx.delete_slot(bad)),
    "tx.put_draft": in_tx(lambda tx, bad: tx.put_draft(Draft(prompt="p", slot=bad))),
    "tx.delete_draft": in_tx(lambda tx, bad: tx.delete_draft(bad)),
}


@pytest.mark.parametrize("use", list(USES))
def test_hostile_ids_are_refused_everywhere(backend: Backend, tmp_path: Path, use: str) -> None:
    seed(backend)
    before = {"slots": backend.slot_ids(SID), "session": dump(backend.load_session(SID))}
    for bad in HOSTILE_IDS:
        with pytest.raises(InvalidId):
            USES[use](backend, bad)
    assert backend.session_ids() == [SID]
    assert {"slots": backend.slot_ids(SID), "session": dump(backend.load_session(SID))} == before
    names = {path.name for path in tmp_path.rglob("*")}
    assert not names & {"x", "a", "b", "-x", "x" * 300}


# ---- append and replace ----------------------------------------------------------------


def test_appended_messages_read_back_as_the_slot_in_memory(backend: Backend) -> None:
    seed(backend)
    slot = backend.load_slot(SID, "default")
    for number in range(3):
        slot.messages += [user(f"q{number}"), user(f"a{number}")]
        slot.meta.message_count = len(slot.messages)
        slot.config.focused.recent_messages = number
        with backend.transaction(SID) as tx:
            tx.append_messages(slot, 2)
        assert dump(backend.load_slot(SID, "default")) == dump(slot)
    assert [m.text() for m in backend.load_slot(SID, "default").messages][-2:] == ["q2", "a2"]


def test_a_replace_after_appends_and_appends_after_a_replace(backend: Backend) -> None:
    seed(backend)
    slot = backend.load_slot(SID, "default")
    slot.messages.append(user("appended"))
    with backend.transaction(SID) as tx:
        tx.append_messages(slot, 1)
    slot.messages = [user("rewritten")]
    with backend.transaction(SID) as tx:
        tx.put_slot(slot)
    assert dump(backend.load_slot(SID, "default")) == dump(slot)
    slot.messages += [user("after"), user("the replace")]
    with backend.transaction(SID) as tx:
        tx.append_messages(slot, 2)
    loaded = backend.load_slot(SID, "default")
    assert dump(loaded) == dump(slot)
    assert [m.text() for m in loaded.messages] == ["rewritten", "after", "the replace"]


def test_appends_and_a_replace_in_one_transaction(backend: Backend) -> None:
    seed(backend)
    slot = backend.load_slot(SID, "default")
    with backend.transaction(SID) as tx:
        slot.messages.append(user("one"))
        tx.append_messages(slot, 1)
        slot.messages.pop(0)
        tx.put_slot(slot)
        slot.messages.append(user("two"))
        tx.append_messages(slot, 1)
        assert dump(tx.load_slot(SID, "default")) == dump(slot)
    assert dump(backend.load_slot(SID, "default")) == dump(slot)


@pytest.mark.parametrize("change", ["edited", "removed", "short", "compressed", "immutable"])
def test_an_append_onto_a_different_slot_is_a_conflict(backend: Backend, change: str) -> None:
    seed(backend)
    before = dump(backend.load_slot(SID, "default"))
    slot = backend.load_slot(SID, "default")
    if change == "edited":
        slot.edit(0, "edited in memory")
    elif change == "removed":
        slot.messages.pop(0)
    elif change == "compressed":
        slot.compressed = []
    elif change == "immutable":
        slot.immutable.append(user("pinned"))
    slot.messages.append(user("new"))
    count = len(slot.messages) if change == "short" else 1
    with pytest.raises(Conflict), backend.transaction(SID) as tx:
        tx.append_messages(slot, count)
    assert dump(backend.load_slot(SID, "default")) == before


# ---- revisions -------------------------------------------------------------------------


def test_every_write_advances_the_revision(backend: Backend) -> None:
    seed(backend)
    session_revs = [backend.load_session(SID).rev]
    slot_revs = [backend.load_slot(SID, "default").rev]
    slot = backend.load_slot(SID, "default")
    for number in range(3):
        session = backend.load_session(SID)
        session.turn_count += 1
        slot.messages.append(user(f"m{number}"))
        with backend.transaction(SID) as tx:
            tx.put_session(session)
            if number % 2:
                tx.put_slot(slot)
            else:
                tx.append_messages(slot, 1)
        session_revs.append(backend.load_session(SID).rev)
        slot_revs.append(backend.load_slot(SID, "default").rev)
        assert slot.rev == slot_revs[-1]  # what was written carries its revision
        assert backend.slot_rev(SID, "default") == slot_revs[-1]
    assert session_revs == sorted(set(session_revs)) and len(session_revs) == 4
    assert slot_revs == sorted(set(slot_revs)) and len(slot_revs) == 4


def test_an_unchanged_slot_is_reused_a_changed_one_read_again(backend: Backend) -> None:
    seed(backend, SID, "other")
    first = backend.load_slot(SID, "default")
    assert backend.load_slot(SID, "default", reuse=first) is first
    with backend.transaction(SID) as tx:
        tx.put_slot(Slot(id="other", messages=[user("elsewhere")]))
    assert backend.load_slot(SID, "default", reuse=first) is first

    changed = backend.load_slot(SID, "default")
    changed.messages.append(user("changed"))
    with backend.transaction(SID) as tx:
        tx.append_messages(changed, 1)
    again = backend.load_slot(SID, "default", reuse=first)
    assert again is not first and dump(again) == dump(changed)
    assert backend.load_slot(SID, "default", reuse=changed) is changed


def test_reuse_never_returns_a_write_that_was_rolled_back(backend: Backend) -> None:
    seed(backend)
    dropped = backend.load_slot(SID, "default")
    dropped.messages.append(user("rolled back"))
    with pytest.raises(RuntimeError), backend.transaction(SID) as tx:
        tx.put_slot(dropped)
        raise RuntimeError("abandon")
    assert backend.load_slot(SID, "default", reuse=dropped) is not dropped
    kept = backend.load_slot(SID, "default")
    kept.messages.append(user("committed"))
    with backend.transaction(SID) as tx:
        tx.put_slot(kept)
    loaded = backend.load_slot(SID, "default", reuse=dropped)
    assert loaded is not dropped and loaded.messages[-1].text() == "committed"


def test_reuse_never_returns_a_slot_deleted_and_written_again(backend: Backend) -> None:
    seed(backend, SID, "x")
    old = backend.load_slot(SID, "x")
    with backend.transaction(SID) as tx:
        tx.delete_slot("x")
    with backend.transaction(SID) as tx:
        tx.put_slot(Slot(id="x", messages=[user("a new x")]))
    loaded = backend.load_slot(SID, "x", reuse=old)
    assert loaded is not old and loaded.messages[0].text() == "a new x"


def test_reuse_never_returns_a_slot_of_a_replaced_session(backend: Backend) -> None:
    seed(backend)
    old = backend.load_slot(SID, "default")
    backend.replace_session(Session(id=SID), [Slot(id="default", messages=[user("new")])])
    loaded = backend.load_slot(SID, "default", reuse=old)
    assert loaded is not old and loaded.messages[0].text() == "new"


def test_reuse_never_returns_a_slot_of_another_session(backend: Backend) -> None:
    backend.create_session(Session(id=SID), [Slot(id="default", messages=[user("in s")])])
    backend.create_session(Session(id="t"), [Slot(id="default", messages=[user("in t")])])
    from_s = backend.load_slot(SID, "default")
    loaded = backend.load_slot("t", "default", reuse=from_s)
    assert loaded is not from_s and loaded.messages[0].text() == "in t"
