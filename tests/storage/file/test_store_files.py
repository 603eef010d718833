"""The file store's own files: the layout it writes, damaged and planted documents, leftovers,
and a data dir open to other users (warned about once)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from helpers import SID, agctl_process, append, snapshot, texts

from agctl.base.errors import (
    CorruptDocument,
    HasChildren,
    ProtectedSlot,
    SchemaTooNew,
)
from agctl.store import Store


def test_create_session_writes_the_layout(store: Store) -> None:
    session = store.create_session(system_prompt="be brief", title="t")
    directory = store.root / "sessions" / session.id
    assert (directory / "session.json").is_file()
    assert (directory / "slots" / "default.json").is_file()
    loaded = store.load_session(session.id)
    assert loaded.system_prompt == "be brief" and loaded.current_slot == "default"
    assert json.loads((directory / "session.json").read_text())["schema_version"] == "1.0"
    assert not [p for p in (store.root / "sessions").iterdir() if p.name.startswith(".")]


def test_corrupt_slot_names_the_file_and_touches_nothing(store: Store) -> None:
    sid = store.create_session("s").id
    store.create_slot(sid, "b")
    path = store.session_dir(sid) / "slots" / "b.json"
    path.write_text('{"id": "b", "messages": [')
    before = snapshot(store.root)
    with pytest.raises(CorruptDocument) as caught:
        store.load_slot(sid, "b")
    assert str(path) in str(caught.value) and "not valid JSON" in str(caught.value)
    with pytest.raises(CorruptDocument):
        append(store, sid, "x", slot="b")
    assert snapshot(store.root) == before
    append(store, sid, "default still works")
    assert texts(store, sid) == ["default still works"]


def test_wrong_shape_names_the_field(store: Store) -> None:
    sid = store.create_session("s").id
    path = store.session_dir(sid) / "slots" / "default.json"
    data = json.loads(path.read_text())
    data["messages"] = [{"role": "wizard", "content": "x"}]
    path.write_text(json.dumps(data))
    with pytest.raises(CorruptDocument, match=r"messages\.0\.role"):
        store.load_slot(sid)


def test_corrupt_session_is_skipped_in_listings_when_asked(store: Store) -> None:
    store.create_session("good")
    store.create_session("bad")
    (store.session_dir("bad") / "session.json").write_bytes(b"\xff\xfe")
    with pytest.raises(CorruptDocument):
        store.list_sessions()
    problems: list = []
    assert [i.session.id for i in store.list_sessions(problems=problems)] == ["good"]
    assert "bad" in str(problems[0])


def test_newer_major_version_on_disk_is_refused(store: Store) -> None:
    sid = store.create_session("s").id
    path = store.session_dir(sid) / "slots" / "default.json"
    data = json.loads(path.read_text())
    data["schema_version"] = "3.1"
    path.write_text(json.dumps(data))
    with pytest.raises(SchemaTooNew) as caught:
        store.load_slot(sid)
    message = str(caught.value)
    assert "3.1" in message and "1.0" in message and str(path) in message


def test_unknown_fields_on_disk_survive_an_update(store: Store) -> None:
    sid = store.create_session("s").id
    path = store.session_dir(sid) / "slots" / "default.json"
    data = json.loads(path.read_text())
    data["schema_version"] = "1.3"
    data["from_the_future"] = {"keep": True}
    path.write_text(json.dumps(data))
    append(store, sid, "hello")
    rewritten = json.loads(path.read_text())
    assert rewritten["from_the_future"] == {"keep": True}
    assert rewritten["schema_version"] == "1.3"


def test_symlinked_slot_is_refused(store: Store, tmp_path: Path) -> None:
    sid = store.create_session("s").id
    outside = tmp_path / "outside.json"
    outside.write_text(store.load_slot(sid).model_dump_json())
    path = store.session_dir(sid) / "slots" / "evil.json"
    os.symlink(outside, path)
    with pytest.raises(CorruptDocument, match="symbolic link"):
        store.load_slot(sid, "evil")


def test_a_corrupt_session_can_still_be_destroyed(store: Store) -> None:
    store.create_session("bad")
    store.create_session("kid", parent_id="bad")
    (store.session_dir("bad") / "session.json").write_text("{")
    with pytest.raises(HasChildren):
        store.destroy_session("bad")
    assert store.destroy_session("bad", recursive=True).destroyed == ["bad", "kid"]
    assert store.session_ids() == []


def test_leftovers_of_a_crashed_create_or_destroy_are_swept(store: Store) -> None:
    store.create_session("first")
    stale = store.sessions_dir / ".new-x-0000"
    (stale / "slots").mkdir(parents=True)
    old = store.sessions_dir / ".trash-y-0000"
    old.mkdir()
    fresh = store.sessions_dir / ".new-z-0000"
    fresh.mkdir()
    for path in (stale, old):
        os.utime(path, (0, 0))
    store.create_session("second")
    assert not stale.exists() and not old.exists()
    assert fresh.exists(), "a recent staging dir may belong to a live process"
    assert store.session_ids() == ["first", "second"]


def test_destroy_refuses_children_unless_recursive(store: Store) -> None:
    store.create_session("a")
    store.create_session("b", parent_id="a")
    store.create_session("c", parent_id="b")
    store.create_session("other")
    with pytest.raises(HasChildren, match=r"children: b$") as caught:
        store.destroy_session("a")
    assert "--recursive" in str(caught.value.hint) and "--orphan" in str(caught.value.hint)
    assert store.session_ids() == ["a", "b", "c", "other"]
    result = store.destroy_session("a", recursive=True)
    assert result.destroyed == ["a", "b", "c"] and result.orphaned == []
    assert store.session_ids() == ["other"]
    assert [p.name for p in store.sessions_dir.iterdir()] == ["other"]


def test_last_slot_is_protected_even_without_default(store: Store) -> None:
    sid = store.create_session("s").id
    store.create_slot(sid, "only")
    (store.session_dir(sid) / "slots" / "default.json").unlink()
    with pytest.raises(ProtectedSlot, match="last slot"):
        store.delete_slot(sid, "only")


def test_a_loose_data_dir_is_warned_about_once(env: dict[str, str], isolated_env: Path) -> None:
    """Before: a 0755 data dir was used silently."""
    isolated_env.mkdir(mode=0o755)
    os.chmod(isolated_env, 0o755)
    first = agctl_process(env, "session", "new", SID)
    assert first.returncode == 0
    assert first.stderr.count("open to other users") == 1
    assert str(isolated_env) in first.stderr and "755" in first.stderr
    again = agctl_process(env, "session", "list")
    assert again.returncode == 0 and "open to other users" not in again.stderr
    os.chmod(isolated_env, 0o775)  # looser still: said again, once
    assert "775" in agctl_process(env, "session", "list").stderr
    assert "open to" not in agctl_process(env, "session", "list").stderr
    os.chmod(isolated_env, 0o700)
    assert agctl_process(env, "session", "list").stderr == ""
