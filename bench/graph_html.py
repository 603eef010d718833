"""`session graph --format html` of a session with 200 slots and 2,000 checkpoints: the
wall time of the real CLI and the page's size, next to `--format json` (the model alone)
of the same session in the same run.

Usage: python bench/graph_html.py [--slots 200] [--checkpoints 2000] [--runs N] [--fixture DIR]
[--json]
Targets (issue 15): under 2 s and under 5 MB. Never part of the test suite's pass/fail. The
session is bench/graph_fixture.py's, the same as bench/graph.py's (--fixture DIR: built once,
kept).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from graph_fixture import arguments, fixture
from timing import interleaved_medians


def measure(
    slots: int, checkpoints: int, runs: int, directory: str | None = None
) -> dict[str, Any]:
    with (
        fixture(directory, slots, checkpoints) as (root, sid, built),
        tempfile.TemporaryDirectory() as out,
    ):
        env = {**os.environ, "AGCTL_DATA_DIR": str(root), "AGCTL_SESSION": sid}
        page = Path(out) / "graph.html"
        graph = [sys.executable, "-m", "agctl", "session", "graph", "--checkpoints"]
        seconds = interleaved_medians(
            {
                "html": ([*graph, "--format", "html", "-o", str(page)], env),
                "json": ([*graph, "--format", "json", "-o", str(Path(out) / "graph.json")], env),
            },
            runs,
        )
        return {
            "slots": slots,
            "checkpoints": checkpoints,
            "fixture_seconds": built,
            "html_seconds": seconds["html"],
            "json_seconds": seconds["json"],
            "html_bytes": page.stat().st_size,
        }


def main() -> None:
    args = arguments(__doc__)
    result = measure(args.slots, args.checkpoints, args.runs, args.fixture)
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
