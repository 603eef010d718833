"""The checkpoint log on disk: its bytes, its caches (index, heads), damage to each, and
the files a destroy removes."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import (
    append,
    checkpoints_dir,
    data_dir_files,
    documents,
    draft_file,
    dumped_at,
    dumped_live,
    dying_after_one_change,
    turn,
)

from agctl.base.errors import (
    CorruptDocument,
    HasChildren,
    NotFound,
    ProviderError,
    TurnInterrupted,
)
from agctl.providers.base import (
    ChatRequest,
    Event,
    Finish,
    TextDelta,
)
from agctl.storage.file.layout import RESTORE_JOURNAL
from agctl.store import Store
from agctl.store.checkpointer import Checkpointer
from agctl.store.checkpoints import (
    Checkpoint,
    checkpoint_offset,
)
from agctl.turn.send import TurnOptions, send_turn

OPTIONS = TurnOptions(model="offline")
SID = "s"


# ---- helpers ---------------------------------------------------------------------------


def log_path(store: Store, sid: str = SID) -> Path:
    return checkpoints_dir(store, sid) / "log"


def log_records(store: Store, sid: str = SID) -> Iterator[tuple[int, bytes, dict[str, Any]]]:
    """(offset, line, record) for every line of the checkpoint log."""
    offset = 0
    for line in log_path(store, sid).read_bytes().splitlines(keepends=True):
        yield offset, line, json.loads(line.rpartition(b"\t")[0] or line)
        offset += len(line)


def node_offset(store: Store, content: str) -> tuple[int, bytes]:
    """The offset and line of the message node holding `content`."""
    for offset, line, record in log_records(store):
        if "h" in record and record["m"].get("content") == content:
            return offset, line
    raise AssertionError(f"no node holds {content!r}")


def overwrite(path: Path, offset: int, data: bytes) -> None:
    raw = bytearray(path.read_bytes())
    raw[offset : offset + len(data)] = data
    path.write_bytes(bytes(raw))


def checkpoint_bytes(store: Store, sid: str = SID) -> int:
    return sum(p.stat().st_size for p in checkpoints_dir(store, sid).iterdir())


def live_bytes(store: Store, sid: str = SID) -> int:
    directory = store.session_dir(sid)
    slots = sum(p.stat().st_size for p in (directory / "slots").iterdir())
    return (directory / "session.json").stat().st_size + slots


class FailingProvider:
    """Streams part of a reply, then fails the way a provider or a user would."""

    name = "failing"

    def __init__(self, error: BaseException | None, text: str = "partial ") -> None:
        self.error = error
        self.text = text

    def stream(self, request: ChatRequest) -> Iterator[Event]:
        if self.text:
            yield TextDelta(self.text)
        if self.error is not None:
            raise self.error
        yield Finish("stop")


def test_without_checkpoints_there_is_nothing_to_undo_to(store: Store) -> None:
    store.create_session(SID)
    keeper = Checkpointer(store)
    result = turn(store, "one", checkpoint=False)
    turn(store, "two", checkpoint=False)
    assert result.checkpoint is None
    assert keeper.ids(SID) == []
    assert not checkpoints_dir(keeper.store, SID).exists()
    before = documents(store)
    with pytest.raises(NotFound, match="automatic checkpoints may have been off"):
        keeper.undo(SID)
    assert documents(store) == before


@pytest.mark.parametrize(
    ("error", "text", "raised"),
    [
        (ProviderError("HTTP 500"), "partial ", ProviderError),
        (None, "", ProviderError),  # an empty reply
        (KeyboardInterrupt(), "partial ", TurnInterrupted),
    ],
    ids=["provider-error", "empty-reply", "interrupted"],
)
def test_a_failed_turn_leaves_no_checkpoint(
    store: Store, error: BaseException | None, text: str, raised: type[Exception]
) -> None:
    store.create_session(SID)
    keeper = Checkpointer(store)
    with pytest.raises(raised):
        send_turn(store, SID, "first", FailingProvider(error, text), OPTIONS)
    assert keeper.ids(SID) == []
    assert not log_path(store).exists()

    turn(store, "second")
    ids = keeper.ids(SID)
    before = {
        name: data
        for name, data in data_dir_files(store.root, SID).items()
        if name != draft_file(SID)
    }
    with pytest.raises(raised):
        send_turn(store, SID, "third", FailingProvider(error, text), OPTIONS)
    assert keeper.ids(SID) == ids
    after = data_dir_files(store.root, SID)
    assert json.loads(after.pop(draft_file(SID)))["prompt"] == "third"
    assert after == before


def test_checkpoint_storage_grows_linearly(store: Store) -> None:
    store.create_session(SID, system_prompt="Be brief.")
    added: dict[int, int] = {}
    for number in range(1, 201):
        before = checkpoint_bytes(store) if number > 1 else 0
        turn(store, f"prompt number {number}: tell me something about the number {number}")
        added[number] = checkpoint_bytes(store) - before
    total, state = checkpoint_bytes(store), live_bytes(store)
    assert len(Checkpointer(store).ids(SID)) == 201
    assert total <= 3.5 * state, (total, state)
    assert added[200] <= 2 * added[20], (added[20], added[200])
    assert added[20] <= 2 * added[200], (added[20], added[200])


def four_turns(store: Store) -> dict[int, tuple[str, dict[str, Any]]]:
    """Turn number -> (its checkpoint id, the documents it saw)."""
    store.create_session(SID)
    seen = {}
    for number in range(1, 5):
        result = turn(store, f"prompt {number}")
        assert result.checkpoint is not None
        seen[number] = (result.checkpoint, documents(store))
    return seen


@pytest.mark.parametrize("damage", ["changed-byte", "torn-record"])
def test_a_damaged_node_breaks_only_the_checkpoints_that_use_it(store: Store, damage: str) -> None:
    seen = four_turns(store)
    keeper = Checkpointer(store)
    path = log_path(store)
    offset, line = node_offset(store, "prompt 3")
    if damage == "changed-byte":
        overwrite(path, offset + line.index(b"prompt 3"), b"prompt X")
    else:
        half = len(line) // 2
        overwrite(path, offset + half, b" " * (len(line) - half - 1))
    live_before, ids = data_dir_files(store.root, SID), keeper.ids(SID)

    for number in (3, 4):
        identifier = seen[number][0]
        with pytest.raises(CorruptDocument) as excinfo:
            keeper.rollback(SID, identifier)
        assert excinfo.value.path == path
        assert str(path) in str(excinfo.value)
        assert f"byte {offset}" in str(excinfo.value)
        with pytest.raises(CorruptDocument):
            keeper.diff(SID, identifier)
    assert data_dir_files(store.root, SID) == live_before
    assert keeper.ids(SID) == ids

    keeper.rollback(SID, seen[2][0])
    assert documents(store) == seen[2][1]
    result = turn(store, "a fresh third")
    assert result.checkpoint is not None
    assert dumped_at(store, result.checkpoint) == dumped_live(store)
    keeper.rollback(SID, seen[1][0])
    assert documents(store) == seen[1][1]


def test_a_garbled_checkpoint_record_is_reported_as_corrupt(store: Store) -> None:
    seen = four_turns(store)
    keeper = Checkpointer(store)
    identifier = seen[2][0]
    overwrite(log_path(store), checkpoint_offset(identifier) + 2, b"XXXX")
    with pytest.raises(CorruptDocument) as excinfo:
        keeper.rollback(SID, identifier)
    assert excinfo.value.path == log_path(store)


def test_a_garbled_checkpoint_record_leaves_the_others_usable(store: Store) -> None:
    seen = four_turns(store)
    keeper = Checkpointer(store)
    overwrite(log_path(store), checkpoint_offset(seen[2][0]) + 2, b"XXXX")
    for number in (4, 3, 1):
        keeper.rollback(SID, seen[number][0])
        assert documents(store) == seen[number][1]


@pytest.mark.parametrize("damage", ["deleted", "garbage"])
def test_a_lost_index_is_rebuilt_from_the_log(store: Store, damage: str) -> None:
    seen = four_turns(store)
    keeper = Checkpointer(store)
    keeper.remove(SID, [seen[1][0]])
    summaries = keeper.summaries(SID)
    index = checkpoints_dir(keeper.store, SID) / "index.jsonl"
    if damage == "deleted":
        index.unlink()
    else:
        index.write_bytes(b'\x00\xffnot json\n{"id": 3\n')

    assert keeper.summaries(SID) == summaries
    assert keeper.summaries(SID) == summaries  # and again, from the rebuilt index
    result = turn(store, "after the repair")
    assert result.checkpoint is not None
    assert keeper.ids(SID) == [result.checkpoint, *(s.id for s in summaries)]
    assert dumped_at(store, result.checkpoint) == dumped_live(store)
    keeper.rollback(SID, seen[3][0])
    assert documents(store) == seen[3][1]


def test_one_garbled_index_line_is_repaired(store: Store) -> None:
    four_turns(store)
    keeper = Checkpointer(store)
    ids = keeper.ids(SID)
    index = checkpoints_dir(keeper.store, SID) / "index.jsonl"
    lines = index.read_bytes().splitlines()
    lines[2] = b"garbage"
    index.write_bytes(b"\n".join(lines) + b"\n")
    assert keeper.ids(SID) == ids


@pytest.mark.parametrize("damage", ["deleted", "garbage", "not-an-object"])
def test_lost_heads_are_rebuilt_and_the_next_checkpoint_is_exact(store: Store, damage: str) -> None:
    seen = four_turns(store)
    keeper = Checkpointer(store)
    heads = checkpoints_dir(keeper.store, SID) / "heads.json"
    if damage == "deleted":
        heads.unlink()
    elif damage == "garbage":
        heads.write_bytes(b"\x00{garbage")
    else:
        heads.write_bytes(b"[1, 2]")
    store.derive_slot(SID, "side")
    result = turn(store, "after the repair")
    assert result.checkpoint is not None
    assert dumped_at(store, result.checkpoint) == dumped_live(store)
    assert keeper.ids(SID)[0] == result.checkpoint
    keeper.rollback(SID, seen[2][0])
    assert documents(store) == seen[2][1]


def test_heads_without_slots_are_rebuilt(store: Store) -> None:
    four_turns(store)
    keeper = Checkpointer(store)
    (checkpoints_dir(keeper.store, SID) / "heads.json").write_bytes(b"{}")
    result = turn(store, "after the repair")
    assert result.checkpoint is not None
    assert dumped_at(store, result.checkpoint) == dumped_live(store)


def test_a_torn_last_line_in_the_log_is_tolerated(store: Store) -> None:
    seen = four_turns(store)
    keeper = Checkpointer(store)
    ids = keeper.ids(SID)
    with open(log_path(store), "ab") as handle:
        handle.write(b'{"h": "0123", "p": -1, "m": {"role": "us')  # a crash mid-append

    assert keeper.ids(SID) == ids
    result = turn(store, "after the crash")
    assert result.checkpoint is not None
    assert keeper.ids(SID) == [result.checkpoint, *ids]
    assert dumped_at(store, result.checkpoint) == dumped_live(store)
    keeper.rollback(SID, seen[3][0])
    assert documents(store) == seen[3][1]
    keeper.rollback(SID, result.checkpoint)
    assert dumped_at(store, result.checkpoint) == dumped_live(store)


def test_a_restore_journal_of_older_agctl_is_dropped(store: Store) -> None:
    store.create_session(SID)
    turn(store, "one")
    before = dumped_live(store)
    journal = store.session_dir(SID) / "checkpoints" / "restoring.json"
    journal.write_bytes(json.dumps({"checkpoint": "zzzz"}).encode())
    later = Store(store.root)  # the next process
    later.memory_set(SID, "k", "v")
    assert not journal.exists()
    after = dumped_live(later)
    assert after["slots"] == before["slots"]
    assert after["session"]["memory"] == {"k": "v"}


def test_destroying_a_session_removes_its_checkpoints(store: Store) -> None:
    store.create_session(SID)
    store.create_session("keep")
    turn(store, "one")
    turn(store, "kept", sid="keep")
    assert checkpoints_dir(store, SID).is_dir()
    store.destroy_session(SID)
    assert not store.session_dir(SID).exists()
    assert sorted(p.name for p in store.sessions_dir.iterdir()) == ["keep"]
    assert len(Checkpointer(store).ids("keep")) == 2


def test_recursive_destroy_removes_a_fork_child_and_orphans_keep_theirs(store: Store) -> None:
    store.create_session(SID)
    keeper = Checkpointer(store)
    first = turn(store, "one")
    assert first.checkpoint is not None
    keeper.fork(SID, first.checkpoint, "child")
    turn(store, "in the child", sid="child")
    keeper.fork("child", keeper.ids("child")[0], "grandchild")

    with pytest.raises(HasChildren) as excinfo:
        store.destroy_session(SID)
    assert excinfo.value.children == ["child"]
    destroyed = store.destroy_session("child", orphan=True)
    assert (destroyed.destroyed, destroyed.orphaned) == (["child"], ["grandchild"])
    assert store.parent("grandchild") is None
    assert store.load_session("grandchild").parent_id == "child"

    keeper.fork(SID, first.checkpoint, "child2")
    turn(store, "in the second child", sid="child2")
    result = store.destroy_session(SID, recursive=True)
    assert result.destroyed == [SID, "child2"] and result.orphaned == []
    assert sorted(p.name for p in store.sessions_dir.iterdir()) == ["grandchild"]
    assert dumped_live(store, "grandchild")["slots"]["default"]["messages"][-2]["content"] == (
        "in the child"
    )


def test_a_checkpoint_id_is_the_offset_of_its_record_in_the_log(store: Store) -> None:
    store.create_session(SID)
    keeper = Checkpointer(store)
    checkpoint = keeper.create(SID, label="hello")
    assert isinstance(checkpoint, Checkpoint)
    offset = checkpoint_offset(checkpoint.id)
    records = {o: r for o, _, r in log_records(store)}
    assert records[offset]["c"]["label"] == "hello"
    assert records[offset]["c"]["turn_index"] == 0


def test_a_rollback_leaves_the_slot_files_of_the_state_it_restores(store: Store) -> None:
    """A rollback writes each slot whole: no append log is left, no file of a slot made
    since the checkpoint, no journal."""
    store.create_session(SID)
    keeper = Checkpointer(store)
    turn(store, "one")
    checkpoint = keeper.create(SID)
    turn(store, "two")
    store.derive_slot(SID, "later")
    keeper.rollback(SID, checkpoint.id)
    slot_files = sorted(p.name for p in (store.session_dir(SID) / "slots").iterdir())
    assert slot_files == ["default.json"]
    assert not (store.session_dir(SID) / RESTORE_JOURNAL).exists()


# ---- an interrupted rollback -----------------------------------------------------------


def test_an_interrupted_rollback_is_finished_by_the_next_writer(store: Store) -> None:
    store.create_session(SID)
    keeper = Checkpointer(store)
    turn(store, "one")
    store.derive_slot(SID, "copy")
    store.memory_set(SID, "k", "v")
    target = keeper.create(SID, label="target")
    expected = dumped_live(store)
    turn(store, "two")
    store.delete_slot(SID, "copy")
    store.derive_slot(SID, "later", make_current=True)
    store.memory_set(SID, "k", "changed")

    # The rollback died after its commit point, having rewritten one document of four (two
    # slots, a stray, the session): the next writer finishes it first.
    with dying_after_one_change():
        keeper.rollback(SID, target.id)
    assert store.pending_recovery(SID)

    append(store, SID, "new", "default")

    assert not store.pending_recovery(SID)
    now = dumped_live(store)
    assert now["session"] == expected["session"]
    assert sorted(now["slots"]) == ["copy", "default"]
    assert now["slots"]["copy"] == expected["slots"]["copy"]
    default, wanted = now["slots"]["default"], expected["slots"]["default"]
    assert default["messages"] == [*wanted["messages"], {"role": "user", "content": "new"}]
    assert {k: v for k, v in default.items() if k not in ("messages", "meta")} == {
        k: v for k, v in wanted.items() if k not in ("messages", "meta")
    }
    result = turn(store, "three")
    assert result.checkpoint is not None
    assert dumped_at(store, result.checkpoint) == dumped_live(store)
