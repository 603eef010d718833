"""Turns over real HTTP: agctl's httpx client against the fake OpenAI server on loopback.

What the server receives, how replies are committed, what a fault leaves behind (nothing
but a draft), cassettes, secrets, cost, and a real Ctrl-C in a child process.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from click.testing import Result
from fake_openai import FakeOpenAI
from helpers import data_dir_files, draft_file

from agctl.base.errors import ProviderError
from agctl.config.file import Resolved, mask
from agctl.context.models import Message, ToolCall, ToolCallFunction
from agctl.providers import build_provider
from agctl.providers.base import ChatRequest, TextDelta, Usage
from agctl.providers.http import HttpProvider
from agctl.providers.openai import HttpSettings, OpenAIProvider
from agctl.store import Store
from agctl.turn.send import TurnOptions, prepare_turn, send_turn

Run = Callable[..., Result]

KEY = "sk-agctl-test-Zq7Xw3Kp9Lm2Vb8N"
SYSTEM = "You are terse."
MODEL = "fake-model"
# The counts `turn send --json` shows as null when the server gave no details of them.
UNREPORTED = {
    "cached_tokens": None,
    "cache_write_tokens": None,
    "reasoning_tokens": None,
    "cache_write_1h_tokens": None,
}
CHAT_PATH = "/v1/chat/completions"


@pytest.fixture
def wired(server: FakeOpenAI, monkeypatch: pytest.MonkeyPatch) -> FakeOpenAI:
    """The server, with agctl pointed at it through the environment."""
    monkeypatch.setenv("AGCTL_PROVIDER", "openai")
    monkeypatch.setenv("AGCTL_BASE_URL", server.base_url)
    monkeypatch.setenv("AGCTL_MODEL", MODEL)
    monkeypatch.setenv("AGCTL_API_KEY", KEY)
    return server


@pytest.fixture
def sid(store: Store) -> str:
    store.create_session("s1", system_prompt=SYSTEM)
    store.set_current_session("s1")
    return "s1"


def add(store: Store, sid: str, *messages: Message) -> None:
    store.update_slot(sid, None, lambda slot: slot.messages.extend(messages))


def msg(role: str, content: str) -> Message:
    return Message.model_validate({"role": role, "content": content})


def chats(server: FakeOpenAI) -> list[dict[str, Any]]:
    """The bodies of the chat-completion requests the server received."""
    return [r.body for r in server.requests if r.path == CHAT_PATH]


def conversation(store: Store, sid: str, slot: str | None = None) -> list[dict[str, Any]]:
    """The slot's messages without timestamps: what a replay must reproduce exactly."""
    keep = ("role", "content", "tool_calls", "reasoning", "usage", "model")
    return [
        {k: v for k, v in m.model_dump(mode="json").items() if k in keep}
        for m in store.load_slot(sid, slot).messages
    ]


def configure(run: Run, **settings: str) -> None:
    for key, value in settings.items():
        result = run("config", "set", key, value)
        assert result.exit_code == 0, result.output


def send(run: Run, *args: str) -> Result:
    return run("turn", "send", *args)


def json_out(result: Result) -> Any:
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


# ---- what the server receives ------------------------------------------------------------


def test_full_view_is_system_prompt_then_slot_messages_then_prompt(
    run: Run, store: Store, sid: str, wired: FakeOpenAI
) -> None:
    call = ToolCall(id="call_a", function=ToolCallFunction(name="ls", arguments='{"d": "."}'))
    add(
        store,
        sid,
        msg("user", "List files."),
        Message(role="assistant", tool_calls=[call]),
        Message(role="tool", content="a.txt b.txt", tool_call_id="call_a"),
        msg("assistant", "Two files."),
    )
    assert send(run, "Which is bigger?").exit_code == 0

    (body,) = chats(wired)
    assert body["messages"] == [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "List files."},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_a",
                    "type": "function",
                    "function": {"name": "ls", "arguments": '{"d": "."}'},
                }
            ],
        },
        {"role": "tool", "content": "a.txt b.txt", "tool_call_id": "call_a"},
        {"role": "assistant", "content": "Two files."},
        {"role": "user", "content": "Which is bigger?"},
    ]
    assert [m["content"] for m in conversation(store, sid)][-2:] == [
        "Which is bigger?",
        "echo: Which is bigger?",
    ]


def test_focused_slot_sends_its_focused_view_and_stores_everything(
    run: Run, store: Store, sid: str, wired: FakeOpenAI
) -> None:
    old = [msg("user", "u1"), msg("assistant", "a1"), msg("user", "u2"), msg("assistant", "a2")]
    add(store, sid, *old)
    store.set_mode(
        sid, None, "focused", focus={"recent_messages": 2, "stride": 1, "summary_override": "S"}
    )

    assert send(run, "u3").exit_code == 0

    (body,) = chats(wired)
    assert body["messages"] == [
        {"role": "system", "content": SYSTEM},
        {"role": "system", "content": "S"},
        {"role": "user", "content": "u2"},
        {"role": "assistant", "content": "a2"},
        {"role": "user", "content": "u3"},
    ]
    assert [m["content"] for m in conversation(store, sid)] == [
        "u1",
        "a1",
        "u2",
        "a2",
        "u3",
        "echo: u3",
    ]


def test_scratch_is_sent_after_the_view_and_never_stored(
    run: Run, store: Store, sid: str, wired: FakeOpenAI
) -> None:
    add(store, sid, msg("user", "u1"), msg("assistant", "a1"))
    result = send(run, "u2", "--scratch", "note one", "--scratch", "note two")
    assert result.exit_code == 0, result.output

    (body,) = chats(wired)
    assert body["messages"] == [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "u1"},
        {"role": "assistant", "content": "a1"},
        {"role": "system", "content": "note one"},
        {"role": "system", "content": "note two"},
        {"role": "user", "content": "u2"},
    ]
    assert [m["content"] for m in conversation(store, sid)] == ["u1", "a1", "u2", "echo: u2"]
    assert send(run, "u3").exit_code == 0
    assert "note one" not in json.dumps(chats(wired)[1])


def test_system_flag_replaces_the_system_prompt_for_that_turn_only(
    run: Run, store: Store, sid: str, wired: FakeOpenAI
) -> None:
    assert send(run, "p1", "--system", "Be verbose.").exit_code == 0
    assert send(run, "p2").exit_code == 0

    first, second = chats(wired)
    assert first["messages"] == [
        {"role": "system", "content": "Be verbose."},
        {"role": "user", "content": "p1"},
    ]
    assert second["messages"][0] == {"role": "system", "content": SYSTEM}
    assert [m["role"] for m in second["messages"]] == ["system", "user", "assistant", "user"]
    assert store.load_session(sid).system_prompt == SYSTEM


def test_model_temperature_and_max_tokens_are_in_the_body(
    run: Run, store: Store, sid: str, wired: FakeOpenAI
) -> None:
    result = send(
        run, "hi", "--model", "gpt-x", "--temperature", "0.3", "--max-tokens", "50", "--no-stream"
    )
    assert result.exit_code == 0, result.output

    (body,) = chats(wired)
    assert body == {
        "model": "gpt-x",
        "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "hi"}],
        "temperature": 0.3,
        "max_tokens": 50,
    }
    assert conversation(store, sid)[-1]["model"] == "gpt-x"


def test_streaming_asks_for_usage_and_event_stream(run: Run, sid: str, wired: FakeOpenAI) -> None:
    assert send(run, "hi", "--stream").exit_code == 0
    assert send(run, "again", "--no-stream").exit_code == 0

    streamed, plain = wired.requests
    assert streamed.body["stream"] is True
    assert streamed.body["stream_options"] == {"include_usage": True}
    assert streamed.headers["accept"] == "text/event-stream"
    assert {"stream", "stream_options", "temperature", "max_tokens"}.isdisjoint(plain.body)
    assert set(plain.body) == {"model", "messages"}


def test_the_authorization_header_carries_the_key(run: Run, sid: str, wired: FakeOpenAI) -> None:
    assert send(run, "hi").exit_code == 0
    (request,) = wired.requests
    assert (request.method, request.path) == ("POST", CHAT_PATH)
    assert request.headers["authorization"] == f"Bearer {KEY}"
    assert request.headers["user-agent"].startswith("agctl/")


# ---- replies: streamed and whole, committed the same -------------------------------------

REASONING = "Let me think it over."
TEXT = "The answer is 42."
TOOL_CALLS: list[dict[str, Any]] = [
    {"id": "call_1", "name": "lookup", "arguments": {"q": "meaning of life"}},
    {"id": "call_2", "name": "add", "arguments": '{"a": 40, "b": 2}'},
]
STORED_CALLS: list[dict[str, Any]] = [
    {
        "id": "call_1",
        "type": "function",
        "function": {"name": "lookup", "arguments": '{"q": "meaning of life"}'},
    },
    {
        "id": "call_2",
        "type": "function",
        "function": {"name": "add", "arguments": '{"a": 40, "b": 2}'},
    },
]


@pytest.mark.parametrize("stream", ["--stream", "--no-stream"])
def test_reply_is_committed_the_same_streamed_or_not(
    run: Run, store: Store, sid: str, wired: FakeOpenAI, stream: str
) -> None:
    wired.reply(
        text=TEXT,
        reasoning=REASONING,
        tool_calls=TOOL_CALLS,
        usage={"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18},
    )
    data = json_out(send(run, "Why?", stream, "--json"))

    assert data["reply"] == TEXT
    assert data["reasoning"] == REASONING
    assert data["tool_calls"] == STORED_CALLS
    assert data["finish_reason"] == "tool_calls"
    assert data["usage"] == {"prompt_tokens": 11, "completion_tokens": 7, **UNREPORTED}
    assert (data["session"], data["slot"], data["turn"], data["model"]) == (
        sid,
        "default",
        1,
        MODEL,
    )
    assert conversation(store, sid) == [
        {"role": "user", "content": "Why?"},
        {
            "role": "assistant",
            "content": TEXT,
            "tool_calls": STORED_CALLS,
            "reasoning": REASONING,
            "model": MODEL,
            "usage": {"prompt_tokens": 11, "completion_tokens": 7},
        },
    ]
    # The completion count of a reply with reasoning includes the reasoning, which is never
    # sent back, so the stored count is left to the estimate of the content.
    assert store.load_slot(sid).messages[-1].tokens is None
    assert store.load_session(sid).turn_count == 1


@pytest.mark.parametrize("stream", ["--stream", "--no-stream"])
def test_finish_reason_and_text_only_reply(
    run: Run, store: Store, sid: str, wired: FakeOpenAI, stream: str
) -> None:
    wired.reply(text="Cut short", finish_reason="length")
    data = json_out(send(run, "Tell me everything.", stream, "--json"))
    assert (data["reply"], data["finish_reason"], data["tool_calls"]) == ("Cut short", "length", [])
    assert data["reasoning"] is None
    assert conversation(store, sid)[-1]["content"] == "Cut short"
    assert "reasoning" not in conversation(store, sid)[-1]


@pytest.mark.parametrize("stream", ["--stream", "--no-stream"])
def test_human_output_prints_the_reply_and_the_calls(
    run: Run, sid: str, wired: FakeOpenAI, stream: str
) -> None:
    wired.reply(text=TEXT, reasoning=REASONING, tool_calls=TOOL_CALLS[1:])
    result = send(run, "Why?", stream)
    assert result.exit_code == 0, result.output
    assert result.stdout == f'{TEXT}\n→ add({{"a": 40, "b": 2}})  [call_2]\n'
    assert (REASONING in result.stderr) == (stream == "--stream")


def test_jsonl_prints_every_event_then_the_result(
    run: Run, store: Store, sid: str, wired: FakeOpenAI
) -> None:
    wired.reply(
        text=TEXT,
        reasoning=REASONING,
        tool_calls=TOOL_CALLS,
        usage={"prompt_tokens": 11, "completion_tokens": 7},
    )
    result = send(run, "Why?", "--jsonl")
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in result.stdout.splitlines()]

    *events, last = lines
    assert chats(wired)[0]["stream"] is True
    assert last["type"] == "result"
    assert (last["reply"], last["reasoning"], last["finish_reason"]) == (
        TEXT,
        REASONING,
        "tool_calls",
    )
    assert last["tool_calls"] == STORED_CALLS
    kinds = [e["type"] for e in events]
    assert set(kinds) == {"reasoning", "text", "tool_call", "finish", "usage"}
    assert kinds.count("text") > 1, "the text arrived in pieces"
    assert max(i for i, k in enumerate(kinds) if k == "reasoning") < kinds.index("text")
    assert "".join(e["text"] for e in events if e["type"] == "text") == TEXT
    assert "".join(e["text"] for e in events if e["type"] == "reasoning") == REASONING
    for index, call in enumerate(STORED_CALLS):
        pieces = [e for e in events if e["type"] == "tool_call" and e["index"] == index]
        assert len(pieces) > 1, "the call arrived in fragments"
        assert pieces[0]["id"] == call["id"]
        assert pieces[0]["name"] == call["function"]["name"]
        assert "".join(p["arguments"] for p in pieces) == call["function"]["arguments"]
    assert [e for e in events if e["type"] == "finish"] == [
        {"type": "finish", "reason": "tool_calls"}
    ]
    assert [e for e in events if e["type"] == "usage"] == [
        {"type": "usage", "prompt_tokens": 11, "completion_tokens": 7}
    ]
    assert conversation(store, sid)[-1]["tool_calls"] == STORED_CALLS


# ---- faults: nothing written, a draft kept -----------------------------------------------


@dataclass(frozen=True)
class Fault:
    inject: Callable[[FakeOpenAI], None]
    stream: bool
    expect: tuple[str, ...]
    requests: int = 1
    config: dict[str, str] = field(default_factory=dict)


def _times(n: int, **kwargs: Any) -> Callable[[FakeOpenAI], None]:
    def inject(server: FakeOpenAI) -> None:
        for _ in range(n):
            server.fail(**kwargs)

    return inject


FAST_FAIL = {"max_retries": "0"}
TIMEOUT = {"max_retries": "0", "read_timeout": "0.3"}
FAULTS = {
    "retries-exhausted": Fault(
        _times(3, kind="status", status=503, message="engine overloaded", retry_after=0.05),
        stream=False,
        expect=("503", "engine overloaded"),
        requests=3,
        config={"max_retries": "2"},
    ),
    "retries-exhausted-stream": Fault(
        _times(3, kind="status", status=503, message="engine overloaded", retry_after=0.05),
        stream=True,
        expect=("503", "engine overloaded"),
        requests=3,
        config={"max_retries": "2"},
    ),
    "401-not-retried": Fault(
        _times(1, kind="status", status=401, message="Invalid authentication for project x"),
        stream=False,
        expect=("401", "Invalid authentication for project x"),
    ),
    "401-not-retried-stream": Fault(
        _times(1, kind="status", status=401, message="Invalid authentication for project x"),
        stream=True,
        expect=("401", "Invalid authentication for project x"),
    ),
    "malformed-sse": Fault(
        _times(1, kind="malformed_sse"), stream=True, expect=("malformed", "{not json")
    ),
    "sse-to-a-plain-request": Fault(
        _times(1, kind="malformed_sse"), stream=False, expect=("malformed response",)
    ),
    "slow": Fault(
        _times(1, kind="slow", seconds=1.5), stream=False, expect=("timed out",), config=TIMEOUT
    ),
    "slow-stream": Fault(
        _times(1, kind="slow", seconds=1.5), stream=True, expect=("timed out",), config=TIMEOUT
    ),
    # Text was already shown: a retry would repeat it, so none is made (default retries on).
    "drop-mid-stream": Fault(
        _times(1, kind="drop_mid_stream"), stream=True, expect=("mid-stream",)
    ),
    "drop-mid-body": Fault(
        _times(1, kind="drop_mid_stream"), stream=False, expect=("failed",), config=FAST_FAIL
    ),
    "garbage": Fault(
        _times(1, kind="garbage"), stream=False, expect=("malformed response", "502 Bad Gateway")
    ),
    "garbage-stream": Fault(_times(1, kind="garbage"), stream=True, expect=(CHAT_PATH,)),
}


@pytest.mark.parametrize("name", list(FAULTS))
def test_a_fault_writes_nothing_and_keeps_a_draft_to_resume(
    run: Run, store: Store, sid: str, wired: FakeOpenAI, isolated_env: Path, name: str
) -> None:
    fault = FAULTS[name]
    configure(run, **fault.config)
    add(store, sid, msg("user", "u1"), msg("assistant", "a1"))
    before = data_dir_files(isolated_env, sid)
    fault.inject(wired)

    stream = "--stream" if fault.stream else "--no-stream"
    result = send(run, "What now?", stream)

    assert result.exit_code == 6, result.output
    error = result.stderr
    assert error.startswith("agctl: error: "), error
    for fragment in fault.expect:
        assert fragment in error
    assert "--resume-draft" in error
    assert len(chats(wired)) == fault.requests
    after = data_dir_files(isolated_env, sid)
    after.pop(draft_file(sid))
    assert after == before
    draft = store.load_draft(sid, "default")
    assert (draft.prompt, draft.slot) == ("What now?", "default")
    assert draft.error is not None and fault.expect[0] in draft.error

    wired.reply(text="Recovered.")
    resumed = send(run, "--resume-draft", stream)
    assert resumed.exit_code == 0, resumed.output
    assert chats(wired)[-1]["messages"][-1] == {"role": "user", "content": "What now?"}
    assert [m["content"] for m in conversation(store, sid)] == [
        "u1",
        "a1",
        "What now?",
        "Recovered.",
    ]
    assert store.load_session(sid).turn_count == 1
    assert store.draft_slots(sid) == []


@pytest.mark.parametrize("stream", ["--stream", "--no-stream"])
def test_429_with_retry_after_is_waited_out_then_succeeds(
    run: Run, store: Store, sid: str, wired: FakeOpenAI, stream: str
) -> None:
    wired.fail("status", status=429, message="slow down", retry_after=0.2)
    wired.reply(text="After the wait.")

    started = time.perf_counter()
    result = send(run, "Hi", stream)
    elapsed = time.perf_counter() - started

    assert result.exit_code == 0, result.output
    assert result.stdout == "After the wait.\n"
    assert elapsed >= 0.2, "Retry-After was not honoured"
    first, second = chats(wired)
    assert first == second
    assert conversation(store, sid)[-1]["content"] == "After the wait."
    assert store.draft_slots(sid) == []


def test_500_is_retried_with_backoff_then_succeeds(
    run: Run, store: Store, sid: str, wired: FakeOpenAI
) -> None:
    wired.fail("status", status=500, message="transient")
    wired.reply(text="Second time lucky.")

    result = send(run, "Hi")

    assert result.exit_code == 0, result.output
    assert len(chats(wired)) == 2
    assert [m["content"] for m in conversation(store, sid)] == ["Hi", "Second time lucky."]
    assert store.load_session(sid).turn_count == 1


# ---- the provider on its own: retry policy -----------------------------------------------


def _request(stream: bool = False) -> ChatRequest:
    return ChatRequest(model=MODEL, messages=[{"role": "user", "content": "hi"}], stream=stream)


def _provider(server: FakeOpenAI, sleeps: list[float], **settings: Any) -> OpenAIProvider:
    http = HttpSettings(base_url=server.base_url, api_key=KEY, backoff_base=0.01, **settings)
    return OpenAIProvider(http, sleep=sleeps.append)


def test_backoff_without_retry_after_doubles_up_to_its_cap(server: FakeOpenAI) -> None:
    for _ in range(3):
        server.fail("status", status=502)
    sleeps: list[float] = []
    provider = _provider(server, sleeps, max_retries=3, backoff_max=0.015)

    events = list(provider.stream(_request()))

    assert TextDelta("echo: hi") in events
    assert len(server.requests) == 4
    ceilings = [0.01, 0.015, 0.015]
    assert len(sleeps) == 3
    for delay, ceiling in zip(sleeps, ceilings, strict=True):
        assert ceiling / 2 <= delay <= ceiling


def test_retry_after_sets_the_delay(server: FakeOpenAI) -> None:
    server.fail("status", status=429, retry_after=0.25)
    sleeps: list[float] = []
    list(_provider(server, sleeps, max_retries=1).stream(_request(stream=True)))
    assert sleeps == [0.25]
    assert len(server.requests) == 2


def test_retry_after_beyond_the_cap_fails_at_once(server: FakeOpenAI) -> None:
    server.fail("status", status=429, message="quota", retry_after=600)
    sleeps: list[float] = []
    with pytest.raises(ProviderError) as caught:
        list(_provider(server, sleeps, max_retries=5).stream(_request()))
    assert (caught.value.status, caught.value.retryable) == (429, True)
    assert "quota" in str(caught.value)
    assert sleeps == []
    assert len(server.requests) == 1


def test_a_client_error_is_not_retried(server: FakeOpenAI) -> None:
    server.fail("status", status=400, message="bad 'temperature'")
    sleeps: list[float] = []
    with pytest.raises(ProviderError) as caught:
        list(_provider(server, sleeps, max_retries=3).stream(_request()))
    assert (caught.value.status, caught.value.retryable) == (400, False)
    assert str(caught.value).startswith(f"400 Bad Request from {server.base_url}{CHAT_PATH[3:]}")
    assert sleeps == []


def test_library_send_turn_through_resolved_settings(
    store: Store, sid: str, server: FakeOpenAI
) -> None:
    settings = Resolved(
        provider="openai", model="m1", base_url=server.base_url, api_key=KEY, max_retries=0
    )
    provider = build_provider(settings)
    assert isinstance(provider, HttpProvider) and provider.wire.name == "openai"
    assert (provider.settings.max_retries, provider.settings.api_key) == (0, KEY)
    server.reply(text="Hello from the library.", usage={"prompt_tokens": 3, "completion_tokens": 4})

    seen: list[Any] = []
    result = send_turn(store, sid, "Hi", provider, TurnOptions(model="m1"), on_event=seen.append)

    assert result.reply.content == "Hello from the library."
    assert result.usage == Usage(3, 4)
    assert result.cost is None, "m1 has no price"
    assert TextDelta("Hello from the library.") in seen
    assert server.requests[0].body["model"] == "m1"
    assert conversation(store, sid)[-1]["content"] == "Hello from the library."
    provider.close()


# ---- readonly ----------------------------------------------------------------------------


@pytest.mark.parametrize("stream", ["--stream", "--no-stream"])
def test_a_readonly_slot_refuses_before_any_request(
    run: Run, store: Store, sid: str, wired: FakeOpenAI, isolated_env: Path, stream: str
) -> None:
    add(store, sid, msg("user", "u1"), msg("assistant", "a1"))
    store.set_mode(sid, None, "readonly")
    before = data_dir_files(isolated_env, sid)

    result = send(run, "Hello?", stream)

    assert result.exit_code == 4
    assert "readonly" in result.stderr
    assert wired.requests == []
    assert data_dir_files(isolated_env, sid) == before


# ---- cassettes ---------------------------------------------------------------------------

PROMPTS = ["Capital of France?", "Weather there?", "Thanks; summarise."]


def test_a_recorded_conversation_replays_offline_in_a_new_session(
    run: Run, store: Store, wired: FakeOpenAI, tmp_path: Path, isolated_env: Path
) -> None:
    cassette = tmp_path / "chat.cassette"
    store.create_session("rec", system_prompt=SYSTEM)
    store.set_current_session("rec")
    wired.fail("status", status=429, retry_after=0.05)
    wired.reply(text="Paris.", reasoning="The capital of France is Paris.")
    wired.reply(
        text=None, tool_calls=[{"id": "call_w", "name": "weather", "arguments": {"city": "Paris"}}]
    )
    wired.reply(text="Paris; sunny.", usage={"prompt_tokens": 40, "completion_tokens": 3})
    for prompt, stream in zip(PROMPTS, ["--no-stream", "--stream", "--no-stream"], strict=True):
        result = send(run, prompt, stream, "--record", str(cassette))
        assert result.exit_code == 0, result.output
    recorded = conversation(store, "rec")
    assert [m["role"] for m in recorded] == ["user", "assistant"] * 3
    assert recorded[1]["reasoning"] == "The capital of France is Paris."
    assert recorded[3]["tool_calls"][0]["function"]["name"] == "weather"
    assert len(chats(wired)) == 4
    wired.stop()

    raw = cassette.read_bytes()
    entries = [json.loads(line) for line in raw.splitlines()]
    assert len(entries) == 3, "a retried request is recorded once"
    assert KEY.encode() not in raw
    assert b"Bearer" not in raw

    store.create_session("rep", system_prompt=SYSTEM)
    store.set_current_session("rep")
    for prompt in PROMPTS[:2]:
        result = send(run, prompt, "--cassette", str(cassette))
        assert result.exit_code == 0, result.output

    before = data_dir_files(isolated_env, "rep")
    changed = "Thanks; summarise briefly."
    wanted = prepare_turn(store, "rep", changed, TurnOptions(model=MODEL)).request.fingerprint()
    miss = send(run, changed, "--cassette", str(cassette))
    assert miss.exit_code == 6
    assert f"no recorded response for request {wanted[:12]}" in miss.stderr
    assert re.search(r"request [0-9a-f]{12}\b", miss.stderr)
    closest = entries[2]["hash"][:12]
    assert f"closest recorded request {closest} shares 5 of 6 messages" in miss.stderr
    assert f"now      [5] user: {changed}" in miss.stderr
    assert f"recorded [5] user: {PROMPTS[2]}" in miss.stderr
    after = data_dir_files(isolated_env, "rep")
    after.pop(draft_file("rep"), None)
    assert after == before
    assert cassette.read_bytes() == raw

    result = send(run, PROMPTS[2], "--cassette", str(cassette), "--json")
    assert json_out(result)["usage"] == {"prompt_tokens": 40, "completion_tokens": 3, **UNREPORTED}
    replayed = conversation(store, "rep")
    for message in replayed[1::2]:  # the same replies, each marked as costing nothing
        assert message["usage"].pop("free") is True
    assert replayed == recorded
    billed, free = store.load_session("rec").cost, store.load_session("rep").cost
    assert free.model_dump(exclude={"cost", "by_model"}) == billed.model_dump(
        exclude={"cost", "by_model"}
    )
    assert (billed.cost, free.cost) == (None, 0.0)  # fake-model has no price; replays cost 0
    assert free.by_model[MODEL].free_requests == free.by_model[MODEL].requests == 3


def test_a_failed_turn_records_nothing(
    run: Run, sid: str, wired: FakeOpenAI, tmp_path: Path
) -> None:
    cassette = tmp_path / "fail.cassette"
    wired.fail("status", status=401, message="nope")
    wired.fail("drop_mid_stream")
    assert send(run, "one", "--record", str(cassette)).exit_code == 6
    assert send(run, "two", "--stream", "--record", str(cassette)).exit_code == 6
    assert not cassette.exists() or cassette.read_bytes() == b""


# ---- secrets -----------------------------------------------------------------------------


def masked(secret: str) -> str:
    shown = mask(secret)
    assert shown is not None and secret not in shown
    return shown


def assert_nowhere(secret: str, root: Path, outputs: list[Result]) -> None:
    """The secret is in no file under `root` and in no output of `outputs`."""
    needle = secret.encode()
    files = [p for p in root.rglob("*") if p.is_file()]
    assert files, "nothing was written at all"
    for path in files:
        assert needle not in path.read_bytes(), f"{path} holds the key"
    for result in outputs:
        assert needle not in result.stdout_bytes, result.stdout
        assert needle not in result.stderr_bytes, result.stderr


def test_the_key_never_reaches_disk_or_output(
    run: Run, store: Store, sid: str, wired: FakeOpenAI, tmp_path: Path
) -> None:
    outputs: list[Result] = []

    def step(*args: str, code: int = 0) -> Result:
        result = run(*args)
        assert result.exit_code == code, result.output
        outputs.append(result)
        return result

    cassette = str(tmp_path / "secret.cassette")
    step("config", "set", "max_retries", "2")
    step("-v", "turn", "send", "plain", "--record", cassette)
    step("turn", "send", "streamed", "--stream", "--json", "--record", cassette)
    wired.fail("status", status=429, message=f"rate limited for key {KEY}", retry_after=0.05)
    step("-v", "turn", "send", "after a 429", "--jsonl")
    wired.fail("status", status=401, message=f"Incorrect API key provided: {KEY}")
    echoed = step("-v", "turn", "send", "refused", "--record", cassette, code=6)
    assert "Incorrect API key provided" in echoed.stderr
    assert KEY not in store.load_draft(sid, "default").model_dump_json()
    for _ in range(3):
        wired.fail("status", status=503, message=f"overloaded ({KEY})", retry_after=0.05)
    exhausted = step("-v", "turn", "send", "--resume-draft", "--stream", code=6)
    assert "overloaded" in exhausted.stderr
    step("turn", "send", "--resume-draft")
    step("turn", "send", "dry", "--dry-run")
    shown = step("config", "show")
    assert masked(KEY) in shown.stdout
    step("config", "show", "--json")
    step("session", "show", "--json")
    step("slot", "show", "--json")

    assert len(chats(wired)) == 9
    assert all(r.headers["authorization"] == f"Bearer {KEY}" for r in wired.requests)
    assert_nowhere(KEY, tmp_path, outputs)


def test_a_profile_key_is_masked_in_config_show_and_the_file_is_private(
    run: Run, store: Store, sid: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    profile_key = "sk-profile-Hd82KsPq0Wn4Yt6R"
    with FakeOpenAI(api_key=profile_key) as guarded:
        added = run(
            "profile", "add", "work", "--base-url", guarded.base_url, "--model", MODEL,
            "--api-key", profile_key, "--default",
        )  # fmt: skip
        assert added.exit_code == 0, added.output
        outputs = [added]
        for args in (("config", "show"), ("config", "show", "--json"), ("profile", "list")):
            result = run(*args)
            assert result.exit_code == 0, result.output
            outputs.append(result)
        shown = json.loads(outputs[2].stdout)
        assert shown["config"]["profiles"]["work"]["api_key"] == masked(profile_key)
        assert shown["resolved"]["api_key"] == masked(profile_key)
        assert shown["resolved"]["sources"]["api_key"] == "profile"
        assert masked(profile_key) in outputs[1].stdout

        config_file = tmp_path / "xdg-config" / "agctl" / "config.json"
        assert config_file.stat().st_mode & 0o777 == 0o600
        assert profile_key.encode() in config_file.read_bytes()

        sent = send(run, "Hi")
        assert sent.exit_code == 0, sent.output
        assert sent.stdout == "echo: Hi\n", "the guarded server accepted the profile's key"
        assert guarded.requests[0].headers["authorization"] == f"Bearer {profile_key}"
        outputs.append(sent)
    assert guarded.errors == []
    assert_nowhere(profile_key, tmp_path / "data", outputs)


def test_a_key_with_a_trailing_newline_is_not_leaked(
    run: Run, sid: str, wired: FakeOpenAI, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("AGCTL_API_KEY", KEY + "\n")
    configure(run, max_retries="0")
    result = send(run, "Hi")
    assert_nowhere(KEY, tmp_path, [result])


def test_a_non_ascii_key_is_a_clean_error(
    run: Run, sid: str, wired: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGCTL_API_KEY", "sk-\u2018pasted\u2019-key-0123456789")
    result = send(run, "Hi")
    assert result.exit_code in (2, 6)
    assert result.stderr.startswith("agctl: error: ")
    assert "pasted" not in result.stderr


# ---- cost and usage ----------------------------------------------------------------------


def test_cost_and_usage_add_up_over_turns_and_models(
    run: Run, store: Store, sid: str, wired: FakeOpenAI
) -> None:
    configure(run, **{"prices.my-model": '{"prompt": 1.0, "completion": 2.0}', "max_retries": "0"})
    turns = [
        ("gpt-4o", 1000, 500, "--no-stream", (1000 * 2.5 + 500 * 10.0) / 1e6),
        ("gpt-4o-mini", 2000, 1000, "--stream", (2000 * 0.15 + 1000 * 0.6) / 1e6),
        ("gpt-4o", 3000, 200, "--stream", (3000 * 2.5 + 200 * 10.0) / 1e6),
        ("my-model", 1000, 500, "--no-stream", (1000 * 1.0 + 500 * 2.0) / 1e6),
        ("mystery-model", 700, 70, "--no-stream", None),
    ]
    for number, (model, prompt, completion, stream, cost) in enumerate(turns, start=1):
        wired.reply(
            text=f"reply {number}", usage={"prompt_tokens": prompt, "completion_tokens": completion}
        )
        data = json_out(send(run, f"turn {number}", "--model", model, stream, "--json"))
        assert data["turn"] == number
        assert data["usage"] == {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            **UNREPORTED,
        }
        assert data["cost"] == (None if cost is None else pytest.approx(cost))
    wired.fail("status", status=500, message="not counted")
    assert send(run, "failed turn", "--model", "gpt-4o").exit_code == 6

    session = store.load_session(sid)
    assert session.turn_count == 5
    assert session.cost.prompt_tokens == 7700
    assert session.cost.completion_tokens == 2270
    # The unpriced model makes the total unknown; the priced models' costs stay known.
    assert session.cost.cost is None
    by_model = {
        name: (c.requests, c.prompt_tokens, c.completion_tokens, c.cost)
        for name, c in session.cost.by_model.items()
    }
    assert by_model == {
        "gpt-4o": (2, 4000, 700, pytest.approx(0.017)),
        "gpt-4o-mini": (1, 2000, 1000, pytest.approx(0.0009)),
        "my-model": (1, 1000, 500, pytest.approx(0.002)),
        "mystery-model": (1, 700, 70, None),
    }
    usages = [m["usage"] for m in conversation(store, sid) if m["role"] == "assistant"]
    assert usages == [{"prompt_tokens": p, "completion_tokens": c} for _, p, c, _, _ in turns]


# ---- a real Ctrl-C -----------------------------------------------------------------------


def test_ctrl_c_mid_request_exits_130_and_writes_nothing(
    store: Store, sid: str, wired: FakeOpenAI, isolated_env: Path
) -> None:
    add(store, sid, msg("user", "u1"), msg("assistant", "a1"))
    wired.fail("slow", seconds=10)
    before = data_dir_files(isolated_env, sid)

    child = subprocess.Popen(
        [sys.executable, "-m", "agctl", "turn", "send", "Are you there?", "--stream"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONIOENCODING": "utf-8"},
    )
    try:
        deadline = time.monotonic() + 20
        while not wired.requests:
            assert child.poll() is None, child.communicate()
            assert time.monotonic() < deadline, "the request never arrived"
            time.sleep(0.01)
        child.send_signal(signal.SIGINT)
        stdout, stderr = child.communicate(timeout=10)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()

    assert child.returncode == 130, stderr
    assert stderr.count(b"nothing was written") == 1, stderr  # said once
    assert stderr.startswith(b"agctl: error: interrupted\n"), stderr
    assert b"Traceback" not in stderr
    assert stdout == b""
    after = data_dir_files(isolated_env, sid)
    after.pop(draft_file(sid))
    assert after == before
    assert store.load_draft(sid, "default").prompt == "Are you there?"
    assert len(wired.requests) == 1
