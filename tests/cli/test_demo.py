"""The main job: `agctl demo` runs the branching scenario offline and checks its claims."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import Result

from agctl.cli import demo
from agctl.store import Store


def test_demo_checks_every_claim_and_leaves_no_data(
    run: Callable[..., Result], isolated_env: Path, tmp_path: Path
) -> None:
    result = run("demo")
    assert result.exit_code == 0, result.stdout + result.stderr
    steps = demo._steps(demo.TourFiles.of(tmp_path, tmp_path))
    claims = sum(1 for step in steps if step.check is not None)
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


def test_the_tool_branch_runs_the_loop_once_and_undo_takes_it_all_away(
    run: Callable[..., Result], tmp_path: Path
) -> None:
    target = tmp_path / "tour"
    result = run("--json", "--data-dir", str(target), "demo")
    assert result.exit_code == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert report["failures"] == 0
    steps = {step["command"].split(" --")[0]: step for step in report["steps"]}
    send = next(s for c, s in steps.items() if c.startswith("agctl turn send 'Is my letter"))
    assert send["holds"] is True and send["output"] == demo.ANSWER + "\n"
    shown = steps["agctl msg list -n 4"]["output"]
    assert f'call call_1: {demo.TOOL}({{"text":"{demo.LETTER}"}})' in shown
    assert "#7 tool tool_call_id=call_1 (5 tokens)\n14\n" in shown
    assert steps["agctl turn undo"]["holds"] is True
    # The loop left nothing behind: option-a holds what it held before it, and the
    # checkpoint of the loop's turn is kept for a rollback.
    store = Store(target)
    assert [m.role for m in store.load_slot("legal-aid", "option-a").messages] == [
        "user",
        "user",
        "assistant",
        "user",
        "assistant",
    ]
    labels = [c["label"] for c in json.loads(run("--json", "--data-dir", str(target), "ckpt",
                                                "list", "-s", "legal-aid").stdout)]  # fmt: skip
    assert "after turn 4" in labels
    # The tool is in the demo's own config, and the script and the tool's log are gone.
    config = json.loads((target / "demo-config.json").read_text())
    assert config["tools"][demo.TOOL]["approve"] == "auto"
    script = Path(shlex.split(send["command"])[shlex.split(send["command"]).index("--script") + 1])
    assert not script.parent.exists()


def test_a_tool_that_did_not_run_fails_the_tool_branchs_claims(
    run: Callable[..., Result], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The claims read the tool's own log of its runs: a tool that answers without
    writing it (as a recorded answer would) is caught."""
    monkeypatch.setattr(demo, "TOOL_PROGRAM", "print(14)")
    result = run("demo")
    assert result.exit_code == 1
    assert result.stdout.count("✗ not so: ") == 2
    assert f"✗ not so: {demo.TOOL} ran once" in result.stdout


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
    tour_steps = demo._steps
    claims: list[str] = []

    def with_a_false_claim(files: demo.TourFiles) -> list[demo.Step]:
        steps = tour_steps(files)
        broken = next(step for step in steps if step.check is not None)
        broken.check = lambda store: False
        claims.append(broken.claim)
        return steps

    monkeypatch.setattr(demo, "_steps", with_a_false_claim)
    result = run("demo")
    assert result.exit_code == 1
    assert "✗ not so: " + claims[0] in result.stdout


def test_demo_as_a_real_process(tmp_path: Path) -> None:
    env = {**os.environ, "AGCTL_DATA_DIR": str(tmp_path / "data")}
    done = subprocess.run(
        [sys.executable, "-m", "agctl", "demo"], env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "All claims checked." in done.stdout
