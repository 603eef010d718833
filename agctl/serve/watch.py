"""Where `agctl serve` hears that a turn must stop (agctl.serve.flights): its client's
disconnect, from the ASGI `receive` channel, and the server's stop signal, from Uvicorn.

Imported by the application only (it imports Starlette and Uvicorn).
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import anyio
import uvicorn
from starlette.responses import StreamingResponse
from starlette.types import Message, Receive, Scope, Send

from agctl.serve.flights import Flight, Flights, log

T = TypeVar("T")


def cancelling(receive: Receive, flight: Flight) -> Receive:
    """`receive`, cancelling `flight` the moment the client is gone (a disconnect that
    comes after the turn ended changes nothing)."""

    async def receiving() -> Message:
        message = await receive()
        if message["type"] == "http.disconnect" and not flight.ended.is_set():
            flight.cancel("the client disconnected")
            log.info("client disconnected: its turn is cancelled and kept as a draft")
        return message

    return receiving


async def until_gone(receive: Receive, flight: Flight) -> None:
    """Wait for the client to disconnect, cancelling `flight` then."""
    heard = cancelling(receive, flight)
    while (await heard())["type"] != "http.disconnect":
        pass


class WatchedStream(StreamingResponse):
    """A streamed reply whose turn is cancelled, and its stream ended, as soon as its
    client disconnects, not at the next piece it fails to send. It listens itself:
    Starlette's StreamingResponse listens only under an ASGI spec_version below 2.4
    (Uvicorn 0.55 says 2.3); from 2.4 on it waits for a send to fail, and Uvicorn's
    sends to a gone client do not."""

    def __init__(self, flight: Flight, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.flight = flight

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        failed: list[Exception] = []
        try:
            async with anyio.create_task_group() as group:

                async def listen() -> None:
                    await until_gone(receive, self.flight)
                    group.cancel_scope.cancel()

                group.start_soon(listen)
                try:
                    await self.stream_response(send)
                except Exception as exc:  # raised below, out of the task group's grouping
                    failed.append(exc)
                group.cancel_scope.cancel()
        finally:
            self.flight.forgo()
        if failed:
            raise failed[0]


async def watched(flight: Flight, receive: Receive, work: Callable[[], Awaitable[T]]) -> T:
    """`work()`, its flight cancelled if the client disconnects before it is done."""
    outcome: dict[str, Any] = {}
    try:
        async with anyio.create_task_group() as group:
            group.start_soon(until_gone, receive, flight)
            try:
                outcome["done"] = await work()
            except Exception as exc:  # raised below, out of the task group's grouping
                outcome["error"] = exc
            group.cancel_scope.cancel()
    finally:
        flight.forgo()
    if "error" in outcome:
        raise outcome["error"]
    done: T = outcome["done"]
    return done


class StoppingServer(uvicorn.Server):
    """Uvicorn's server, telling the flights when a signal stops it: they get `grace`
    seconds to finish, then are cancelled (at once on a second signal)."""

    def __init__(self, config: uvicorn.Config, flights: Flights, grace: float) -> None:
        super().__init__(config)
        self.flights = flights
        self.grace = grace

    def handle_exit(self, sig: int, frame: Any) -> None:
        super().handle_exit(sig, frame)
        # Not here: the handler may have interrupted this thread inside the flights' lock.
        threading.Thread(target=self.flights.stop, args=(sig, self.grace), daemon=True).start()
