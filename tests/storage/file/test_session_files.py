"""Session documents on disk that cannot be read: reported, left out, never fatal; parent
chains written by hand that loop: walks over them still end."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import Result
from helpers import (
    agctl_process,
    forest_shape,
    make_family,
)

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


Run = Callable[..., Result]


# ---- parent chains that loop -----------------------------------------------------------------


def test_walks_over_a_looping_parent_chain_end(
    env: dict[str, str], run: Run, isolated_env: Path
) -> None:
    """Data written by hand (or by an older agctl) may loop: tree and rm still end."""
    for sid in ("a", "b", "c"):
        assert run("session", "new", sid).exit_code == 0
    for sid, parent in (("a", "b"), ("b", "a"), ("c", "c")):
        path = isolated_env / "sessions" / sid / "session.json"
        document = json.loads(path.read_text())
        document["parent_id"] = parent
        path.write_text(json.dumps(document))
    tree = agctl_process(env, "session", "tree", "--json", timeout=20)
    assert tree.returncode == 0, tree.stderr
    shown = {node["id"]: node["looped"] for node in json.loads(tree.stdout)}
    assert shown == {"a": True, "b": True, "c": True}
    listed = agctl_process(env, "session", "list", timeout=20)
    assert "a (loop)" in listed.stdout and "(gone)" not in listed.stdout
    alone = agctl_process(env, "session", "rm", "c", timeout=20)  # its own parent
    assert alone.returncode == 0, alone.stderr
    removed = agctl_process(env, "session", "rm", "a", "--recursive", timeout=20)
    assert removed.returncode == 0, removed.stderr
