"""The file backend's own tests run against it alone, not over every backend."""

from __future__ import annotations

from pathlib import Path

import pytest

from agctl.store import Store


@pytest.fixture
def store(isolated_env: Path) -> Store:
    """A Store over the file backend in the test's data dir (the suite's one, unparametrised)."""
    return Store(isolated_env)
