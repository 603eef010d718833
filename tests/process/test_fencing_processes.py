"""Two agctl processes on one slot: while the first waits on the model (the fake server
holds its request), a second commits a turn. With --if-unchanged the first exits 4 and
keeps its reply in the draft; without it, it commits after the other."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from fake_openai import FakeOpenAI
from helpers import agctl_in

SID = "s"


def agctl(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return agctl_in(env, *args, session=SID)


@pytest.fixture
def offline(isolated_env: Path) -> dict[str, str]:
    """The second writer's environment: the offline model, the test's data dir."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("AGCTL_", "OPENAI_"))}
    environ["AGCTL_DATA_DIR"] = str(isolated_env)
    environ["PYTHONIOENCODING"] = "utf-8"
    created = agctl(environ, "session", "new", SID)
    assert created.returncode == 0, created.stderr
    return environ


@pytest.fixture
def online(offline: dict[str, str], server: FakeOpenAI) -> dict[str, str]:
    """The first writer's environment: the fake server, whose next request waits for a
    second agctl process to commit a turn on the same slot."""

    def second_writer() -> None:
        done = agctl(offline, "turn", "send", "other turn")
        assert done.returncode == 0, done.stderr

    server.before_reply(second_writer)
    return {
        **offline,
        "AGCTL_PROVIDER": "openai",
        "AGCTL_BASE_URL": server.base_url,
        "AGCTL_MODEL": "fake-model",
    }


def prompts(env: dict[str, str]) -> list[str]:
    listed = agctl(env, "--json", "msg", "list")
    assert listed.returncode == 0, listed.stderr
    return [m["content"] for m in json.loads(listed.stdout) if m["role"] == "user"]


def test_a_fenced_turn_exits_4_when_another_process_commits_meanwhile(
    online: dict[str, str], offline: dict[str, str], server: FakeOpenAI
) -> None:
    first = agctl(online, "--json", "turn", "send", "question", "--if-unchanged")

    assert server.errors == []  # the second process committed its turn
    assert (first.returncode, first.stdout) == (4, "")
    error = json.loads(first.stderr)["error"]
    assert (error["type"], error["exit"]) == ("SlotMoved", 4)
    assert "2 messages were appended" in error["message"]
    draft = json.loads(agctl(offline, "--json", "draft", "show").stdout)
    assert (draft["prompt"], draft["reply"]) == ("question", "echo: question")
    assert prompts(offline) == ["other turn"]


def test_without_the_fence_the_turn_commits_after_the_other_process(
    online: dict[str, str], offline: dict[str, str], server: FakeOpenAI
) -> None:
    first = agctl(online, "--json", "turn", "send", "question")

    assert server.errors == []
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout)["reply"] == "echo: question"
    assert prompts(offline) == ["other turn", "question"]
