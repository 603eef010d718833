"""Timing shared by the benchmarks: the median wall time of a real process, the instructions
it executes, and a row of the table."""

from __future__ import annotations

import re
import shutil
import statistics
import subprocess
import tempfile
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from installed import Installed


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


def interleaved_medians(
    commands: dict[str, tuple[list[str], dict[str, str]]], runs: int
) -> dict[str, float]:
    """Median seconds of each command (argv, env), run in turn within each round (after
    one unmeasured round), so that a change in the machine's load touches them alike."""
    samples: dict[str, list[float]] = {name: [] for name in commands}
    for round_number in range(runs + 1):
        for name, (argv, env) in commands.items():
            start = time.perf_counter()
            subprocess.run(argv, env=env, capture_output=True, check=True)
            if round_number:
                samples[name].append(time.perf_counter() - start)
    return {name: statistics.median(times) for name, times in samples.items()}


def instructions(
    commands: list[tuple[list[str], dict[str, str]]], agctl: Installed
) -> list[int] | None:
    """The instructions each command executes, counted by callgrind (one run each, with
    a fixed hash seed): the same count on a busy machine as on a quiet one, where wall
    times of a few hundred ms swing by a fifth. None without valgrind."""
    if shutil.which("valgrind") is None:
        return None
    counts = []
    with tempfile.TemporaryDirectory() as tmp:
        for argv, env in commands:
            if not argv[0].endswith("python") and not argv[0].endswith("python3"):
                argv = [agctl.python, *argv]  # the agctl script: count the interpreter
            done = subprocess.run(
                ["valgrind", "--tool=callgrind", f"--callgrind-out-file={tmp}/out", *argv],
                env={**env, "PYTHONHASHSEED": "0"},
                capture_output=True,
                text=True,
                timeout=600,
                check=False,
            )
            found = re.search(r"Collected : (\d+)", done.stderr)
            if done.returncode or found is None:
                return None
            counts.append(int(found.group(1)))
    return counts


def row(
    name: str,
    value: float,
    unit: str,
    reference: str,
    ratio: float | None,
    target: str,
    met: bool | None,
) -> dict[str, Any]:
    """One line of the benchmark table (bench/run.py), its reference beside it."""
    return {
        "name": name,
        "value": value,
        "unit": unit,
        "reference": reference,
        "ratio": ratio,
        "target": target,
        "met": met,
    }
