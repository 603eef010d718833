"""Cassettes (agctl.providers.cassette): a turn recorded and replayed, a damaged or cut-short
recording."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import OPTIONS, data_dir_files, file_only

from agctl.base.errors import InvalidInput, NotFound, ReplayMiss
from agctl.providers.cassette import RecordingProvider, ReplayProvider, load_cassette
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
