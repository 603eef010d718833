"""agctl.serve.tools and the tool results of a request: a client's tools checked and
offered, the calls handed back (whole and as stream deltas), their results placed after
the calls and the turn going on from them, here on the scripted offline provider."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from helpers import add, msg

from agctl.base.errors import InvalidInput
from agctl.context.models import Message
from agctl.providers.base import Event, Finish, TextDelta, ToolCallDelta, Usage
from agctl.serve.chat import completion, parse_chat, place, run_chat
from agctl.serve.tools import ClientTools, StreamedCalls, parse_tools
from agctl.store import Store
from agctl.turn.reply import ReplyBuilder
from agctl.turn.setup import ModelChoice

WEATHER: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "weather",
        "description": "The weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}
TIME: dict[str, Any] = {
    "type": "function",
    "function": {"name": "time", "parameters": {"type": "object"}},
}
USER: dict[str, Any] = {"role": "user", "content": "weather and time in Oslo?"}
CALLS: list[dict[str, Any]] = [
    {
        "id": "w1",
        "type": "function",
        "function": {"name": "weather", "arguments": '{"city":"Oslo"}'},
    },
    {"id": "t1", "type": "function", "function": {"name": "time", "arguments": "{}"}},
]
ASKED: dict[str, Any] = {"role": "assistant", "content": None, "tool_calls": CALLS}
RESULTS = [
    {"role": "tool", "tool_call_id": "w1", "content": "rain"},
    {"role": "tool", "tool_call_id": "t1", "content": "09:00"},
]


def body(*messages: dict[str, Any], **more: Any) -> dict[str, Any]:
    return {"model": "m", "messages": list(messages), **more}


@pytest.mark.parametrize(
    ("more", "needle"),
    [
        ({"tools": {"weather": 1}}, "tools: expected an array"),
        ({"tools": [{"type": "code"}]}, 'tools[0]: expected {"type": "function"'),
        ({"tools": [{"type": "function"}]}, "tools[0].function: expected an object"),
        ({"tools": [{"type": "function", "function": {"name": "a b"}}]}, "tools[0].function.name"),
        (
            {"tools": [{"type": "function", "function": {"name": "f", "parameters": []}}]},
            "tools[0].function.parameters: expected a JSON Schema object",
        ),
        ({"tools": [WEATHER, WEATHER]}, "tools[1]: a second function named 'weather'"),
        ({"tools": [WEATHER], "tool_choice": "sometimes"}, "tool_choice: expected"),
        (
            {"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "x"}}},
            "tool_choice: no tool named 'x' is offered",
        ),
        ({"tools": [WEATHER], "parallel_tool_calls": "yes"}, "parallel_tool_calls: expected"),
    ],
)
def test_a_requests_tools_are_checked(more: dict[str, Any], needle: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        parse_chat(body(USER, **more))
    assert needle in str(caught.value)


def test_tools_are_kept_as_the_client_gave_them_in_its_order() -> None:
    named = {"type": "function", "function": {"name": "time"}}
    chat = parse_chat(
        body(USER, tools=[WEATHER, TIME], tool_choice=named, parallel_tool_calls=False)
    )
    assert chat.tools == ClientTools([WEATHER, TIME], "time", False)
    assert parse_tools({"tools": [TIME], "tool_choice": "required"}) == ClientTools(
        [TIME], "required"
    )
    assert parse_tools({"tools": []}) is None
    assert parse_tools({}) is None


def test_trailing_tool_messages_are_the_input() -> None:
    chat = parse_chat(body({"role": "system", "content": "S"}, USER, ASKED, *RESULTS))
    assert (chat.system, chat.prompt) == ("S", "")
    assert [m.role for m in chat.history] == ["user", "assistant"]
    assert [m.tool_call_id for m in chat.results] == ["w1", "t1"]
    alone = parse_chat(body(*RESULTS))
    assert (alone.history, len(alone.results)) == ([], 2)
    with pytest.raises(InvalidInput, match="a user message with text, or tool results"):
        parse_chat(body(USER, ASKED))


def stored(store: Store, session: str, slot: str | None = None) -> list[dict[str, Any]]:
    return [m.to_openai() for m in store.load_slot(session, slot).messages]


def test_results_are_placed_after_the_calls_the_slot_holds(store: Store) -> None:
    store.create_session("s")
    asked = Message.from_openai(ASKED)
    add(store, "s", None, Message.from_openai(USER), asked)
    # The whole history: the calls already stored, the results appended (no branch).
    placed = place(store, parse_chat(body(USER, ASKED, *RESULTS)), "s", None)
    assert (placed.slot, placed.appended, placed.branched_at) == ("default", 2, None)
    assert stored(store, "s")[2:] == RESULTS
    # The same request again (a retry after a failed turn): nothing more is written.
    again = place(store, parse_chat(body(USER, ASKED, *RESULTS)), "s", None)
    assert (again.slot, again.appended) == ("default", 0)

    store.create_session("t")
    add(store, "t", None, Message.from_openai(USER), asked)
    # Only the results: they answer the slot's calls.
    alone = place(store, parse_chat(body(*RESULTS)), "t", None)
    assert (alone.slot, alone.appended) == ("default", 2)
    assert stored(store, "t") == stored(store, "s")


@pytest.mark.parametrize("history", [True, False])
def test_a_result_answering_no_call_is_refused_and_nothing_written(
    store: Store, history: bool
) -> None:
    store.create_session("s")
    add(store, "s", None, Message.from_openai(USER), Message.from_openai(ASKED))
    before = stored(store, "s")
    wrong = [RESULTS[0], {"role": "tool", "tool_call_id": "nope", "content": "?"}]
    given = [USER, ASKED, *wrong] if history else wrong
    with pytest.raises(InvalidInput, match="tool_call_id 'nope' answers no call waiting"):
        place(store, parse_chat(body(*given)), "s", None)
    assert stored(store, "s") == before
    # Not even a session is made for a request no slot's calls could be answered by.
    sessions = store.session_ids()
    with pytest.raises(InvalidInput, match="'w1' answers no call waiting"):
        place(store, parse_chat(body(*RESULTS)), None, None)
    assert store.session_ids() == sessions


def test_a_round_trip_on_the_scripted_offline_provider(store: Store, tmp_path: Path) -> None:
    # A script is read from its first entry by each provider made for it: one a request.
    asking, answering = tmp_path / "asking.json", tmp_path / "answering.json"
    calls = [{"id": c["id"], **c["function"]} for c in CALLS]
    asking.write_text(json.dumps([{"content": None, "tool_calls": calls}]))
    answering.write_text(json.dumps(["Rainy, 9 o'clock."]))
    choice = ModelChoice(provider="offline", script=asking)
    store.create_session("s")
    tools = {"tools": [WEATHER, TIME], "parallel_tool_calls": True}

    placed, asked = run_chat(store, parse_chat(body(USER, **tools)), choice, session="s")
    document = completion(placed, asked, 0)
    (choice_doc,) = document["choices"]
    assert choice_doc["finish_reason"] == "tool_calls"
    assert choice_doc["message"] == {"role": "assistant", "content": None, "tool_calls": CALLS}

    history = [USER, choice_doc["message"], *RESULTS]
    choice = ModelChoice(provider="offline", script=answering)
    placed, answered = run_chat(store, parse_chat(body(*history, **tools)), choice, session="s")
    assert completion(placed, answered, 0)["choices"][0] == {
        "index": 0,
        "message": {"role": "assistant", "content": "Rainy, 9 o'clock."},
        "finish_reason": "stop",
    }
    assert [m["role"] for m in stored(store, "s")] == [
        "user",
        "assistant",
        "tool",
        "tool",
        "assistant",
    ]
    assert store.load_session("s").turn_count == 2


def accumulated(deltas: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Tool call deltas put together as the openai SDK does: by index, strings appended."""
    calls: dict[int, dict[str, Any]] = {}
    for delta in deltas:
        for part in delta.get("tool_calls", ()):
            call = calls.setdefault(part["index"], {"function": {"name": "", "arguments": ""}})
            for key in ("id", "type"):
                if key in part:
                    call[key] = part[key]
            for key, value in part.get("function", {}).items():
                call["function"][key] += value
    return [calls[index] for index in sorted(calls)]


@pytest.mark.parametrize(
    "events",
    [
        # OpenAI: each call on its own index, arguments in pieces.
        [
            ToolCallDelta(0, id="w1", name="weather"),
            ToolCallDelta(1, id="t1", name="time"),
            ToolCallDelta(0, arguments='{"city":'),
            ToolCallDelta(0, arguments='"Oslo"}'),
            ToolCallDelta(1, arguments="{}"),
        ],
        # Ollama: every call on index 0, each whole.
        [
            ToolCallDelta(0, id="w1", name="weather", arguments='{"city":"Oslo"}'),
            ToolCallDelta(0, id="t1", name="time", arguments="{}"),
        ],
        # Gemini without ids: the builder's ids.
        [
            ToolCallDelta(0, name="weather", arguments='{"city":"Oslo"}'),
            ToolCallDelta(1, name="time", arguments="{}"),
        ],
        # A name after the call began.
        [
            ToolCallDelta(0, id="w1"),
            ToolCallDelta(0, name="weather", arguments='{"city":"Oslo"}'),
            ToolCallDelta(1, id="t1", name="time", arguments="{}"),
        ],
    ],
)
def test_streamed_calls_put_together_are_the_calls_the_slot_keeps(
    events: list[Event],
) -> None:
    streamed = StreamedCalls()
    builder = ReplyBuilder()
    deltas = []
    for event in [TextDelta("Let me look."), *events, Usage(1, 2), Finish("tool_calls")]:
        builder.feed(event)
        delta = streamed.delta(event)
        if delta is not None:
            deltas.append(delta)
    assert deltas[0] == {"content": "Let me look."}
    kept = builder.message("m").tool_calls or []
    assert accumulated(deltas) == [call.model_dump(mode="json") for call in kept]
    if isinstance(events[0], ToolCallDelta) and events[0].id:
        assert [c.id for c in kept] == ["w1", "t1"]
    first = [d["tool_calls"][0] for d in deltas[1:] if "id" in d["tool_calls"][0]]
    assert [c["type"] for c in first] == ["function", "function"]


def test_a_reply_with_text_and_calls_keeps_its_text() -> None:
    from agctl.serve.tools import message_document

    reply = Message.from_openai({**ASKED, "content": "Looking."})
    assert message_document(reply) == {
        "role": "assistant",
        "content": "Looking.",
        "tool_calls": CALLS,
    }
    assert message_document(msg("assistant", "hi")) == {"role": "assistant", "content": "hi"}


def test_what_the_sdk_sends_back_of_a_streamed_reply_is_the_reply_the_slot_keeps(
    store: Store,
) -> None:
    """Before: the openai SDK's streamed message sent back (its null fields, a call's index
    and parsed_arguments) differed from the slot's reply, and made a branch every turn."""
    nulls: dict[str, Any] = dict.fromkeys(
        ("refusal", "parsed", "audio", "function_call", "annotations")
    )
    sdk_calls = [
        {**call, "index": n, "function": {**call["function"], "parsed_arguments": None}}
        for n, call in enumerate(CALLS)
    ]
    store.create_session("s")
    add(store, "s", None, Message.from_openai(USER), Message.from_openai(ASKED))
    resent = {**ASKED, **nulls, "tool_calls": sdk_calls}
    placed = place(store, parse_chat(body(USER, resent, *RESULTS)), "s", None)
    assert (placed.slot, placed.branched_at, placed.appended) == ("default", None, 2)
    assert stored(store, "s")[1] == ASKED
    texted = {"role": "assistant", "content": "hi", **nulls}
    add(store, "s", None, msg("assistant", "hi"))
    again = place(store, parse_chat(body(USER, resent, *RESULTS, texted, USER)), "s", None)
    assert (again.slot, again.branched_at, again.appended) == ("default", None, 0)


def test_a_new_prompt_after_unanswered_calls_is_left_to_the_model(store: Store) -> None:
    """Only tool results are checked against the calls: a user message after calls the
    client chose not to run is placed as any message is (the upstream says what it makes
    of it)."""
    store.create_session("s")
    add(store, "s", None, Message.from_openai(USER), Message.from_openai(ASKED))
    placed = place(
        store, parse_chat(body(USER, ASKED, {"role": "user", "content": "skip"})), "s", None
    )
    assert (placed.slot, placed.appended, placed.branched_at) == ("default", 0, None)
