"""prompt_cache_key over real HTTP: what the fake OpenAI server on loopback receives.

A conversation's requests carry one key, stable across turns; a fork (`ckpt fork`) and a
derived slot (`slot derive`) send their parent's; the profile turns it on or off, and by
default only OpenAI itself gets it (another server may refuse a field it does not know).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from click.testing import Result
from fake_openai import FakeOpenAI

from agctl.config.file import Config, Profile, resolve

Run = Callable[..., Result]
MODEL = "fake-model"


def ok(result: Result) -> Result:
    assert result.exit_code == 0, result.output
    return result


def keys(server: FakeOpenAI) -> list[Any]:
    """The prompt_cache_key of each chat request received (None when absent), checked to
    be the last field of the raw body, after the messages."""
    found = []
    for request in server.requests:
        if not request.path.endswith("/chat/completions"):
            continue
        key = request.body.get("prompt_cache_key")
        if key is not None:
            assert request.raw.endswith(b',"prompt_cache_key":' + json.dumps(key).encode() + b"}")
        found.append(key)
    return found


@pytest.fixture
def session(run: Run, server: FakeOpenAI, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("AGCTL_API_KEY", "sk-test")
    ok(run("session", "new", "talk", "--system", "You are terse."))
    return "talk"


def test_a_conversation_its_forks_and_derived_slots_share_one_key(
    run: Run, server: FakeOpenAI, session: str
) -> None:
    add = ("profile", "add", "work", "--base-url", server.base_url, "--model", MODEL)
    ok(run(*add, "--prompt-cache-key", "--default"))
    ok(run("turn", "send", "one"))
    ok(run("turn", "send", "two"))
    ckpt = json.loads(ok(run("ckpt", "list", "--json")).stdout)
    first = next(c["id"] for c in ckpt if c["label"] == "after turn 1")
    ok(run("ckpt", "fork", first, "--id", "what-if"))
    ok(run("turn", "send", "three", "-s", "what-if"))
    ok(run("slot", "derive", "branch"))
    ok(run("turn", "send", "four", "--slot", "branch"))
    ok(run("slot", "new", "fresh"))
    ok(run("turn", "send", "five", "--slot", "fresh"))
    dry = json.loads(ok(run("turn", "send", "six", "--dry-run", "--slot", "branch")).stdout)
    sent = keys(server)
    assert dry["request"]["prompt_cache_key"] == sent[0]
    assert len(sent) == 5 and all(isinstance(key, str) for key in sent)
    assert sent[0] == sent[1] == sent[2] == sent[3] != sent[4]
    # The fork's first request repeats the parent's first request's messages.
    bodies = [r.body for r in server.requests if r.path.endswith("/chat/completions")]
    assert bodies[2]["messages"][:-1] == bodies[1]["messages"][:-1]


def test_the_profile_turns_the_key_off_and_other_servers_do_not_get_it_by_default(
    run: Run, server: FakeOpenAI, session: str
) -> None:
    add = ("profile", "add", "work", "--base-url", server.base_url, "--model", MODEL)
    ok(run(*add, "--default"))
    ok(run("turn", "send", "one"))
    ok(run(*add, "--no-prompt-cache-key", "--replace"))
    ok(run("turn", "send", "two"))
    ok(run("config", "set", "profiles.work.prompt_cache_key", "true"))
    ok(run("turn", "send", "three"))
    sent = keys(server)
    assert sent[:2] == [None, None] and isinstance(sent[2], str)


def test_only_openai_itself_gets_the_key_unless_the_profile_says() -> None:
    env = {"OPENAI_API_KEY": "sk-test", "DEEPSEEK_API_KEY": "sk-test"}
    config = Config(profiles={"off": Profile(preset="openai", prompt_cache_key=False)})
    assert resolve(config, profile="openai", env=env).prompt_cache_key is True
    assert resolve(config, provider="openai", model="m", env=env).prompt_cache_key is True
    assert resolve(config, profile="deepseek", env=env).prompt_cache_key is False
    assert resolve(config, profile="off", env=env).prompt_cache_key is False
