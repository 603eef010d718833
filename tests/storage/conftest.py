"""The backends every storage test runs against, and the Store over each of them."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from agctl.storage.base import Backend
from agctl.storage.file.backend import FileBackend
from agctl.storage.memory import MemoryBackend
from agctl.store import Store


def memory_backend(root: Path) -> Backend:
    return MemoryBackend()


def file_backend(root: Path) -> Backend:
    backend: Backend = FileBackend(root)
    return backend


# A new backend joins the suite here: a name and a factory over an empty data dir.
BACKENDS: dict[str, Callable[[Path], Backend]] = {
    "memory": memory_backend,
    "file": file_backend,
}


@pytest.fixture(params=list(BACKENDS))
def backend_name(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


@pytest.fixture
def backend(backend_name: str, isolated_env: Path) -> Backend:
    """A fresh, empty backend of each kind (the file one in the test's data dir)."""
    return BACKENDS[backend_name](isolated_env)


@pytest.fixture
def new_file_backend(isolated_env: Path) -> Callable[[], Backend]:
    """Fresh file backends over one data dir, as successive processes open it."""
    file_backend(isolated_env)
    return lambda: file_backend(isolated_env)


def memory_store(root: Path) -> Store:
    return Store(backend=MemoryBackend())


STORES: dict[str, Callable[[Path], Store]] = {"file": Store, "memory": memory_store}


@pytest.fixture(params=list(STORES))
def store(request: pytest.FixtureRequest, isolated_env: Path) -> Store:
    """The Store facade over each backend, for the domain's tests."""
    return STORES[request.param](isolated_env)
