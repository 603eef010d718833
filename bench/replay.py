"""`turn replay` in one process: offline turns with automatic checkpoints into a growing slot.

Usage: python bench/replay.py [--turns 1000] [--flat 300] [--prefill 4000] [--json]
Auto-compress is off and the window large, so every message stays in the slot. Rates are
printed next to the durability floor measured in the same run (one atomic replace with
its file and directory fsyncs), and the flat per-turn cost compares the same turns on a
slot that already holds --prefill messages (in a checkpointed session, as one that grew
by turns is) with the same turns on an empty slot; the same onto a never checkpointed
slot is shown too (its first turn checkpoints every message once).
`--sync end` is measured when agctl.turn.transcripts.replay takes a `sync` argument.
Never part of the test suite's pass/fail.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from turn import fill

from agctl.providers.offline import OfflineProvider
from agctl.store import Store
from agctl.turn.send import TurnOptions
from agctl.turn.transcripts import TranscriptTurn
from agctl.turn.transcripts import replay as run_replay

# No slot here comes near it: no turn is refused or compressed for its size.
WINDOW = 100_000_000
OPTIONS = TurnOptions(model="offline", checkpoint=True, window=WINDOW, auto_compress=False)


def sync_modes() -> list[str]:
    """The replay's sync modes this tree has: "per-turn" always, "end" once `replay`
    takes a `sync` argument."""
    return ["per-turn", "end"] if "sync" in inspect.signature(run_replay).parameters else []


def transcript(count: int, start: int = 0) -> list[TranscriptTurn]:
    return [TranscriptTurn(input=f"question {i}: what next?") for i in range(start, start + count)]


def replay_rate(
    store: Store, session_id: str, turns: list[TranscriptTurn], sync: str | None
) -> float:
    """Turns per second of one replay (wall time around the library call)."""
    extra: dict[str, Any] = {} if sync is None else {"sync": sync}
    started = time.perf_counter()
    summary = run_replay(store, session_id, turns, OfflineProvider(), OPTIONS, **extra)
    elapsed = time.perf_counter() - started
    assert summary.sent == len(turns), summary
    return len(turns) / elapsed


def durability_floor(samples: int = 50) -> float:
    """Median seconds of one durable atomic replace (write, fsync, rename, fsync the
    directory): the least a turn that is acknowledged only once on disk can cost."""
    with tempfile.TemporaryDirectory() as tmp:
        target = Path(tmp) / "doc.json"
        data = b"x" * 2048
        times = []
        for i in range(samples):
            started = time.perf_counter()
            temp = Path(tmp) / f".doc.{i}.tmp"
            fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            try:
                os.write(fd, data)
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(temp, target)
            directory = os.open(tmp, os.O_RDONLY)
            try:
                os.fsync(directory)
            finally:
                os.close(directory)
            times.append(time.perf_counter() - started)
    return statistics.median(times)


def growing(count: int, sync: str | None) -> float:
    """Rate of `count` turns replayed into a new session's default slot."""
    with tempfile.TemporaryDirectory() as tmp:
        store = Store(tmp)
        session_id = store.create_session("bench", system_prompt="You are a benchmark.").id
        return replay_rate(store, session_id, transcript(count), sync)


def flat(count: int, prefill: int, rounds: int = 3) -> tuple[float, float, float]:
    """Rates of the same `count` turns (per-turn sync) onto an empty slot, onto one holding
    `prefill` messages whose session is checkpointed (as one that grew by turns is), and
    onto such a slot never checkpointed (its first turn checkpoints the `prefill`
    messages first, once); medians of `rounds` interleaved rounds."""
    from agctl.store.checkpointer import Checkpointer

    rates: dict[str, list[float]] = {"empty": [], "full": [], "fresh": []}
    with tempfile.TemporaryDirectory() as tmp:
        for round_number in range(rounds):  # interleaved, medians: a shared machine is noisy
            store = Store(tmp)
            names = {kind: f"{kind}-{round_number}" for kind in rates}
            store.create_session(names["empty"], system_prompt="You are a benchmark.")
            fill(store, names["full"], prefill)
            Checkpointer(store).create(names["full"], label="filled", auto=True)
            fill(store, names["fresh"], prefill)
            for kind, session_id in names.items():
                rates[kind].append(replay_rate(Store(tmp), session_id, transcript(count), None))
    empty, full, fresh = (statistics.median(rates[kind]) for kind in ("empty", "full", "fresh"))
    return empty, full, fresh


def measure(turns: int, flat_turns: int, prefill: int) -> dict[str, Any]:
    modes = sync_modes()
    floor = durability_floor()
    rates = {mode: growing(turns, mode) for mode in modes} if modes else {}
    if not modes:
        rates["per-turn"] = growing(turns, None)
    empty, full, fresh = flat(flat_turns, prefill)
    return {
        "turns": turns,
        "durable_write_s": floor,
        "turns_per_second": rates,
        "sync_end_available": "end" in modes,
        "flat_turns": flat_turns,
        "prefill": prefill,
        "empty_turns_per_second": empty,
        "full_turns_per_second": full,
        "flat_ratio": full / empty,
        "fresh_turns_per_second": fresh,
        "fresh_ratio": fresh / empty,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--turns", type=int, default=1000)
    parser.add_argument("--flat", type=int, default=300)
    parser.add_argument("--prefill", type=int, default=4000)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = measure(args.turns, args.flat, args.prefill)
    if args.json:
        print(json.dumps(result, indent=2))
        return
    floor = result["durable_write_s"]
    print(f"durable atomic replace: {floor * 1000:.2f} ms ({1 / floor:.0f} per second)")
    for mode, rate in result["turns_per_second"].items():
        print(f"{result['turns']} turns, sync {mode}: {rate:.1f} turns/s")
    if not result["sync_end_available"]:
        print("sync end: not available yet (transcripts.replay takes no `sync` argument)")
    print(
        f"{result['flat_turns']} turns onto {result['prefill']} messages: "
        f"{result['full_turns_per_second']:.1f} turns/s; onto an empty slot: "
        f"{result['empty_turns_per_second']:.1f} turns/s; ratio {result['flat_ratio']:.2f}"
    )
    print(
        f"  the same onto {result['prefill']} messages never checkpointed (the first turn "
        f"checkpoints them): {result['fresh_turns_per_second']:.1f} turns/s; "
        f"ratio {result['fresh_ratio']:.2f}"
    )


if __name__ == "__main__":
    main()
