"""`session graph --format html` of a session with 200 slots and 2,000 checkpoints: the
wall time of the real CLI and the page's size, next to `--format json` (the model alone)
of the same session in the same run.

Usage: python bench/graph_html.py [--slots 200] [--checkpoints 2000] [--runs N] [--json]
Targets (issue 15): under 2 s and under 5 MB. Never part of the test suite's pass/fail.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from timing import interleaved_medians

from agctl.checkpoints import Checkpointer
from agctl.models import Message
from agctl.store import Store


def big_session(store: Store, slots: int, checkpoints: int) -> str:
    """A session of `slots` slots derived from `default` (a few from one another) and
    `checkpoints` checkpoints, each after one new exchange in the next slot in turn."""
    sid = store.create_session("big", system_prompt="You are a benchmark.").id
    keeper = Checkpointer(store)
    names = ["default"]
    for step in range(checkpoints):
        if len(names) < slots:
            source = names[len(names) // 3] if len(names) % 4 == 0 else "default"
            names.append(f"slot-{len(names):03d}")
            store.derive_slot(sid, names[-1], source=source, strategy="full")
        slot = names[step % len(names)]
        exchange = [
            Message(role="user", content=f"question {step} in {slot}: what next?"),
            Message(role="assistant", content=f"answer {step}: the next step in {slot}."),
        ]
        store.update_slot(sid, slot, lambda s, added=exchange: s.extend(added))
        keeper.create(sid, label=f"step {step}" if step % 100 == 0 else None)
    return sid


def measure(slots: int, checkpoints: int, runs: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        store = Store(Path(tmp) / "data")
        sid = big_session(store, slots, checkpoints)
        env = {**os.environ, "AGCTL_DATA_DIR": str(Path(tmp) / "data"), "AGCTL_SESSION": sid}
        page = Path(tmp) / "graph.html"
        graph = [sys.executable, "-m", "agctl", "session", "graph", "--checkpoints"]
        seconds = interleaved_medians(
            {
                "html": ([*graph, "--format", "html", "-o", str(page)], env),
                "json": ([*graph, "--format", "json", "-o", str(Path(tmp) / "graph.json")], env),
            },
            runs,
        )
        return {
            "slots": slots,
            "checkpoints": checkpoints,
            "html_seconds": seconds["html"],
            "json_seconds": seconds["json"],
            "html_bytes": page.stat().st_size,
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--slots", type=int, default=200)
    parser.add_argument("--checkpoints", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = measure(args.slots, args.checkpoints, args.runs)
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(
        f"session graph --format html, {result['slots']} slots, {result['checkpoints']} "
        f"checkpoints: {result['html_seconds']:.2f} s, {result['html_bytes'] / 1e6:.2f} MB "
        f"(--format json: {result['json_seconds']:.2f} s)"
    )


if __name__ == "__main__":
    main()
