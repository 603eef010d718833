"""The PostgreSQL backend's own fault, migration and hostile-value tests: a real server
(tests/pgserver.py), real processes, real connection kills; never the other backends."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from pgserver import PgServer, PgStore

from agctl.storage.postgres.backend import PostgresBackend


@pytest.fixture
def open_backend(pg_store: PgStore, isolated_env: Path) -> Iterator[Callable[..., PostgresBackend]]:
    """Backends over the test's fresh schema (each call a new one, as a new process
    would open it), closed after the test."""
    opened: list[PostgresBackend] = []

    def make(local_dir: Path | None = None, dsn: str | None = None) -> PostgresBackend:
        backend = PostgresBackend(
            dsn or pg_store.dsn, schema=pg_store.schema, local_dir=local_dir or isolated_env
        )
        opened.append(backend)
        return backend

    yield make
    for backend in opened:
        backend.close()


@pytest.fixture
def running_server(pg_server: PgServer) -> Iterator[PgServer]:
    """The shared server, for a test that stops or restarts it: running again afterwards,
    whatever the test did, so the tests after it find it up."""
    yield pg_server
    try:
        pg_server.execute("SELECT 1")
    except Exception:
        pg_server.start()
