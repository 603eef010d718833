"""The house checks: ruff lint and format, and mypy --strict over the library."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_tool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, check=False
    )


def test_ruff_lint_and_format() -> None:
    lint = run_tool("ruff", "check", "agctl", "tests", "bench", "scripts")
    assert lint.returncode == 0, lint.stdout + lint.stderr
    fmt = run_tool("ruff", "format", "--check", "agctl", "tests", "bench", "scripts")
    assert fmt.returncode == 0, fmt.stdout + fmt.stderr


def test_mypy_strict() -> None:
    result = run_tool("mypy")
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_package_of_the_source_tree_is_shipped() -> None:
    from setuptools.config.pyprojecttoml import read_configuration

    config = read_configuration(ROOT / "pyproject.toml")
    shipped = set(config["tool"]["setuptools"]["packages"])
    on_disk = {
        ".".join(path.parent.relative_to(ROOT).parts)
        for path in (ROOT / "agctl").rglob("__init__.py")
    }
    assert on_disk == shipped, f"not shipped: {sorted(on_disk - shipped)}"
