"""agctl.store.sessions: ids drawn, given and resolved by prefix, parents, listing and destroying,
memory, the session forest, removing several sessions, settings as text."""

from __future__ import annotations

import pytest
from helpers import (
    forest_shape,
    make_family,
)

from agctl.base.errors import (
    AgctlError,
    AlreadyExists,
    AmbiguousId,
    InvalidId,
    NotFound,
    UsageError,
)
from agctl.storage.memory import MemoryBackend
from agctl.store import Store, sessions
from agctl.store.sessions import remove_sessions, session_forest
from agctl.store.work import work_on


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


def test_a_drawn_id_another_session_has_is_drawn_again(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two sessions made in the same second may draw one id (3 random characters): the
    second draws again, for a new session and a fork; a given id is refused as taken."""
    from agctl.store import sessions
    from agctl.store.checkpointer import Checkpointer

    store.create_session("taken")
    store.create_session("also-taken")
    draws = iter(["taken", "also-taken", "fresh", "taken", "forked"])
    drawn = []

    def draw() -> str:
        drawn.append(next(draws))
        return drawn[-1]

    monkeypatch.setattr(sessions, "new_session_id", draw)
    assert store.create_session().id == "fresh"
    assert drawn == ["taken", "also-taken", "fresh"]

    monkeypatch.setattr("agctl.base.ids.new_session_id", draw)  # fork imports it where it draws
    checkpoints = Checkpointer(store)
    made = checkpoints.create("fresh")
    assert checkpoints.fork("fresh", made.id).id == "forked"
    assert store.session_ids() == ["also-taken", "forked", "fresh", "taken"]
    assert store.load_session("forked").parent_id == "fresh"

    monkeypatch.setattr(sessions, "ID_DRAWS", 2)
    draws = iter(["taken", "taken"])
    with pytest.raises(AlreadyExists):  # every draw taken: said, not looped on
        store.create_session()


def test_create_with_a_given_id_and_a_duplicate(store: Store) -> None:
    store.create_session("review")
    with pytest.raises(AlreadyExists):
        store.create_session("review")
    assert store.session_ids() == ["review"]


def test_parent_must_exist_and_is_resolved_by_prefix(store: Store) -> None:
    store.create_session("parent-1")
    child = store.create_session("child", parent_id="parent")
    assert child.parent_id == "parent-1"
    with pytest.raises(NotFound):
        store.create_session("c2", parent_id="nobody")


def test_prefix_lookup(store: Store) -> None:
    store.create_session("abc1")
    store.create_session("abc2")
    store.create_session("abd")
    assert store.resolve_session("abd") == "abd"
    assert store.resolve_session("abc1") == "abc1"
    with pytest.raises(AmbiguousId) as caught:
        store.resolve_session("ab")
    assert caught.value.candidates == ["abc1", "abc2", "abd"]
    with pytest.raises(NotFound):
        store.resolve_session("zz")


def test_exact_id_wins_over_longer_ones(store: Store) -> None:
    store.create_session("run")
    store.create_session("run2")
    assert store.resolve_session("run") == "run"


def test_a_whole_id_is_resolved_without_listing_every_session(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    store.create_session("run")
    store.create_session("run2")

    def listing() -> list[str]:
        raise AssertionError("every session listed to resolve a whole id")

    monkeypatch.setattr(store.backend, "session_ids", listing)
    assert store.resolve_session("run") == "run"
    assert store.resolve_session("run2") == "run2"
    with pytest.raises(AssertionError, match="every session listed"):
        store.resolve_session("ru")  # a prefix still needs the list
    monkeypatch.undo()
    with pytest.raises(InvalidId):
        store.resolve_session("../x")


def test_list_reports_parents_children_and_orphans(store: Store) -> None:
    store.create_session("root")
    store.create_session("kid", parent_id="root")
    store.create_session("lonely")
    infos = {i.session.id: i for i in store.list_sessions()}
    assert infos["root"].children == ["kid"] and not infos["kid"].orphan
    store.destroy_session("root", orphan=True)
    infos = {i.session.id: i for i in store.list_sessions()}
    assert set(infos) == {"kid", "lonely"}
    assert infos["kid"].orphan and infos["kid"].session.parent_id == "root"
    assert store.parent("kid") is None


def test_destroy_with_orphan_reports_the_orphans(store: Store) -> None:
    store.create_session("a")
    store.create_session("b", parent_id="a")
    result = store.destroy_session("a", orphan=True)
    assert result.destroyed == ["a"] and result.orphaned == ["b"]
    with pytest.raises(NotFound):
        store.load_session("a")


def test_memory(store: Store) -> None:
    sid = store.create_session("s").id
    store.memory_set(sid, "lang", "fr")
    store.memory_set(sid, "lang", "de")
    assert store.memory_get(sid, "lang") == "de"
    assert store.load_session(sid).memory == {"lang": "de"}
    assert store.memory_remove(sid, "lang") == "de"
    with pytest.raises(NotFound):
        store.memory_get(sid, "lang")
    with pytest.raises(NotFound):
        store.memory_remove(sid, "lang")


def test_the_session_rules_work_on_a_backend_without_files() -> None:
    backend = MemoryBackend()
    sessions.create_session(backend, "root")
    sessions.create_session(backend, "kid", parent_id="ro")
    backend.set_current_session("kid")
    assert sessions.children(backend, "root") == ["kid"]
    assert sessions.parent(backend, "kid") == "root"
    with work_on(backend, "kid") as work:
        sessions.memory_set(work, "k", "v")
    assert sessions.memory_get(backend, "kid", "k") == "v"
    gone = sessions.destroy_session(backend, "root", recursive=True)
    assert gone.destroyed == ["root", "kid"]
    assert backend.current_session_id() is None
    with pytest.raises(NotFound, match="session 'kid' not found"):
        sessions.destroy_session(backend, "kid")
