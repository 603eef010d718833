"""Fixes from a review of the whole change: each test is a reproduction that used to fail."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from click.testing import Result

from agctl.config import Config, ConfigStore, Profile, mask_secrets, resolve
from agctl.errors import (
    AgctlError,
    InvalidInput,
    ProviderError,
    ReadonlySlot,
    UsageError,
)
from agctl.interchange import export_session, import_session
from agctl.merge import merge_slots
from agctl.models import Message
from agctl.providers.base import ChatRequest, Event, TextDelta
from agctl.providers.offline import OfflineProvider, load_script
from agctl.providers.openai import HttpSettings, OpenAIProvider
from agctl.store import Store
from agctl.turns import TurnOptions, send_turn

Run = Callable[..., Result]
OPTIONS = TurnOptions(model="offline")


def test_export_to_a_symlink_writes_its_target(run: Run, tmp_path: Path) -> None:
    assert run("session", "new", "s").exit_code == 0
    assert run("msg", "append", "user", "hi").exit_code == 0
    target = tmp_path / "dotfiles" / "chat.json"
    target.parent.mkdir()
    target.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(target)
    assert run("msg", "export", "-o", str(link)).exit_code == 0
    assert link.is_symlink()
    assert json.loads(target.read_text()) == [{"role": "user", "content": "hi"}]


def test_a_reply_that_cannot_be_written_is_shown_and_the_prompt_kept(store: Store) -> None:
    store.create_session("s")

    class LockedMeanwhile:
        name = "locked"

        def stream(self, request: ChatRequest) -> Iterator[Event]:
            store.set_mode("s", None, "readonly")  # another process, while the model answers
            yield TextDelta("a costly answer")

    with pytest.raises(ReadonlySlot) as caught:
        send_turn(store, "s", "my question", LockedMeanwhile(), OPTIONS)
    notes = "\n".join(caught.value.__notes__)
    assert "a costly answer" in notes and "--resume-draft" in notes
    assert store.load_draft("s", "default").prompt == "my question"
    assert store.load_slot("s").messages == []


def test_a_turn_on_another_slot_keeps_the_draft_one_on_its_slot_clears_it(store: Store) -> None:
    store.create_session("s")
    store.create_slot("s", "other")

    class Broken:
        name = "broken"

        def stream(self, request: ChatRequest) -> Iterator[Event]:
            raise ProviderError("down")
            yield TextDelta("")  # pragma: no cover

    with pytest.raises(ProviderError):
        send_turn(store, "s", "long careful prompt", Broken(), OPTIONS)
    elsewhere = TurnOptions(model="offline", slot="other")
    send_turn(store, "s", "quick question", OfflineProvider(), elsewhere)
    assert store.load_draft("s", "default").prompt == "long careful prompt"
    send_turn(store, "s", "a different question", OfflineProvider(), OPTIONS)
    with pytest.raises(AgctlError):
        store.load_draft("s", "default")


def test_the_openai_key_goes_only_toward_openai() -> None:
    config = Config(profiles={"box": Profile(base_url="http://gpu-box:8000/v1", model="m")})
    env = {"OPENAI_API_KEY": "sk-openai-0123456789"}
    assert resolve(config, profile="box", env=env).api_key is None
    openai = Config(profiles={"o": Profile(model="gpt-4o")})
    assert resolve(openai, profile="o", env=env).api_key == "sk-openai-0123456789"
    proxied = resolve(openai, profile="o", env={**env, "OPENAI_BASE_URL": "http://proxy/v1"})
    assert proxied.api_key == "sk-openai-0123456789"


@pytest.mark.parametrize(
    "key",
    ["auto_checkpont", "profiles.x.provder", "profiles", "max_retries.deep", "prices.m.cheap"],
)
def test_config_set_refuses_unknown_keys(tmp_path: Path, key: str) -> None:
    with pytest.raises(UsageError):
        ConfigStore(tmp_path / "config.json").set(key, "1")
    assert not (tmp_path / "config.json").exists()


def test_secrets_are_masked_wherever_they_are_shown(run: Run) -> None:
    secret = "sk-proj-SECRETSECRET0123"
    result = run("config", "set", "profiles.work", json.dumps({"api_key": secret}))
    assert result.exit_code == 0 and secret not in result.stdout
    assert (
        run(
            "profile",
            "add",
            "az",
            "--base-url",
            "http://x/v1",
            "--header",
            "api-key: AZURESECRETKEY0000111",
        ).exit_code
        == 0
    )
    for args in (("config", "show"), ("config", "show", "--json")):
        shown = run(*args).stdout
        assert secret not in shown and "AZURESECRETKEY0000111" not in shown
    assert mask_secrets({"headers": {"x": "abcdefghijklmnop"}}) == {"headers": {"x": "abc…mnop"}}


def test_a_symlinked_config_file_is_read(tmp_path: Path) -> None:
    real = tmp_path / "dotfiles" / "config.json"
    real.parent.mkdir()
    real.write_text(json.dumps({"max_retries": 9}))
    link = tmp_path / "config.json"
    link.symlink_to(real)
    assert ConfigStore(link).load().max_retries == 9


def test_an_export_without_a_default_slot_is_refused(store: Store) -> None:
    store.create_session("s")
    store.create_slot("s", "other", make_current=True)
    document = export_session(store, "s")
    document.slots = [s for s in document.slots if s.id != "default"]
    with pytest.raises(InvalidInput, match="default"):
        import_session(store, document.model_dump_json().encode(), as_id="t")
    assert "t" not in store.session_ids()


@pytest.mark.parametrize(
    "reply", [{"content": 5}, {"content": "x", "reasoning": 5}, {"tool_calls": "lookup"}]
)
def test_a_script_of_the_wrong_types_is_refused(tmp_path: Path, reply: object) -> None:
    path = tmp_path / "script.json"
    path.write_text(json.dumps([reply]))
    with pytest.raises(InvalidInput):
        load_script(path)


def test_a_header_http_cannot_carry_is_refused(run: Run) -> None:
    result = run("profile", "add", "p", "--base-url", "http://x/v1", "--header", "X-Name: Zoë")
    assert result.exit_code != 0 and "ASCII" in result.output
    assert "Traceback" not in result.output


def test_an_unsupported_url_is_not_retried() -> None:
    slept: list[float] = []
    provider = OpenAIProvider(
        HttpSettings(base_url="ftp://example.invalid/v1", max_retries=3), sleep=slept.append
    )
    with pytest.raises(ProviderError, match="cannot send"):
        list(provider.stream(ChatRequest(model="m", messages=[{"role": "user", "content": "x"}])))
    assert slept == []


def test_merge_ignores_what_the_target_dropped_since(store: Store) -> None:
    store.create_session("s")
    for text in ("q1", "q2", "q3"):
        send_turn(store, "s", text, OfflineProvider(), OPTIONS)
    store.derive_slot("s", "branch")
    send_turn(
        store, "s", "only in branch", OfflineProvider(), TurnOptions(model="x", slot="branch")
    )
    store.update_slot("s", None, lambda slot: slot.retain({"assistant"}))
    result = merge_slots(store, "s", "branch")
    assert result.merged == 2
    texts = [m.text() for m in store.load_slot("s").messages]
    assert texts.count("q1") == 0 and "only in branch" in texts


def test_messages_keep_their_shape_through_a_merge(store: Store) -> None:
    store.create_session("s")
    store.derive_slot("s", "b")
    call = Message(role="assistant", tool_calls=[{"id": "c", "function": {"name": "f"}}])
    store.update_slot("s", "b", lambda slot: slot.append(call))
    merge_slots(store, "s", "b")
    assert store.load_slot("s").messages[-1].tool_calls == call.tool_calls
