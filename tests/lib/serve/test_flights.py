"""agctl.serve.flights: the turns `serve` has in flight, admitted up to a limit, cancelled
into a draft at their next event, and counted once the server is told to stop."""

from __future__ import annotations

import signal

import pytest

from agctl.base.errors import Conflict, TurnInterrupted
from agctl.serve.chat import parse_chat, run_chat
from agctl.serve.flights import Flights, Tally
from agctl.store import Store
from agctl.turn.setup import ModelChoice

HELLO = {"model": "m", "messages": [{"role": "user", "content": "hello"}]}


def test_at_most_limit_are_admitted_and_a_landed_one_frees_its_place() -> None:
    flights = Flights(limit=2)
    first, second = flights.admit(), flights.admit()
    assert first is not None and second is not None
    assert flights.admit() is None
    with first:
        pass
    assert first.ended.is_set()
    third = flights.admit()
    assert third is not None
    third.forgo()  # its request given up before the turn started
    assert len(flights.flying) == 1 and flights.admit() is not None


@pytest.mark.parametrize("stream", [True, False])
def test_a_cancelled_turn_stops_at_its_next_event_writes_nothing_and_keeps_a_draft(
    store: Store, stream: bool
) -> None:
    store.create_session("s")
    flight = Flights().admit()
    assert flight is not None
    heard: list[object] = []

    def first_event(event: object) -> None:
        heard.append(event)
        flight.cancel("the client disconnected")

    with pytest.raises(TurnInterrupted, match="the client disconnected") as raised, flight:
        run_chat(
            store,
            parse_chat({**HELLO, "stream": stream}),
            ModelChoice(provider="offline"),
            session="s",
            on_event=flight.watching(first_event),
        )
    assert raised.value is flight.cancelled and len(heard) == 1
    assert store.load_slot("s").messages == []
    draft = store.load_draft("s", "default")
    assert draft is not None and draft.prompt == "hello"
    assert "the client disconnected" in (draft.error or "")


def test_a_turn_not_cancelled_commits_and_a_cancel_after_it_ended_changes_nothing(
    store: Store,
) -> None:
    store.create_session("s")
    flight = Flights().admit()
    assert flight is not None
    placed, result = flight.run(
        run_chat, store, parse_chat(HELLO), ModelChoice(provider="offline"), session="s"
    )
    flight.cancel("too late")
    assert flight.cancelled is None
    assert [m.role for m in store.load_slot("s").messages] == ["user", "assistant"]
    assert result.turn == 1 and placed.session == "s"


def test_stopping_admits_none_counts_those_in_flight_and_cancels_them_when_told() -> None:
    flights = Flights()
    finished, drafted, failed, ignored = (flights.admit() for _ in range(4))
    assert finished and drafted and failed and ignored
    with ignored:  # landed before the stop: not counted
        pass
    flights.stop(signal.SIGTERM, grace=3600)
    assert flights.stopping == signal.SIGTERM and flights.admit() is None
    with finished:
        pass
    with pytest.raises(Conflict), failed:
        raise Conflict("busy")
    flights.stop(signal.SIGTERM, grace=3600)  # told again: cancelled at once
    assert isinstance(drafted.cancelled, TurnInterrupted)
    assert drafted.cancelled.exit_code == 128 + signal.SIGTERM
    with pytest.raises(TurnInterrupted), drafted:
        drafted.watching(None)(object())  # type: ignore[arg-type]
    assert flights.tally == Tally(finished=1, drafted=1, failed=1)
    assert flights.wait(0) == 0
