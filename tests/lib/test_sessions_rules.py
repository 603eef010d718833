"""The Store delegates, the rules decide (ARCHITECTURE.md): each session, slot and draft
rule is a function of the store in agctl.sessions, agctl.slots or agctl.drafts, and the
Store's method of the same name forwards every argument to it and returns its answer."""

from __future__ import annotations

import inspect
from types import ModuleType
from typing import Any

import pytest

import agctl.store
from agctl import drafts, sessions, slots
from agctl.errors import NotFound
from agctl.storage.memory import MemoryBackend
from agctl.store import Store

RULES: dict[ModuleType, tuple[str, ...]] = {
    sessions: (
        "list_sessions",
        "children",
        "create_session",
        "replace_session",
        "update_session",
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
        "update_slot",
        "append_messages",
        "set_mode",
        "delete_slot",
        "configure_slot",
    ),
    drafts: ("draft_slots", "save_draft", "load_draft", "clear_draft", "clear_legacy_draft"),
}
DELEGATES = [(module, name) for module, names in RULES.items() for name in names]


def summary(thing: Any) -> str:
    """A docstring's first paragraph."""
    return (inspect.getdoc(thing) or "").split("\n\n")[0]


@pytest.mark.parametrize(
    ("module", "name"), DELEGATES, ids=[f"{m.__name__}.{n}" for m, n in DELEGATES]
)
def test_the_store_method_forwards_every_argument_to_its_rule(
    module: ModuleType, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    rule = getattr(module, name)
    method = getattr(Store, name)
    rule_signature = inspect.signature(rule)
    rule_params = list(rule_signature.parameters.values())
    assert rule_params[0].name == "store"
    method_signature = inspect.signature(method)
    assert list(method_signature.parameters.values())[1:] == rule_params[1:]
    assert method_signature.return_annotation == rule_signature.return_annotation
    assert summary(method) == summary(rule)

    received: dict[str, Any] = {}
    answer = object()

    def recorded(*args: Any, **kwargs: Any) -> object:
        received.update(rule_signature.bind(*args, **kwargs).arguments)
        return answer

    monkeypatch.setattr(module, name, recorded)
    store = Store(backend=MemoryBackend())
    given = {param.name: object() for param in rule_params[1:]}
    returned = method(store, **given)
    assert received == {"store": store, **given}
    assert returned is (None if rule_signature.return_annotation == "None" else answer)


def test_the_moved_names_are_still_importable_from_the_store() -> None:
    assert agctl.store.SessionInfo is sessions.SessionInfo
    assert agctl.store.Replaced is sessions.Replaced
    assert agctl.store.Destroyed is sessions.Destroyed
    assert agctl.store.DEFAULT_SLOT == slots.DEFAULT_SLOT == "default"


def test_the_session_rules_work_on_a_store_without_files() -> None:
    store = Store(backend=MemoryBackend())
    assert store.files is None
    sessions.create_session(store, "root")
    sessions.create_session(store, "kid", parent_id="ro")
    store.set_current_session("kid")
    assert sessions.children(store, "root") == ["kid"]
    assert sessions.parent(store, "kid") == "root"
    sessions.memory_set(store, "kid", "k", "v")
    assert sessions.memory_get(store, "kid", "k") == "v"
    gone = sessions.destroy_session(store, "root", recursive=True)
    assert gone.destroyed == ["root", "kid"]
    assert store.current_session_id() is None
    with pytest.raises(NotFound, match="session 'kid' not found"):
        sessions.destroy_session(store, "kid")
