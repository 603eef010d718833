"""What the tests of real processes share: a real agctl's environment over the test's data
dir, and the small session (and its checkpoint) the hostile tests refuse input against."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from click.testing import Result
from helpers import env  # noqa: F401  (the fixture)

from agctl.store import Store

Run = Callable[..., Result]


@pytest.fixture
def session(run: Run) -> str:
    """A current session 's' with two messages and one checkpoint."""
    for args in (
        ("session", "new", "s", "--system", "Be brief."),
        ("msg", "append", "user", "hello"),
        ("msg", "append", "assistant", "hi"),
        ("ckpt", "create", "--label", "first"),
    ):
        result = run(*args)
        assert result.exit_code == 0, result.output
    return "s"


@pytest.fixture
def checkpoint(store: Store, session: str) -> str:
    from agctl.store.checkpointer import Checkpointer

    return Checkpointer(store).ids(session)[0]
