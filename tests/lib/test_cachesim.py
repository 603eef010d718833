"""The prefix-cache simulator (tests/cachesim.py) against the providers' documented rules,
then over real HTTP in the fake server's cache mode."""

from __future__ import annotations

import http.client
import json
from typing import Any

import pytest
from cachesim import PrefixCache, Rule, Tokens, reply_message, segments
from fake_openai import FakeOpenAI


def one_per_byte() -> Tokens:
    """A tokenizer of one token per byte, so that prefix lengths are exact in tests."""
    return Tokens(lambda text: list(text.encode()))


def body(*contents: str, key: str | None = None, model: str = "m") -> dict[str, Any]:
    """A request whose messages alternate user and assistant, starting with a user."""
    roles = ("user", "assistant")
    messages = [{"role": roles[i % 2], "content": text} for i, text in enumerate(contents)]
    request: dict[str, Any] = {"model": model, "messages": messages}
    if key is not None:
        request["prompt_cache_key"] = key
    return request


def prompt_length(request: dict[str, Any]) -> int:
    return sum(len(text.encode()) for text in segments(request))


def served(cache: PrefixCache, request: dict[str, Any], text: str = "ok") -> dict[str, Any]:
    return cache.serve(request, reply_message(text))


def cached(usage: dict[str, Any]) -> int:
    return int(usage["prompt_tokens_details"]["cached_tokens"])


# OpenAI: the longest common prefix, from 1,024 tokens, in steps of 128


def test_openai_counts_the_common_prefix_in_128_token_steps_from_1024() -> None:
    cache = PrefixCache("openai", one_per_byte())
    first = body("a" * 3000)
    assert cached(served(cache, first)) == 0  # nothing before it
    second = body("a" * 3000, "reply", "next question")
    usage = served(cache, second)
    shared = prompt_length(first) - len('"}')  # the user message's text goes on, its end differs
    assert usage["prompt_tokens"] == prompt_length(second)
    assert cached(usage) == shared // 128 * 128
    assert cached(usage) % 128 == 0 and shared - cached(usage) < 128
    assert usage["completion_tokens_details"]["reasoning_tokens"] == 0
    assert "prompt_cache_hit_tokens" not in usage


@pytest.mark.parametrize(
    ("shared", "expected"),
    [(1023, 0), (1024, 1024), (1151, 1024), (1152, 1152), (1279, 1152), (1280, 1280)],
)
def test_openai_threshold_and_steps(shared: int, expected: int) -> None:
    cache = PrefixCache("openai", one_per_byte())
    head = len('{"role":"user","content":"')  # one token per byte: the text starts here
    text = "x" * (shared - head)
    served(cache, body(text + "A" * 500))
    usage = served(cache, body(text + "B" * 500))
    assert cached(usage) == expected


def test_openai_matches_any_earlier_request_not_only_the_last() -> None:
    cache = PrefixCache("openai", one_per_byte())
    served(cache, body("p" * 2000))
    served(cache, body("q" * 2000))
    assert cached(served(cache, body("p" * 2000, "r", "more"))) >= 1920


def test_openai_a_byte_changed_early_forfeits_everything_after_it() -> None:
    cache = PrefixCache("openai", one_per_byte())
    history = ["u" * 1500, "a" * 1500, "v" * 1500]
    served(cache, body(*history))
    edited = ["u" * 1500, "a" * 200 + "!" + "a" * 1299, "v" * 1500]
    usage = served(cache, body(*edited, "w"))
    before_edit = len('{"role":"user","content":"' + "u" * 1500 + '"}')
    before_edit += len('{"role":"assistant","content":"') + 200
    assert cached(usage) == before_edit // 128 * 128
    assert usage["prompt_tokens"] > 4500


def test_openai_key_order_counts_as_bytes() -> None:
    cache = PrefixCache("openai", one_per_byte())
    served(cache, {"model": "m", "messages": [{"role": "user", "content": "z" * 3000}]})
    reordered = {"model": "m", "messages": [{"content": "z" * 3000, "role": "user"}]}
    assert cached(served(cache, reordered)) == 0


def test_openai_cache_is_per_key_and_model() -> None:
    cache = PrefixCache("openai", one_per_byte())
    served(cache, body("k" * 3000, key="session-a"))
    assert cached(served(cache, body("k" * 3000, "r", "q", key="session-b"))) == 0
    assert cached(served(cache, body("k" * 3000, "r", "q", model="other", key="session-a"))) == 0
    assert cached(served(cache, body("k" * 3000, "r", "q", key="session-a"))) >= 2944


def test_tools_come_first_in_the_prompt() -> None:
    cache = PrefixCache("openai", one_per_byte())
    tool = {"type": "function", "function": {"name": "f", "parameters": {}}}
    served(cache, {**body("t" * 3000), "tools": [tool]})
    other = {"type": "function", "function": {"name": "g", "parameters": {}}}
    assert cached(served(cache, {**body("t" * 3000, "r", "q"), "tools": [other]})) == 0


# DeepSeek: prefix units ending at each user input and each model output


def hits(usage: dict[str, Any]) -> int:
    assert (
        usage["prompt_cache_hit_tokens"] + usage["prompt_cache_miss_tokens"]
        == (usage["prompt_tokens"])
    )
    assert usage["prompt_tokens_details"]["cached_tokens"] == usage["prompt_cache_hit_tokens"]
    return int(usage["prompt_cache_hit_tokens"])


def test_deepseek_next_turn_hits_the_unit_ending_at_the_models_output() -> None:
    cache = PrefixCache("deepseek", one_per_byte())
    first = body("What is the capital of China?")
    assert hits(served(cache, first, "Beijing.")) == 0
    second = body("What is the capital of China?", "Beijing.", "And of the USA?")
    usage = served(cache, second)
    through_reply = prompt_length(body("What is the capital of China?", "Beijing."))
    # No rounding and no minimum: the whole unit, up to the end of the reply.
    assert hits(usage) == through_reply


def test_deepseek_unit_ending_at_the_user_input_is_kept() -> None:
    cache = PrefixCache("deepseek", one_per_byte())
    served(cache, body("question"), "an answer the client never keeps")
    usage = served(cache, body("question", "a different answer", "next"))
    assert hits(usage) == prompt_length(body("question"))


def test_deepseek_only_whole_units_hit_then_the_common_prefix_is_persisted() -> None:
    # The guide's example: A + B, then A + C misses; A is persisted; A + D hits A.
    cache = PrefixCache("deepseek", one_per_byte())
    a, b, c, d = "A" * 1200, "B" * 300, "C" * 300, "D" * 300
    served(cache, body(a, "r", b))
    assert hits(served(cache, body(a, "r", c))) == 0
    usage = served(cache, body(a, "r", d))
    assert hits(usage) == prompt_length(body(a, "r")) + len('{"role":"user","content":"')
    openai = PrefixCache("openai", one_per_byte())
    served(openai, body(a, "r", b))
    assert cached(served(openai, body(a, "r", c))) > 0  # where OpenAI counts the shared part


def test_deepseek_a_short_prompt_hits_without_a_minimum() -> None:
    cache = PrefixCache("deepseek", one_per_byte())
    served(cache, body("hi"), "hello")
    assert 0 < hits(served(cache, body("hi", "hello", "bye"))) < 1024


def test_unknown_rule_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown cache rule"):
        PrefixCache("anthropic")  # type: ignore[arg-type]


# The real tokenizer


def test_o200k_tokens_are_cut_per_message_so_a_change_moves_only_what_follows() -> None:
    tokens = Tokens()
    history = [
        f"Message {i}: " + "the quick brown fox jumps over the lazy dog " * 40 for i in range(6)
    ]
    original = body(*history)
    edited = body(*history[:3], history[3].replace("fox", "cat", 1), *history[4:])
    parts = [tokens(text) for text in segments(original)]
    changed = [tokens(text) for text in segments(edited)]
    assert parts[:3] == changed[:3] and parts[3] != changed[3] and parts[4:] == changed[4:]
    cache = PrefixCache("openai", tokens)
    served(cache, original)
    usage = served(cache, edited)
    before = sum(len(part) for part in parts[:3])
    assert before <= cached(usage) + 128 and cached(usage) < before + len(parts[3])
    assert usage["prompt_tokens"] == sum(len(part) for part in changed)


# Over HTTP: the fake server's cache mode


def post(server: FakeOpenAI, request: dict[str, Any]) -> dict[str, Any]:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    conn.request("POST", "/v1/chat/completions", body=json.dumps(request).encode())
    response = conn.getresponse()
    assert response.status == 200
    return dict(json.loads(response.read()))


def stream_usage(server: FakeOpenAI, request: dict[str, Any]) -> dict[str, Any]:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    streamed = {**request, "stream": True, "stream_options": {"include_usage": True}}
    conn.request("POST", "/v1/chat/completions", body=json.dumps(streamed).encode())
    events = conn.getresponse().read().decode().split("\n\n")
    chunks = [json.loads(e.removeprefix("data: ")) for e in events if e.startswith("data: {")]
    return dict(chunks[-1]["usage"])


@pytest.mark.parametrize("rule", ["openai", "deepseek"])
def test_fake_server_answers_with_the_simulated_usage(rule: Rule) -> None:
    system = {"role": "system", "content": "You are a careful assistant. " * 300}
    first = {"model": "m", "messages": [system, {"role": "user", "content": "one"}]}
    with FakeOpenAI(cache=rule) as server:
        reply = post(server, first)
        text = reply["choices"][0]["message"]["content"]
        assert cached(reply["usage"]) == 0
        second = {
            **first,
            "messages": [*first["messages"], {"role": "assistant", "content": text}],
        }
        second["messages"].append({"role": "user", "content": "two"})
        usage = stream_usage(server, second)
    assert usage["prompt_tokens"] > 1500
    if rule == "openai":
        assert cached(usage) >= 1024 and cached(usage) % 128 == 0
        assert usage["completion_tokens_details"]["reasoning_tokens"] == 0
    else:
        assert hits(usage) > 1500  # the whole first request and its reply
    assert usage["prompt_tokens"] - cached(usage) < 200


def test_fake_server_without_cache_mode_keeps_its_estimate() -> None:
    with FakeOpenAI() as server:
        usage = post(server, body("x" * 5000))["usage"]
    assert "prompt_tokens_details" not in usage and usage["prompt_tokens"] > 1000
