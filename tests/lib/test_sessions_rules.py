"""The Store delegates, the rules decide (ARCHITECTURE.md): each session, slot and draft
rule is a function in agctl.store.sessions, agctl.store.slots or agctl.store.drafts of
what it works on (a unit of work the Store opened, or the backend), and the Store's
method of the same name is one call down to it, with every other argument as given."""

from __future__ import annotations

import inspect
from types import ModuleType
from typing import Any

import pytest

import agctl.store
from agctl.base.errors import NotFound
from agctl.storage.memory import MemoryBackend
from agctl.store import Store, drafts, sessions, slots
from agctl.store.work import Work, work_on

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


# What a Store method may take beyond its rule's parameters: settings passed on whole.
SETTINGS = {
    "create_session": sessions.NewSession,
    "replace_session": sessions.NewSession,
    "create_slot": slots.NewSlot,
    "derive_slot": slots.DerivedSlot,
}
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
        return answer

    monkeypatch.setattr(module, name, recorded)
    store = Store(backend=MemoryBackend())
    store.create_session("s")
    method = getattr(Store, name)
    given: dict[str, Any] = {}
    for param in list(inspect.signature(method).parameters.values())[1:]:
        if param.kind is inspect.Parameter.VAR_KEYWORD:
            given.update({key: object() for key in SETTINGS[name].__optional_keys__})
        else:
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
