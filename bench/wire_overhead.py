"""Each wire's per-turn cost next to the OpenAI wire's (issue 27: within 1.1x).

Usage: python bench/run.py --only wires [--quick] [--source] [--json]
One `agctl turn send --no-stream` per wire, on a slot of 10 and one of 5,000 messages
(bench/turn.py's `fill`), against that wire's loopback fake (tests/fake_*.py, echo replies),
each next to the OpenAI wire's turn of the same size in the same run. Every wire gets the
same work: its own data directory filled alike, the same model name, a window large enough
that nothing compresses. Wall medians are interleaved round by round, and shown less the
fake's own time (its handler timed in this process, where the fakes run: the fakes differ,
FakeGemini and FakeAnthropic validating and hashing every block of a request to simulate a
prompt cache). The figure that decides is the instruction count (callgrind, of the agctl
process only), since a wall time here swings by a fifth.
A wire whose turn fails (not there yet, or broken) is shown as skipped, with its error.
Never part of the test suite's pass/fail.
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from fake_anthropic import FakeAnthropic
from fake_gemini import FakeGemini
from fake_openai import FakeOpenAI
from installed import Installed
from loopback import LoopbackFake
from timing import instructions, interleaved_medians, row
from turn import fill

from agctl.store import Store

REFERENCE = "openai"
FAKES: dict[str, type[LoopbackFake[Any, Any]]] = {
    "openai": FakeOpenAI,
    "anthropic": FakeAnthropic,
    "gemini": FakeGemini,
}
MODEL = "fake-model"
TARGET = 1.1  # a wire's turn against the OpenAI wire's


def measure(runs: int, sizes: list[int], agctl: Installed, *, count: bool = True) -> dict[str, Any]:
    """Wall medians and (with `count` and valgrind) instruction counts of each wire's turn
    at each size, by wire then size; `skipped` maps a wire whose turn fails to its error."""
    skipped: dict[str, str] = {}
    commands: dict[tuple[str, int], tuple[list[str], dict[str, str]]] = {}
    servers: dict[str, LoopbackFake[Any, Any]] = {}
    spent: dict[str, list[float]] = {wire: [] for wire in FAKES}
    with contextlib.ExitStack() as stack:
        for wire, fake in FAKES.items():
            server = stack.enter_context(_timed(fake, spent[wire]))
            data = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="agctl-wire-")))
            env = _environment(agctl, wire, server.base_url, data)
            store = Store(data)
            fill(store, "probe", 2)
            problem = _turn_fails(agctl, env, "probe")
            if problem is not None:
                skipped[wire] = problem
                continue
            servers[wire] = server
            for size in sizes:
                fill(store, f"s{size}", size)
                commands[(wire, size)] = (_turn(agctl, f"s{size}"), env)
        if REFERENCE in skipped:
            raise RuntimeError(f"the {REFERENCE} wire's turn fails: {skipped[REFERENCE]}")
        # Size by size, every wire in turn within each round.
        order = [(wire, size) for size in sizes for wire in servers]
        times = interleaved_medians({f"{w} {s}": commands[(w, s)] for w, s in order}, runs)
        for wire, server in servers.items():
            if server.errors:
                raise RuntimeError(f"the {wire} fake failed: {server.errors[0]!r}")
            turns = 1 + (runs + 1) * len(sizes)  # the probe, then every round
            if len(server.requests) != turns:
                raise RuntimeError(
                    f"the {wire} fake answered {len(server.requests)} requests, not {turns}"
                )
        # The fake's own time: each request of a measured round (after the probe and the
        # unmeasured round), by size.
        own = {
            wire: {
                size: statistics.median(spent[wire][1 + len(sizes) + i :: len(sizes)])
                for i, size in enumerate(sizes)
            }
            for wire in servers
        }
        counted: dict[str, dict[int, int] | None] = {}
        for wire in servers:
            counts = (
                instructions([commands[(wire, size)] for size in sizes], agctl) if count else None
            )
            counted[wire] = dict(zip(sizes, counts, strict=True)) if counts is not None else None
    wall = {wire: {size: times[f"{wire} {size}"] for size in sizes} for wire in servers}
    return {
        "sizes": sizes,
        "wall": wall,
        "fake": own,
        "instructions": counted,
        "skipped": skipped,
    }


def _timed(fake: type[LoopbackFake[Any, Any]], spent: list[float]) -> LoopbackFake[Any, Any]:
    """A `fake` whose handler adds the seconds it spends on each request to `spent`."""

    class Handler(fake.handler):
        def do_POST(self) -> None:
            started = time.perf_counter()
            try:
                super().do_POST()
            finally:
                spent.append(time.perf_counter() - started)

    return type(fake.__name__, (fake,), {"handler": Handler})()


def _environment(agctl: Installed, wire: str, base_url: str, data: Path) -> dict[str, str]:
    """A turn's environment on `wire`: its own data directory and config, the same model."""
    config = data / "config.json"
    config.write_text(json.dumps({"context_windows": {MODEL: 100_000_000}}))
    return {
        **agctl.env(dict(os.environ)),
        "AGCTL_DATA_DIR": str(data),
        "AGCTL_CONFIG": str(config),
        "AGCTL_PROVIDER": wire,
        "AGCTL_BASE_URL": base_url,
        "AGCTL_MODEL": MODEL,
        "AGCTL_API_KEY": "bench-key",
    }


def _turn(agctl: Installed, session: str) -> list[str]:
    return [*agctl.agctl, "-s", session, "turn", "send", "hi", "--no-stream"]


def _turn_fails(agctl: Installed, env: dict[str, str], session: str) -> str | None:
    """Why one turn on `session` fails (the last line of its stderr), None if it works."""
    done = subprocess.run(
        _turn(agctl, session), env=env, capture_output=True, text=True, timeout=300, check=False
    )
    if done.returncode == 0:
        return None
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    return f"exit {done.returncode}: " + (lines[-1] if lines else "no message")


def rows(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The table's rows: each wire's turn at each size against the OpenAI wire's, as timed,
    less the fake's own time (target), and counted in instructions (target)."""
    out = []
    wall, fake, counted = result["wall"], result["fake"], result["instructions"]
    target = f"<= {TARGET}x {REFERENCE}"
    for size in result["sizes"]:
        reference, reference_fake = wall[REFERENCE][size], fake[REFERENCE][size]
        for wire in wall:
            if wire == REFERENCE:
                continue
            seconds, own = wall[wire][size], fake[wire][size]
            out.append(
                row(
                    f"turn send, {wire} wire, {size} messages",
                    seconds * 1000,
                    "ms",
                    f"{REFERENCE} wire {reference * 1000:.0f} ms",
                    seconds / reference,
                    "(shown)",
                    None,
                )
            )
            ratio = (seconds - own) / (reference - reference_fake)
            out.append(
                row(
                    "  less the fake server's own time",
                    (seconds - own) * 1000,
                    "ms",
                    f"{REFERENCE} wire {(reference - reference_fake) * 1000:.0f} ms "
                    f"(the fakes' own {own * 1000:.1f} and {reference_fake * 1000:.1f} ms)",
                    ratio,
                    target,
                    ratio <= TARGET,
                )
            )
            counts, reference_counts = counted.get(wire), counted.get(REFERENCE)
            if counts is None or reference_counts is None:
                continue
            ratio = counts[size] / reference_counts[size]
            out.append(
                row(
                    "  the same, counted in instructions (callgrind)",
                    counts[size] / 1e6,
                    "M instr",
                    f"{REFERENCE} wire {reference_counts[size] / 1e6:.1f}M",
                    ratio,
                    target,
                    ratio <= TARGET,
                )
            )
    for wire, why in result["skipped"].items():
        out.append(row(f"turn send, {wire} wire", 0, "-", why, None, "skipped", None))
    return out
