"""bench/cache.py, shortened: agctl's real requests through the simulated prefix cache keep
the properties the benchmark's figures rest on, and the benchmark still runs."""

from __future__ import annotations

from types import ModuleType

import pytest
from helpers import bench_module


@pytest.fixture
def bench(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    module = bench_module(monkeypatch, "cache")
    monkeypatch.setattr(module, "EVERY", 3)
    monkeypatch.setattr(module, "RECENT", 4)
    return module


def test_short_replay_through_agctl(bench: ModuleType) -> None:
    result = bench.measure("openai", 8, strides=[2])
    scenarios = {scenario.name: scenario for scenario in result["scenarios"]}
    full = scenarios["full mode, 8 turns"]
    assert len(full.hits) == 8
    assert full.hits[0].cached == 0  # a cold cache
    # Full mode only appends: each request starts with the whole previous one.
    for before, after in zip(full.hits, full.hits[1:], strict=False):
        assert after.matched >= before.prompt_tokens
        assert after.cached == after.matched // 128 * 128
    # A branch's first request starts with all its parent sent at the branch point.
    fork = scenarios["fork at turn 4: its first request"].hits[0]
    assert fork.matched >= full.hits[3].prompt_tokens
    derived = scenarios["derived slot at turn 8: its first request"].hits[0]
    assert derived.matched >= full.hits[7].prompt_tokens
    compress = scenarios["full, ctx compress every 3 turns"]
    # The turns, and a summary for each compression that had something to fold (at turn 3
    # there are only the 6 messages a compression keeps).
    assert len(compress.hits) == 8 + 1
    assert compress.note == "summary requests counted: 1"
    # 8 turns never reach the default stride (16): a stride of 2 drops messages within them.
    focused = next(s for s in result["scenarios"] if "stride 2" in s.name)
    assert len(focused.hits) == 8 and focused.prompt < full.prompt
    rows = bench.rows(result)
    assert [row["met"] is None for row in rows] == [s.target is None for s in scenarios.values()]
    assert all(0 <= row["value"] <= 100 for row in rows)
    assert full.cost(bench.PRICES, cache=True) < full.cost(bench.PRICES, cache=False)
