"""agctl.store.facade: the Store, the public face: the current session, reads of what is missing,
and each of its methods one call down to the rule of the same name."""

from __future__ import annotations

import inspect
from types import ModuleType
from typing import Any

import pytest
from helpers import append

import agctl.store
from agctl.base.errors import NotFound
from agctl.storage.memory import MemoryBackend
from agctl.store import Store, drafts, sessions, slots
from agctl.store.work import Work


def test_current_session_pointer(store: Store) -> None:
    assert store.current_session_id() is None
    store.create_session("s1")
    store.set_current_session("s1")
    assert store.current_session_id() == "s1"
    with pytest.raises(NotFound):
        store.set_current_session("nope")
    store.destroy_session("s1")
    assert store.current_session_id() is None


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
