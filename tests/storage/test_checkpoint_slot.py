"""A checkpoint taken for a turn keeps the slot that turn wrote, which need not be the
session's current slot (`turn send --slot`), in its record and its index line, by every
backend; it survives an index rebuilt from the log, `store gc`, and a copy to another
store; a checkpoint not taken for a turn has no such field in its record."""

from __future__ import annotations

from pathlib import Path

import orjson

from agctl.graph.model import build_graph
from agctl.interchange.transfer import copy_sessions
from agctl.providers.offline import OfflineProvider
from agctl.storage.encoding import encode_record
from agctl.store import Store
from agctl.store.checkpointer import Checkpointer
from agctl.store.checkpoints.files import drop_index, open_log
from agctl.store.checkpoints.records import checkpoint_offset
from agctl.turn.send import TurnOptions, send_turn

SID = "s"


def on_draft(store: Store) -> dict[str, str | None]:
    """A turn on `draft` while `default` is current, then a manual checkpoint: each
    checkpoint's label -> the slot its record keeps."""
    store.create_session(SID)
    store.derive_slot(SID, "draft", source="default", strategy="full")
    options = TurnOptions(model="offline", slot="draft")
    send_turn(store, SID, "Draft the plan.", OfflineProvider(), options)
    Checkpointer(store).create(SID, label="manual")
    return {"before turn 1": "draft", "after turn 1": "draft", "manual": None}


def kept(store: Store) -> dict[str | None, tuple[str | None, str]]:
    """Each checkpoint's label -> (slot, current slot), as the summaries say."""
    return {s.label: (s.slot, s.current_slot) for s in Checkpointer(store).summaries(SID)}


def test_a_turns_checkpoints_keep_the_slot_it_wrote(store: Store) -> None:
    expected = on_draft(store)
    keeper = Checkpointer(store)
    assert store.load_session(SID).current_slot == "default"
    assert kept(store) == {label: (slot, "default") for label, slot in expected.items()}
    history = open_log(store.backend, SID)
    for summary in keeper.summaries(SID):
        assert keeper.load(SID, summary.id).slot == expected[summary.label]
        record = history.read(checkpoint_offset(summary.id))["c"]
        # Left out of the record while None: such a record is as before the field was.
        assert record.get("slot", "absent") == (expected[summary.label] or "absent")
    drop_index(store.backend, SID)  # the index rebuilt from the log says the same
    assert kept(store) == {label: (slot, "default") for label, slot in expected.items()}


def test_gc_and_a_copy_to_another_store_keep_it(store: Store, tmp_path: Path) -> None:
    expected = on_draft(store)
    keeper = Checkpointer(store)
    first = [s.id for s in keeper.summaries(SID) if s.label == "before turn 1"]
    keeper.remove(SID, first)
    report = keeper.gc(SID)
    assert report.rewritten and any(old != new for old, new in report.ids.items())
    del expected["before turn 1"]
    assert kept(store) == {label: (slot, "default") for label, slot in expected.items()}
    there = Store(tmp_path / "copy")
    assert [r.outcome for r in copy_sessions(store, there)] == ["copied"]
    assert kept(there) == kept(store)


def test_a_record_from_before_the_field_reads_on_the_current_slot(tmp_path: Path) -> None:
    """The log's last record, the checkpoint after the turn, written again without the
    field (as agctl wrote it before): it reads, with no slot, and the graph draws it on
    the session's current slot, as it did."""
    store = Store(tmp_path)
    store.create_session(SID)
    store.derive_slot(SID, "draft", source="default", strategy="full")
    options = TurnOptions(model="offline", slot="draft")
    after = send_turn(store, SID, "Draft the plan.", OfflineProvider(), options).checkpoint
    assert after is not None
    log = next(tmp_path.rglob("checkpoints/log"))
    data = log.read_bytes()
    start = checkpoint_offset(after)
    value = orjson.loads(data[start:].rpartition(b"\t")[0])
    assert value["c"].pop("slot") == "draft"
    log.write_bytes(data[:start] + encode_record(value))
    assert kept(store) == {"before turn 1": ("draft", "default"), "after turn 1": (None, "default")}
    assert Checkpointer(store).load(SID, after).slot is None
    lanes = {
        n["checkpoint_label"]: n["slot"]
        for n in build_graph(store, SID, checkpoints=True).to_json()["nodes"]
        if n["kind"] == "checkpoint"
    }
    assert lanes == {"before turn 1": "draft", "after turn 1": "default"}
