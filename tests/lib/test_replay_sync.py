"""`turn replay --sync end`: the turns of a replay made durable together, at its end."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import Result

from agctl.checkpoints import Checkpointer
from agctl.errors import UsageError
from agctl.providers.offline import OfflineProvider
from agctl.replay import TranscriptTurn, replay
from agctl.store import Store
from agctl.turns import TurnOptions

TURNS = [TranscriptTurn(input=f"question {n}") for n in range(40)]


def replayed(store: Store, sync: str, monkeypatch: pytest.MonkeyPatch) -> int:
    """Replay TURNS into a new session; the number of fsyncs it made."""
    store.create_session("s")
    synced: list[int] = []
    real = os.fsync

    def counting(fd: int) -> None:
        synced.append(fd)
        real(fd)

    monkeypatch.setattr(os, "fsync", counting)
    summary = replay(store, "s", TURNS, OfflineProvider(), TurnOptions(model="offline"), sync=sync)
    monkeypatch.undo()
    assert summary.sent == len(TURNS)
    return len(synced)


def test_the_end_sync_replays_the_same_turns_with_far_fewer_fsyncs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    each = Store(tmp_path / "each")
    grouped = Store(tmp_path / "grouped")
    per_turn = replayed(each, "per-turn", monkeypatch)
    at_end = replayed(grouped, "end", monkeypatch)
    assert per_turn >= len(TURNS), "every turn is made durable as it commits"
    assert at_end < per_turn / 3, (at_end, per_turn)
    texts = [[m.text() for m in s.load_slot("s").messages] for s in (each, grouped)]
    assert texts[0] == texts[1] and len(texts[0]) == 2 * len(TURNS)
    assert each.load_session("s").turn_count == grouped.load_session("s").turn_count == 40
    assert len(Checkpointer(grouped).ids("s")) == len(Checkpointer(each).ids("s"))
    # Nothing is left waiting for a sync: the journal was emptied at the end.
    assert grouped.files is not None and not grouped.files.journal("s").pending()
    assert grouped.files.durable, "the store syncs each commit again after the replay"


def test_an_unknown_sync_mode_is_refused_before_any_turn(tmp_path: Path) -> None:
    store = Store(tmp_path)
    store.create_session("s")
    with pytest.raises(UsageError, match="unknown sync mode 'x'"):
        replay(store, "s", TURNS, OfflineProvider(), TurnOptions(model="offline"), sync="x")
    assert store.load_slot("s").messages == []


def test_the_command_line_replays_with_sync_end(
    run: Callable[..., Result], store: Store, tmp_path: Path
) -> None:
    transcript = tmp_path / "t.jsonl"
    transcript.write_text("".join(f'{{"input": "q{n}"}}\n' for n in range(5)))
    result = run("--json", "turn", "replay", str(transcript), "--new-session", "r", "--sync", "end")
    assert result.exit_code == 0, result.stderr
    assert store.load_session("r").turn_count == 5
    assert [m.text() for m in store.load_slot("r").messages][::2] == [f"q{n}" for n in range(5)]
    refused = run("turn", "replay", str(transcript), "--sync", "sometimes")
    assert refused.exit_code == 2 and "sometimes" in refused.stderr
