"""The library's tests run over the memory backend, the reference, and over the file one;
a test marked `helpers.file_only` (it needs the data dir too) over the file one alone."""

from __future__ import annotations

from pathlib import Path

import pytest

from agctl.context.models import Message
from agctl.storage.memory import MemoryBackend
from agctl.store import Store


@pytest.fixture(params=["memory", "file"])
def store(request: pytest.FixtureRequest, isolated_env: Path) -> Store:
    """A fresh Store over each backend: a rule of the library holds whatever keeps the data."""
    if request.param == "memory":
        return Store(backend=MemoryBackend())
    return Store(isolated_env)


@pytest.fixture
def sid(store: Store) -> str:
    session = store.create_session("s", system_prompt="Be brief.")
    store.update_slot(session.id, None, lambda s: s.append(Message(role="user", content="hi")))
    return session.id
