"""The provider contract: what every wire does over real HTTP, one suite run on each.

Each test runs on every wire of tests/wires.py (`WIRES`) against that wire's loopback fake,
through the provider a turn builds (`build_provider`). Retries wait through a recorder, never
for real; timeouts are a fraction of a second and the assertions are on errors and events,
never on durations.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from wires import KEY, WIRES, Call, Tokens, WireAdapter

from agctl.base.errors import ProviderError
from agctl.base.redact import MARK
from agctl.cli import cli
from agctl.providers.base import (
    EVENT_TYPES,
    ChatRequest,
    Event,
    Finish,
    ReasoningDelta,
    TextDelta,
    ToolCallDelta,
    Usage,
    WirePart,
)
from agctl.store import Store
from agctl.turn.reply import ReplyBuilder

STREAMS = [pytest.param(False, id="whole"), pytest.param(True, id="stream")]
SIGNATURE = "c2lnbmVkLWJ5LXRoZS1jb250cmFjdA=="
CALLS = [
    Call("call_contract_7", "forecast", {"city": "Paris", "days": 3, "units": ["metric"]}),
    Call("call_contract_8", "clock", {}),
]
# Every header any wire sends a key in.
KEY_HEADERS = ("authorization", "x-api-key", "x-goog-api-key")


# What a wire does not do yet, by test and wire: the test runs and must fail (strict xfail),
# so the day it passes the entry goes.
KNOWN_GAPS: dict[tuple[str, str], str] = {}


@pytest.fixture(params=list(WIRES))
def wire(request: pytest.FixtureRequest) -> Iterator[WireAdapter[Any]]:
    """Each wire's adapter, its fake serving on loopback."""
    gap = KNOWN_GAPS.get((request.function.__name__, request.param))
    if gap is not None:
        request.applymarker(pytest.mark.xfail(strict=True, reason=gap))
    with WIRES[request.param]().serving() as adapter:
        yield adapter


def events_of(wire: WireAdapter[Any], *, stream: bool = False, **settings: Any) -> list[Event]:
    """The events of one request to the wire's fake, with the provider `settings` give."""
    request = ChatRequest(
        model=wire.model, messages=[{"role": "user", "content": "hi"}], stream=stream
    )
    return list(wire.provider(**settings).stream(request))


def grouped(events: list[Event]) -> dict[str, list[Event]]:
    """The events by kind, in order within each: text and reasoning pieces joined (a
    stream cuts them where it likes), usage and finish wherever the wire puts them."""
    kinds: dict[str, list[Event]] = {}
    for event in events:
        same = kinds.setdefault(event.type, [])
        last = same[-1] if same else None
        if isinstance(event, TextDelta) and isinstance(last, TextDelta):
            same[-1] = TextDelta(last.text + event.text)
        elif isinstance(event, ReasoningDelta) and isinstance(last, ReasoningDelta):
            same[-1] = ReasoningDelta(last.text + event.text)
        else:
            same.append(event)
    return kinds


def assembled(events: list[Event]) -> dict[str, Any]:
    """What a reply's events make: the events by kind, the tool calls assembled."""
    kinds: dict[str, Any] = grouped(events)
    kinds.pop("tool_call", None)
    kinds["tool_calls"] = calls_of(events)
    return kinds


def built(events: list[Event]) -> ReplyBuilder:
    builder = ReplyBuilder()
    for event in events:
        builder.feed(event)
    return builder


def calls_of(events: list[Event]) -> list[Call]:
    """The tool calls a ReplyBuilder assembles from `events`, their arguments parsed (a
    stream sends the model's JSON text, a whole reply may send an object the wire writes)."""
    calls = []
    for call in built(events).tool_calls():
        function = call["function"]
        assert isinstance(function, dict)
        calls.append(Call(str(call["id"]), function["name"], json.loads(function["arguments"])))
    return calls


def failure(wire: WireAdapter[Any], *, stream: bool, **settings: Any) -> ProviderError:
    """The ProviderError a request ends with (any other exception fails the test); it
    names the wire's endpoint and never the key."""
    with pytest.raises(ProviderError) as raised:
        events_of(wire, stream=stream, **settings)
    message = str(raised.value)
    assert wire.fake.base_url in message, message
    assert KEY not in message, message
    return raised.value


# ---- replies -----------------------------------------------------------------------------


def test_a_whole_and_a_streamed_text_reply_give_the_same_events(wire: WireAdapter[Any]) -> None:
    for _ in STREAMS:
        wire.reply_text("Hello there, small world.", tokens=Tokens(20, 0, 6))
    whole = grouped(events_of(wire))
    streamed = grouped(events_of(wire, stream=True))
    assert whole == streamed
    assert sorted(whole) == ["finish", "text", "usage"]
    assert whole["text"] == [TextDelta("Hello there, small world.")]
    assert whole["finish"] == [Finish("stop")]
    [usage] = whole["usage"]
    assert isinstance(usage, Usage)
    assert (usage.prompt_tokens, usage.completion_tokens) == (20, 6)


@pytest.mark.parametrize("kind", ["tool_calls", "reasoning"])
def test_a_whole_and_a_streamed_reply_assemble_alike(wire: WireAdapter[Any], kind: str) -> None:
    for _ in STREAMS:
        if kind == "tool_calls":
            wire.reply_tool_calls(CALLS)
        else:
            wire.reply_reasoning("Let me think about the sky.", SIGNATURE, text="It is blue.")
    whole, streamed = (events_of(wire, stream=stream, thinking=True) for stream in (False, True))
    assert assembled(whole) == assembled(streamed)


@pytest.mark.parametrize("stream", STREAMS)
def test_the_key_travels_in_the_wire_s_own_header(wire: WireAdapter[Any], stream: bool) -> None:
    events_of(wire, stream=stream)
    [request] = wire.requests()
    assert request.headers[wire.key_header] == wire.key_value(KEY)
    others = [name for name in KEY_HEADERS if name != wire.key_header and name in request.headers]
    assert others == [], f"the key went in {others} too"
    assert KEY not in request.path and KEY.encode() not in request.raw
    if wire.name == "anthropic":
        assert request.headers["anthropic-version"]


@pytest.mark.parametrize("count", [1, 2])
@pytest.mark.parametrize("stream", STREAMS)
def test_tool_calls_are_assembled_each_into_one_call(
    wire: WireAdapter[Any], stream: bool, count: int
) -> None:
    wire.reply_tool_calls(CALLS[:count])
    events = events_of(wire, stream=stream)
    assert any(isinstance(event, ToolCallDelta) for event in events), events
    assert calls_of(events) == CALLS[:count]
    builder = built(events)
    assert builder.finish_reason == "tool_calls"
    assert builder.text == []


@pytest.mark.parametrize("stream", STREAMS)
def test_reasoning_gives_reasoning_deltas_and_its_signature(
    wire: WireAdapter[Any], stream: bool
) -> None:
    wire.reply_reasoning("Let me think about the sky.", SIGNATURE, text="It is blue.")
    kinds = grouped(events_of(wire, stream=stream, thinking=True))
    assert kinds["reasoning"] == [ReasoningDelta("Let me think about the sky.")]
    assert kinds["text"] == [TextDelta("It is blue.")]
    parts = kinds.get("part", [])
    assert all(isinstance(part, WirePart) and part.wire == wire.name for part in parts)
    assert (SIGNATURE in json.dumps([part._asdict() for part in parts])) == wire.signs, parts


@pytest.mark.parametrize("stream", STREAMS)
def test_cached_tokens_are_a_part_of_all_the_input(wire: WireAdapter[Any], stream: bool) -> None:
    wire.reply_text("ok", tokens=Tokens(input=1000, cached=600, output=70, reasoning=50))
    usage = built(events_of(wire, stream=stream)).usage
    assert usage is not None
    assert (usage.prompt_tokens, usage.cached_tokens) == (1000, 600)
    assert usage.completion_tokens == 70, "the reasoning is a part of all the output"
    assert usage.reasoning_tokens == (50 if wire.counts_reasoning else None)


@pytest.mark.parametrize("stream", STREAMS)
def test_a_reply_cut_at_the_token_limit_finishes_length(
    wire: WireAdapter[Any], stream: bool
) -> None:
    wire.reply_at_the_limit("The beginning of a long")
    kinds = grouped(events_of(wire, stream=stream))
    assert kinds["text"] == [TextDelta("The beginning of a long")]
    assert kinds["finish"] == [Finish("length")]


@pytest.mark.parametrize("stream", STREAMS)
def test_a_tool_loop_sends_the_reasoning_s_wire_parts_back(
    wire: WireAdapter[Any], stream: bool
) -> None:
    wire.reply_reasoning("I need the forecast.", SIGNATURE, calls=CALLS[:1])
    provider = wire.provider(thinking=True)
    question = {"role": "user", "content": "Weather in Paris?"}
    first = ChatRequest(model=wire.model, messages=[question], stream=stream)
    builder = built(list(provider.stream(first)))
    [call] = builder.tool_calls()
    answer = {"role": "tool", "tool_call_id": call["id"], "content": "sunny"}
    asked = {"role": "assistant", "content": None, "tool_calls": [call]}
    second = first._replace(
        messages=[question, asked, answer], wire_parts={1: builder.parts} if builder.parts else None
    )
    # The fake refuses a history it would not take (Gemini's: a call without its signature).
    assert grouped(list(provider.stream(second)))["finish"] == [Finish("stop")]
    sent = wire.requests()[-1].raw.decode()
    assert (SIGNATURE in sent) == wire.signs
    assert ("I need the forecast." in sent) == wire.returns_reasoning


# ---- retries -----------------------------------------------------------------------------


@pytest.mark.parametrize("status", [429, 503, 529])
def test_a_busy_server_s_retry_after_is_waited_out(wire: WireAdapter[Any], status: int) -> None:
    slept: list[float] = []
    wire.fail_status(status, retry_after=2)
    wire.reply_text("after the wait")
    events = events_of(wire, sleep=slept.append, max_retries=1)
    assert slept == [2]
    assert grouped(events)["text"] == [TextDelta("after the wait")]
    assert len(wire.requests()) == 2


def test_a_busy_server_s_wait_in_the_wire_s_own_terms_is_waited_out(wire: WireAdapter[Any]) -> None:
    slept: list[float] = []
    wire.fail_busy(3)
    wire.reply_text("after the wait")
    events = events_of(wire, sleep=slept.append, max_retries=1)
    assert slept == [3]
    assert grouped(events)["text"] == [TextDelta("after the wait")]


def test_a_bad_request_is_not_retried(wire: WireAdapter[Any]) -> None:
    slept: list[float] = []
    wire.fail_status(400)
    error = failure(wire, stream=False, sleep=slept.append, max_retries=3)
    assert error.status == 400
    assert "busy" in str(error)
    assert slept == []
    assert len(wire.requests()) == 1


def test_a_wrong_key_is_refused_at_once_and_shown_nowhere(wire: WireAdapter[Any]) -> None:
    slept: list[float] = []
    wrong = "sk-wrong/Key+Xw3Kp9=Lm2Vb8NZq7"
    error = failure(wire, stream=False, api_key=wrong, sleep=slept.append, max_retries=3)
    assert error.status in (400, 401), error
    assert wrong not in str(error)
    assert slept == []
    assert wire.requests()[0].headers[wire.key_header] == wire.key_value(wrong)


@pytest.mark.parametrize("said", ["retry-after", "own-terms"])
def test_a_wait_beyond_max_retry_wait_fails_at_once_saying_so(
    wire: WireAdapter[Any], said: str
) -> None:
    slept: list[float] = []
    if said == "retry-after":
        wire.fail_status(wire.busy_status, retry_after=90)
    else:
        wire.fail_busy(90)
    error = failure(wire, stream=False, sleep=slept.append, max_retries=3, max_retry_wait=30)
    assert "wait 90 s" in str(error) and "max_retry_wait (30 s)" in str(error)
    assert slept == []
    assert len(wire.requests()) == 1


def test_a_retry_after_past_request_timeout_fails_at_once_saying_so(wire: WireAdapter[Any]) -> None:
    slept: list[float] = []
    wire.fail_status(wire.busy_status, retry_after=20)
    error = failure(wire, stream=False, sleep=slept.append, max_retries=3, request_timeout=5)
    assert "wait 20 s" in str(error) and "past request_timeout (5 s)" in str(error)
    assert slept == []


def test_max_retries_bounds_the_attempts(wire: WireAdapter[Any]) -> None:
    slept: list[float] = []
    for _ in range(4):
        wire.fail_status(wire.busy_status, retry_after=0)
    error = failure(wire, stream=True, sleep=slept.append, max_retries=2)
    assert error.status == wire.busy_status
    assert slept == [0, 0]
    assert len(wire.requests()) == 3


# ---- bounds ------------------------------------------------------------------------------


@pytest.mark.parametrize("stream", STREAMS)
def test_a_slow_server_fails_after_read_timeout(wire: WireAdapter[Any], stream: bool) -> None:
    wire.fail_slow(30)
    error = failure(wire, stream=stream, read_timeout=0.3, max_retries=0)
    assert "timed out" in str(error)


def test_a_slow_server_within_read_timeout_fails_after_request_timeout(
    wire: WireAdapter[Any],
) -> None:
    slept: list[float] = []
    wire.fail_slow(30)
    error = failure(
        wire,
        stream=True,
        sleep=slept.append,
        read_timeout=30,
        request_timeout=0.3,
        max_retries=3,
    )
    assert "timed out" in str(error)
    assert slept == [], "no retry past the request's deadline"
    assert len(wire.requests()) == 1


@pytest.mark.parametrize(
    ("limits", "named"),
    [
        ({"read_timeout": 0.3}, "(read_timeout 0.3 s)"),
        ({"read_timeout": 30, "request_timeout": 0.3}, "(request_timeout 0.3 s)"),
    ],
    ids=["read_timeout", "request_timeout"],
)
def test_a_timeout_names_the_bound_that_ended_it(
    wire: WireAdapter[Any], limits: dict[str, float], named: str
) -> None:
    wire.fail_slow(30)
    error = failure(wire, stream=True, max_retries=0, **limits)
    assert named in str(error)


@pytest.mark.parametrize("stream", STREAMS)
def test_a_reply_larger_than_max_reply_bytes_fails(wire: WireAdapter[Any], stream: bool) -> None:
    wire.reply_text("x" * 20_000, chunk_size=500)
    error = failure(wire, stream=stream, max_reply_bytes=4000)
    assert "max_reply_bytes (4000 bytes)" in str(error)


# ---- malformed replies -------------------------------------------------------------------


# How a reply goes wrong (the adapter's method that queues it), whole or streamed, and what
# the error says of it.
BROKEN: dict[str, tuple[str, bool, tuple[str, ...]]] = {
    "garbage": ("fail_garbage", False, ("malformed response", "502 Bad Gateway")),
    "garbage-stream": ("fail_garbage", True, ("ended before",)),
    "malformed-sse": ("fail_malformed_sse", True, ("malformed stream data", "{not json")),
    "cut-stream": ("fail_cut_stream", True, ("ended before",)),
    "dropped-stream": ("fail_drop", True, ("failed mid-stream",)),
    "dropped": ("fail_drop", False, ("failed",)),
}


@pytest.mark.parametrize("how", list(BROKEN))
def test_a_broken_reply_is_a_provider_error_naming_the_url(
    wire: WireAdapter[Any], how: str
) -> None:
    queue, stream, fragments = BROKEN[how]
    getattr(wire, queue)()
    message = str(failure(wire, stream=stream, max_retries=0))
    assert all(fragment in message for fragment in fragments), message


# The names and values the wires' parsers look for, so that random replies reach deep
# into each parser instead of failing at its first field.
FIELDS = (  # noqa: SIM905 (words, not a list to read one a line)
    "choices message delta content reasoning_content tool_calls index id function name "
    "arguments finish_reason usage prompt_tokens completion_tokens prompt_tokens_details "
    "cached_tokens type content_block input partial_json thinking signature text "
    "stop_reason input_tokens output_tokens cache_read_input_tokens cache_creation "
    "candidates parts role thought thoughtSignature functionCall args finishReason "
    "usageMetadata promptTokenCount candidatesTokenCount cachedContentTokenCount "
    "promptFeedback blockReason error"
).split()
WORDS = (  # noqa: SIM905 (words, not a list to read one a line)
    "message_start content_block_start content_block_delta content_block_stop "
    "message_delta message_stop ping text_delta input_json_delta thinking_delta "
    "signature_delta text tool_use thinking redacted_thinking end_turn max_tokens STOP "
    "MAX_TOKENS SAFETY model assistant function stop tool_calls"
).split()
JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-1, 2**53)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.sampled_from(WORDS)
    | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(FIELDS), inner),
    max_leaves=16,
)


@settings(
    max_examples=40,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(replies=st.lists(JSON, min_size=1, max_size=4), stream=st.booleans())
def test_any_json_reply_gives_events_or_a_provider_error(
    wire: WireAdapter[Any], replies: list[Any], stream: bool
) -> None:
    """A whole reply of any JSON, or a stream of any JSON chunks: events, or a
    ProviderError naming the URL; never another exception, never a hang."""
    if stream:
        body = b"".join(b"data: " + json.dumps(chunk).encode() + b"\n\n" for chunk in replies)
    else:
        body = json.dumps(replies[0]).encode()
    wire.fake_fail("garbage", body=body)
    try:
        events = events_of(wire, stream=stream, max_retries=0)
    except ProviderError as error:
        assert wire.fake.base_url in str(error), error
    else:
        assert all(isinstance(event, tuple(EVENT_TYPES.values())) for event in events), events


def test_an_error_object_mid_stream_fails_with_its_message(wire: WireAdapter[Any]) -> None:
    wire.fail_error_mid_stream("the model fell over")
    error = failure(wire, stream=True)
    assert "error mid-stream" in str(error) and "the model fell over" in str(error)


# ---- secrets -----------------------------------------------------------------------------


@pytest.mark.parametrize("stream", STREAMS)
def test_a_key_the_server_echoes_is_not_in_the_events(wire: WireAdapter[Any], stream: bool) -> None:
    # In pieces of three characters: a stream cuts the key across many.
    wire.reply_text(f"Your key is {KEY} and nothing else.", chunk_size=3)
    events = events_of(wire, stream=stream)
    assert grouped(events)["text"] == [TextDelta(f"Your key is {MARK} and nothing else.")]
    assert KEY not in repr(events)


@pytest.mark.parametrize("stream", STREAMS)
def test_a_key_the_server_echoes_in_reasoning_is_not_in_the_events(
    wire: WireAdapter[Any], stream: bool
) -> None:
    wire.reply_reasoning(f"The key {KEY} is in the prompt.", SIGNATURE, text="Noted.")
    events = events_of(wire, stream=stream, thinking=True)
    assert grouped(events)["reasoning"] == [ReasoningDelta(f"The key {MARK} is in the prompt.")]
    assert KEY not in repr(events)


@pytest.mark.parametrize("mid_stream", [False, True], ids=["status", "mid-stream"])
def test_a_key_the_server_echoes_in_an_error_is_not_in_it(
    wire: WireAdapter[Any], mid_stream: bool
) -> None:
    echo = f"invalid request from key {KEY}"
    if mid_stream:
        wire.fail_error_mid_stream(echo)
    else:
        wire.fail_status(400, message=echo)
    assert f"key {MARK}" in str(failure(wire, stream=mid_stream))


@pytest.mark.parametrize("stream", STREAMS)
def test_a_key_the_server_echoes_in_tool_arguments_is_not_in_the_call(
    wire: WireAdapter[Any], stream: bool
) -> None:
    wire.reply_tool_calls([Call("call_echo", "store", {"secret": KEY, "note": f"is {KEY}"})])
    assert calls_of(events_of(wire, stream=stream)) == [
        Call("call_echo", "store", {"secret": MARK, "note": f"is {MARK}"})
    ]


def test_the_debug_log_shows_the_key_header_as_stars(
    wire: WireAdapter[Any], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="agctl.provider")
    events_of(wire)
    [post] = [record.getMessage() for record in caplog.records if "POST" in record.msg]
    shown = f"{wire.key_header}: {wire.key_value(MARK)}"
    assert shown in post, post
    assert KEY not in caplog.text
    assert wire.requests()[0].headers[wire.key_header] == wire.key_value(KEY)


def test_minus_vv_shows_the_key_header_as_stars(
    wire: WireAdapter[Any], isolated_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in {
        "AGCTL_PROVIDER": wire.name,
        "AGCTL_BASE_URL": wire.fake.base_url,
        "AGCTL_MODEL": wire.model,
        "AGCTL_API_KEY": KEY,
    }.items():
        monkeypatch.setenv(name, value)
    Store(isolated_env).create_session("s1")
    result = CliRunner().invoke(
        cli, ["-vv", "turn", "send", "--session", "s1", "hello"], catch_exceptions=False
    )
    assert result.exit_code == 0, result.output
    assert result.stdout == "echo: hello\n"
    assert f"{wire.key_header}: {wire.key_value(MARK)}" in result.stderr, result.stderr
    assert KEY not in result.stderr
