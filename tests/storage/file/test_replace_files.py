"""Replacing a session on disk: the old one's checkpoints go, and a failed write or rename
leaves the old one and no staging dir."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import Result

from agctl.base.errors import StoreError
from agctl.store import Store

Run = Callable[..., Result]
ROOT = Path(__file__).resolve().parents[2]
EXIT_CONFLICT, EXIT_PROVIDER, EXIT_CHECK_FAILED = 4, 6, 8


def ok(result: Result) -> Result:
    assert result.exit_code == 0, (result.exit_code, result.stdout, result.stderr)
    return result


def test_replace_makes_a_fresh_session_of_that_id(run: Run, store: Store, tmp_path: Path) -> None:
    ok(run("session", "new", "ci", "--title", "old"))
    ok(run("turn", "send", "hello"))
    old = store.load_session("ci")
    ok(run("session", "new", "other"))
    result = ok(run("session", "new", "ci", "--replace", "--title", "new"))
    assert result.stdout == "ci\n"
    fresh = store.load_session("ci")
    assert (fresh.title, fresh.turn_count) == ("new", 0)
    assert fresh.created_at > old.created_at
    assert store.load_slot("ci").messages == []
    assert not (store.session_dir("ci") / "checkpoints").exists()
    assert store.current_session_id() == "ci"
    assert sorted(p.name for p in store.sessions_dir.iterdir()) == ["ci", "other"]


def old_session_with_a_message(store: Store) -> None:
    store.create_session("ci")
    store.update_slot("ci", None, lambda slot: slot.messages.append(message("old")))


def message(text: str) -> Any:
    from agctl.context.models import Message

    return Message(role="user", content=text)


def test_a_failed_write_of_the_new_session_leaves_the_old_one(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agctl.storage.file import backend

    old_session_with_a_message(store)
    real_write = backend.write_atomic

    def failing(path: Path, data: bytes, **kwargs: Any) -> None:
        if any(part.startswith(".new-") for part in path.parts):
            raise StoreError("disk full")
        real_write(path, data, **kwargs)

    monkeypatch.setattr(backend, "write_atomic", failing)
    with pytest.raises(StoreError, match="disk full"):
        store.replace_session("ci")
    assert [m.text() for m in store.load_slot("ci").messages] == ["old"]
    assert sorted(p.name for p in store.sessions_dir.iterdir()) == ["ci"]


def test_without_an_atomic_exchange_a_failed_rename_puts_the_old_one_back(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    old_session_with_a_message(store)
    monkeypatch.setattr("agctl.storage.file.backend.exchange_paths", lambda first, second: False)
    real_rename = os.rename

    def rename(source: Any, target: Any) -> None:
        if Path(source).name.startswith(".new-"):
            raise OSError(28, "No space left on device")
        real_rename(source, target)

    monkeypatch.setattr(os, "rename", rename)
    with pytest.raises(StoreError, match="cannot replace session 'ci'"):
        store.replace_session("ci")
    monkeypatch.setattr(os, "rename", real_rename)
    assert [m.text() for m in store.load_slot("ci").messages] == ["old"]
    assert sorted(p.name for p in store.sessions_dir.iterdir()) == ["ci"]
    # and with the renames working, the two-step path replaces it
    assert store.replace_session("ci").replaced
    assert store.load_slot("ci").messages == []
    assert sorted(p.name for p in store.sessions_dir.iterdir()) == ["ci"]
