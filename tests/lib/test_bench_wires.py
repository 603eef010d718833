"""bench/wires.py, shortened: every wire's turn runs against its own fake and is set against
the OpenAI wire's of the same size, and the table judges each by its ratio."""

from __future__ import annotations

from types import ModuleType

import pytest
from helpers import bench_module


@pytest.fixture
def bench(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    return bench_module(monkeypatch, "wires")


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
