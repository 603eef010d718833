"""Each wire's per-turn cost next to the OpenAI wire's (issue 27: within 1.1x).

Usage: python bench/run.py --only wires [--quick] [--source] [--json]
One `agctl turn send --no-stream` per wire, on a slot of 10 and one of 5,000 messages
(bench/turn.py's `fill`), against that wire's loopback fake (tests/fake_*.py, echo replies),
each next to the OpenAI wire's turn of the same size in the same run. Every wire gets the
same work: its own data directory filled alike, the same model name, a window large enough
that nothing compresses. Wall medians are interleaved round by round; the figure that decides
is the instruction count (callgrind, the agctl process only: the fakes run in this process),
since a wall time here swings by a fifth and includes the fake's own parsing of the request.
A wire whose turn fails (not there yet, or broken) is shown as skipped, with its error.
Never part of the test suite's pass/fail.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
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
FAKES: dict[str, Callable[[], LoopbackFake[Any, Any]]] = {
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
    with contextlib.ExitStack() as stack:
        for wire, fake in FAKES.items():
            server = stack.enter_context(fake())
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
        counted: dict[str, dict[int, int] | None] = {}
        for wire in servers:
            counts = (
                instructions([commands[(wire, size)] for size in sizes], agctl) if count else None
            )
            counted[wire] = dict(zip(sizes, counts, strict=True)) if counts is not None else None
    wall = {wire: {size: times[f"{wire} {size}"] for size in sizes} for wire in servers}
    return {"sizes": sizes, "wall": wall, "instructions": counted, "skipped": skipped}


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
    """The table's rows: each wire's turn at each size against the OpenAI wire's."""
    out = []
    wall, counted = result["wall"], result["instructions"]
    reference_wall, reference_count = wall[REFERENCE], counted.get(REFERENCE)
    target = f"<= {TARGET}x {REFERENCE}"
    for size in result["sizes"]:
        for wire in wall:
            if wire == REFERENCE:
                continue
            seconds, reference = wall[wire][size], reference_wall[size]
            ratio = seconds / reference
            out.append(
                row(
                    f"turn send, {wire} wire, {size} messages",
                    seconds * 1000,
                    "ms",
                    f"{REFERENCE} wire {reference * 1000:.0f} ms",
                    ratio,
                    target,
                    ratio <= TARGET,
                )
            )
            counts = counted.get(wire)
            if counts is None or reference_count is None:
                continue
            ratio = counts[size] / reference_count[size]
            out.append(
                row(
                    "  the same, counted in instructions (callgrind)",
                    counts[size] / 1e6,
                    "M instr",
                    f"{REFERENCE} wire {reference_count[size] / 1e6:.1f}M",
                    ratio,
                    target,
                    ratio <= TARGET,
                )
            )
    for wire, why in result["skipped"].items():
        out.append(row(f"turn send, {wire} wire", 0, "-", why, None, "skipped", None))
    return out
