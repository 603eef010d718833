"""The backends every storage test runs against, and the Store over each of them."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import child_backend
import pytest
from pgserver import PgStore

from agctl.storage.base import Backend
from agctl.storage.file.backend import FileBackend
from agctl.storage.memory import MemoryBackend
from agctl.store import Store


def memory_backend(root: Path) -> Backend:
    return MemoryBackend()


def file_backend(root: Path) -> Backend:
    backend: Backend = FileBackend(root)
    return backend


def postgres_backend(root: Path, where: PgStore) -> Backend:
    from agctl.storage.postgres.backend import PostgresBackend

    backend: Backend = PostgresBackend(where.dsn, schema=where.schema, local_dir=root)
    return backend


# A new backend joins the suite here: a name and a factory over an empty data dir (and,
# for a database, an empty schema of the test server's).
BACKENDS: dict[str, Callable[[Path], Backend]] = {
    "memory": memory_backend,
    "file": file_backend,
}
SERVED: dict[str, Callable[[Path, PgStore], Backend]] = {"postgres": postgres_backend}


@pytest.fixture(params=[*BACKENDS, *SERVED])
def backend_name(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


@pytest.fixture
def backend(backend_name: str, isolated_env: Path, request: pytest.FixtureRequest) -> Backend:
    """A fresh, empty backend of each kind (the file one in the test's data dir, the
    PostgreSQL one in a fresh schema of the test server)."""
    if backend_name in SERVED:
        where: PgStore = request.getfixturevalue("pg_store")
        return SERVED[backend_name](isolated_env, where)
    return BACKENDS[backend_name](isolated_env)


@pytest.fixture(params=["file", "postgres"])
def shared_backend(
    request: pytest.FixtureRequest, isolated_env: Path
) -> tuple[str, Callable[[], Backend]]:
    """A store several processes share: its spec for a child (child_backend.py) and
    fresh backends over it, as successive processes open it."""
    if request.param == "postgres":
        where: PgStore = request.getfixturevalue("pg_store")
        text = child_backend.spec("postgres", isolated_env, where.dsn, where.schema)
    else:
        text = child_backend.spec("file", isolated_env)
    return text, lambda: child_backend.open_backend(text)


def memory_store(root: Path) -> Store:
    return Store(backend=MemoryBackend())


STORES: dict[str, Callable[[Path], Store]] = {"file": Store, "memory": memory_store}


@pytest.fixture(params=[*STORES, *SERVED])
def store(request: pytest.FixtureRequest, isolated_env: Path) -> Store:
    """The Store facade over each backend, for the domain's tests."""
    if request.param in SERVED:
        where: PgStore = request.getfixturevalue("pg_store")
        return Store(backend=SERVED[request.param](isolated_env, where))
    return STORES[request.param](isolated_env)
