"""Session documents on disk that cannot be read: reported, left out, never fatal."""

from __future__ import annotations

import pytest
from helpers import forest_shape, make_family

from agctl.base.errors import AgctlError
from agctl.store import Store
from agctl.store.sessions import session_forest


@pytest.fixture
def family(store: Store) -> Store:
    """root -> a -> c, root -> b, and lone; root is the current session."""
    return make_family(store)


def test_unreadable_sessions_are_reported_and_left_out(family: Store) -> None:
    path = family.session_dir("b") / "session.json"
    path.write_text("{not json")
    problems: list[AgctlError] = []
    assert forest_shape(session_forest(family.backend, problems=problems)) == [
        ("root", [("a", [("c", [])])]),
        ("lone", []),
    ]
    assert len(problems) == 1 and "b" in str(problems[0])
    with pytest.raises(AgctlError):
        session_forest(family.backend, "b")
