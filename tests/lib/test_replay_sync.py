"""`turn replay --sync end`: the turns of a replay made durable together, at its end."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import Result
from helpers import file_only

from agctl.base.errors import AgctlError, ProviderError, StoreError, UsageError
from agctl.providers.base import ChatRequest, Event
from agctl.providers.offline import OfflineProvider
from agctl.store import Store
from agctl.store.checkpointer import Checkpointer
from agctl.turn.send import TurnOptions
from agctl.turn.transcripts import TranscriptTurn, TurnOutcome, replay

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


@file_only
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


# ---- groups: the turns of a fast provider committed together -------------------------


def commits_of(store: Store, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Record each outermost transaction the store opens (a commit when it writes)."""
    opened: list[str] = []
    real = store.backend.transaction

    def counting(session_id: str) -> Any:
        if store.backend.in_transaction(session_id) is None:
            opened.append(session_id)
        return real(session_id)

    monkeypatch.setattr(store.backend, "transaction", counting)
    return opened


def test_the_turns_of_a_fast_provider_share_commits_and_each_checkpoint_holds_its_turn(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    store.create_session("s")
    opened = commits_of(store, monkeypatch)
    options = TurnOptions(model="offline", checkpoint=True)
    summary = replay(store, "s", TURNS, OfflineProvider(), options, sync="end")
    assert summary.sent == len(TURNS)
    assert len(opened) < len(TURNS) / 4, f"{len(opened)} commits for {len(TURNS)} turns"
    checkpointer = Checkpointer(store)
    assert not checkpointer.verify("s").problems
    # Every turn's checkpoint, made inside a group, holds that turn's state: the slot's
    # revision moved on for each turn, so none was taken as unchanged.
    for turn in (1, 7, 20, len(TURNS)):
        state = checkpointer.state("s", checkpointer.checkpoint_at_turn("s", turn))
        texts = [m.text() for m in state.slots["default"].messages]
        assert texts[::2] == [t.input for t in TURNS[:turn]]
    checkpointer.undo("s", 3)
    assert store.load_session("s").turn_count == len(TURNS) - 3
    assert len(store.load_slot("s").messages) == 2 * (len(TURNS) - 3)


def test_a_turn_is_reported_once_its_group_is_committed(store: Store, isolated_env: Path) -> None:
    store.create_session("s")
    seen: list[tuple[int, int]] = []

    def reported(outcome: TurnOutcome) -> None:
        # What another reader of the data dir finds when the turn is reported.
        other = Store(isolated_env) if store.files is not None else store
        seen.append((outcome.number, other.load_session("s").turn_count))

    replay(
        store,
        "s",
        TURNS,
        OfflineProvider(),
        TurnOptions(model="offline"),
        on_turn=reported,
        sync="end",
    )
    assert [number for number, _ in seen] == list(range(1, len(TURNS) + 1))
    assert all(committed >= number for number, committed in seen), seen


class FailingAt:
    """The offline provider, failing its `at`-th request."""

    name = "offline"

    def __init__(self, at: int) -> None:
        self.at = at
        self.calls = 0
        self.inner = OfflineProvider()

    def stream(self, request: ChatRequest) -> Iterator[Event]:
        self.calls += 1
        if self.calls == self.at:
            raise ProviderError("the model is down")
        return self.inner.stream(request)


def test_a_turn_failing_in_a_group_keeps_the_turns_before_it(store: Store) -> None:
    store.create_session("s")
    reported: list[TurnOutcome] = []
    with pytest.raises(ProviderError) as raised:
        replay(
            store,
            "s",
            TURNS,
            FailingAt(25),
            TurnOptions(model="offline", checkpoint=True),
            on_turn=reported.append,
            sync="end",
        )
    assert "turns 1 to 24 were committed" in "\n".join(raised.value.__notes__)
    assert store.load_session("s").turn_count == 24
    assert [m.text() for m in store.load_slot("s").messages][::2] == [t.input for t in TURNS[:24]]
    assert [o.number for o in reported] == list(range(1, 26)) and reported[-1].error


def test_a_turn_failing_after_it_wrote_in_a_group_is_undone_alone(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The failure comes after the turn's messages were appended in the group's
    transaction: its savepoint undoes them, and the group commits the turns before."""
    import agctl.turn.send

    store.create_session("s")
    real = agctl.turn.send.account
    counted: list[int] = []

    def failing(session: Any, *args: Any, **kwargs: Any) -> None:
        counted.append(session.turn_count)
        if len(counted) == 30:
            raise StoreError("the disk went away")
        real(session, *args, **kwargs)

    monkeypatch.setattr(agctl.turn.send, "account", failing)
    options = TurnOptions(model="offline", checkpoint=True)
    with pytest.raises(StoreError):
        replay(store, "s", TURNS, OfflineProvider(), options, sync="end")
    assert store.load_session("s").turn_count == 29
    assert len(store.load_slot("s").messages) == 2 * 29
    checkpointer = Checkpointer(store)
    assert not checkpointer.verify("s").problems
    assert max(c.turn_index for c in checkpointer.summaries("s")) == 29  # none of turn 30


class Slow:
    """The offline provider answering late, checking meanwhile that the session's lock
    is free (another writer could take it)."""

    name = "offline"

    def __init__(self, store: Store) -> None:
        self.store = store
        self.locked_while_answering = 0
        self.inner = OfflineProvider()

    def stream(self, request: ChatRequest) -> Iterator[Event]:
        import threading
        import time

        free: list[bool] = []

        def try_lock() -> None:
            try:
                with self.store.transaction("s"):
                    free.append(True)
            except AgctlError:
                free.append(False)

        os.environ["AGCTL_LOCK_TIMEOUT"] = "0.2"
        try:
            thread = threading.Thread(target=try_lock)
            thread.start()
            thread.join()
        finally:
            del os.environ["AGCTL_LOCK_TIMEOUT"]
        self.locked_while_answering += not free[0]
        time.sleep(0.02)
        return self.inner.stream(request)


def test_a_slow_provider_answers_with_the_session_unlocked_and_turns_commit_one_by_one(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    store.create_session("s")
    opened = commits_of(store, monkeypatch)
    provider = Slow(store)
    turns = TURNS[:6]
    replay(store, "s", turns, provider, TurnOptions(model="offline"), sync="end")
    assert provider.locked_while_answering == 0
    assert store.load_session("s").turn_count == len(turns)
    assert len(opened) >= len(turns)
