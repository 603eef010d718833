"""The checkpoint index keeps each checkpoint's slot zones as a delta and its record's
checksum: the zones read from it are those of the records, a record replaced under it is
noticed, and an index line of another shape is read from its record. Here, beside the file
backend's tests, because they edit its files."""

from __future__ import annotations

from pathlib import Path

import orjson

from agctl.context.models import Message
from agctl.graph.model import _headers
from agctl.storage.encoding import encode_record
from agctl.store import Store
from agctl.store.checkpointer import Checkpointer
from agctl.store.checkpoints.files import open_log
from agctl.store.checkpoints.reader import record_zones, summaries, zones_at


def _history(store: Store) -> tuple[str, Checkpointer]:
    """Checkpoints after appends, a derivation, a rollback and a removed slot."""
    sid = store.create_session("zones").id
    keeper = Checkpointer(store)
    keeper.create(sid, label="empty")
    store.update_slot(sid, "default", lambda s: s.append(Message(role="user", content="one")))
    first = keeper.create(sid)
    store.derive_slot(sid, "side", source="default", strategy="full")
    store.update_slot(sid, "side", lambda s: s.append(Message(role="user", content="two")))
    keeper.create(sid)
    keeper.rollback(sid, first.id)
    store.update_slot(sid, "default", lambda s: s.append(Message(role="user", content="three")))
    keeper.create(sid)
    store.derive_slot(sid, "gone", source="default", strategy="full")
    keeper.create(sid)
    store.delete_slot(sid, "gone")
    keeper.create(sid)
    return sid, keeper


def test_the_zones_from_the_index_deltas_are_those_of_the_records(tmp_path: Path) -> None:
    store = Store(tmp_path)
    sid, _ = _history(store)
    found = summaries(store.backend, sid)
    assert all(s.zones is not None and s.checksum is not None for s in found)
    assert any(s.zones is not None and s.zones["base"] is not None for s in found)
    history = open_log(store.backend, sid)
    offsets = [s.offset for s in found]
    assert zones_at(store.backend, sid, offsets) == {o: record_zones(history, o) for o in offsets}


def test_an_index_rebuilt_from_the_log_gives_the_same_zones(tmp_path: Path) -> None:
    store = Store(tmp_path)
    sid, _ = _history(store)
    offsets = [s.offset for s in summaries(store.backend, sid)]
    before = zones_at(store.backend, sid, offsets)
    index = next(tmp_path.rglob("index.jsonl"))
    index.unlink()
    assert zones_at(store.backend, sid, offsets) == before
    assert index.exists()  # rebuilt, its lines with deltas again
    assert all(s.zones is not None for s in summaries(store.backend, sid))


def test_a_delta_of_another_shape_is_read_from_the_record(tmp_path: Path) -> None:
    """The index is a cache: a zones field it should never hold means the record is read."""
    store = Store(tmp_path)
    sid, _ = _history(store)
    history = open_log(store.backend, sid)
    offsets = [s.offset for s in summaries(store.backend, sid)]
    index = next(tmp_path.rglob("index.jsonl"))
    lines = index.read_bytes().splitlines(keepends=True)
    odd = [
        {"changed": 3},
        {"base": "x", "changed": {}, "deleted": []},
        {"base": None, "changed": {"default": "zz"}, "deleted": []},
        {"base": None, "changed": {}, "deleted": 7},
    ]
    shapes = iter(odd * len(lines))
    rewritten = []
    for line in lines:
        body, _, _ = line.rstrip(b"\n").rpartition(b"\t")
        value = orjson.loads(body)
        if "zones" in value:
            value["zones"] = next(shapes)
        rewritten.append(encode_record(value))
    index.write_bytes(b"".join(rewritten))
    assert [s.zones for s in summaries(store.backend, sid)][-4:] == odd[::-1]  # the lines were kept
    assert zones_at(store.backend, sid, offsets) == {o: record_zones(history, o) for o in offsets}


def test_an_index_line_whose_record_changed_is_dropped(tmp_path: Path) -> None:
    store = Store(tmp_path)
    sid, keeper = _history(store)
    newest = summaries(store.backend, sid)[0]
    log = next(tmp_path.rglob("checkpoints/log"))
    data = bytearray(log.read_bytes())
    # Another record of the same length where the newest was: a different checksum.
    tail = data[newest.end - 10 : newest.end]
    data[newest.end - 9 : newest.end - 1] = b"0" * 8 if tail[1:9] != b"0" * 8 else b"1" * 8
    log.write_bytes(bytes(data))
    assert newest.id not in {s.id for s in summaries(store.backend, sid)}
    assert len(summaries(store.backend, sid)) == len(keeper.summaries(sid))


def test_slot_headers_are_the_slots_without_their_messages(tmp_path: Path) -> None:
    store = Store(tmp_path)
    sid, _ = _history(store)
    store.update_slot(sid, "default", lambda s: s.append(Message(role="user", content="four")))
    whole = store.list_slots(sid)
    headers = _headers(store, sid)
    assert [h.model_dump(exclude={"immutable", "compressed", "messages"}) for h in headers] == [
        s.model_dump(exclude={"immutable", "compressed", "messages"}) for s in whole
    ]
    assert all(not h.messages for h in headers)
