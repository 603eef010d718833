"""A hostile or broken server gives a clean exit 6 and a draft: never a hang, never a traceback.

Real HTTP against the fake server on loopback, each fault bounded so that the server stops
by itself; the assertions are on exit codes, messages and files, never on durations.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import Result
from fake_openai import FakeOpenAI

from agctl.base.errors import ProviderError
from agctl.providers.base import ChatRequest, TextDelta
from agctl.providers.openai import HttpSettings, OpenAIProvider
from agctl.store import Store

Run = Callable[..., Result]

MODEL = "fake-model"
CHAT_PATH = "/v1/chat/completions"
STREAMS = ["--stream", "--no-stream"]


@pytest.fixture
def wired(server: FakeOpenAI, monkeypatch: pytest.MonkeyPatch) -> FakeOpenAI:
    monkeypatch.setenv("AGCTL_PROVIDER", "openai")
    monkeypatch.setenv("AGCTL_BASE_URL", server.base_url)
    monkeypatch.setenv("AGCTL_MODEL", MODEL)
    return server


@pytest.fixture
def sid(store: Store) -> str:
    store.create_session("s1")
    store.set_current_session("s1")
    return "s1"


def configure(run: Run, **settings: str) -> None:
    for key, value in {"max_retries": "0", **settings}.items():
        result = run("config", "set", key, value)
        assert result.exit_code == 0, result.output


def chats(server: FakeOpenAI) -> int:
    return sum(1 for r in server.requests if r.path == CHAT_PATH)


def assert_failed_with_a_draft(
    result: Result, store: Store, sid: str, *fragments: str, prompt: str = "hello"
) -> None:
    assert result.exit_code == 6, result.output
    assert "Traceback" not in result.stderr
    assert result.stderr.startswith("agctl: error: "), result.stderr
    for fragment in fragments:
        assert fragment in result.stderr
    assert store.load_draft(sid, "default").prompt == prompt
    assert store.load_slot(sid).messages == [], "nothing was committed"


# ---- bounded waits -----------------------------------------------------------------------


@pytest.mark.parametrize("stream", STREAMS)
def test_keepalives_forever_do_not_keep_a_turn_alive(
    run: Run, store: Store, sid: str, wired: FakeOpenAI, stream: str
) -> None:
    configure(run, read_timeout="0.5")
    wired.fail("keepalive", seconds=20, interval=0.1)
    result = run("turn", "send", "hello", stream)
    assert_failed_with_a_draft(result, store, sid, "timed out", "read_timeout")
    assert chats(wired) == 1


@pytest.mark.parametrize("stream", STREAMS)
def test_a_body_dripping_a_byte_at_a_time_times_out(
    run: Run, store: Store, sid: str, wired: FakeOpenAI, stream: str
) -> None:
    configure(run, read_timeout="0.5")
    wired.fail("drip", seconds=20, interval=0.2)
    result = run("turn", "send", "hello", stream)
    assert_failed_with_a_draft(result, store, sid, "timed out", "read_timeout")


@pytest.mark.parametrize("stream", STREAMS)
def test_keepalives_before_the_reply_are_skipped(
    run: Run, sid: str, wired: FakeOpenAI, stream: str
) -> None:
    configure(run, read_timeout="5")
    wired.fail("keepalive", seconds=0.3, interval=0.05)
    result = run("turn", "send", "hello", stream)
    assert result.exit_code == 0, result.output
    assert result.stdout == "echo: hello\n"


def test_each_event_that_carries_data_restarts_the_read_timeout(
    run: Run, sid: str, wired: FakeOpenAI
) -> None:
    # ~200 bytes an event, 10 bytes every 10 ms: the 20 events take twice read_timeout,
    # but each comes well within it (its 20 pauses may each take 100 ms on a loaded
    # machine, where the server's thread waits for the interpreter's lock).
    configure(run, read_timeout="2")
    wired.reply(text="abcdefghij" * 4, chunk_size=2)
    wired.fail("drip", seconds=30, interval=0.01, piece=10)
    result = run("turn", "send", "hello", "--stream")
    assert result.exit_code == 0, result.output
    assert result.stdout == "abcdefghij" * 4 + "\n"


def test_the_whole_request_has_a_deadline(
    run: Run, store: Store, sid: str, wired: FakeOpenAI
) -> None:
    configure(run, read_timeout="5", request_timeout="1")
    wired.reply(text="x" * 400, chunk_size=1)
    wired.fail("drip", seconds=30, interval=0.001)
    result = run("turn", "send", "hello", "--stream")
    assert_failed_with_a_draft(result, store, sid, "request_timeout (1 s)")


@pytest.mark.parametrize("stream", STREAMS)
def test_a_reply_larger_than_max_reply_bytes_fails(
    run: Run, store: Store, sid: str, wired: FakeOpenAI, stream: str
) -> None:
    configure(run, max_reply_bytes="20000")
    wired.fail("oversize", size=100_000)
    result = run("turn", "send", "hello", stream)
    assert_failed_with_a_draft(result, store, sid, "max_reply_bytes (20000 bytes)")


def test_a_reply_within_max_reply_bytes_passes(run: Run, sid: str, wired: FakeOpenAI) -> None:
    configure(run, max_reply_bytes="200000")
    wired.fail("oversize", size=50_000)
    result = run("turn", "send", "hello", "--stream")
    assert result.exit_code == 0, result.output
    assert result.stdout == "x" * 50_000 + "\n"


@pytest.mark.parametrize(
    "header", [{"retry_after": 90}, {"retry_after_ms": 90_000}], ids=["seconds", "ms"]
)
def test_a_retry_after_beyond_max_retry_wait_fails_at_once_saying_the_wait(
    run: Run, store: Store, sid: str, wired: FakeOpenAI, header: dict[str, float]
) -> None:
    configure(run, max_retries="3")
    wired.fail("status", status=429, message="slow down", **header)
    result = run("turn", "send", "hello")
    assert_failed_with_a_draft(result, store, sid, "slow down", "90 s", "max_retry_wait (60 s)")
    assert chats(wired) == 1


def test_max_retry_wait_is_the_limit_not_a_constant(server: FakeOpenAI) -> None:
    sleeps: list[float] = []
    settings = HttpSettings(base_url=server.base_url, max_retries=1, max_retry_wait=100)
    server.fail("status", status=503, retry_after=90)
    events = list(OpenAIProvider(settings, sleep=sleeps.append).stream(request()))
    assert sleeps == [90]
    assert TextDelta("echo: hi") in events

    sleeps.clear()
    server.fail("status", status=503, retry_after=90)
    strict = HttpSettings(base_url=server.base_url, max_retries=1, max_retry_wait=30)
    with pytest.raises(ProviderError, match=r"wait 90 s .* max_retry_wait \(30 s\)"):
        list(OpenAIProvider(strict, sleep=sleeps.append).stream(request()))
    assert sleeps == []


@pytest.mark.parametrize("value", ["nan", "inf", "-5"])
def test_a_retry_after_that_is_not_a_wait_is_ignored(server: FakeOpenAI, value: str) -> None:
    sleeps: list[float] = []
    server.fail("status", status=503, retry_after_ms=float(value))
    settings = HttpSettings(base_url=server.base_url, max_retries=1, backoff_base=0.01)
    list(OpenAIProvider(settings, sleep=sleeps.append).stream(request()))
    assert len(sleeps) == 1 and 0 <= sleeps[0] <= 0.01


def request(stream: bool = False) -> ChatRequest:
    return ChatRequest(model=MODEL, messages=[{"role": "user", "content": "hi"}], stream=stream)


# ---- malformed 200 replies ---------------------------------------------------------------

GOOD_MESSAGE: dict[str, Any] = {"role": "assistant", "content": "fine"}
CALL: dict[str, Any] = {
    "id": "c1",
    "type": "function",
    "function": {"name": "f", "arguments": "{}"},
}


def whole(message: Any = GOOD_MESSAGE, **top: Any) -> dict[str, Any]:
    choice = {"index": 0, "message": message, "finish_reason": "stop"}
    return {"object": "chat.completion", "choices": [choice], **top}


def chunk(delta: Any = None, **top: Any) -> dict[str, Any]:
    choice = {"index": 0, "delta": {"content": "fine"} if delta is None else delta}
    return {"object": "chat.completion.chunk", "choices": [choice], **top}


def call(**function: Any) -> dict[str, Any]:
    return {**CALL, "function": {**CALL["function"], **function}}


# name: (whole reply, stream events, what the message names)
MALFORMED: dict[str, tuple[Any, list[Any], str]] = {
    "usage a list": (whole(usage=[1, 2]), [chunk(usage=[1, 2])], "usage"),
    "usage negative": (
        whole(usage={"prompt_tokens": -1, "completion_tokens": 2}),
        [chunk(usage={"prompt_tokens": -1, "completion_tokens": 2})],
        "usage.prompt_tokens",
    ),
    "usage beyond 64 bits": (
        whole(usage={"prompt_tokens": 1, "completion_tokens": 2**63}),
        [chunk(usage={"prompt_tokens": 1, "completion_tokens": 2**63})],
        "usage.completion_tokens",
    ),
    "usage a bool": (
        whole(usage={"prompt_tokens": True}),
        [chunk(usage={"prompt_tokens": True})],
        "usage.prompt_tokens",
    ),
    "usage a float": (
        whole(usage={"completion_tokens": 2.5}),
        [chunk(usage={"completion_tokens": 2.5})],
        "usage.completion_tokens",
    ),
    "usage details a list": (
        whole(usage={"prompt_tokens": 5, "prompt_tokens_details": [1]}),
        [chunk(usage={"prompt_tokens": 5, "prompt_tokens_details": [1]})],
        "usage.prompt_tokens_details",
    ),
    "cached tokens a string": (
        whole(usage={"prompt_tokens": 5, "prompt_tokens_details": {"cached_tokens": "4"}}),
        [chunk(usage={"prompt_tokens": 5, "prompt_tokens_details": {"cached_tokens": "4"}})],
        "usage.prompt_tokens_details.cached_tokens",
    ),
    "reasoning tokens negative": (
        whole(usage={"completion_tokens_details": {"reasoning_tokens": -1}}),
        [chunk(usage={"completion_tokens_details": {"reasoning_tokens": -1}})],
        "usage.completion_tokens_details.reasoning_tokens",
    ),
    "cache hits a float": (
        whole(usage={"prompt_tokens": 5, "prompt_cache_hit_tokens": 2.5}),
        [chunk(usage={"prompt_tokens": 5, "prompt_cache_hit_tokens": 2.5})],
        "usage.prompt_cache_hit_tokens",
    ),
    "message a string": (whole("hello"), [chunk("hello")], "choices[0]."),
    "message null / delta a list": (whole(None), [chunk([1])], "choices[0]"),
    "choices an object": (
        {"choices": {"0": GOOD_MESSAGE}},
        [{"choices": {"0": {}}}],
        "choices",
    ),
    "choice a string": ({"choices": ["hi"]}, [{"choices": ["hi"]}], "choices[0]"),
    "content a number": (whole({"content": 5}), [chunk({"content": 5})], "content"),
    "content an object": (
        whole({"content": {"text": "x"}}),
        [chunk({"content": {"text": "x"}})],
        "content",
    ),
    "reasoning a list": (
        whole({"content": "x", "reasoning_content": ["a"]}),
        [chunk({"reasoning_content": ["a"]})],
        "reasoning_content",
    ),
    "tool calls a string": (
        whole({"tool_calls": "f"}),
        [chunk({"tool_calls": "f"})],
        "tool_calls",
    ),
    "tool call name null": (
        whole({"tool_calls": [call(name=None)]}),
        [chunk({"tool_calls": [{"index": 0, **call(name=None)}]})],
        "name",
    ),
    "tool call name a number": (
        whole({"tool_calls": [call(name=7)]}),
        [chunk({"tool_calls": [{"index": 0, **call(name=7)}]})],
        "function.name",
    ),
    "tool call arguments null": (
        whole({"tool_calls": [call(arguments=None)]}),
        [chunk({"tool_calls": [{"index": 0, **call(arguments=None)}]})],
        "function.arguments",
    ),
    "tool call arguments an object": (
        whole({"tool_calls": [call(arguments={"a": 1})]}),
        [chunk({"tool_calls": [{"index": 0, **call(arguments={"a": 1})}]})],
        "function.arguments",
    ),
    "tool call function null / index negative": (
        whole({"tool_calls": [{"id": "c", "function": None}]}),
        [chunk({"tool_calls": [{"index": -1, **CALL}]})],
        "tool_calls[0]",
    ),
    "tool call a string / index a string": (
        whole({"tool_calls": ["f"]}),
        [chunk({"tool_calls": [{"index": "0", **CALL}]})],
        "tool_calls[0]",
    ),
    "finish reason a number": (
        {"choices": [{"message": GOOD_MESSAGE, "finish_reason": 1}]},
        [{"choices": [{"delta": {"content": "x"}, "finish_reason": 1}]}],
        "finish_reason",
    ),
    "the reply a list": ([whole()], [[chunk()]], "not an object"),
    "no choices / a stream of a nameless call": (
        {"object": "chat.completion"},
        [chunk({"tool_calls": [{"index": 0, "function": {"arguments": "{}"}}]})],
        "",
    ),
}


@pytest.mark.parametrize("stream", STREAMS)
@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_a_malformed_200_reply_is_exit_6_with_a_draft_never_a_traceback(
    run: Run, store: Store, sid: str, wired: FakeOpenAI, name: str, stream: str
) -> None:
    configure(run)
    body, events, names = MALFORMED[name]
    if stream == "--stream":
        wired.fail("sse", events=events)
    else:
        wired.fail("garbage", body=json.dumps(body).encode())
    result = run("turn", "send", "hello", stream)
    assert_failed_with_a_draft(result, store, sid, "malformed", names)


def test_an_error_object_in_a_200_reply_names_the_server_message(
    run: Run, store: Store, sid: str, wired: FakeOpenAI
) -> None:
    configure(run)
    wired.fail("garbage", body=b'{"error": {"message": "model overloaded"}}')
    result = run("turn", "send", "hello")
    assert_failed_with_a_draft(result, store, sid, "model overloaded")


def test_well_formed_replies_with_every_optional_field_still_pass(
    run: Run, sid: str, wired: FakeOpenAI
) -> None:
    configure(run)
    head = {"index": 0, "id": "c", "function": {"name": "f"}}
    chunks = [
        b": comment",
        {"choices": [{"delta": {"role": "assistant", "content": None}}], "usage": None},
        {"choices": [{"delta": {"reasoning": "think", "content": ""}}]},
        {"choices": [{"delta": {"tool_calls": [head]}}]},
        {"choices": [{"delta": {"tool_calls": [{"index": 0, "function": {"arguments": "{}"}}]}}]},
        {"choices": [{"delta": {}, "finish_reason": "tool_calls"}]},
        {"choices": [], "usage": {
            "prompt_tokens": 3,
            "completion_tokens": None,
            "prompt_tokens_details": None,
            "completion_tokens_details": {"reasoning_tokens": None},
            "prompt_cache_hit_tokens": None,
        }},
    ]  # fmt: skip
    wired.fail("sse", events=chunks)
    result = run("--json", "turn", "send", "hello", "--stream")
    assert result.exit_code == 0, result.output
    reply = json.loads(result.stdout)
    assert reply["usage"] == {
        "prompt_tokens": 3,
        "completion_tokens": 0,
        "cached_tokens": None,
        "cache_write_tokens": None,
        "reasoning_tokens": None,
        "cache_write_1h_tokens": None,
    }


# ---- base URLs and sampling options ------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "http://[::1",
        "http://u:hunter2-Zq7Xw3@[::1/v1",
        "ftp://example.invalid/v1",
        "example.invalid/v1",
        "http://exa mple.invalid/v1",
        "http://example.invalid:99999/v1",
        "http://example.invalid:port/v1",
        "http:///v1",
        "http://example.invalid/v1\n",
    ],
)
@pytest.mark.parametrize("command", ["send", "replay"])
def test_an_unusable_base_url_is_a_usage_error_before_any_request(
    run: Run,
    sid: str,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    url: str,
    command: str,
) -> None:
    monkeypatch.setenv("AGCTL_PROVIDER", "openai")
    monkeypatch.setenv("AGCTL_MODEL", MODEL)
    monkeypatch.setenv("AGCTL_BASE_URL", url)
    if command == "send":
        result = run("turn", "send", "hello")
    else:
        transcript = tmp_path / "chat.jsonl"
        transcript.write_text('{"input": "hello"}\n')
        result = run("turn", "replay", str(transcript))
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.stderr
    assert "invalid base URL" in result.stderr
    assert "hunter2" not in result.stderr


@pytest.mark.parametrize("value", ["nan", "NaN", "inf", "-inf", "1e999", "-0.5", "2.5"])
def test_a_temperature_that_is_not_a_finite_number_in_range_is_refused(
    run: Run, sid: str, wired: FakeOpenAI, value: str
) -> None:
    result = run("turn", "send", "hello", "--temperature", value)
    assert result.exit_code == 2, result.output
    assert "--temperature" in result.output
    assert wired.requests == []


@pytest.mark.parametrize("value", ["-1", "0", str(2**70)])
def test_a_max_tokens_out_of_range_is_refused(
    run: Run, sid: str, wired: FakeOpenAI, value: str
) -> None:
    for extra in ([], ["--dry-run"]):
        result = run("turn", "send", "hello", "--max-tokens", value, *extra)
        assert result.exit_code == 2, result.output
        assert "--max-tokens" in result.output
    assert wired.requests == []


@pytest.mark.parametrize("key", ["read_timeout", "connect_timeout"])
def test_an_infinite_socket_timeout_is_refused_by_the_config(run: Run, key: str) -> None:
    result = run("config", "set", key, "inf")
    assert result.exit_code == 2, result.output
    assert "finite" in result.output


def test_infinite_limits_given_to_the_library_mean_no_limit(server: FakeOpenAI) -> None:
    forever = float("inf")
    settings = HttpSettings(
        base_url=server.base_url,
        connect_timeout=forever,
        read_timeout=forever,
        request_timeout=forever,
    )
    assert TextDelta("echo: hi") in list(OpenAIProvider(settings).stream(request()))


@pytest.mark.parametrize("stream", STREAMS)
def test_content_as_a_list_of_text_parts_is_joined(
    run: Run, store: Store, sid: str, wired: FakeOpenAI, stream: str
) -> None:
    configure(run)
    parts = [{"type": "text", "text": "Hello, "}, {"type": "text", "text": "parts"}]
    if stream == "--stream":
        done = {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
        wired.fail("sse", events=[chunk({"content": parts}), done])
    else:
        body = {"choices": [{"message": {"role": "assistant", "content": parts}}]}
        wired.fail("garbage", body=json.dumps(body).encode())
    result = run("--json", "turn", "send", "hello", stream)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["reply"] == "Hello, parts"


def test_content_with_a_part_that_is_not_text_is_malformed(
    run: Run, store: Store, sid: str, wired: FakeOpenAI
) -> None:
    configure(run)
    image = {"choices": [{"message": {"content": [{"type": "image_url", "image_url": {}}]}}]}
    wired.fail("garbage", body=json.dumps(image).encode())
    failed = run("turn", "send", "hello")
    assert_failed_with_a_draft(failed, store, sid, "malformed", "content[0]")


def test_a_whole_body_arriving_in_parts_is_not_a_timeout(
    run: Run, sid: str, wired: FakeOpenAI
) -> None:
    """A reply body that keeps arriving (here 3 KiB parts, 0.6 s apart, past a 1.5 s
    read_timeout in all) is progress, not a stalled server (a review found it refused)."""
    configure(run, read_timeout="1.5")
    text = "x" * 15000
    wired.reply(text)
    wired.fail("drip", seconds=10, interval=0.6, piece=3072)
    result = run("--json", "turn", "send", "hello", "--no-stream")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["reply"] == text
