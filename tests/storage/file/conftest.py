"""The file backend's own tests run against it alone, not over every backend."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import Result
from helpers import SID, env  # noqa: F401  (env: the fixture of a real agctl's environment)

from agctl.store import Store

Run = Callable[..., Result]


@pytest.fixture
def store(isolated_env: Path) -> Store:
    """A Store over the file backend in the test's data dir (the suite's one, unparametrised)."""
    return Store(isolated_env)


@pytest.fixture
def session(run: Run) -> str:
    assert run("session", "new", SID, "--system", "be brief").exit_code == 0
    assert run("-s", SID, "turn", "send", "hello").exit_code == 0
    return SID
