"""Every test gets its own data and config dirs and a plain terminal."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from agctl.cli import cli
from agctl.store import Store


@pytest.fixture(autouse=True)
def isolated_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    data_dir = tmp_path / "data"
    monkeypatch.setenv("AGCTL_DATA_DIR", str(data_dir))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg-data"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg-config"))
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("COLUMNS", "80")
    for name in ("AGCTL_SESSION", "AGCTL_LOG", "AGCTL_API_KEY", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    return data_dir


@pytest.fixture
def store(isolated_env: Path) -> Store:
    return Store(isolated_env)


@pytest.fixture
def run() -> Callable[..., Result]:
    """Invoke the CLI in-process; a traceback fails the test."""
    runner = CliRunner()

    def invoke(*args: str, input: str | bytes | None = None) -> Result:
        return runner.invoke(cli, list(args), input=input, catch_exceptions=False)

    return invoke
