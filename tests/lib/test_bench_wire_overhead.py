"""bench/wire_overhead.py, shortened: every wire's turn runs against its own fake and is set against
the OpenAI wire's of the same size, and the table judges each by its ratio."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest
from helpers import bench_module

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def bench(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    return bench_module(monkeypatch, "wire_overhead")


def test_every_wire_turns_against_its_fake(
    bench: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    from installed import source_tree

    monkeypatch.chdir(ROOT)  # `python -m agctl` runs this tree's agctl
    result = bench.measure(1, [2, 30], source_tree(), count=False)
    assert result["skipped"] == {}
    assert set(result["wall"]) == {"openai", "anthropic", "gemini"}
    assert all(set(times) == {2, 30} for times in result["wall"].values())
    wall, fake = result["wall"], result["fake"]
    # Each fake's handler was timed on every measured request.
    assert all(0 < fake[wire][size] < wall[wire][size] for wire in wall for size in (2, 30))
    # Each wire against the reference, size by size; no callgrind asked, so wall times only.
    names = [f"turn send, {wire} wire, {size} messages" for size in (2, 30) for wire in wall]
    rows = bench.rows(result)
    assert [row["name"] for row in rows[::2]] == [n for n in names if "openai" not in n]
    assert all(row["name"] == "  less the fake server's own time" for row in rows[1::2])


def test_each_wire_is_judged_against_openai_less_the_fakes_time(bench: ModuleType) -> None:
    result = {
        "sizes": [10, 5000],
        "wall": {
            "openai": {10: 0.200, 5000: 0.400},
            "anthropic": {10: 0.210, 5000: 0.480},
        },
        # FakeAnthropic hashes every block of a request: its own time is not agctl's.
        "fake": {
            "openai": {10: 0.001, 5000: 0.010},
            "anthropic": {10: 0.001, 5000: 0.100},
        },
        "instructions": {
            "openai": {10: 1_000_000_000, 5000: 2_000_000_000},
            "anthropic": {10: 1_050_000_000, 5000: 2_300_000_000},
        },
        "skipped": {"gemini": "exit 1: ModuleNotFoundError"},
    }
    rows = bench.rows(result)
    less = "  less the fake server's own time"
    counted = "  the same, counted in instructions (callgrind)"
    assert [(row["name"], row["target"], row["met"]) for row in rows] == [
        ("turn send, anthropic wire, 10 messages", "(shown)", None),
        (less, "<= 1.1x openai", True),
        (counted, "<= 1.1x openai", True),
        ("turn send, anthropic wire, 5000 messages", "(shown)", None),
        (less, "<= 1.1x openai", True),
        (counted, "<= 1.1x openai", False),
        ("turn send, gemini wire", "skipped", None),
    ]
    ratios = [1.05, 0.209 / 0.199, 1.05, 1.2, 0.38 / 0.39, 1.15]
    assert [row["ratio"] for row in rows[:6]] == pytest.approx(ratios)
    assert rows[4]["value"] == pytest.approx(380)
    assert rows[4]["reference"] == "openai wire 390 ms (the fakes' own 100.0 and 10.0 ms)"
    assert rows[5]["reference"] == "openai wire 2000.0M"
    assert rows[6]["reference"] == "exit 1: ModuleNotFoundError"
