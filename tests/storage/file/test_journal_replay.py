"""The file backend's redo journal: what it replays after a crash or a power failure,
and what it never replays."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from agctl.context.models import Message
from agctl.providers.offline import OfflineProvider
from agctl.storage.encoding import encode_record
from agctl.storage.file import journal as redo
from agctl.store import Store
from agctl.turn.send import TurnOptions, send_turn

SID = "s"


def files_of(directory: Path) -> dict[str, str]:
    """Digest of every file of a session but its lock and journal."""
    return {
        str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(directory.rglob("*"))
        if p.is_file() and p.name not in (".lock", "journal")
    }


def turns(store: Store, count: int) -> None:
    for number in range(count):
        send_turn(store, SID, f"question {number}", OfflineProvider(), TurnOptions(model="o"))


@pytest.fixture
def store(isolated_env: Path) -> Store:
    store = Store(isolated_env)
    store.create_session(SID)
    return store


def test_after_a_power_failure_every_record_since_the_last_flush_is_replayed(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    directory = store.session_dir(SID)
    turns(store, 2)
    assert store.files is not None
    store.files.journal(SID).flush()
    synced = {name: (directory / name).read_bytes() for name in files_of(directory)}
    turns(store, 3)  # committed and applied, but their files not synced yet
    expected = files_of(directory)
    # The machine loses power: the files fall back to what was synced (the journal,
    # fsynced at each commit, survives); it boots again, under another boot id.
    for name, data in synced.items():
        (directory / name).write_bytes(data)
    for name in set(expected) - set(synced):
        (directory / name).unlink()
    assert files_of(directory) != expected
    monkeypatch.setattr(redo, "_BOOT", "another-boot")
    fresh = Store(store.root)
    assert fresh.pending_recovery(SID)
    assert fresh.load_session(SID).turn_count == 5  # a reader finishes it first
    assert files_of(directory) == expected
    assert not fresh.pending_recovery(SID)


def test_a_record_torn_by_a_crash_never_committed(store: Store) -> None:
    directory = store.session_dir(SID)
    turns(store, 1)
    before = files_of(directory)
    journal = directory / "journal"
    record = encode_record({"ops": [["put", "session.json", redo.pack_data(b"{}")]]})
    with journal.open("ab") as handle:
        handle.write(record[: len(record) // 2])  # the fsync never came
    fresh = Store(store.root)
    fresh.memory_set(SID, "k", "v")
    assert fresh.load_session(SID).turn_count == 1
    after = files_of(directory)
    assert after.pop("session.json") != before.pop("session.json")  # the memory write
    assert after == before


def test_replaying_a_record_twice_gives_the_same_files(store: Store) -> None:
    directory = store.session_dir(SID)
    turns(store, 1)
    journal = directory / "journal"
    data = journal.read_bytes()
    header_size = redo._header_size()
    assert len(data) > header_size, "the turn's record is still in the journal"
    before = files_of(directory)
    # As if the writer had died before marking its record applied: it is replayed.
    journal.write_bytes(redo._header(header_size, redo._BOOT) + data[header_size:])
    fresh = Store(store.root)
    assert fresh.pending_recovery(SID)
    fresh.settle(SID)
    assert files_of(directory) == before
    assert fresh.load_slot(SID).messages[0].text() == "question 0"
    assert len(fresh.load_slot(SID).messages) == 2, "appended once, not twice"


def test_the_journal_is_emptied_once_it_has_grown(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(redo, "FLUSH_BYTES", 4096)
    journal = store.session_dir(SID) / "journal"
    for number in range(30):
        store.update_slot(
            SID, None, lambda s, n=number: s.messages.append(Message(role="user", content=f"m{n}"))
        )
        assert journal.stat().st_size < 4096 + 8192, "flushed when it passed the limit"
    assert [m.text() for m in store.load_slot(SID).messages][-1] == "m29"


def test_a_turn_whose_changes_fail_after_the_commit_point_is_finished_not_resent(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The record is durable, applying it fails (a full disk): the turn is committed, so
    no draft invites sending it again, and the next command finishes it."""
    from agctl.base.errors import CommitPending, StoreError
    from agctl.storage.file.journal import Journal

    original = Journal._apply
    applied: list[object] = []

    def fails_after_one(self: Journal, op: list, temp: Path | None) -> None:
        if applied:
            raise StoreError("cannot write session.json: No space left on device")
        applied.append(op)
        original(self, op, temp)

    monkeypatch.setattr(Journal, "_apply", fails_after_one)
    with pytest.raises(CommitPending) as caught:
        send_turn(store, SID, "kept once", OfflineProvider(), TurnOptions(model="o"))
    monkeypatch.undo()
    assert "was committed" in str(caught.value) and "do not repeat it" in str(caught.value)
    assert not any("draft" in note for note in getattr(caught.value, "__notes__", []))
    later = Store(store.root)
    assert later.draft_slots(SID) == []
    assert later.load_session(SID).turn_count == 1
    assert later.load_slot(SID).messages[0].text() == "kept once"
    assert len(later.load_slot(SID).messages) == 2
