"""`session graph` on a large session: 200 slots (a derivation tree) and 2,000 checkpoints.

Usage: python bench/graph.py [--slots 200] [--checkpoints 2000] [--runs N] [--json]
The median wall time of the real CLI for `session graph --format text` (the target: under
1 s), next to `ckpt list` on the same session (which reads the same 2,000 checkpoint
summaries) measured in the same rounds; and, in process, each renderer's time and output
size on the whole graph (--checkpoints: every checkpoint a node). Never part of the test
suite's pass/fail.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from timing import interleaved_medians

from agctl.checkpoints import Checkpointer
from agctl.graph.model import build_graph
from agctl.graph.render import render
from agctl.models import Message
from agctl.store import Store


def build_fixture(root: Path, slots: int, checkpoints: int) -> str:
    """A session with `slots` slots, each derived from an earlier one (a tree four wide),
    and `checkpoints` checkpoints, each after one more message in some slot."""
    store = Store(root, sync="end")
    sid = store.create_session("bench", title="graph benchmark").id
    names = ["default"]
    for index in range(1, slots):
        parent = names[(index - 1) // 4]
        name = f"slot-{index:03}"
        store.derive_slot(sid, name, source=parent, strategy="focused" if index % 3 else "full")
        names.append(name)
    keeper = Checkpointer(store)
    for start in range(0, checkpoints, 100):
        # A hundred checkpoints a transaction: each still plans every slot, as a turn's does.
        with store.transaction(sid):
            for index in range(start, min(start + 100, checkpoints)):
                slot = names[index % len(names)]
                message = Message(role="user", content=f"note {index} in {slot}")
                store.update_slot(sid, slot, lambda s, m=message: s.append(m))
                keeper.create(sid, label=f"step {index}", auto=index % 2 == 0)
    store.flush()
    return sid


def renderers(store: Store, sid: str) -> list[dict[str, Any]]:
    """Each renderer on the whole graph (every checkpoint a node): seconds and bytes."""
    started = time.perf_counter()
    model = build_graph(store, sid, checkpoints=True).to_json()
    built = time.perf_counter() - started
    found = [{"format": "model", "seconds": built, "nodes": len(model["nodes"])}]
    for fmt in ("text", "mermaid", "dot", "json"):
        started = time.perf_counter()
        drawn = render(model, fmt)
        found.append(
            {
                "format": fmt,
                "seconds": time.perf_counter() - started,
                "bytes": len(drawn.encode()),
                "nodes": len(model["nodes"]),
                "edges": len(model["edges"]),
            }
        )
    return found


def measure(slots: int, checkpoints: int, runs: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        sid = build_fixture(Path(tmp), slots, checkpoints)
        fixture = time.perf_counter() - started
        env = {**os.environ, "AGCTL_DATA_DIR": tmp, "AGCTL_SESSION": sid, "LANG": "C.UTF-8"}
        agctl = [sys.executable, "-m", "agctl"]
        seconds = interleaved_medians(
            {
                "graph": ([*agctl, "session", "graph", "--format", "text"], env),
                "graph_checkpoints": (
                    [*agctl, "session", "graph", "--checkpoints", "--format", "text"],
                    env,
                ),
                "ckpt_list": ([*agctl, "ckpt", "list"], env),
            },
            runs,
        )
        return {
            "slots": slots,
            "checkpoints": checkpoints,
            "fixture_seconds": fixture,
            "seconds": seconds,
            "renderers": renderers(Store(tmp), sid),
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
    seconds = result["seconds"]
    print(
        f"{result['slots']} slots, {result['checkpoints']} checkpoints "
        f"(fixture built in {result['fixture_seconds']:.1f} s)"
    )
    for name, value in seconds.items():
        print(f"  {name:20} {value * 1000:8.0f} ms")
    for found in result["renderers"]:
        size = f"{found['bytes'] / 1024:8.0f} KB" if "bytes" in found else " " * 11
        took = found["seconds"] * 1000
        print(f"  {found['format']:8} {took:8.0f} ms {size}  {found['nodes']} nodes")


if __name__ == "__main__":
    main()
