"""`session graph` on a large session: 200 slots (a derivation tree) and 2,000 checkpoints.

Usage: python bench/graph.py [--slots 200] [--checkpoints 2000] [--runs N] [--fixture DIR] [--json]
The median wall time of the real CLI for `session graph --format text` (the target: under
1 s), next to `ckpt list` on the same session (which reads the same 2,000 checkpoint
summaries) measured in the same rounds; and, in process, each renderer's time and output
size on the whole graph (--checkpoints: every checkpoint a node). Never part of the test
suite's pass/fail. The session is bench/graph_fixture.py's (--fixture DIR: built once, kept).
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

from graph_fixture import arguments, fixture
from timing import interleaved_medians

from agctl.graph.model import build_graph
from agctl.graph.render import render
from agctl.store import Store


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


def measure(
    slots: int, checkpoints: int, runs: int, directory: str | None = None
) -> dict[str, Any]:
    with fixture(directory, slots, checkpoints) as (root, sid, built):
        env = {**os.environ, "AGCTL_DATA_DIR": str(root), "AGCTL_SESSION": sid, "LANG": "C.UTF-8"}
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
            "fixture_seconds": built,
            "seconds": seconds,
            "renderers": renderers(Store(root), sid),
        }


def main() -> None:
    args = arguments(__doc__)
    result = measure(args.slots, args.checkpoints, args.runs, args.fixture)
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
