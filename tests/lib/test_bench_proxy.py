"""bench/proxy.py's table: each served turn's added latency is its median less the direct
call's, judged against 15 ms; the build before a change is shown beside it; PostgreSQL's
turn is judged against the file store's plus what importing psycopg costs."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest
from helpers import bench_module

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def bench(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    return bench_module(monkeypatch, "proxy")


def test_a_short_run_times_every_kind_of_client(monkeypatch: pytest.MonkeyPatch) -> None:
    """Real processes: `agctl serve` from this tree (`python -m agctl` in it), the fake
    upstream, httpx clients; the run checks that each upstream request held it all."""
    bench = bench_module(monkeypatch, "proxy")
    from installed import source_tree

    monkeypatch.chdir(ROOT)
    result = bench.measure(1, True, source_tree())
    styles = ("direct", "new message", "whole history")
    assert {f"{size} {style}" for size in (10, 1000) for style in styles} <= set(result["latency"])
    assert all(0 < t["median"] <= t["p90"] for t in result["latency"].values())
    assert set(result["rate"]) == {"direct", "served"}
    assert all(rate > 0 for rate in result["rate"].values())
    names = [row["name"] for row in bench.rows(result)]
    assert names[0] == "serve: added latency, 10 msgs, new message"
    assert "serve: 8 clients on 8 sessions, 10 msgs" in names


def timed(median_ms: float, p90_ms: float) -> dict[str, float]:
    return {"median": median_ms / 1000, "p90": p90_ms / 1000}


def test_the_added_latency_is_the_served_median_less_the_direct_one(bench: ModuleType) -> None:
    latency = {}
    for size, direct, new, whole, pg in ((10, 1, 8, 9, 9.5), (1000, 4, 12, 25, 30)):
        latency[f"{size} direct"] = timed(direct, direct * 2)
        latency[f"{size} new message"] = timed(new, new * 2)
        latency[f"{size} whole history"] = timed(whole, whole * 2)
        latency[f"{size} new message before"] = timed(new + 10, new * 3)
        latency[f"{size} new message, PostgreSQL"] = timed(pg, pg * 2)
    result = {
        "turns": 40,
        "latency": latency,
        "rate": {"direct": 800.0, "served": 90.0, "before": 80.0},
        "together": "3 runs x 8 clients x 25 turns",
        "import_psycopg": 0.1,
        "skipped": None,
        "against": "the wheel of d5fcf88",
    }
    rows = bench.rows(result)
    shown = [(r["name"], round(r["value"], 1), r["target"], r["met"]) for r in rows]
    before = "  the same before (the other build)"
    assert shown == [
        ("serve: added latency, 10 msgs, new message", 7.0, "< 15 ms", True),
        ("  the same at p90", 14.0, "(shown)", None),
        (before, 17.0, "< 15 ms", False),
        ("serve: added latency, 10 msgs, whole history", 8.0, "< 15 ms", True),
        ("  the same at p90", 16.0, "(shown)", None),
        ("serve: added latency, 1000 msgs, new message", 8.0, "< 15 ms", True),
        ("  the same at p90", 16.0, "(shown)", None),
        (before, 18.0, "< 15 ms", False),
        ("serve: added latency, 1000 msgs, whole history", 21.0, "< 15 ms", False),
        ("  the same at p90", 42.0, "(shown)", None),
        ("serve: 8 clients on 8 sessions, 10 msgs", 90.0, "(shown)", None),
        (before, 80.0, "(shown)", None),
        ("serve on PostgreSQL fsync off: turn's extra, 10 msgs", 1.5, "< import psycopg", True),
        ("serve on PostgreSQL fsync off: turn's extra, 1000 msgs", 18.0, "< import psycopg", True),
    ]
    assert rows[0]["reference"] == "direct 1.0 ms, served 8.0 ms (medians of 40 turns)"
    assert rows[0]["ratio"] == pytest.approx(8.0)
    assert rows[-1]["reference"] == (
        "served on PostgreSQL 30.0 ms, on files 12.0 ms; import psycopg 100 ms"
    )


def test_without_postgresql_its_rows_say_why(bench: ModuleType) -> None:
    latency = {
        f"{size} {style}": timed(2, 3)
        for size in (10, 1000)
        for style in ("direct", "new message", "whole history")
    }
    result = {
        "turns": 15,
        "latency": latency,
        "rate": {"direct": 800.0, "served": 90.0},
        "together": "1 runs x 8 clients x 10 turns",
        "import_psycopg": None,
        "skipped": "psycopg is not installed",
        "against": None,
    }
    last = bench.rows(result)[-1]
    assert (last["name"], last["target"], last["reference"]) == (
        "serve on PostgreSQL",
        "skipped",
        "psycopg is not installed",
    )
