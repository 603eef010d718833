"""`turn send --if-unchanged` and `turn replay --if-unchanged` through the CLI: another
writer commits a turn while the fake server holds the request (its before_reply hook),
and the fenced command exits 4 with a JSON error and the reply kept in the draft."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import Result
from fake_openai import FakeOpenAI

from agctl.providers.offline import OfflineProvider
from agctl.store import Store
from agctl.turn.send import TurnOptions, send_turn

Run = Callable[..., Result]
SID = "s"


@pytest.fixture
def wired(server: FakeOpenAI, monkeypatch: pytest.MonkeyPatch, store: Store) -> FakeOpenAI:
    """The server, agctl pointed at it, and a current session with one turn."""
    monkeypatch.setenv("AGCTL_PROVIDER", "openai")
    monkeypatch.setenv("AGCTL_BASE_URL", server.base_url)
    monkeypatch.setenv("AGCTL_MODEL", "fake-model")
    store.create_session(SID)
    store.set_current_session(SID)
    send_turn(store, SID, "first", OfflineProvider(), TurnOptions(model="offline"))
    return server


def another_turn(isolated_env: Path) -> Callable[[], None]:
    """Another writer, with a Store of its own: a turn committed on the same slot."""

    def commit() -> None:
        send_turn(Store(isolated_env), SID, "other turn", OfflineProvider(), TurnOptions("offline"))

    return commit


def prompts(store: Store) -> list[str]:
    return [m.text() for m in store.load_slot(SID).messages if m.role == "user"]


def json_error(result: Result) -> dict[str, Any]:
    error: dict[str, Any] = json.loads(result.stderr)["error"]
    return error


def test_help_shows_the_option_with_an_example(run: Run) -> None:
    send = run("turn", "send", "--help").stdout
    options = " ".join(send.split("\nOptions:", 1)[1].split())
    assert "--if-unchanged Refuse to commit (exit 4, the reply kept in the draft)" in options
    assert "even by another turn's append (allowed by default)" in options
    assert 'agctl turn send "Go on" --if-unchanged' in send
    replay = run("turn", "replay", "--help").stdout
    assert "agctl turn replay chat.jsonl --cassette chat.cassette --if-unchanged" in replay


def test_a_fenced_send_exits_4_with_the_reply_in_the_draft(
    run: Run, wired: FakeOpenAI, store: Store, isolated_env: Path
) -> None:
    wired.before_reply(another_turn(isolated_env))

    result = run("--json", "turn", "send", "question", "--if-unchanged")

    assert (result.exit_code, result.stdout) == (4, "")
    error = json_error(result)
    assert (error["type"], error["exit"], error["hint"]) == ("SlotMoved", 4, None)
    assert error["message"] == (
        "slot 'default' changed while the model was answering (2 messages were appended; "
        "--if-unchanged refuses any change): the reply, computed from the old context, "
        "was not written"
    )
    assert any("agctl turn send --resume-draft" in note for note in error["notes"])
    assert any("echo: question" in note for note in error["notes"])
    draft = json.loads(run("--json", "draft", "show").stdout)
    assert (draft["prompt"], draft["reply"], draft["stale"]) == ("question", "echo: question", None)
    assert prompts(store) == ["first", "other turn"]

    resent = run("--json", "turn", "send", "--resume-draft", "--if-unchanged")
    assert resent.exit_code == 0, resent.stderr
    assert prompts(store) == ["first", "other turn", "question"]


def test_the_same_race_without_the_option_commits_after_the_other_turn(
    run: Run, wired: FakeOpenAI, store: Store, isolated_env: Path
) -> None:
    wired.before_reply(another_turn(isolated_env))

    result = run("--json", "turn", "send", "question")

    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["reply"] == "echo: question"
    assert prompts(store) == ["first", "other turn", "question"]


def test_a_fenced_replay_stops_at_the_raced_turn(
    run: Run, wired: FakeOpenAI, store: Store, isolated_env: Path, tmp_path: Path
) -> None:
    transcript = tmp_path / "chat.jsonl"
    transcript.write_text('{"input": "r1"}\n{"input": "r2"}\n')
    wired.before_reply(lambda: None)  # turn 1 answered undisturbed
    wired.before_reply(another_turn(isolated_env))

    result = run("--json", "turn", "replay", str(transcript), "--if-unchanged")

    assert result.exit_code == 4
    error = json_error(result)
    assert error["type"] == "SlotMoved"
    assert any("the replay stopped at turn 2 of 2" in note for note in error["notes"])
    assert prompts(store) == ["first", "r1", "other turn"]
    assert store.draft_slots(SID) == []
