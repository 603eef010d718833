"""Checkpoint storage and speed after T turns with automatic checkpoints (offline provider).

Usage: python bench/checkpoints.py [--turns 100,1000,5000] [--runs N] [--json]
For each T: bytes of the live state (session.json + slot files), bytes of all checkpoints
(apparent size and allocated blocks), their ratio, and the median wall time of the real
CLI for `ckpt list`, `ckpt diff` (oldest checkpoint against the live state) and
`ckpt rollback` (to the middle checkpoint). Never part of the test suite's pass/fail.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from timing import median_wall

from agctl.providers.offline import OfflineProvider
from agctl.store import Store
from agctl.store.checkpointer import Checkpointer
from agctl.turn.send import TurnOptions, send_turn


def tree_bytes(paths: list[Path]) -> tuple[int, int]:
    """Apparent bytes and allocated bytes of the files under `paths`."""
    apparent = allocated = 0
    for root in paths:
        files = [root] if root.is_file() else [p for p in root.rglob("*") if p.is_file()]
        for path in files:
            info = path.stat()
            apparent += info.st_size
            allocated += info.st_blocks * 512
    return apparent, allocated


def median_cli(args: list[str], env: dict[str, str], runs: int) -> float:
    return median_wall([sys.executable, "-m", "agctl", *args], env, runs, warm_up=False)


def measure(turns: int, runs: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        store = Store(tmp)
        sid = store.create_session("bench", system_prompt="You are a benchmark.").id
        provider = OfflineProvider()
        options = TurnOptions(model="offline")
        started = time.perf_counter()
        for turn in range(turns):
            send_turn(store, sid, f"question number {turn}: what next?", provider, options)
        elapsed = time.perf_counter() - started
        directory = store.session_dir(sid)
        live = [directory / "session.json", directory / "slots"]
        live_bytes, live_blocks = tree_bytes(live)
        ckpt_bytes, ckpt_blocks = tree_bytes([directory / "checkpoints"])
        checkpoints = Checkpointer(store).summaries(sid)
        env = {**os.environ, "AGCTL_DATA_DIR": tmp, "AGCTL_SESSION": sid}
        oldest, middle = checkpoints[-1].id, checkpoints[len(checkpoints) // 2].id
        return {
            "turns": turns,
            "turns_per_second": turns / elapsed,
            "checkpoints": len(checkpoints),
            "live_bytes": live_bytes,
            "checkpoint_bytes": ckpt_bytes,
            "ratio": ckpt_bytes / live_bytes,
            "ratio_allocated": ckpt_blocks / live_blocks,
            "ckpt_list_s": median_cli(["ckpt", "list"], env, runs),
            "ckpt_diff_s": median_cli(["ckpt", "diff", oldest], env, runs),
            "ckpt_rollback_s": median_cli(["ckpt", "rollback", middle], env, runs),
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--turns", default="100,1000,5000")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rows = [measure(int(t), args.runs) for t in args.turns.split(",")]
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    print(
        f"{'turns':>6} {'live KB':>9} {'ckpt KB':>9} {'ratio':>6} {'(alloc)':>7} "
        f"{'list ms':>8} {'diff ms':>8} {'rollback ms':>11} {'turns/s':>8}"
    )
    for r in rows:
        print(
            f"{r['turns']:>6} {r['live_bytes'] / 1024:>9.1f} {r['checkpoint_bytes'] / 1024:>9.1f} "
            f"{r['ratio']:>6.2f} {r['ratio_allocated']:>7.2f} {r['ckpt_list_s'] * 1000:>8.1f} "
            f"{r['ckpt_diff_s'] * 1000:>8.1f} {r['ckpt_rollback_s'] * 1000:>11.1f} "
            f"{r['turns_per_second']:>8.1f}"
        )


if __name__ == "__main__":
    main()
