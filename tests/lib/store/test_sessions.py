"""agctl.store.sessions: the session forest, removing several sessions, settings as text."""

from __future__ import annotations

import pytest
from helpers import forest_shape, make_family

from agctl.base.errors import AgctlError, NotFound, UsageError
from agctl.store import Store
from agctl.store.sessions import remove_sessions, session_forest


@pytest.fixture
def family(store: Store) -> Store:
    """root -> a -> c, root -> b, and lone; root is the current session."""
    return make_family(store)


def test_the_forest_nests_children_under_their_roots(family: Store) -> None:
    forest = session_forest(family.backend)
    assert forest_shape(forest) == [("root", [("a", [("c", [])]), ("b", [])]), ("lone", [])]
    assert forest[0].current and forest[0].title == "Root"
    assert not forest[1].current


def test_the_forest_under_a_prefix(family: Store) -> None:
    shape = [("root", [("a", [("c", [])]), ("b", [])])]
    assert forest_shape(session_forest(family.backend, "ro")) == shape
    assert forest_shape(session_forest(family.backend, "c")) == [("c", [])]
    with pytest.raises(NotFound):
        session_forest(family.backend, "nosuch")


def test_an_orphan_is_a_root_and_marked(family: Store) -> None:
    family.destroy_session("a", orphan=True)
    forest = session_forest(family.backend)
    assert forest_shape(forest) == [("root", [("b", [])]), ("c", []), ("lone", [])]
    assert [n.orphan for n in forest] == [False, True, False]


def test_to_dict_is_the_nested_document(family: Store) -> None:
    assert session_forest(family.backend, "a")[0].to_dict() == {
        "id": "a",
        "title": None,
        "orphan": False,
        "looped": False,
        "current": False,
        "children": [
            {
                "id": "c",
                "title": None,
                "orphan": False,
                "looped": False,
                "current": False,
                "children": [],
            }
        ],
    }


def test_removing_a_parent_and_its_descendant_destroys_each_once(family: Store) -> None:
    removal = remove_sessions(family.backend, ["a", "c", "a"], recursive=True)
    assert sorted(removal.destroyed) == ["a", "c"]
    assert removal.orphaned == []
    assert sorted(family.session_ids()) == ["b", "lone", "root"]


def test_a_name_that_resolves_to_nothing_destroys_nothing(family: Store) -> None:
    with pytest.raises(NotFound):
        remove_sessions(family.backend, ["lone", "nosuch"])
    assert "lone" in family.session_ids()


def test_orphans_destroyed_later_are_not_reported_as_orphans(family: Store) -> None:
    removal = remove_sessions(family.backend, ["a", "c"], orphan=True)
    assert removal.to_dict() == {"destroyed": ["a", "c"], "orphaned": []}
    removal = remove_sessions(family.backend, ["root"], orphan=True)
    assert removal.to_dict() == {"destroyed": ["root"], "orphaned": ["b"]}


def test_a_parent_is_refused_without_recursive_or_orphan(family: Store) -> None:
    with pytest.raises(AgctlError):
        remove_sessions(family.backend, ["root"])
    assert "root" in family.session_ids()


def test_session_settings_from_text(family: Store) -> None:
    assert family.set_session_setting("lone", "title", "42").title == "42"
    assert family.set_session_setting("lone", "title", "null").title is None
    assert family.set_session_setting("lone", "memory_in_context", "true").memory_in_context
    assert family.set_session_setting("lone", "auto_compress", "false").auto_compress is False
    assert family.set_session_setting("lone", "auto_compress", "default").auto_compress is None
    with pytest.raises(UsageError):
        family.set_session_setting("lone", "memory_in_context", "maybe")
