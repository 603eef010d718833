"""The checkpoint log as a file, against damage: no changed byte of the log or of its caches
(heads, index) restores a different state or gives a wrong checkpoint, a damaged or torn
record stops nothing else, and a log written before checksums stays readable.

Each test failed before its fix (its docstring says what happened then).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import Result
from helpers import checkpoints_dir

from agctl.base.errors import CorruptDocument, DataError
from agctl.context.models import Message
from agctl.reports.checkup import diagnose
from agctl.storage.file.backend import FileLog
from agctl.store import Store
from agctl.store.checkpointer import Checkpointer
from agctl.store.checkpoints import checkpoint_offset
from agctl.store.checkpoints.pack import Log

Run = Callable[..., Result]


SID = "s"


# ---- integrity of the checkpoint log ---------------------------------------------------------


@pytest.fixture
def small_log(store: Store) -> tuple[Store, list[str]]:
    store.create_session(SID)
    keeper = Checkpointer(store)
    ids = []
    for turn in range(3):
        store.update_slot(
            SID, None, lambda s, t=turn: s.messages.append(Message(role="user", content=f"m{t}"))
        )
        store.update_session(SID, lambda s: setattr(s, "turn_count", s.turn_count + 1))
        store.memory_set(SID, f"k{turn}", "v")
        ids.append(keeper.create(SID, label=f"c{turn}").id)
    return store, ids


def _state(keeper: Checkpointer, identifier: str) -> Any:
    state = keeper.state(SID, keeper.load(SID, identifier))
    return (
        state.session.model_dump(mode="json"),
        {k: v.model_dump(mode="json") for k, v in state.slots.items()},
    )


def test_no_one_byte_change_of_the_log_restores_a_different_state(
    small_log: tuple[Store, list[str]],
) -> None:
    """Before: a changed byte at about a quarter of the offsets rolled back to a different
    state (turn count, current slot, cost) with exit 0."""
    store, ids = small_log
    keeper = Checkpointer(store)
    log = checkpoints_dir(keeper.store, SID) / "log"
    pristine = log.read_bytes()
    expected = {i: _state(keeper, i) for i in ids}
    silent: list[int] = []
    undetected: list[int] = []
    for offset in range(len(pristine)):
        mutated = bytearray(pristine)
        mutated[offset] = (mutated[offset] + 1 + offset % 7) % 256 or 1
        log.write_bytes(bytes(mutated))
        for identifier in ids:
            try:
                if _state(keeper, identifier) != expected[identifier]:
                    silent.append(offset)
            except DataError:
                pass
            except Exception as exc:
                silent.append(offset)
                print(offset, type(exc), exc)
        if keeper.verify(SID).ok:
            undetected.append(offset)
    log.write_bytes(pristine)
    assert not silent, f"{len(silent)} offsets restored a different state: {silent[:20]}"
    assert not undetected, f"ckpt verify missed {len(undetected)} offsets: {undetected[:20]}"
    assert keeper.verify(SID).ok


def test_a_mismatch_names_the_checkpoint_and_exits_5(
    run: Run, isolated_env: Path, session: str
) -> None:
    log = isolated_env / "sessions" / SID / "checkpoints" / "log"
    raw = log.read_bytes()
    checkpoint = json.loads(run("-s", SID, "ckpt", "list", "--json").stdout)[0]["id"]
    start = checkpoint_offset(checkpoint)
    end = raw.index(b"\n", start)
    index = raw.index(b'"turn_count":1', start, end) + len('"turn_count":')
    log.write_bytes(raw[:index] + b"7" + raw[index + 1 :])
    result = run("-s", SID, "ckpt", "rollback", checkpoint)
    assert result.exit_code == 5
    assert f"byte {start}" in result.stderr or checkpoint in result.stderr
    verify = run("-s", SID, "ckpt", "verify", "--json")
    assert verify.exit_code == 5
    report = json.loads(verify.stdout)
    assert not report["ok"] and any(str(start) in p for p in report["problems"])


def test_a_log_written_before_checksums_stays_readable_and_is_reported(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    import orjson

    from agctl.store.checkpoints import pack

    def legacy(value: Any) -> bytes:  # as agctl 0.1 wrote lines: no header, no checksum
        return b"" if value == pack.HEADER else orjson.dumps(value) + b"\n"

    store.create_session(SID)
    keeper = Checkpointer(store)
    with monkeypatch.context() as patch:
        patch.setattr(pack, "encode_record", legacy)
        keeper.create(SID, label="old")
    assert b"\t" not in (checkpoints_dir(keeper.store, SID) / "log").read_bytes()
    keeper.create(SID, label="new")
    assert Log(FileLog(checkpoints_dir(keeper.store, SID) / "log")).checked() is False
    assert [s.label for s in keeper.summaries(SID)] == ["new", "old"]
    assert keeper.state(SID, keeper.load(SID, keeper.ids(SID)[-1])).session.id == SID
    report = keeper.verify(SID)
    assert report.ok and not report.checksums and report.unverifiable == report.records > 0
    notices = [f for f in diagnose(store) if f.kind == "unverifiable"]
    assert len(notices) == 1 and notices[0].notice


def test_the_index_and_heads_follow_a_log_cut_short_and_grown_again(
    small_log: tuple[Store, list[str]],
) -> None:
    """Before: `ckpt list` kept showing checkpoints that no longer existed."""
    store, ids = small_log
    keeper = Checkpointer(store)
    log = checkpoints_dir(keeper.store, SID) / "log"
    first_end = next(s.end for s in keeper.summaries(SID) if s.id == ids[0])
    with open(log, "r+b") as handle:
        handle.truncate(first_end)
    store.update_slot(SID, None, lambda s: s.messages.append(Message(role="user", content="n")))
    grown = [keeper.create(SID, label=f"g{i}").id for i in range(3)]
    listed = [s.id for s in keeper.summaries(SID)]
    assert listed == list(reversed([ids[0], *grown]))
    assert {s.label for s in keeper.summaries(SID)} == {"c0", "g0", "g1", "g2"}
    live = keeper.live_state(SID)
    rebuilt = keeper.state(SID, keeper.load(SID, grown[-1]))
    assert [m.text() for m in rebuilt.slots["default"].messages] == [
        m.text() for m in live.slots["default"].messages
    ]
    assert keeper.verify(SID).ok


def test_no_one_byte_change_of_the_heads_cache_gives_a_wrong_checkpoint(
    small_log: tuple[Store, list[str]],
) -> None:
    """Before (review): a changed byte in heads.json was copied into the next checkpoint,
    which then restored a wrong message count or merge bases with a valid checksum."""
    store, _ids = small_log
    keeper = Checkpointer(store)
    heads = checkpoints_dir(keeper.store, SID) / "heads.json"
    pristine = heads.read_bytes()
    wrong: list[int] = []
    for offset in range(0, len(pristine), 3):
        mutated = bytearray(pristine)
        mutated[offset] = (mutated[offset] + 1) % 256
        heads.write_bytes(bytes(mutated))
        checkpoint = keeper.create(SID)
        if _state(keeper, checkpoint.id) != (
            keeper.live_state(SID).session.model_dump(mode="json"),
            {k: v.model_dump(mode="json") for k, v in keeper.live_state(SID).slots.items()},
        ):
            wrong.append(offset)
        heads.write_bytes(pristine)
    assert not wrong, f"{len(wrong)} changed bytes of heads.json gave a wrong checkpoint"


def test_a_damaged_last_record_does_not_stop_later_checkpoints(
    small_log: tuple[Store, list[str]],
) -> None:
    store, ids = small_log
    keeper = Checkpointer(store)
    log = checkpoints_dir(keeper.store, SID) / "log"
    raw = bytearray(log.read_bytes())
    last = checkpoint_offset(ids[-1])
    raw[last + 3] ^= 1
    log.write_bytes(bytes(raw))
    later = keeper.create(SID, label="later")
    keeper.rollback(SID, ids[0])
    assert [m.text() for m in store.load_slot(SID).messages] == ["m0"]
    assert keeper.load(SID, later.id).label == "later"
    with pytest.raises(CorruptDocument, match=ids[-1]):
        keeper.load(SID, ids[-1])
    keeper.summaries(SID)  # the index is rebuilt: still exit 5, never "not found"
    with pytest.raises(CorruptDocument, match=ids[-1]):
        keeper.load(SID, ids[-1])


def test_an_edited_index_line_is_not_believed(small_log: tuple[Store, list[str]]) -> None:
    store, _ids = small_log
    keeper = Checkpointer(store)
    index = checkpoints_dir(keeper.store, SID) / "index.jsonl"
    index.write_bytes(index.read_bytes().replace(b'"label":"c1"', b'"label":"XX"'))
    assert sorted(s.label or "" for s in keeper.summaries(SID)) == ["c0", "c1", "c2"]


def test_a_torn_header_does_not_make_a_log_unverifiable(store: Store) -> None:
    store.create_session(SID)
    keeper = Checkpointer(store)
    checkpoints_dir(keeper.store, SID).mkdir(mode=0o700, exist_ok=True)
    (checkpoints_dir(keeper.store, SID) / "log").write_bytes(b'{"agctl":"checkpoint-log","chec')
    keeper.create(SID)
    report = keeper.verify(SID)
    assert report.ok and report.checksums and not report.unverifiable
