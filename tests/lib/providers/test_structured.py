"""A schema's reply asked of each wire (turn send --schema), against the wire's fake on
loopback: the exact bytes sent, the same bytes for the same schema every time, the bytes
of a turn without a schema unchanged, and the reply read back as the schema's JSON."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import orjson
import pytest
from fake_anthropic import FakeAnthropic
from fake_gemini import FakeGemini
from fake_openai import FakeOpenAI
from hypothesis import given, settings
from hypothesis import strategies as st

from agctl.base.errors import UsageError
from agctl.config.file import Resolved
from agctl.providers import build_provider
from agctl.providers.base import ChatRequest, Provider, TextDelta
from agctl.providers.http import HttpProvider
from agctl.providers.offline import OfflineProvider
from agctl.providers.structured import LEAST_INT, MOST_INT, SCHEMA_TOOL, example_instance
from agctl.store import Store
from agctl.turn.schema import check_schema, load_schema, reply_problem
from agctl.turn.send import TurnOptions, TurnResult, send_turn

KEY = "sk-structured-test"
SCHEMA = load_schema("name, age int")
SCHEMA_BYTES = (
    b'{"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"}},'
    b'"required":["name","age"],"additionalProperties":false}'
)
REX = {"name": "Rex", "age": 3}


@pytest.fixture
def connect() -> Iterator[Callable[..., HttpProvider]]:
    """An HTTP provider of a wire at a fake, as a turn builds it; closed after the test."""
    made: list[HttpProvider] = []

    def build(kind: str, base_url: str, model: str, **changes: Any) -> HttpProvider:
        settings = Resolved(provider=kind, model=model, base_url=base_url, api_key=KEY, **changes)
        provider = build_provider(settings)
        assert isinstance(provider, HttpProvider)
        made.append(provider)
        return provider

    yield build
    for provider in made:
        provider.close()


def turns(
    store: Store, provider: Provider, model: str, schema: dict[str, Any] | None, stream: bool
) -> list[TurnResult]:
    """The same first turn ("A dog.") in two new sessions: the same request twice."""
    options = TurnOptions(model=model, schema=schema, stream=stream, checkpoint=False)
    return [
        send_turn(store, store.create_session().id, "A dog.", provider, options) for _ in (1, 2)
    ]


@pytest.mark.parametrize("stream", [False, True])
def test_openai_asks_with_response_format_after_the_messages_and_the_same_bytes_every_time(
    store: Store, connect: Callable[..., HttpProvider], stream: bool
) -> None:
    with FakeOpenAI(api_key=KEY) as server:
        provider = connect("openai", server.base_url, "gpt-test")
        for _ in range(4):
            server.reply(orjson.dumps(REX).decode())
        plain = turns(store, provider, "gpt-test", None, stream)
        structured = turns(store, provider, "gpt-test", SCHEMA, stream)
        sent = [request.raw for request in server.requests]
    streaming = b',"stream":true,"stream_options":{"include_usage":true}' if stream else b""
    head = b'{"model":"gpt-test","messages":[{"role":"user","content":"A dog."}]'
    assert sent[0] == sent[1] == head + streaming + b"}"  # as before schemas existed
    assert (
        sent[2]
        == sent[3]
        == (
            head + b',"response_format":{"type":"json_schema","json_schema":'
            b'{"name":"reply","schema":' + SCHEMA_BYTES + b',"strict":true}}' + streaming + b"}"
        )
    )
    assert [r.parsed for r in structured] == [REX, REX]
    assert [r.to_dict()["parsed"] for r in structured] == [REX, REX]
    assert all("parsed" not in r.to_dict() for r in plain)


@pytest.mark.parametrize("stream", [False, True])
def test_anthropic_forces_one_tool_whose_input_is_the_reply(
    store: Store, connect: Callable[..., HttpProvider], stream: bool
) -> None:
    model = "claude-sonnet-4-5"
    with FakeAnthropic(api_key=KEY) as fake:
        provider = connect("anthropic", fake.base_url, model)
        fake.reply("Plain.")
        fake.reply("Plain.")
        for _ in (1, 2):
            fake.reply(tool_uses=[{"name": SCHEMA_TOOL, "input": REX}])
        plain = turns(store, provider, model, None, stream)
        structured = turns(store, provider, model, SCHEMA, stream)
        sent = [request.raw for request in fake.requests]
        assert fake.errors == []
    streaming = b',"stream":true' if stream else b""
    head = (
        b'{"model":"claude-sonnet-4-5","max_tokens":4096,"messages":'
        b'[{"role":"user","content":[{"type":"text","text":"A dog."}]}]'
    )
    assert sent[0] == sent[1] == head + streaming + b"}"
    assert (
        sent[2]
        == sent[3]
        == (
            head + b',"tools":[{"name":"structured_reply","description":"Give the reply: its input '
            b'is the whole answer, as the schema says.","input_schema":' + SCHEMA_BYTES + b"}],"
            b'"tool_choice":{"type":"tool","name":"structured_reply"}' + streaming + b"}"
        )
    )
    assert [r.reply.text() for r in plain] == ["Plain.", "Plain."]
    for result in structured:
        assert orjson.loads(result.reply.text()) == REX == result.parsed
        assert result.reply.tool_calls is None and result.finish_reason == "stop"
    # The reply is stored as the text it is: the next turn sends no tool_use for it.
    slot = store.load_slot(structured[0].session_id, None)
    assert [m.role for m in slot.messages] == ["user", "assistant"]
    assert orjson.loads(slot.messages[1].text()) == REX


@pytest.mark.parametrize(
    ("request_changes", "wire_changes", "said"),
    [
        ({"tools": [{"type": "function", "function": {"name": "calc"}}]}, {}, "offers tools"),
        ({}, {"thinking_budget": 1024}, "has a thinking_budget (1024)"),
        ({"response_schema": {"type": "array"}}, {}, "root is not an object"),
    ],
)
def test_anthropic_refuses_what_a_forced_tool_cannot_do_before_sending(
    request_changes: dict[str, Any], wire_changes: dict[str, Any], said: str
) -> None:
    from agctl.providers.anthropic import AnthropicWire

    request = ChatRequest("claude-sonnet-4-5", [{"role": "user", "content": "hi"}])
    request = request._replace(**{"response_schema": SCHEMA, **request_changes})
    with pytest.raises(UsageError, match="forcing a tool call") as raised:
        AnthropicWire(**wire_changes).body(request)
    assert said in str(raised.value)


@pytest.mark.parametrize("stream", [False, True])
def test_gemini_asks_for_json_with_the_json_schema_as_it_is(
    store: Store, connect: Callable[..., HttpProvider], stream: bool
) -> None:
    model = "gemini-2.5-flash"
    with FakeGemini(api_key=KEY) as gemini:
        provider = connect("gemini", gemini.base_url, model)
        for _ in range(4):
            gemini.reply(orjson.dumps(REX).decode())
        turns(store, provider, model, None, stream)
        structured = turns(store, provider, model, SCHEMA, stream)
        sent = [request.raw for request in gemini.requests]
        assert gemini.errors == []
    head = b'{"contents":[{"role":"user","parts":[{"text":"A dog."}]}]'
    assert sent[0] == sent[1] == head + b"}"
    assert (
        sent[2]
        == sent[3]
        == (
            head + b',"generationConfig":{"responseMimeType":"application/json",'
            b'"responseJsonSchema":' + SCHEMA_BYTES + b"}}"
        )
    )
    assert [r.parsed for r in structured] == [REX, REX]


def test_the_schema_is_part_of_the_fingerprint_and_no_schema_leaves_it_as_it_was() -> None:
    request = ChatRequest("m", [{"role": "user", "content": "hi"}])
    assert request.model_input() == {"model": "m", "messages": request.messages, "params": {}}
    asked = request._replace(response_schema=SCHEMA)
    other = request._replace(response_schema=load_schema("name, age float"))
    fingerprints = {request.fingerprint(), asked.fingerprint(), other.fingerprint()}
    assert len(fingerprints) == 3
    assert (
        asked.fingerprint()
        == request._replace(response_schema=load_schema("name, age int")).fingerprint()
    )


def test_the_cache_outlook_counts_the_schema_before_the_messages_as_the_tools() -> None:
    """A reply's schema goes before the messages (a tool on Anthropic, before the system
    message on OpenAI): a changed schema caches nothing of the last request; none at all
    hashes as it did before schemas existed."""
    import zlib

    from agctl.context.cache import cached_prefix, prefix_hashes, sent_marks

    messages = [{"role": "user", "content": f"message {n}"} for n in range(5)]
    plain = ChatRequest("m", messages)
    assert prefix_hashes(plain, [0]) == {
        0: f"{zlib.crc32(orjson.dumps({'model': 'm', 'tools': None})):08x}"
    }
    asked = plain._replace(response_schema=SCHEMA)
    longer = asked._replace(messages=[*messages, {"role": "user", "content": "more"}])
    assert cached_prefix(sent_marks(asked), longer) == 5
    assert cached_prefix(sent_marks(asked), longer._replace(response_schema=None)) is None
    changed = longer._replace(response_schema=load_schema("name, age float"))
    assert cached_prefix(sent_marks(asked), changed) is None


def test_an_anthropic_schema_turn_recorded_replays_as_the_same_text(
    store: Store, connect: Callable[..., HttpProvider], tmp_path: Any
) -> None:
    """The cassette keeps the wire's events (the forced tool's call); its replay makes the
    same reply text of them, and a changed schema is a miss."""
    from agctl.base.errors import ReplayMiss
    from agctl.providers.cassette import RecordingProvider, ReplayProvider

    model, cassette = "claude-sonnet-4-5", tmp_path / "dog.cassette"
    options = TurnOptions(model=model, schema=SCHEMA, stream=True, checkpoint=False)
    with FakeAnthropic(api_key=KEY) as fake:
        fake.reply(tool_uses=[{"name": SCHEMA_TOOL, "input": REX}])
        recording = RecordingProvider(connect("anthropic", fake.base_url, model), cassette)
        recorded = send_turn(store, store.create_session().id, "A dog.", recording, options)
    replayed = send_turn(
        store, store.create_session().id, "A dog.", ReplayProvider(cassette), options
    )
    assert replayed.reply.text() == recorded.reply.text()
    assert replayed.parsed == recorded.parsed == REX
    changed = TurnOptions(model=model, schema=load_schema("name, age float"), checkpoint=False)
    with pytest.raises(ReplayMiss):
        send_turn(store, store.create_session().id, "A dog.", ReplayProvider(cassette), changed)


# ---- the offline model's reply to a hostile schema ----------------------------------------

# JSON as orjson reads it: integers of 64 bits (a longer one is read as a float), any float.
NUMBERS = (
    st.integers(LEAST_INT, MOST_INT)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.sampled_from([1e300, -1e300, 2.0**64, -(2.0**70), 1.5])
)
VALUES = st.recursive(
    st.none() | st.booleans() | NUMBERS | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner),
    max_leaves=8,
)
TYPES = st.sampled_from(["integer", "number", "string", "boolean", "null", "object", "array"])
LEAVES = st.fixed_dictionaries(
    {},
    optional={
        "type": TYPES | st.lists(TYPES, max_size=3),
        "minimum": NUMBERS,
        "exclusiveMinimum": NUMBERS,
        "maximum": NUMBERS,
        "minLength": st.integers(-3, 10**6),
        "maxLength": st.integers(-3, 10**6),
        "minItems": st.integers(-3, 10**6),
        "pattern": st.sampled_from(["^[0-9]+$", "x{3}", "["]),
        "enum": st.lists(VALUES, max_size=4),
        "const": VALUES,
        "default": VALUES,
    },
)
BOUNDED = st.fixed_dictionaries(
    {"type": st.sampled_from(["integer", "number"])},
    optional={"minimum": NUMBERS, "exclusiveMinimum": NUMBERS},
)
SCHEMAS = st.recursive(
    LEAVES | BOUNDED,
    lambda inner: (
        st.fixed_dictionaries({"properties": st.dictionaries(st.text(max_size=4), inner)})
        | st.fixed_dictionaries({"type": st.just("array"), "items": inner})
        | st.fixed_dictionaries({"oneOf": st.lists(inner, min_size=1, max_size=3)})
        | st.fixed_dictionaries({"anyOf": st.lists(inner, min_size=1, max_size=3)})
    ),
    max_leaves=12,
)


def offline_reply(schema: dict[str, Any]) -> str:
    request = ChatRequest(
        "offline", [{"role": "user", "content": "A dog."}], response_schema=schema
    )
    return "".join(e.text for e in OfflineProvider().stream(request) if isinstance(e, TextDelta))


@settings(max_examples=200, derandomize=True, database=None, deadline=None)
@given(SCHEMAS)
def test_the_offline_model_answers_any_schema_with_json_and_checking_it_never_raises(
    schema: dict[str, Any],
) -> None:
    reply = offline_reply(schema)
    assert orjson.loads(reply) == orjson.loads(orjson.dumps(example_instance(schema)))
    with contextlib.suppress(UsageError):  # a schema turn send would refuse is never checked
        check_schema(schema, "the schema")
        reply_problem(reply, schema)  # says what is wrong, never raises


@pytest.mark.parametrize(
    ("bound", "least"),
    [(1e300, 1e300), (-1e300, -1e300), (2.0**63, 2.0**63), (MOST_INT, MOST_INT), (2.5, 3)],
)
def test_an_integers_least_value_past_64_bits_is_the_same_integer_as_a_float(
    bound: float, least: float
) -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer", "minimum": bound}}}
    reply = offline_reply(schema)
    assert orjson.loads(reply) == {"a": least}
    assert reply_problem(reply, schema) == ({"a": least}, None)
