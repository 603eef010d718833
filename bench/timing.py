"""Timing shared by the benchmarks: the median wall time of a real process."""

from __future__ import annotations

import statistics
import subprocess
import time


def median_wall(argv: list[str], env: dict[str, str], runs: int, *, warm_up: bool = True) -> float:
    """Median seconds of `runs` runs of `argv` (after one unmeasured run, to warm caches)."""
    if warm_up:
        subprocess.run(argv, env=env, capture_output=True, check=True)
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(argv, env=env, capture_output=True, check=True)
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)
