"""agctl.serve.responses: a Responses API request checked, its id spelled and read back,
and its turn placed: a new session, appended to the previous response's slot, forked
where an older response left it or where another turn is running, or run on an
in-memory copy that the store never sees; a failed turn leaves nothing of its input."""

from __future__ import annotations

from typing import Any

import pytest

from agctl.base.errors import InvalidInput, NotFound, SlotMoved, TurnInterrupted
from agctl.context.models import Message
from agctl.providers.base import Event
from agctl.serve.flights import Flights
from agctl.serve.responses import (
    Events,
    Placement,
    ResponseId,
    answer,
    parse_response,
    place,
    stored,
)
from agctl.store import Store
from agctl.store.checkpointer import Checkpointer
from agctl.turn.send import TurnResult
from agctl.turn.setup import ModelChoice

OFFLINE = ModelChoice(provider="offline")


def respond(
    store: Store, session: str | None = None, slot: str | None = None, /, **body: Any
) -> tuple[Placement, TurnResult]:
    """A request made a turn, as the server makes it (`body` may hold `store`)."""
    ask = parse_response({"model": "m", **body})
    placement = place(store, ask, session, slot)
    return placement, answer(placement, ask, OFFLINE)


def texts(store: Store, session: str, slot: str) -> list[str]:
    return [m.text() for m in store.load_slot(session, slot).messages]


def text_item(role: str, kind: str, text: str) -> dict[str, Any]:
    return {"type": "message", "role": role, "content": [{"type": kind, "text": text}]}


@pytest.mark.parametrize(
    ("given", "needle"),
    [
        ([], "not a JSON object"),
        ({}, "input: a string or a non-empty array"),
        ({"input": []}, "input: a string or a non-empty array"),
        ({"input": [{"type": "function_call", "name": "f"}]}, "input[0]: 'function_call' items"),
        (
            {"input": [{"type": "function_call_output", "call_id": "c", "output": "x"}]},
            "input[0]: 'function_call_output' items",
        ),
        ({"input": [{"role": "wizard", "content": "x"}]}, "input[0].role: expected one of"),
        ({"input": [{"role": "user", "content": 3}]}, "input[0].content: expected a string"),
        (
            {"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "u"}]}]},
            "input[0].content[0]: 'input_image' parts are not served",
        ),
        (
            {"input": ["hi", {"role": "user", "content": [{"type": "input_file"}]}]},
            "input[0]: an input item is a JSON object",
        ),
        ({"input": [{"role": "assistant", "content": "x"}]}, "the last item must be a user"),
        ({"input": "hi", "previous_response_id": "resp_abc"}, "previous_response_id: 'resp_abc'"),
        ({"input": "hi", "tools": [{"type": "function", "name": "f"}]}, "tools: tools are not"),
        ({"input": "hi", "text": {"format": {"type": "json_schema"}}}, "text.format: 'json_"),
        ({"input": "hi", "store": "no"}, "store: expected a boolean"),
        ({"input": "hi", "instructions": 3}, "instructions: expected a string"),
        ({"input": "hi", "max_output_tokens": 1.5}, "max_output_tokens: expected a int"),
    ],
)
def test_a_request_is_checked_before_anything_is_placed(given: Any, needle: str) -> None:
    with pytest.raises(InvalidInput, match=needle.replace("[", r"\[")):
        parse_response(given)


def test_the_input_messages_are_text_in_any_of_the_shapes_the_sdk_sends() -> None:
    ask = parse_response(
        {
            "input": [
                text_item("developer", "input_text", "Be terse."),
                {"role": "user", "content": "first"},
                {
                    "type": "message",
                    "id": "msg_1",
                    "status": "completed",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": "one", "annotations": []}],
                },
                text_item("user", "input_text", "second"),
            ],
            "instructions": "Be brief.",
            "max_output_tokens": 50,
        }
    )
    assert [(m.role, m.text()) for m in ask.messages] == [
        ("system", "Be terse."),
        ("user", "first"),
        ("assistant", "one"),
    ]
    assert (ask.prompt, ask.instructions, ask.max_output_tokens) == ("second", "Be brief.", 50)
    assert (ask.store, ask.stream, ask.previous) == (True, False, None)
    assert parse_response({"input": "hi", "store": False}).store is False


@pytest.mark.parametrize(
    ("session", "slot"), [("s", "default"), ("a.b-c_d", "x.y"), ("1nhak1tgr7", "default-2")]
)
def test_a_response_id_reads_back_as_its_session_slot_and_nonce(session: str, slot: str) -> None:
    drawn = ResponseId.drawn(session, slot)
    spelled = str(drawn)
    assert spelled.startswith("resp_") and spelled.count("~") == 2
    assert ResponseId.parse(spelled) == drawn
    assert ResponseId.drawn(session, slot) != drawn  # each turn its own


@pytest.mark.parametrize(
    "spelled",
    [
        "chatcmpl-s.default.0001",
        "resp_s~default",
        "resp_s~default~0123456789abcdef~x",
        "resp_s~default~0123456789ABCDEF",  # not Crockford's lower case
        "resp_s~default~0123456789abcdeu",  # u is not in it
        "resp_s~default~0123",
        "resp_..~default~0123456789abcdef",
        "resp_s~-x~0123456789abcdef",
        "resp_~default~0123456789abcdef",
        42,
    ],
)
def test_what_is_not_a_response_id_is_refused_as_input(spelled: Any) -> None:
    with pytest.raises(InvalidInput, match=r"previous_response_id: .* is not a response id"):
        ResponseId.parse(spelled)


def test_without_a_previous_response_each_request_is_a_new_conversation(store: Store) -> None:
    first, said = respond(store, input="hello", instructions="Be brief.")
    second, _ = respond(store, input="hello", instructions="Be brief.")
    assert first.placed.session != second.placed.session
    session = first.placed.session
    # The instructions were that request's system prompt only, not the session's.
    assert store.load_session(session).system_prompt is None
    assert texts(store, session, "default") == ["hello", said.reply.text()]
    # The turn's checkpoint carries the response's id.
    (after,) = [s for s in Checkpointer(store).summaries(session) if s.id == said.checkpoint]
    assert after.label == str(first.id)


def test_a_previous_response_at_its_slot_head_appends_and_an_older_one_forks(
    store: Store,
) -> None:
    first, one = respond(store, input="a")
    session = first.placed.session
    second, two = respond(store, input="b", previous_response_id=str(first.id))
    assert (second.placed.slot, second.placed.branched_at) == ("default", None)
    assert texts(store, session, "default") == ["a", one.reply.text(), "b", two.reply.text()]

    # The first response named again: the slot moved on, so a slot holding what the
    # first response left is derived, and the turn goes there; the old branch is kept.
    forked, three = respond(
        store,
        input=[{"role": "user", "content": "earlier"}, {"role": "user", "content": "c"}],
        previous_response_id=str(first.id),
    )
    assert (forked.placed.slot, forked.placed.branched_from, forked.placed.branched_at) == (
        "default-2",
        "default",
        2,
    )
    assert forked.id.slot == "default-2" and forked.placed.appended == 1
    assert texts(store, session, "default-2") == [
        "a",
        one.reply.text(),
        "earlier",
        "c",
        three.reply.text(),
    ]
    assert texts(store, session, "default") == ["a", one.reply.text(), "b", two.reply.text()]
    assert store.load_slot(session, "default-2").config.source.parent_id == "default"
    # Its own head appends to the derived slot; the second response, still default's
    # head, appends there.
    fourth, _ = respond(store, input="d", previous_response_id=str(forked.id))
    fifth, _ = respond(store, input="e", previous_response_id=str(second.id))
    assert (fourth.placed.slot, fifth.placed.slot) == ("default-2", "default")
    assert sorted(store.slot_ids(session)) == ["default", "default-2"]


def test_an_older_response_forks_from_its_own_state_even_after_the_slot_was_rewritten(
    store: Store,
) -> None:
    first, one = respond(store, input="a")
    session = first.placed.session
    respond(store, input="b", previous_response_id=str(first.id))

    def rewrite(slot: Any) -> None:
        slot.messages[0] = slot.messages[0].model_copy(update={"content": "A!"})

    store.update_slot(session, "default", rewrite)
    forked, _ = respond(store, input="c", previous_response_id=str(first.id))
    assert forked.placed.branched_at == 0
    assert texts(store, session, forked.placed.slot)[:3] == ["a", one.reply.text(), "c"]


def test_store_false_writes_nothing_and_its_id_is_unknown_after(store: Store) -> None:
    first, one = respond(store, input="a")
    session = first.placed.session
    before = (
        store.session_ids(),
        store.load_session(session),
        [s.id for s in Checkpointer(store).summaries(session)],
        store.load_slot(session, "default"),
    )

    unstored, reply = respond(store, input="b", previous_response_id=str(first.id), store=False)
    fresh, _ = respond(store, input="alone", store=False)

    assert "(3 messages in context)" in reply.reply.text()  # the first turn, then "b"
    assert (reply.checkpoint, unstored.placed.session) == (None, session)
    assert unstored.store is not store and fresh.placed.session not in store.session_ids()
    after = (
        store.session_ids(),
        store.load_session(session),
        [s.id for s in Checkpointer(store).summaries(session)],
        store.load_slot(session, "default"),
    )
    assert after == before
    for gone in (unstored.id, fresh.id):
        with pytest.raises(NotFound, match="no response"):
            respond(store, input="c", previous_response_id=str(gone))
        with pytest.raises(NotFound, match="no response"):
            stored(store, str(gone))
    assert stored(store, str(first.id))["output"][0]["content"][0]["text"] == one.reply.text()


def test_a_named_session_gets_the_input_after_its_context_and_must_agree_with_the_id(
    store: Store,
) -> None:
    with pytest.raises(NotFound, match="no session 'nope'"):
        respond(store, "nope", input="x")
    store.create_session("notes", system_prompt="Keep notes.")
    placement, result = respond(store, "notes", input="remember 42")
    assert placement.placed == type(placement.placed)("notes", "default")
    assert "(2 messages in context)" in result.reply.text()
    with pytest.raises(InvalidInput, match="is of session 'notes', but the request names"):
        respond(store, "other", input="x", previous_response_id=str(placement.id))
    # The slot follows from the response: a client naming the slot it began on (a header
    # it sends with every request) goes on in the fork its older response made.
    respond(store, "notes", "default", input="y", previous_response_id=str(placement.id))
    fork, _ = respond(store, "notes", "default", input="z", previous_response_id=str(placement.id))
    after, _ = respond(store, "notes", "default", input="w", previous_response_id=str(fork.id))
    assert (fork.placed.slot, after.placed.slot) == ("default-2", "default-2")
    assert texts(store, "notes", "default-2")[-4::2] == ["z", "w"]
    unknown = ResponseId.drawn("notes", "default")
    with pytest.raises(NotFound, match="no response"):
        respond(store, input="x", previous_response_id=str(unknown))


def test_the_stream_events_are_numbered_and_name_one_item() -> None:
    ask = parse_response({"input": "hi"})
    response = ResponseId.drawn("s", "default")
    events = Events(response, ask, 0.0, "offline")
    started = events.started()
    said = [events.delta("he"), events.delta("llo")]
    failed = events.failed("upstream gone", 6)
    sent = [*started, *said, *failed]
    assert [kind for kind, _ in sent] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.delta",
        "error",
        "response.failed",
    ]
    assert [data["sequence_number"] for _, data in sent] == list(range(8))
    assert {data["item_id"] for _, data in sent if "item_id" in data} == {
        started[2][1]["item"]["id"]
    }
    assert failed[0][1]["code"] == "6"
    assert failed[1][1]["response"]["status"] == "failed"
    assert {data["response"]["id"] for _, data in sent if "response" in data} == {str(response)}


def test_a_response_named_while_a_turn_runs_on_its_slot_forks_before_either_is_sent(
    store: Store,
) -> None:
    first, one = respond(store, input="a")
    session = first.placed.session
    flights = Flights()
    ask_b = parse_response({"input": "b", "previous_response_id": str(first.id)})
    ask_c = parse_response({"input": "c", "previous_response_id": str(first.id)})
    # Both placed before either turn is sent, as two requests at once are: the second
    # forks at the response rather than append to the slot the first will write.
    flight_b, flight_c = flights.admit(), flights.admit()
    assert flight_b is not None and flight_c is not None
    b = place(store, ask_b, None, None, flight_b)
    c = place(store, ask_c, None, None, flight_c)
    assert (b.placed.slot, c.placed.slot) == ("default", "default-2")
    with flight_c:  # the fork's turn ends first
        said_c = answer(c, ask_c, OFFLINE).reply.text()
    with flight_b:
        said_b = answer(b, ask_b, OFFLINE).reply.text()
    assert texts(store, session, "default") == ["a", one.reply.text(), "b", said_b]
    assert texts(store, session, "default-2") == ["a", one.reply.text(), "c", said_c]

    # Once its turn has landed, a response's slot is free again: the next turn appends.
    after = parse_response({"input": "d", "previous_response_id": str(b.id)})
    assert place(store, after, None, None, flights.admit()).placed.slot == "default"


def test_a_turn_following_a_response_is_refused_when_another_writer_wrote_its_slot(
    store: Store,
) -> None:
    first, one = respond(store, input="a")
    session = first.placed.session
    ask = parse_response({"input": "b", "previous_response_id": str(first.id)})
    placement = place(store, ask, None, None)
    heard: list[Event] = []

    def another_writer(event: Event) -> None:
        """Another writer appends to the slot while the model answers this turn."""
        if not heard:
            heard.append(event)
            store.update_slot(
                session, "default", lambda s: s.messages.append(Message(role="user", content="x"))
            )

    with pytest.raises(SlotMoved, match="1 messages were appended"):
        answer(placement, ask, OFFLINE, on_event=another_writer)
    # Not written after a message its reply never saw: kept in the slot's draft.
    assert texts(store, session, "default") == ["a", one.reply.text(), "x"]
    draft = store.load_draft(session, "default")
    assert draft.prompt == "b" and draft.reply is not None and "you said" in draft.reply.text()


def test_a_failed_turn_takes_its_earlier_input_out_and_a_retry_appends_again(
    store: Store,
) -> None:
    first, one = respond(store, input="a")
    session = first.placed.session
    body: dict[str, Any] = {
        "input": [
            {"role": "developer", "content": "Use short words."},
            {"role": "user", "content": "next"},
        ],
        "previous_response_id": str(first.id),
    }
    ask = parse_response(body)

    def failed(placement: Placement) -> None:
        """The turn stopped by its client leaving (the server cancels its flight)."""
        flight = Flights().admit()
        assert flight is not None
        flight.cancel("the client disconnected")
        with pytest.raises(TurnInterrupted):
            answer(placement, ask, OFFLINE, on_event=flight.watching(None))

    failed(place(store, ask, None, None))
    assert texts(store, session, "default") == ["a", one.reply.text()]
    assert store.load_draft(session, "default").prompt == "next"
    retried, reply = respond(store, **body)
    assert retried.placed.slot == "default" and store.slot_ids(session) == ["default"]
    assert texts(store, session, "default") == [
        "a",
        one.reply.text(),
        "Use short words.",
        "next",
        reply.reply.text(),
    ]
    # A fork made for a failed turn stays, holding its draft and what the response left.
    forked = place(store, ask, None, None)
    failed(forked)
    assert forked.placed.slot == "default-2"
    assert texts(store, session, "default-2") == ["a", one.reply.text()]
    assert store.load_draft(session, "default-2").prompt == "next"


def test_the_sdk_puts_the_streamed_text_in_the_one_part_announced() -> None:
    """The openai SDK's own accumulation of the events: one part, the deltas in it."""
    from openai.lib.streaming.responses import ResponseStreamState
    from openai.types.responses import ResponseStreamEvent
    from pydantic import TypeAdapter

    parts: list[list[list[str]]] = []

    class Watched(ResponseStreamState[str]):
        """The SDK's state, its snapshot's text parts noted after each event."""

        def accumulate_event(self, event: Any) -> Any:
            snapshot: Any = super().accumulate_event(event)
            parts.append([[p.text for p in item.content] for item in snapshot.output])
            return snapshot

    events = Events(ResponseId.drawn("s", "default"), parse_response({"input": "hi"}), 0.0, "m")
    state = Watched(input_tools=[], text_format=str)
    parsed: TypeAdapter[Any] = TypeAdapter(ResponseStreamEvent)
    for _, data in [*events.started(), events.delta("hel"), events.delta("lo")]:
        state.handle_event(parsed.validate_python(data))
    assert parts == [[], [], [[]], [[""]], [["hel"]], [["hello"]]]
