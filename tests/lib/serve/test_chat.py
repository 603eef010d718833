"""agctl.serve.chat: a chat completions request checked, and placed on its session and
slot: appended, extended, or branched where its history parts from the slot's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from helpers import add, msg

from agctl.base.errors import InvalidInput, NotFound
from agctl.serve.chat import divergence, fingerprint, parse_chat, place, run_chat
from agctl.store import Store
from agctl.turn.setup import ModelChoice

SYSTEM = {"role": "system", "content": "Be brief."}


def said(*texts: str) -> list[dict[str, Any]]:
    """Alternating user and assistant messages."""
    return [{"role": ("user", "assistant")[i % 2], "content": t} for i, t in enumerate(texts)]


def body(*messages: dict[str, Any], **more: Any) -> dict[str, Any]:
    return {"model": "m", "messages": list(messages), **more}


@pytest.mark.parametrize(
    ("given", "needle"),
    [
        ([], "not a JSON object"),
        ({"messages": []}, "messages: a non-empty array"),
        ({"messages": [{"role": "wizard", "content": "x"}]}, "messages[0]"),
        ({"messages": said("a", "b")}, "the last message must be a user message"),
        ({"messages": said("a"), "stream": 1}, "stream: expected a boolean"),
        ({"messages": said("a"), "temperature": "hot"}, "temperature: expected a number"),
        ({"messages": said("a"), "max_tokens": True}, "max_tokens: expected a int"),
    ],
)
def test_a_request_is_checked_before_anything_is_placed(given: Any, needle: str) -> None:
    with pytest.raises(InvalidInput, match=needle.replace("[", r"\[")):
        parse_chat(given)


def test_the_fingerprint_is_the_same_from_the_first_request_to_the_last() -> None:
    first = parse_chat(body(SYSTEM, *said("hello")))
    later = parse_chat(body(SYSTEM, *said("hello", "hi", "more")))
    other = parse_chat(body(*said("hello", "hi", "more")))
    assert fingerprint(first) == fingerprint(later) != fingerprint(other)
    assert fingerprint(first).startswith("srv-") and len(fingerprint(first)) == 20


def test_a_history_is_appended_extended_or_branched(store: Store) -> None:
    chat = parse_chat(body(SYSTEM, *said("a", "b", "c")))
    placed = place(store, chat, None, None)
    session = placed.session
    assert store.load_session(session).system_prompt == "Be brief."
    # The slot lacked the history: appended.
    assert (placed.slot, placed.appended, placed.branched_at) == ("default", 2, None)
    # The same history again: a pure extension, nothing changes.
    again = place(store, chat, None, None)
    assert (again.slot, again.appended, again.branched_at) == ("default", 0, None)
    # A history parting at message 1: a new slot with the shared message and the rest.
    edited = parse_chat(body(SYSTEM, *said("a", "B!", "c")))
    branched = place(store, edited, None, None)
    assert (branched.slot, branched.branched_from, branched.branched_at) == (
        "default-2",
        "default",
        1,
    )
    assert [m.text() for m in store.load_slot(session, "default-2").messages] == ["a", "B!"]
    assert [m.text() for m in store.load_slot(session, "default").messages] == ["a", "b"]
    # Only the new message: the slot's context is used as it is.
    alone = place(store, parse_chat(body(*said("z"))), session, "default")
    assert (alone.slot, alone.appended) == ("default", 0)


def test_histories_part_where_the_json_the_model_sees_differs() -> None:
    """Compared as sent: a field the wire passes on that is 1 in one and true (or 1.0)
    in the other parts them, though Python finds the two equal; metadata does not."""
    first = {"role": "user", "content": "c", "n": 1}
    stored = parse_chat(body(*said("a", "b"), first, *said("next"))).history
    for other, shared in (
        ({"role": "user", "content": "c", "n": 1}, 3),
        ({"content": "c", "n": 1, "role": "user", "created_at": "2026-01-01T00:00:00Z"}, 3),
        ({"role": "user", "content": "c", "n": True}, 2),
        ({"role": "user", "content": "c", "n": 1.0}, 2),
        ({"role": "user", "content": [{"type": "text", "text": "c"}], "n": 1}, 2),
    ):
        given = parse_chat(body(*said("a", "b"), other, *said("next"))).history
        assert divergence(stored, given) == shared, other
    assert divergence(stored[:1], stored) == divergence(stored, stored[:1]) == 1
    assert divergence([], stored) == 0


def test_a_named_session_must_exist_and_a_turn_goes_where_it_was_placed(store: Store) -> None:
    with pytest.raises(NotFound, match="no session 'nope'"):
        place(store, parse_chat(body(*said("x"))), "nope", None)
    store.create_session("s")
    add(store, "s", None, msg("user", "kept"), msg("assistant", "yes"))

    placed, result = run_chat(
        store,
        parse_chat(body(*said("kept", "no", "next"))),
        ModelChoice(provider="offline"),
        session="s",
    )

    assert (placed.slot, result.slot_id) == ("default-2", "default-2")
    assert [m.text() for m in store.load_slot("s", "default-2").messages][:3] == [
        "kept",
        "no",
        "next",
    ]


def test_a_first_reply_regenerated_by_a_whole_history_client_is_a_branch(store: Store) -> None:
    """The fingerprint's session gets the first request again: a branch at message 0,
    not the same question asked twice in one slot."""
    chat = parse_chat(body(SYSTEM, *said("hello")))
    first, _ = run_chat(store, chat, ModelChoice(provider="offline"))
    again, result = run_chat(store, chat, ModelChoice(provider="offline"))

    assert (first.session, first.slot) == (again.session, "default")
    assert (again.slot, again.branched_from, again.branched_at) == ("default-2", "default", 0)
    assert [m.text() for m in store.load_slot(again.session, "default").messages][:1] == ["hello"]
    assert len(store.load_slot(again.session, "default").messages) == 2
    assert [m.role for m in store.load_slot(again.session, "default-2").messages] == [
        "user",
        "assistant",
    ]
    assert result.slot_id == "default-2"


OFFLINE = ModelChoice(provider="offline")


def turns(store: Store, history: list[dict[str, Any]], *prompts: str) -> list[dict[str, Any]]:
    """A whole-history client's turns: each prompt sent with the history, the reply kept."""
    for prompt in prompts:
        history = [*history, {"role": "user", "content": prompt}]
        _, result = run_chat(store, parse_chat(body(*history)), OFFLINE)
        history = [*history, {"role": "assistant", "content": result.reply.text()}]
    return history


def test_a_client_going_on_after_a_regenerated_reply_stays_on_its_branch(store: Store) -> None:
    """Its branch is found among the session's slots (no new branch each turn); going back
    to the old history finds the old slot."""
    history = turns(store, [SYSTEM], "a", "b")
    regenerated = turns(store, history[:3], "b")  # "b" answered again
    session = fingerprint(parse_chat(body(*history[:2])))
    onward = turns(store, regenerated, "c", "d")
    back = turns(store, history, "e")

    assert sorted(store.slot_ids(session)) == ["default", "default-2"]
    branch = [m.text() for m in store.load_slot(session, "default-2").messages]
    assert branch == [m["content"] for m in onward[1:]]
    old = [m.text() for m in store.load_slot(session, "default").messages]
    assert old == [m["content"] for m in back[1:]]


def test_a_whole_history_client_goes_on_from_a_compressed_slot(store: Store) -> None:
    """The slot holds a summary and the messages it kept: the client's history, which
    still has all the folded messages, extends it (nothing appended twice, no branch); a
    reply regenerated among the kept messages branches there, the summary kept."""
    from agctl.providers.offline import OfflineProvider
    from agctl.turn.compress import compress

    history = turns(store, [SYSTEM], "q0", "q1", "q2", "q3")
    session = fingerprint(parse_chat(body(*history[:2])))
    compress(store, session, None, strategy="extractive", keep_recent=2, provider=OfflineProvider())
    onward = turns(store, history, "q4")

    slot = store.load_slot(session, "default")
    assert store.slot_ids(session) == ["default"]
    assert len(slot.compressed) == 1
    assert [m.text() for m in slot.messages] == [m["content"] for m in onward[-4:]]

    again = parse_chat(body(*onward[:-2], {"role": "user", "content": "q4"}))
    placed = place(store, again, None, None)
    assert (placed.slot, placed.branched_from, placed.branched_at) == ("default-2", "default", 2)
    branch = store.load_slot(session, "default-2")
    assert branch.compressed == slot.compressed
    assert [m.text() for m in branch.messages] == [m["content"] for m in onward[-4:-2]]


def test_whole_history_clients_at_once_append_what_the_slot_lacks_once(store: Store) -> None:
    """Placement holds the session's lock from its read to its last write: 6 requests at
    once with the same history the slot lacks append it once, 20 times over."""
    from concurrent.futures import ThreadPoolExecutor

    history = said("a", "b", "c", "d")
    chat = parse_chat(body(*history, {"role": "user", "content": "next"}))
    with ThreadPoolExecutor(6) as pool:
        for round in range(20):
            session = f"s{round}"
            store.create_session(session)
            placed = list(pool.map(place, *zip(*[(store, chat, session, None)] * 6, strict=True)))
            assert sum(p.appended for p in placed) == 4
            assert {p.slot for p in placed} == {"default"}
            kept = store.load_slot(session, "default").messages
            assert [m.text() for m in kept] == ["a", "b", "c", "d"]


def test_the_client_system_prompt_is_the_turn_s_in_a_named_session(
    store: Store, tmp_path: Path
) -> None:
    """A named session's own system prompt is replaced for the turn by the client's (the
    request recorded in a cassette is what the model got); without one, the session's."""
    import json

    store.create_session("s", system_prompt="Be terse.")
    cassette = tmp_path / "sent.cassette"
    asked = body({"role": "system", "content": "Talk like a pirate."}, *said("hi"))
    run_chat(store, parse_chat(asked), OFFLINE, session="s", record=cassette)
    run_chat(store, parse_chat(body(*said("more"))), OFFLINE, session="s", record=cassette)

    sent = [json.loads(line)["request"]["messages"] for line in cassette.read_text().splitlines()]
    assert [m[0] for m in sent] == [
        {"role": "system", "content": "Talk like a pirate."},
        {"role": "system", "content": "Be terse."},
    ]


def compressed_session(store: Store) -> tuple[str, list[dict[str, Any]]]:
    """A whole-history client's session of 4 turns, its slot compressed to the last 2
    messages kept, and the client's history."""
    from agctl.providers.offline import OfflineProvider
    from agctl.turn.compress import compress

    history = turns(store, [SYSTEM], "q0", "q1", "q2", "q3")
    session = fingerprint(parse_chat(body(*history[:2])))
    compress(store, session, None, strategy="extractive", keep_recent=4, provider=OfflineProvider())
    return session, history


def test_a_compressed_slot_is_extended_only_by_a_history_holding_its_kept_messages_whole(
    store: Store,
) -> None:
    """An edit among the kept messages branches where it is; a history holding only the
    slot's last message somewhere does not extend it; the other slots are not taken for a
    history that merely shares a message with them."""
    session, history = compressed_session(store)
    kept = [m.text() for m in store.load_slot(session, "default").messages]
    assert kept == [m["content"] for m in history[-4:]]

    edited = [*history[:-4], {"role": "user", "content": "q2 EDITED"}, *history[-3:]]
    placed = place(store, parse_chat(body(*edited, {"role": "user", "content": "q4"})), None, None)
    assert (placed.slot, placed.branched_from, placed.branched_at) == ("default-2", "default", 0)
    assert store.load_slot(session, "default-2").compressed == []  # the summary not kept

    unrelated = [SYSTEM, {"role": "user", "content": "q0"}, history[-1]]
    placed = place(
        store, parse_chat(body(*unrelated, {"role": "user", "content": "x"})), None, None
    )
    assert placed.slot == "default-3"  # from the edited branch, which shares "q0"
    assert [m.text() for m in store.load_slot(session, "default").messages] == kept


def test_branch_names_do_not_grow_with_each_regeneration(store: Store) -> None:
    """The same first reply regenerated six times: default-2 to default-7."""
    history = [SYSTEM, {"role": "user", "content": "hello"}]
    for _ in range(7):
        placed, _ = run_chat(store, parse_chat(body(*history)), OFFLINE)
    session = placed.session
    assert sorted(store.slot_ids(session)) == ["default", *(f"default-{n}" for n in range(2, 8))]
    assert store.load_session(session).current_slot == "default-7"


def test_tool_results_sent_again_after_a_failed_turn_go_on(store: Store) -> None:
    """Results given alone are written before the turn: the same results again (the
    turn failed) are found there, not refused as answering no call."""
    from agctl.context.models import Message, ToolCall

    store.create_session("s")
    call = ToolCall.model_validate(
        {"id": "w1", "type": "function", "function": {"name": "weather", "arguments": "{}"}}
    )
    add(store, "s", None, msg("user", "weather?"))
    store.update_slot(
        "s", None, lambda s: s.messages.append(Message(role="assistant", tool_calls=[call]))
    )
    result = {"role": "tool", "tool_call_id": "w1", "content": "sunny"}
    first = place(store, parse_chat(body(result)), "s", None)
    again = place(store, parse_chat(body(result)), "s", None)
    assert (first.appended, again.appended) == (1, 0)
    roles = [m.role for m in store.load_slot("s", None).messages]
    assert roles == ["user", "assistant", "tool"]


def test_a_history_going_on_from_a_slot_a_turn_is_going_on_from_branches(store: Store) -> None:
    """Two whole-history requests at once with different new messages: the second, placed
    while the first's turn is in flight, goes to a branch; once it lands, appends again."""
    from agctl.serve.flights import Flights

    flights = Flights()
    history = turns(store, [SYSTEM], "a")
    one, two, three = (flights.admit() for _ in range(3))
    assert one is not None and two is not None and three is not None
    first = place(
        store, parse_chat(body(*history, {"role": "user", "content": "ONE"})), None, None, one
    )
    second = place(
        store, parse_chat(body(*history, {"role": "user", "content": "TWO"})), None, None, two
    )
    assert (first.slot, second.slot, second.branched_at) == ("default", "default-2", 2)
    for flight in (one, two):
        with flight:
            pass
    third = place(
        store, parse_chat(body(*history, {"role": "user", "content": "3"})), None, None, three
    )
    assert third.slot == "default-2"  # the current slot since the branch, free again


def test_a_branch_in_a_named_session_becomes_its_current_slot(store: Store) -> None:
    """With no slot named, the branch a diverging history makes is where the session's
    next request looks first (no scan of every slot each turn)."""
    store.create_session("s")
    add(store, "s", None, msg("user", "kept"), msg("assistant", "yes"))
    placed = place(store, parse_chat(body(*said("kept", "no", "next"))), "s", None)
    assert placed.slot == "default-2"
    assert store.load_session("s").current_slot == "default-2"
