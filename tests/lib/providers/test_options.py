"""Model options (agctl.providers.options): a VALUE typed becomes JSON or text, each wire
takes its own keys of their own types, a request carries them sorted, and a request
without any has the input and bytes it had before options existed."""

from __future__ import annotations

from typing import Any

import pytest

from agctl.base.errors import UsageError
from agctl.base.hashing import request_fingerprint
from agctl.providers.anthropic import AnthropicWire
from agctl.providers.base import ChatRequest
from agctl.providers.gemini import GeminiWire
from agctl.providers.openai import OpenAIWire
from agctl.providers.options import (
    SET_BY_AGCTL,
    WIRE_OPTIONS,
    accepted_options,
    checked_options,
    option_value,
    typed_options,
)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("42", 42),
        ("0.5", 0.5),
        ("true", True),
        ('["a", "b"]', ["a", "b"]),
        ('{"user_id": "u1"}', {"user_id": "u1"}),
        ('"42"', "42"),
        ("high", "high"),
        ("", ""),
        ("[unclosed", "[unclosed"),
        ("NaN", "NaN"),  # not JSON: the text
    ],
)
def test_a_value_is_json_when_it_parses_else_the_text(text: str, value: Any) -> None:
    assert option_value(text) == value
    assert type(option_value(text)) is type(value)


def test_options_are_sorted_by_key_whatever_order_they_came_in() -> None:
    first = checked_options(typed_options([("top_p", "0.5"), ("seed", "1")]), "openai")
    second = checked_options(typed_options([("seed", "1"), ("top_p", "0.5")]), "openai")
    assert first == second == (("seed", 1), ("top_p", 0.5))


def test_a_key_given_twice_is_refused() -> None:
    with pytest.raises(UsageError, match="'seed' is given twice"):
        typed_options([("seed", "1"), ("seed", "1")])


@pytest.mark.parametrize("wire", [OpenAIWire(), AnthropicWire(), GeminiWire()])
def test_each_wire_declares_its_own_table_and_none_of_agctls_keys(wire: Any) -> None:
    assert wire.options is WIRE_OPTIONS[wire.name]
    assert not set(wire.options) & set(SET_BY_AGCTL)


def test_a_number_takes_an_integer_but_an_integer_no_fraction_and_no_boolean() -> None:
    assert checked_options({"top_p": 1}, "openai") == (("top_p", 1),)
    with pytest.raises(UsageError, match="'seed' takes an integer, not a number"):
        checked_options({"seed": 1.5}, "openai")
    with pytest.raises(UsageError, match="'top_k' takes an integer, not a boolean"):
        checked_options({"top_k": True}, "anthropic")
    with pytest.raises(UsageError, match="not null"):
        checked_options({"user": None}, "openai")


def test_offline_and_replay_take_every_wires_keys_in_any_of_their_types() -> None:
    accepted = accepted_options("offline")
    assert set(accepted) == {key for table in WIRE_OPTIONS.values() for key in table}
    # OpenAI's logprobs is a flag, Gemini's a count: either is taken.
    assert accepted["logprobs"] == ("boolean", "integer")
    assert checked_options({"logprobs": 3}, "replay") == (("logprobs", 3),)
    with pytest.raises(UsageError, match="the replay provider accepts no model option"):
        checked_options({"nope": 1}, "replay")


def test_an_unknown_key_names_what_the_wire_accepts() -> None:
    with pytest.raises(UsageError) as caught:
        checked_options({"top_q\x1b[2J": 1}, "anthropic")
    assert "'top_q\\x1b[2J'" in str(caught.value)  # escaped, never the raw control byte
    assert caught.value.hint == "it accepts: metadata, service_tier, stop_sequences, top_k, top_p"


def request(**fields: Any) -> ChatRequest:
    return ChatRequest(model="m", messages=[{"role": "user", "content": "hi"}], **fields)


def test_a_request_without_options_has_the_input_it_had_before_options() -> None:
    plain = request(temperature=0.5)
    before = {"model": "m", "messages": plain.messages, "params": {"temperature": 0.5}}
    assert plain.model_input() == before
    assert plain.fingerprint() == request_fingerprint(before)


def test_options_are_model_input_after_agctls_own_parameters() -> None:
    with_options = request(temperature=0.5, options=(("seed", 1), ("top_p", 0.9)))
    assert list(with_options.params()) == ["temperature", "seed", "top_p"]
    assert with_options.fingerprint() != request(temperature=0.5).fingerprint()
    assert (
        with_options.fingerprint() != request(temperature=0.5, options=(("seed", 2),)).fingerprint()
    )


def test_each_wire_puts_the_options_where_it_keeps_such_fields() -> None:
    options = (("seed", 1),)
    openai = OpenAIWire().body(request(options=options, stream=True))
    assert openai.endswith(b',"seed":1,"stream":true,"stream_options":{"include_usage":true}}')
    claude = AnthropicWire(thinking_budget=2048).body(request(options=(("top_k", 5),)))
    assert claude.endswith(b',"top_k":5,"thinking":{"type":"enabled","budget_tokens":2048}}')
    gemini = GeminiWire().body(request(max_tokens=9, options=options))
    assert gemini.endswith(b'"generationConfig":{"maxOutputTokens":9,"seed":1}}')


@pytest.mark.parametrize(
    "value",
    [2**64, -(2**63) - 1, float("inf"), float("nan"), {1: "x"}, {"a": {1, 2}}, [b"x"]],
    ids=["2**64", "below-int64", "inf", "nan", "int-key", "set", "bytes"],
)
def test_a_value_the_body_cannot_carry_is_refused_before_it_is_sent(value: Any) -> None:
    """A template's YAML can hold values no command line parses to: each is refused here,
    where serialising the body would have raised."""
    key = "metadata" if isinstance(value, dict) else "stop" if isinstance(value, list) else "seed"
    with pytest.raises(UsageError, match=f"model option '{key}' is not plain JSON"):
        checked_options({key: value}, "openai")


def test_the_largest_whole_numbers_pass_and_are_sent() -> None:
    for number in (2**64 - 1, -(2**63)):
        (option,) = checked_options({"seed": number}, "openai")
        body = OpenAIWire().body(request(options=(option,)))
        assert body.endswith(f',"seed":{number}}}'.encode())
