"""Search over a damaged data dir: a slot that is not JSON is reported and skipped, a
document the fast path cannot vouch for is read validated."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import Result
from helpers import add_said, searched_sessions

from agctl.base.errors import AgctlError, CorruptDocument, SchemaTooNew
from agctl.reports.search import Hit, Matcher, search
from agctl.store import Store

Run = Callable[..., Result]


def slot_file(store: Store, session_id: str, slot_id: str = "default") -> Path:
    return store.sessions_dir / session_id / "slots" / f"{slot_id}.json"


@pytest.fixture
def sessions(store: Store) -> Store:
    return searched_sessions(store)


def test_hits_stream_before_the_rest_is_read(sessions: Store) -> None:
    """A later damaged slot is not even read when the caller stops at the first hit."""
    slot_file(sessions, "c-session").write_text("{broken")
    problems: list[AgctlError] = []
    hits = search(sessions, Matcher("hello"), on_problem=problems.append)
    assert isinstance(next(hits), Hit)
    assert problems == []
    assert len(list(hits)) == 4
    assert len(problems) == 1


def test_a_damaged_session_is_reported_and_the_search_goes_on(
    sessions: Store, caplog: pytest.LogCaptureFixture
) -> None:
    slot_file(sessions, "a-session").write_text("{broken")
    store = sessions
    os.mkdir(store.sessions_dir / "d-session")  # not a session: no session.json
    (store.sessions_dir / "e-session").mkdir()
    (store.sessions_dir / "e-session" / "session.json").write_text("{}")  # no slots dir
    problems: list[AgctlError] = []
    hits = list(search(store, Matcher("hello"), on_problem=problems.append))
    assert [(h.session, h.slot) for h in hits] == [
        ("a-session", "plan"),
        ("a-session", "plan"),
        ("b-session", "default"),
    ]
    assert len(problems) == 2
    assert isinstance(problems[0], CorruptDocument)
    assert "default.json" in str(problems[0])
    assert "e-session" in str(problems[1])
    with caplog.at_level("WARNING", logger="agctl"):
        assert len(list(search(store, Matcher("hello")))) == 3
    assert "skipped" in caplog.text and "default.json" in caplog.text


def test_a_document_the_fast_path_cannot_vouch_for_is_read_validated(store: Store) -> None:
    """A newer major format, or a shape outside what the fast path checks, goes through
    the Store: what it refuses is reported as every command reports it."""
    store.create_session("s")
    add_said(store, "s", "find me")
    path = slot_file(store, "s")
    document = json.loads(path.read_text())
    del document["schema_version"]  # read as the current version, as the model does
    path.write_text(json.dumps(document))
    assert [h.index for h in search(store, Matcher("find"))] == [0]
    problems: list[AgctlError] = []
    path.write_text(json.dumps({**document, "schema_version": "2.0"}))
    assert list(search(store, Matcher("find"), on_problem=problems.append)) == []
    assert isinstance(problems[0], SchemaTooNew) and "2.0" in str(problems[0])
    document["messages"].append({"role": "tool", "content": "find me too"})  # no call id
    path.write_text(json.dumps(document))
    assert list(search(store, Matcher("find"), on_problem=problems.append)) == []
    assert isinstance(problems[1], CorruptDocument) and "tool_call_id" in str(problems[1])


def test_a_damaged_session_is_a_warning_not_a_failure(run: Run, sessions: Store) -> None:
    slot_file(sessions, "a-session").write_text("{broken")
    result = run("search", "hello")
    assert result.exit_code == 0
    assert result.stdout.count("\n") == 3
    assert "agctl: warning: skipped" in result.stderr and "default.json" in result.stderr
