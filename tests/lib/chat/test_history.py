"""A session's chat history goes with the session: destroyed, replaced or removed with
its children, it leaves no file a new session of the same id would recall (a password
typed there). Checked on a real data dir; tests/process/test_chat.py types the lines."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import Result

from agctl.base.errors import HasChildren
from agctl.chat.lines import history_path
from agctl.store import Store


def typed(store: Store, session_id: str) -> Path:
    """A history file with a line in it, as a chat on the session leaves one."""
    assert store.local_dir is not None
    path = history_path(store.local_dir, session_id)
    path.write_text("+my password\n")
    return path


def test_destroy_replace_and_remove_take_the_chat_history_with_them(tmp_path: Path) -> None:
    store = Store(tmp_path / "data")
    for sid in ("gone", "replaced", "root"):
        store.create_session(sid)
    store.create_session("child", parent_id="root")
    store.create_session("kept")
    paths = {sid: typed(store, sid) for sid in ("gone", "replaced", "root", "child", "kept")}

    store.destroy_session("gone")
    store.replace_session("replaced")
    with pytest.raises(HasChildren):
        store.remove_sessions(["kept", "root"])  # kept goes, root is refused
    assert [sid for sid, path in paths.items() if path.exists()] == ["root", "child"]
    store.remove_sessions(["root"], recursive=True)
    assert not paths["root"].exists() and not paths["child"].exists()


def test_a_new_session_does_not_recall_a_history_left_before(tmp_path: Path) -> None:
    store = Store(tmp_path / "data")
    left = typed(store, "s")  # by an agctl that did not remove it
    store.create_session("s")
    assert not left.exists()


def test_session_rm_and_new_replace_remove_it(
    run: Callable[..., Result], isolated_env: Path
) -> None:
    for command in (["session", "rm", "s"], ["session", "new", "s", "--replace"]):
        assert run("session", "new", "s", "--replace").exit_code == 0
        left = typed(Store(isolated_env), "s")
        assert run(*command).exit_code == 0
        assert not left.exists(), command
