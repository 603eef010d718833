"""Cassettes (agctl.providers.cassette): a turn recorded and replayed, a damaged or cut-short
recording."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from helpers import OPTIONS, data_dir_files, file_only

from agctl.base.errors import InvalidInput, NotFound, ReplayMiss
from agctl.providers.base import (
    ChatRequest,
    Event,
    Finish,
    ReasoningDelta,
    TextDelta,
    WirePart,
)
from agctl.providers.cassette import (
    RecordingProvider,
    ReplayProvider,
    append_recording,
    load_cassette,
)
from agctl.providers.offline import OfflineProvider
from agctl.store import Store
from agctl.turn.send import prepare_turn, send_turn


@file_only
def test_record_then_replay_gives_the_same_slot(store: Store, tmp_path: Path) -> None:
    cassette = tmp_path / "chat.cassette"
    recorder = RecordingProvider(OfflineProvider(), cassette)
    for sid in ("rec", "play"):
        store.create_session(sid, system_prompt="sys")
    for prompt in ("one", "two", "three"):
        send_turn(store, "rec", prompt, recorder, OPTIONS)
    assert len(load_cassette(cassette)) == 3
    replay = ReplayProvider(cassette)
    for prompt in ("one", "two", "three"):
        send_turn(store, "play", prompt, replay, OPTIONS)

    def chat(session_id: str) -> list[tuple[str, str]]:
        return [(m.role, m.text()) for m in store.load_slot(session_id).messages]

    assert chat("play") == chat("rec") and len(chat("play")) == 6
    before = data_dir_files(store.root)
    with pytest.raises(ReplayMiss) as caught:
        send_turn(store, "play", "four?", replay, OPTIONS)
    message = str(caught.value)
    wanted = prepare_turn(store, "play", "four?", OPTIONS).request.fingerprint()
    assert wanted[:12] in message
    assert "shares 6 of 8 messages" in message and "turn 3" in message
    assert {k: v for k, v in data_dir_files(store.root).items() if "draft" not in k} == before


def test_cassette_damage_is_reported_with_the_line(tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"
    path.write_text(
        '{"hash": "x", "request": {"model": "m", "messages": []}, "events": []}\n{oops\n'
    )
    with pytest.raises(InvalidInput, match="line 2"):
        load_cassette(path)
    path.write_text(
        '{"schema_version": "9.0", "hash": "x", '
        '"request": {"model": "m", "messages": []}, "events": []}\n'
    )
    with pytest.raises(InvalidInput, match=r"version 9\.0"):
        load_cassette(path)
    with pytest.raises(NotFound):
        load_cassette(tmp_path / "missing")


def test_empty_cassette_miss_says_so(store: Store, sid: str, tmp_path: Path) -> None:
    path = tmp_path / "empty"
    path.write_text("")
    with pytest.raises(ReplayMiss, match="cassette is empty"):
        send_turn(store, sid, "x", ReplayProvider(path), OPTIONS)


def test_a_recording_cut_short_by_a_crash_is_skipped(tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"
    path.write_text(
        '{"hash": "x", "request": {"model": "m", "messages": []}, "events": []}\n'
        '{"hash": "y", "requ'
    )
    assert [r.hash for r in load_cassette(path)] == ["x"]
    path.write_text(
        '{"hash": "x", "request": {"model": "m", "messages": []}, "events": []}\n'
        '{"hash": "y", "requ\n'
    )
    with pytest.raises(InvalidInput, match="line 2"):
        load_cassette(path)


class SignedReplies:
    """A provider whose every reply carries a wire part, as Anthropic's thinking does; it
    keeps the requests it was sent."""

    name = "anthropic"

    def __init__(self) -> None:
        self.requests: list[ChatRequest] = []

    def stream(self, request: ChatRequest) -> Iterator[Event]:
        self.requests.append(request)
        number = len(self.requests)
        yield ReasoningDelta(f"thought {number}")
        yield WirePart(
            "anthropic", {"type": "thinking", "thinking": "t", "signature": f"s{number}"}
        )
        yield TextDelta(f"answer {number}")
        yield Finish("stop")


@file_only
def test_wire_parts_are_recorded_replayed_and_sent_back_where_they_stand(
    store: Store, tmp_path: Path
) -> None:
    cassette = tmp_path / "signed.cassette"
    live = SignedReplies()
    for sid in ("rec", "play"):
        store.create_session(sid, system_prompt="sys")
    for prompt in ("one", "two"):
        send_turn(store, "rec", prompt, RecordingProvider(live, cassette), OPTIONS)
    # The second request carries the first reply's part, at that reply's place.
    assert live.requests[0].wire_parts is None
    second = live.requests[1]
    assert second.messages[2] == {"role": "assistant", "content": "answer 1"}
    assert second.wire_parts == {
        2: {"anthropic": [{"type": "thinking", "thinking": "t", "signature": "s1"}]}
    }
    lines = [orjson.loads(line) for line in cassette.read_bytes().splitlines()]
    assert [line["schema_version"] for line in lines] == ["3.0", "3.0"]
    assert {line["wire"] for line in lines} == {"anthropic"}
    replay = ReplayProvider(cassette)
    for prompt in ("one", "two"):
        send_turn(store, "play", prompt, replay, OPTIONS)
    kept = [m.wire_parts for m in store.load_slot("play", None).messages]
    assert kept == [m.wire_parts for m in store.load_slot("rec", None).messages]
    assert kept[1] == {"anthropic": [{"type": "thinking", "thinking": "t", "signature": "s1"}]}


def test_a_plain_line_keeps_its_old_version_and_a_newer_major_is_refused(tmp_path: Path) -> None:
    cassette = tmp_path / "plain.cassette"
    request = ChatRequest(model="m", messages=[{"role": "user", "content": "x"}])
    append_recording(cassette, request, [TextDelta("y"), Finish("stop")], wire="openai")
    (line,) = [orjson.loads(raw) for raw in cassette.read_bytes().splitlines()]
    assert (line["schema_version"], line["wire"]) == ("1.0", "openai")
    cassette.write_bytes(orjson.dumps({**line, "schema_version": "4.0"}) + b"\n")
    with pytest.raises(InvalidInput, match=r"versions up to 3\.0"):
        load_cassette(cassette)
