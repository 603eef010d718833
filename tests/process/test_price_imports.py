"""A billed turn reads its model's price sheet from the data dir: after the first turn that
priced the model, real `agctl turn send` processes load no genai-prices (50-65 ms of a
~320 ms turn), a known model's cost and an unknown model's absence of one unchanged."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from fake_openai import FakeOpenAI, openai_usage

from agctl.storage.file import layout

# Runs agctl's main as `python -m agctl` would, then writes every module loaded into the
# file AGCTL_TEST_MODULES names (at exit: main ends with sys.exit).
CHILD = """
import atexit, os, sys
def dump():
    import json
    with open(os.environ["AGCTL_TEST_MODULES"], "w") as handle:
        json.dump(sorted(sys.modules), handle)
atexit.register(dump)
from agctl.cli import main
main()
"""


@pytest.fixture
def env(isolated_env: Path, tmp_path: Path, server: FakeOpenAI) -> dict[str, str]:
    environ = dict(os.environ)
    environ.update(
        AGCTL_DATA_DIR=str(isolated_env),
        AGCTL_CONFIG=str(tmp_path / "config.json"),
        AGCTL_TEST_MODULES=str(tmp_path / "modules.json"),
        AGCTL_PROVIDER="openai",
        AGCTL_BASE_URL=server.base_url,
        AGCTL_API_KEY="sk-agctl-test-Sheets4Qm8Zr2Lx",
        PYTHONIOENCODING="utf-8",
    )
    (tmp_path / "config.json").write_text("{}")
    return environ


def turn(env: dict[str, str], server: FakeOpenAI, model: str) -> tuple[Any, set[str]]:
    """One billed turn of `model` in a new process: its --json output and its modules."""
    server.reply("ok", usage=openai_usage(2000, 100, cached=1536))
    result = subprocess.run(
        [sys.executable, "-c", CHILD, "turn", "send", "hi", "--json"],
        capture_output=True,
        text=True,
        env={**env, "AGCTL_MODEL": model},
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    modules = set(json.loads(Path(env["AGCTL_TEST_MODULES"]).read_text()))
    return json.loads(result.stdout), modules


def of_genai_prices(modules: set[str]) -> set[str]:
    return {m for m in modules if m.split(".")[0] == "genai_prices"}


@pytest.mark.parametrize("model", ["gpt-4o", "fake-model"])
def test_a_later_turn_is_priced_without_importing_genai_prices(
    env: dict[str, str], server: FakeOpenAI, model: str
) -> None:
    from genai_prices import Usage, calc_price

    assert (
        subprocess.run(
            [sys.executable, "-m", "agctl", "session", "new", "s"], env=env, check=False
        ).returncode
        == 0
    )
    first, modules = turn(env, server, model)
    assert "genai_prices" in of_genai_prices(modules)  # the check can see it
    second, modules = turn(env, server, model)
    assert of_genai_prices(modules) == set()
    assert "agctl.context.price_sheets" in modules
    assert second["cost"] == first["cost"]
    assert second["cache_saved"] == first["cache_saved"]
    sheets = json.loads(layout.price_sheets(Path(env["AGCTL_DATA_DIR"])).read_text())
    if model == "fake-model":  # unknown: remembered as such, and unpriced each time
        assert sheets["models"] == {"fake-model": "unknown"}
        assert second["cost"] is None
    else:
        counts = Usage(input_tokens=2000, cache_read_tokens=1536, output_tokens=100)
        assert second["cost"] == float(calc_price(counts, model).total_price)
        assert list(sheets["models"]) == [model]
