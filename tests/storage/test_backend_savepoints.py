"""Every backend's savepoints: a unit of work inside a transaction, undone alone when it
fails, its documents at revisions of their own when it succeeds."""

from __future__ import annotations

import json

import pytest
from backend_docs import SID, rich_draft, seed, snapshot, user
from test_backend_transactions import change_everything, record

from agctl.context.models import Session, Slot
from agctl.storage.base import Backend
from agctl.store.checkpoints.pack import Log


def staged(tx: object) -> dict[str, object]:
    """What a transaction shows of the session (its own writes included)."""
    return snapshot(tx)  # type: ignore[arg-type]


def test_a_failed_unit_leaves_the_transaction_as_it_was(backend: Backend) -> None:
    seed(backend, SID, "other")
    with backend.transaction(SID) as tx:
        # Earlier work of the same transaction, of every kind a unit may then change.
        session = tx.load_session(SID)
        session.title = "first unit"
        tx.put_session(session)
        slot = tx.load_slot(SID, "default")
        slot.messages.append(user("kept"))
        tx.append_messages(slot, 1)
        tx.checkpoint_log().append(lambda offset: record(offset, what="kept"))
        tx.write_cache("index", b"kept\n", append=True)
        before = staged(tx)
        with pytest.raises(RuntimeError, match="in the unit"), tx.savepoint():
            change_everything(tx)
            again = tx.load_slot(SID, "default")
            again.messages.append(user("undone"))
            tx.append_messages(again, 1)
            tx.write_cache("index", b"undone\n", append=True)
            raise RuntimeError("in the unit")
        assert staged(tx) == before
        # The transaction goes on, and commits what it had before the unit.
        after = tx.load_session(SID)
        after.model = "still writable"
        tx.put_session(after)
    stored = snapshot(backend)
    assert stored["session"]["title"] == "first unit"
    assert stored["session"]["model"] == "still writable"
    assert [m["content"] for m in stored["slots"]["default"]["messages"]][-1] == "kept"
    assert sorted(stored["slots"]) == ["default", "other"]
    assert json.loads(stored["log"]) == {"at": 0, "what": "kept"}
    assert stored["caches"]["index"] == b"kept\n"
    assert stored["drafts"] == {} and stored["removed"] == set()


def test_a_unit_that_succeeds_is_committed_with_the_transaction(backend: Backend) -> None:
    seed(backend, SID, "other")
    with backend.transaction(SID) as tx, tx.savepoint():
        change_everything(tx)
    stored = snapshot(backend)
    assert stored["session"]["title"] == "changed"
    assert sorted(stored["slots"]) == ["added", "default"]


def test_nested_units_undo_only_the_inner_one(backend: Backend) -> None:
    seed(backend, SID)
    with backend.transaction(SID) as tx:
        with tx.savepoint():
            tx.put_session(Session(id=SID, title="outer unit"))
            with pytest.raises(KeyError), tx.savepoint():
                tx.put_session(Session(id=SID, title="inner unit"))
                tx.put_draft(rich_draft())
                raise KeyError("inner")
            assert tx.load_session(SID).title == "outer unit"
        with pytest.raises(KeyError), tx.savepoint():
            tx.delete_slot("default")
            raise KeyError("second")
        assert tx.slot_ids(SID) == ["default"]
    assert backend.load_session(SID).title == "outer unit"
    assert backend.draft_slots(SID) == []


def test_a_slot_appended_to_in_a_failed_unit_is_as_it_was(backend: Backend) -> None:
    """The slot object the transaction holds gets its messages and header back, so a
    caller that keeps it (a replay reusing the slot of its last turn) reads no ghost."""
    seed(backend, SID)
    with backend.transaction(SID) as tx:
        slot = tx.load_slot(SID, "default")
        slot.messages.append(user("one"))
        tx.append_messages(slot, 1)
        slot = tx.load_slot(SID, "default")
        count, rev, config = len(slot.messages), slot.rev, slot.config.model_dump()
        with pytest.raises(RuntimeError), tx.savepoint():
            slot.messages.append(user("two"))
            slot.config.mode = "readonly"
            tx.append_messages(slot, 1)
            raise RuntimeError
        current = tx.load_slot(SID, "default")
        assert len(current.messages) == count and current.rev == rev
        assert current.config.model_dump() == config
    assert [m.text() for m in backend.load_slot(SID, "default").messages][-1] == "one"


def test_each_unit_gives_what_it_writes_a_revision_of_its_own(backend: Backend) -> None:
    """A checkpoint made in one unit records a slot's revision; a later unit that appends
    to the slot must give it another, or the next checkpoint would take it as unchanged."""
    seed(backend, SID)
    turns = backend.load_session(SID).turn_count
    with backend.transaction(SID) as tx:
        revs: list[tuple[int, int]] = []
        for text in ("one", "two", "three"):
            with tx.savepoint():
                slot = tx.load_slot(SID, "default")
                slot.messages.append(user(text))
                tx.append_messages(slot, 1)
                session = tx.load_session(SID)
                session.turn_count += 1
                tx.put_session(session)
                revs.append((tx.slot_rev(SID, "default") or 0, tx.load_session(SID).rev))
        slot_revs, session_revs = zip(*revs, strict=True)
        assert list(slot_revs) == sorted(set(slot_revs))
        assert list(session_revs) == sorted(set(session_revs))
    stored = backend.load_slot(SID, "default")
    assert stored.rev == slot_revs[-1]
    assert [m.text() for m in stored.messages][-3:] == ["one", "two", "three"]
    assert backend.load_session(SID).turn_count == turns + 3


def test_a_reader_of_the_log_forgets_what_a_failed_unit_appended(backend: Backend) -> None:
    seed(backend, SID)
    with backend.transaction(SID) as tx:
        log = Log(tx.checkpoint_log())
        log.append([{"kept": 1}])
        with pytest.raises(RuntimeError), tx.savepoint():
            undone = log.append([{"undone": 1}])[0]
            assert log.last() == (undone, {"undone": 1})
            raise RuntimeError
        assert log.last() is not None and log.last()[1] == {"kept": 1}  # type: ignore[index]
        replaced = log.append([{"instead": 1}])[0]
        assert replaced == undone
        assert log.read(replaced) == {"instead": 1}
        digest = log.line_digest(replaced)
    fresh = Log(backend.checkpoint_log(SID))
    assert fresh.read(replaced) == {"instead": 1}
    assert fresh.line_digest(replaced) == digest


def test_a_slot_made_in_a_failed_unit_is_at_no_stored_revision(backend: Backend) -> None:
    seed(backend, SID)
    with backend.transaction(SID) as tx:
        made = Slot(id="made", messages=[user("never stored")])
        with pytest.raises(RuntimeError), tx.savepoint():
            tx.put_slot(made)
            raise RuntimeError
        assert tx.slot_ids(SID) == ["default"]
        assert tx.slot_rev(SID, "made") is None
    assert backend.slot_ids(SID) == ["default"]
