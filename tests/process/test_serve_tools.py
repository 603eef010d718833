"""`agctl serve` with a client's tools, its client the real `openai` SDK and upstream the
suite's fake OpenAI server: two parallel calls handed back (whole and streamed), never run,
their results sent by the client continuing the turn, the slot holding it all as agctl's
own tool turns do, and the continuation's request extending the first one's bytes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import openai
import pytest
from fake_openai import FakeOpenAI
from serving import SYSTEM, agctl, serving, sessions, upstream_env

WEATHER: Any = {
    "type": "function",
    "function": {
        "name": "weather",
        "description": "The weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}
TIME: Any = {"type": "function", "function": {"name": "time", "parameters": {"type": "object"}}}
USER: Any = {"role": "user", "content": "weather and time in Oslo?"}
ASKED = [
    {"id": "call_w", "name": "weather", "arguments": {"city": "Oslo"}},
    {"id": "call_t", "name": "time", "arguments": {}},
]
ANSWER = "Rain, and it is nine."


def results(calls: list[Any]) -> list[dict[str, Any]]:
    """The client's answers to the calls, as it would run them."""
    said = {"weather": "rain", "time": "09:00"}
    return [
        {"role": "tool", "tool_call_id": call.id, "content": said[call.function.name]}
        for call in calls
    ]


def ask(client: openai.OpenAI, messages: list[Any], stream: bool) -> tuple[Any, Any]:
    """One request with the tools: the message and finish reason, whole or streamed (the
    SDK putting the chunks together)."""
    tools: Any = [WEATHER, TIME]
    if not stream:
        reply = client.chat.completions.create(
            model="m", messages=messages, tools=tools, parallel_tool_calls=True
        )
        return reply.choices[0].message, reply.choices[0].finish_reason
    with client.chat.completions.stream(
        model="m", messages=messages, tools=tools, parallel_tool_calls=True
    ) as events:
        done = events.get_final_completion()
    return done.choices[0].message, done.choices[0].finish_reason


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_two_parallel_calls_go_back_to_the_client_and_its_results_continue_the_turn(
    tmp_path: Path, stream: bool
) -> None:
    with FakeOpenAI() as upstream:
        upstream.reply(tool_calls=ASKED)
        upstream.reply(text=ANSWER)
        env = upstream_env(tmp_path, upstream.base_url)
        with serving(env) as (url, _):
            client = openai.OpenAI(base_url=url, api_key="unused", max_retries=0)
            message, finish = ask(client, [SYSTEM, USER], stream)
            assert finish == "tool_calls"
            assert message.content is None
            assert [(c.id, c.type, c.function.name) for c in message.tool_calls or ()] == [
                ("call_w", "function", "weather"),
                ("call_t", "function", "time"),
            ]
            assert json.loads(message.tool_calls[0].function.arguments) == {"city": "Oslo"}
            assert message.tool_calls[1].function.arguments == "{}"

            answers = results(message.tool_calls)
            # The SDK's own message object goes back, as a client's loop sends it.
            history = [SYSTEM, USER, message, *answers]
            said, finish = ask(client, history, stream)
            assert (said.content, finish) == (ANSWER, "stop")
            assert not said.tool_calls

        first, second = upstream.requests
    # Upstream got the client's tools in its order, and nothing ran them here.
    for request in (first, second):
        assert request.body["tools"] == [WEATHER, TIME]
        assert request.body["parallel_tool_calls"] is True
    # The calls as upstream sent them (the stored reply), then the client's results.
    calls = [
        {
            "id": c["id"],
            "type": "function",
            "function": {"name": c["name"], "arguments": json.dumps(c["arguments"])},
        }
        for c in ASKED
    ]
    assert second.body["messages"] == [
        SYSTEM,
        USER,
        {"role": "assistant", "content": None, "tool_calls": calls},
        *answers,
    ]
    # The continuation's messages extend the first request's bytes, none moved.
    opened = first.raw.index(b'"messages":[')
    shared = first.raw[opened : first.raw.index(b"]", first.raw.index(USER["content"].encode()))]
    assert second.raw[opened : opened + len(shared)] == shared

    (session,) = (str(s["id"]) for s in sessions(env))
    # The SDK's message sent back is the reply the slot holds: no branch was made.
    slots = json.loads(agctl(env, "-s", session, "slot", "list", "--json").stdout)
    assert [s["id"] for s in slots] == ["default"]
    listed = json.loads(agctl(env, "-s", session, "msg", "list", "--json").stdout)
    assert [m["role"] for m in listed] == ["user", "assistant", "tool", "tool", "assistant"]
    assert [c["id"] for c in listed[1]["tool_calls"]] == ["call_w", "call_t"]
    assert [(m["tool_call_id"], m["content"]) for m in listed[2:4]] == [
        ("call_w", "rain"),
        ("call_t", "09:00"),
    ]
    assert listed[4]["content"] == ANSWER
    shown = agctl(env, "-s", session, "session", "show")
    assert shown.returncode == 0 and "Traceback" not in shown.stderr
    assert (
        json.loads(agctl(env, "-s", session, "session", "show", "--json").stdout)["turn_count"] == 2
    )


def test_a_tool_result_answering_no_call_is_refused_and_nothing_sent(tmp_path: Path) -> None:
    with FakeOpenAI() as upstream:
        upstream.reply(tool_calls=ASKED)
        env = upstream_env(tmp_path, upstream.base_url)
        with serving(env) as (url, _):
            client = openai.OpenAI(base_url=url, api_key="unused", max_retries=0)
            message, _ = ask(client, [SYSTEM, USER], False)
            wrong: list[Any] = [
                {"role": "tool", "tool_call_id": "call_w", "content": "rain"},
                {"role": "tool", "tool_call_id": "call_zz", "content": "?"},
            ]
            with pytest.raises(openai.BadRequestError) as caught:
                client.chat.completions.create(
                    model="m", messages=[SYSTEM, USER, message, *wrong], tools=[WEATHER, TIME]
                )
            assert caught.value.body == {
                "message": "tool_call_id 'call_zz' answers no call waiting (waiting: call_t)",
                "type": "invalid_request_error",
                "code": 5,
                "param": None,
            }
        assert len(upstream.requests) == 1
    (session,) = (str(s["id"]) for s in sessions(env))
    listed = json.loads(agctl(env, "-s", session, "msg", "list", "--json").stdout)
    assert [m["role"] for m in listed] == ["user", "assistant"]
