"""bench/wires.py, shortened: every wire's turn runs against its own fake and is set against
the OpenAI wire's of the same size, and the table judges each by its ratio."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest
from helpers import bench_module

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def bench(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    return bench_module(monkeypatch, "wires")


def test_every_wire_turns_against_its_fake(
    bench: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    from installed import source_tree

    monkeypatch.chdir(ROOT)  # `python -m agctl` runs this tree's agctl
    result = bench.measure(1, [2, 30], source_tree(), count=False)
    assert result["skipped"] == {}
    assert set(result["wall"]) == {"openai", "anthropic", "gemini"}
    assert all(set(times) == {2, 30} for times in result["wall"].values())
    wall = result["wall"]
    # Each wire against the reference, size by size; no callgrind asked, so wall times only.
    expected = [
        (f"turn send, {wire} wire, {size} messages", wall[wire][size] / wall["openai"][size])
        for size in (2, 30)
        for wire in ("anthropic", "gemini")
    ]
    rows = bench.rows(result)
    assert [row["name"] for row in rows] == [name for name, _ in expected]
    assert [row["ratio"] for row in rows] == pytest.approx([ratio for _, ratio in expected])
    assert [row["met"] for row in rows] == [ratio <= 1.1 for _, ratio in expected]


def test_the_instruction_ratio_decides_each_row(bench: ModuleType) -> None:
    result = {
        "sizes": [10, 5000],
        "wall": {
            "openai": {10: 0.200, 5000: 0.400},
            "anthropic": {10: 0.210, 5000: 0.480},
        },
        "instructions": {
            "openai": {10: 1_000_000_000, 5000: 2_000_000_000},
            "anthropic": {10: 1_050_000_000, 5000: 2_300_000_000},
        },
        "skipped": {"gemini": "exit 1: ModuleNotFoundError"},
    }
    rows = bench.rows(result)
    assert [(row["name"], row["met"]) for row in rows] == [
        ("turn send, anthropic wire, 10 messages", True),
        ("  the same, counted in instructions (callgrind)", True),
        ("turn send, anthropic wire, 5000 messages", False),
        ("  the same, counted in instructions (callgrind)", False),
        ("turn send, gemini wire", None),
    ]
    assert [row["ratio"] for row in rows[:4]] == pytest.approx([1.05, 1.05, 1.2, 1.15])
    assert rows[3]["reference"] == "openai wire 2000.0M"
    assert rows[4]["reference"] == "exit 1: ModuleNotFoundError"
