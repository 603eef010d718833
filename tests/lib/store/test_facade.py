"""The file store: sessions, slots, memory, ids, locks and damaged files."""

from __future__ import annotations

import inspect
from types import ModuleType
from typing import Any

import pytest
from helpers import append, data_dir_files, file_only, snapshot, texts, user

import agctl.store
from agctl.base.errors import (
    AlreadyExists,
    AmbiguousId,
    InvalidId,
    NotFound,
    ProtectedSlot,
    ReadonlySlot,
    UsageError,
)
from agctl.context.models import Message
from agctl.storage.memory import MemoryBackend
from agctl.store import Store, drafts, sessions, slots
from agctl.store.work import Work, work_on

# ---- sessions ------------------------------------------------------------------------


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


@file_only
@pytest.mark.parametrize(
    "bad", ["", "..", "a/b", "../x", "a:b", "a\x00b", "a\nb", ".hidden", "-opt", "x" * 129, "a..b"]
)
def test_unsafe_ids_are_refused(store: Store, bad: str) -> None:
    with pytest.raises(InvalidId):
        store.create_session(bad)
    sid = store.create_session("ok").id
    with pytest.raises(InvalidId):
        store.create_slot(sid, bad)
    with pytest.raises(InvalidId):
        store.load_slot(sid, bad)
    assert not list(store.root.parent.glob("x*"))


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


def test_current_session_pointer(store: Store) -> None:
    assert store.current_session_id() is None
    store.create_session("s1")
    store.set_current_session("s1")
    assert store.current_session_id() == "s1"
    with pytest.raises(NotFound):
        store.set_current_session("nope")
    store.destroy_session("s1")
    assert store.current_session_id() is None


# ---- slots ---------------------------------------------------------------------------


def test_same_slot_id_in_two_sessions_stays_separate(store: Store) -> None:
    store.create_session("one")
    store.create_session("two")
    append(store, "one", "only in one")
    store.create_slot("one", "notes")
    store.create_slot("two", "notes")
    append(store, "two", "two's note", slot="notes")
    assert texts(store, "one") == ["only in one"] and texts(store, "two") == []
    assert texts(store, "one", "notes") == [] and texts(store, "two", "notes") == ["two's note"]


def test_create_slot_with_defaults_and_duplicates(store: Store) -> None:
    sid = store.create_session("s").id
    slot = store.create_slot(sid, "b")
    assert slot.config.mode == "full" and slot.config.source.kind == "new"
    assert store.slot_ids(sid) == ["b", "default"]
    with pytest.raises(AlreadyExists):
        store.create_slot(sid, "b")
    with pytest.raises(UsageError):
        store.create_slot(sid, "c", mode="sideways")
    with pytest.raises(UsageError):
        store.create_slot(sid, "c", focus={"recent_messages": -2})
    assert store.load_session(sid).current_slot == "default"
    store.create_slot(sid, "d", make_current=True)
    assert store.load_session(sid).current_slot == "d"


def test_static_slot_keeps_presets_in_the_immutable_zone(store: Store) -> None:
    sid = store.create_session("s").id
    preset = [Message(role="system", content="law: tenancy act")]
    slot = store.create_slot(sid, "law", immutable=preset, mode="readonly")
    assert slot.config.source.kind == "static"
    assert store.load_slot(sid, "law").immutable == preset
    assert store.load_slot(sid, "law").messages == []
    with pytest.raises(ReadonlySlot):
        append(store, sid, "x", slot="law")


def test_derive_full_copies_every_zone_and_records_the_parent(store: Store) -> None:
    sid = store.create_session("s").id
    for text in ("u1", "u2", "u3"):
        append(store, sid, text)
    store.update_slot(sid, None, lambda s: s.compressed.append(user("old summary")))
    child = store.derive_slot(sid, "branch")
    assert child.meta.parent_id == "default"
    assert child.config.source.kind == "derived" and child.config.source.parent_id == "default"
    assert child.config.source.strategy == "full"
    assert texts(store, sid, "branch") == ["u1", "u2", "u3"]
    assert [m.text() for m in store.load_slot(sid, "branch").compressed] == ["old summary"]
    append(store, sid, "only in branch", slot="branch")
    assert texts(store, sid, "default") == ["u1", "u2", "u3"]


def test_derive_focused_copies_the_focused_view(store: Store) -> None:
    sid = store.create_session("s").id
    store.update_slot(sid, None, lambda s: s.append(Message(role="system", content="rules")))
    for text in ("u1", "u2", "u3", "u4"):
        append(store, sid, text)
    child = store.derive_slot(
        sid,
        "short",
        strategy="focused",
        focus={"recent_messages": 2, "stride": 1, "summary_override": "earlier: u1, u2"},
    )
    assert child.config.mode == "focused"
    assert child.config.focused.summary_override == "earlier: u1, u2"
    assert texts(store, sid, "short") == ["rules", "u3", "u4"]
    assert len(store.load_slot(sid, "default").messages) == 5


def test_derive_from_a_readonly_slot_gives_a_writable_branch(store: Store) -> None:
    sid = store.create_session("s").id
    append(store, sid, "fact")
    store.set_mode(sid, "default", "readonly")
    store.derive_slot(sid, "work", source="default", make_current=True)
    assert store.load_session(sid).current_slot == "work"
    append(store, sid, "my note")
    assert texts(store, sid) == ["fact", "my note"]


def test_derive_from_a_missing_slot(store: Store) -> None:
    sid = store.create_session("s").id
    with pytest.raises(NotFound):
        store.derive_slot(sid, "x", source="ghost")
    assert store.slot_ids(sid) == ["default"]


def test_use_slot_switches_and_refuses_unknown(store: Store) -> None:
    sid = store.create_session("s").id
    store.create_slot(sid, "b")
    assert store.use_slot(sid, "b").current_slot == "b"
    append(store, sid, "to b")
    assert texts(store, sid, "b") == ["to b"]
    with pytest.raises(NotFound):
        store.use_slot(sid, "ghost")
    assert store.load_session(sid).current_slot == "b"


def test_set_mode_keeps_messages_and_settings(store: Store) -> None:
    sid = store.create_session("s").id
    for text in ("a", "b", "c"):
        append(store, sid, text)
    slot = store.set_mode(sid, None, "focused", focus={"recent_messages": 1})
    assert slot.config.mode == "focused" and slot.config.focused.recent_messages == 1
    store.set_mode(sid, None, "readonly")
    slot = store.set_mode(sid, None, "focused")
    assert slot.config.focused.recent_messages == 1
    assert texts(store, sid) == ["a", "b", "c"]
    with pytest.raises(UsageError):
        store.set_mode(sid, None, "bogus")


@file_only
def test_readonly_still_reads_derives_and_saves(store: Store) -> None:
    sid = store.create_session("s").id
    append(store, sid, "a")
    store.set_mode(sid, None, "readonly")
    before = data_dir_files(store.root)
    with pytest.raises(ReadonlySlot):
        append(store, sid, "b")
    assert data_dir_files(store.root) == before
    assert texts(store, sid) == ["a"]
    store.derive_slot(sid, "copy")
    store.set_mode(sid, None, "readonly", focus={"recent_messages": 3})
    assert store.load_slot(sid).config.focused.recent_messages == 3


def test_delete_protections(store: Store) -> None:
    sid = store.create_session("s").id
    with pytest.raises(ProtectedSlot):
        store.delete_slot(sid, "default")
    store.create_slot(sid, "b", make_current=True)
    with pytest.raises(ProtectedSlot):
        store.delete_slot(sid, "default")
    session = store.delete_slot(sid, "b")
    assert session.current_slot == "default"
    assert store.load_session(sid).current_slot == "default"
    assert store.slot_ids(sid) == ["default"]
    with pytest.raises(NotFound):
        store.delete_slot(sid, "b")


def test_empty_slot_round_trip(store: Store) -> None:
    sid = store.create_session("s").id
    store.create_slot(sid, "empty")
    store.update_slot(sid, "empty", lambda s: None)
    slot = store.load_slot(sid, "empty")
    assert slot.messages == [] and slot.immutable == [] and slot.compressed == []
    assert slot.meta.message_count == 0 and slot.meta.total_tokens == 0


def test_meta_follows_the_messages(store: Store) -> None:
    sid = store.create_session("s").id
    append(store, sid, "abcdefgh")
    meta = store.load_slot(sid).meta
    assert meta.message_count == 1 and meta.total_tokens == 2 + 4
    assert meta.updated_at >= meta.created_at


@file_only
def test_failed_change_writes_nothing(store: Store) -> None:
    sid = store.create_session("s").id
    append(store, sid, "a")
    before = snapshot(store.root)

    def bad(slot: object) -> None:
        slot.messages.append(user("half-done"))  # type: ignore[attr-defined]
        raise NotFound("simulated failure mid-change")

    with pytest.raises(NotFound):
        store.update_slot(sid, None, bad)
    assert snapshot(store.root) == before


# ---- memory --------------------------------------------------------------------------


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


# ---- damaged and foreign files -------------------------------------------------------


def test_missing_session_and_slot(store: Store) -> None:
    with pytest.raises(NotFound):
        store.load_session("ghost")
    with pytest.raises(NotFound):
        append(store, "ghost", "x")
    sid = store.create_session("s").id
    with pytest.raises(NotFound, match="slot 'ghost'"):
        store.load_slot(sid, "ghost")


# The Store delegates, the rules decide (ARCHITECTURE.md): each session, slot and draft
# rule is a function in agctl.store.sessions, agctl.store.slots or agctl.store.drafts of
# what it works on (a unit of work the Store opened, or the backend), and the Store's
# method of the same name is one call down to it, with every other argument as given.


RULES: dict[ModuleType, tuple[str, ...]] = {
    sessions: (
        "list_sessions",
        "children",
        "create_session",
        "replace_session",
        "check_parent",
        "parent",
        "destroy_session",
        "memory_set",
        "memory_get",
        "memory_remove",
        "configure_session",
    ),
    slots: (
        "resolve_slot",
        "list_slots",
        "create_slot",
        "derive_slot",
        "use_slot",
        "update_session",
        "update_slot",
        "append_messages",
        "set_mode",
        "delete_slot",
        "configure_slot",
    ),
    drafts: ("draft_slots", "save_draft", "load_draft", "clear_draft", "clear_legacy_draft"),
}
DELEGATES = [(module, name) for module, names in RULES.items() for name in names]


# How a rule is handed what it works on: a unit of work (a change of one session), the
# backend (the whole store, or what is kept beside a session's transaction), a reader.
BELOW = ("work", "backend", "reader")


@pytest.mark.parametrize(
    ("module", "name"), DELEGATES, ids=[f"{m.__name__}.{n}" for m, n in DELEGATES]
)
def test_the_store_method_is_one_call_down_to_its_rule(
    module: ModuleType, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every argument reaches the rule as given, the session as a unit of work, the
    backend or a reader of it; the rule's answer comes back; nothing else is called."""
    rule_signature = inspect.signature(getattr(module, name))
    below, *rest = rule_signature.parameters
    assert below in BELOW
    received: dict[str, Any] = {}
    answer = object()

    def recorded(*args: Any, **kwargs: Any) -> object:
        received.update(rule_signature.bind(*args, **kwargs).arguments)
        for param in rule_signature.parameters.values():  # settings given on as a whole
            if param.kind is inspect.Parameter.VAR_KEYWORD:
                received.update(received.pop(param.name, {}))
        return answer

    monkeypatch.setattr(module, name, recorded)
    store = Store(backend=MemoryBackend())
    store.create_session("s")
    method = getattr(Store, name)
    given: dict[str, Any] = {}
    for param in list(inspect.signature(method).parameters.values())[1:]:
        given[param.name] = "s" if param.name == "session_id" else object()
    returned = method(store, **given)
    handed = received.pop(below)
    if below == "work":
        assert isinstance(handed, Work) and handed.session_id == "s"
    else:
        assert handed is store.backend
    if "session_id" not in rest:
        given.pop("session_id", None)
    if name == "clear_draft":  # the moment and the step log of a turn, as one
        given["by"] = drafts.Superseding(given.pop("before"), given.pop("own"))
    assert received == given
    assert returned is (None if rule_signature.return_annotation == "None" else answer)


def test_the_moved_names_are_still_importable_from_the_store() -> None:
    assert agctl.store.SessionInfo is sessions.SessionInfo
    assert agctl.store.Replaced is sessions.Replaced
    assert agctl.store.Destroyed is sessions.Destroyed
    assert agctl.store.DEFAULT_SLOT == slots.DEFAULT_SLOT == "default"


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


@pytest.mark.parametrize(
    ("call", "refused"),
    [
        (lambda store: store.create_slot("gone", "bad id!"), InvalidId),
        (lambda store: store.create_slot("gone", "x", mode="zz"), UsageError),
        (lambda store: store.derive_slot("gone", "x", strategy="zz"), UsageError),
        (lambda store: store.delete_slot("gone", "default"), ProtectedSlot),
        (lambda store: store.configure_slot("gone", None, {"zz": 1}), UsageError),
        (lambda store: store.configure_session("gone", {"zz": 1}), UsageError),
    ],
)
def test_input_a_rule_refuses_is_refused_before_the_session_is_opened(
    call: Any, refused: type[Exception]
) -> None:
    """As before the unit of work: the same error for the same input whatever the
    session, and no lock waited for (the work opens its transaction on first use)."""
    store = Store(backend=MemoryBackend())
    with pytest.raises(refused) as caught:
        call(store)
    assert not isinstance(caught.value, NotFound)
