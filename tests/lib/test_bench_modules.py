"""bench/ scripts put tests/ first on sys.path (for the fakes), so a bench module named as a
module of tests/ would import the test's instead: bench/wires.py once did, after
tests/wires.py came."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_no_bench_module_is_shadowed_by_a_test_module() -> None:
    tests = {path.stem for path in (ROOT / "tests").glob("*.py")}
    tests |= {path.name for path in (ROOT / "tests").iterdir() if (path / "__init__.py").exists()}
    bench = {path.stem for path in (ROOT / "bench").glob("*.py")}
    assert len(bench) > 10  # the modules are where this test looks
    assert bench & tests == set()
