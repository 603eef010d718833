"""The main job: `agctl demo` runs the branching scenario offline and checks its claims."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import Result

from agctl.cli import demo
from agctl.store import Store


def test_demo_checks_every_claim_and_leaves_no_data(
    run: Callable[..., Result], isolated_env: Path
) -> None:
    result = run("demo")
    assert result.exit_code == 0, result.stdout + result.stderr
    claims = sum(1 for step in demo._steps() if step.check is not None)
    assert result.stdout.count("✓") == claims >= 10
    assert "✗" not in result.stdout and "All claims checked." in result.stdout
    assert not isolated_env.exists(), "the demo must not write into the user's data dir"


def test_demo_keeps_its_data_with_an_explicit_data_dir(
    run: Callable[..., Result], tmp_path: Path
) -> None:
    target = tmp_path / "tour"
    assert run("--data-dir", str(target), "demo").exit_code == 0
    store = Store(target)
    assert store.slot_ids("legal-aid") == ["default", "option-a"]
    assert store.load_session("legal-aid").turn_count == 3
    again = run("--data-dir", str(target), "demo")
    assert again.exit_code == 2 and "already holds" in again.stderr


def test_demo_stays_offline_whatever_the_environment(
    run: Callable[..., Result], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGCTL_PROVIDER", "openai")
    monkeypatch.setenv("AGCTL_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("AGCTL_MODEL", "gpt-4o")
    result = run("demo")
    assert result.exit_code == 0, result.stdout
    assert os.environ["AGCTL_PROVIDER"] == "openai", "the demo must restore the environment"


def test_a_false_claim_fails_the_demo(
    run: Callable[..., Result], monkeypatch: pytest.MonkeyPatch
) -> None:
    steps = demo._steps()
    broken = next(step for step in steps if step.check is not None)
    broken.check = lambda store: False
    monkeypatch.setattr(demo, "_steps", lambda: steps)
    result = run("demo")
    assert result.exit_code == 1
    assert "✗ not so: " + broken.claim in result.stdout


def test_demo_as_a_real_process(tmp_path: Path) -> None:
    env = {**os.environ, "AGCTL_DATA_DIR": str(tmp_path / "data")}
    done = subprocess.run(
        [sys.executable, "-m", "agctl", "demo"], env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "All claims checked." in done.stdout
