"""Damaged and planted files in the data dir, on the command line: a clear error that names
the file, never a traceback, nothing written."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import Result
from helpers import (
    EXIT_DATA,
    append_four_messages,
    as_json,
    fails_with_message,
    new_first_session,
    ok,
)

Run = Callable[..., Result]


# ---- helpers ---------------------------------------------------------------------------


@pytest.fixture
def session(run: Run) -> str:
    """A current session 's1' with a system prompt and an empty default slot."""
    return new_first_session(run)


@pytest.fixture
def chat(run: Run, session: str) -> str:
    """The current session with four messages in its default slot."""
    append_four_messages(run)
    return session


def slot_path(data_dir: Path, session: str, slot: str = "default") -> Path:
    return data_dir / "sessions" / session / "slots" / f"{slot}.json"


def test_an_unrelated_corrupt_session_does_not_break_session_show(
    run: Run, session: str, isolated_env: Path
) -> None:
    ok(run("session", "new", "broken", "--no-use"))
    (isolated_env / "sessions" / "broken" / "session.json").write_text("garbage")
    assert as_json(run("session", "show", "--json"))["id"] == "s1"


class TestBrokenData:
    def test_corrupt_slot_names_the_file(self, run: Run, chat: str, isolated_env: Path) -> None:
        path = slot_path(isolated_env, "s1")
        path.write_text("{ not json")
        result = fails_with_message(run("msg", "list"), EXIT_DATA, str(path))
        assert "not valid JSON" in result.stderr
        fails_with_message(run("msg", "append", "user", "x"), EXIT_DATA, str(path))
        assert path.read_text() == "{ not json"

    def test_newer_major_schema_is_refused_naming_both_versions(
        self, run: Run, chat: str, isolated_env: Path
    ) -> None:
        path = slot_path(isolated_env, "s1")
        document = json.loads(path.read_text())
        document["schema_version"] = "7.0"
        path.write_text(json.dumps(document))
        before = path.read_bytes()
        result = fails_with_message(run("msg", "append", "user", "x"), EXIT_DATA, "7.0", "1.0")
        assert str(path) in result.stderr
        assert path.read_bytes() == before

    def test_corrupt_session_is_skipped_by_list_with_a_warning(
        self, run: Run, session: str, isolated_env: Path
    ) -> None:
        ok(run("session", "new", "broken", "--no-use"))
        (isolated_env / "sessions" / "broken" / "session.json").write_text("[]")
        result = ok(run("session", "list", "--json"))
        assert [r["id"] for r in json.loads(result.stdout)] == ["s1"]
        assert "warning" in result.stderr
        assert "broken" in result.stderr
