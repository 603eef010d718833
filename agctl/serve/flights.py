"""The turns `agctl serve` has in flight: how many may run at once, and how one stops early.

A request's turn is admitted as a Flight, or refused at once when `limit` are running (the
client gets 429 and retries; threads never pile up). A flight is cancelled when its client
disconnects, or when the server, told to stop, has waited its grace for it: the turn stops
at its next event from the provider (a piece of the reply, or the whole reply) with
TurnInterrupted, which agctl's turn treats as Ctrl-C: nothing is written to the slot and
the prompt (and any reply so far) is kept as the slot's draft. A turn waiting on a silent
upstream stops when the next piece comes, or at the profile's read_timeout.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from agctl.base.errors import SIGINT, TurnInterrupted, signal_name

if TYPE_CHECKING:
    from types import TracebackType

    from agctl.providers.base import Event
    from agctl.store import Store

T = TypeVar("T")

# How many turns run at once unless the server is told otherwise.
MAX_CONCURRENT = 16
# How long a stopping server waits for its turns in flight before it cancels them.
GRACE_SECONDS = 30.0
# What a client refused for the limit is told to wait before it tries again.
RETRY_AFTER_SECONDS = 1

log = logging.getLogger("agctl.serve")


@dataclass
class Tally:
    """What became of the turns in flight when the server was told to stop."""

    finished: int = 0
    drafted: int = 0
    failed: int = 0


class Flight:
    """One turn in flight: cancelled at its next event once `cancel` is called."""

    def __init__(self, flights: Flights) -> None:
        self._flights = flights
        self.cancelled: TurnInterrupted | None = None
        self.started = False
        self.ended = threading.Event()

    def cancel(self, why: str, signum: int = SIGINT) -> None:
        """Stop the turn at its next event (nothing once it has ended)."""
        if not self.ended.is_set() and self.cancelled is None:
            self.cancelled = TurnInterrupted(why, signum=signum)

    def watching(self, on_event: Callable[[Event], None] | None) -> Callable[[Event], None]:
        """`on_event`, raising the cancellation before an event once the turn is cancelled."""

        def heard(event: Event) -> None:
            if self.cancelled is not None:
                raise self.cancelled
            if on_event is not None:
                on_event(event)

        return heard

    def run(self, work: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """`work(*args, on_event=..., **kwargs)` as this flight, its events watched."""
        with self:
            return work(*args, on_event=self.watching(None), **kwargs)

    def forgo(self) -> None:
        """Free the place of a flight whose turn never started (its request given up first)."""
        if not self.started:
            self._flights.landed(self, None, ran=False)

    def __enter__(self) -> Flight:
        self.started = True
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._flights.landed(self, error)


@dataclass
class Flights:
    """The turns in flight, at most `limit`; once stopping, none is admitted."""

    limit: int = MAX_CONCURRENT
    flying: set[Flight] = field(default_factory=set)
    stopping: int | None = None  # the signal the server was told to stop by
    tally: Tally = field(default_factory=Tally)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _stopping_with: set[Flight] = field(default_factory=set)

    def admit(self) -> Flight | None:
        """A new flight, or None when `limit` are in flight or the server is stopping."""
        with self._lock:
            if self.stopping is not None or len(self.flying) >= self.limit:
                return None
            flight = Flight(self)
            self.flying.add(flight)
            return flight

    def landed(self, flight: Flight, error: BaseException | None, *, ran: bool = True) -> None:
        """`flight` ended: counted if the server was stopping, and its place freed."""
        with self._lock:
            self.flying.discard(flight)
            if ran and flight in self._stopping_with:
                if error is None:
                    self.tally.finished += 1
                elif error is flight.cancelled:
                    self.tally.drafted += 1
                else:
                    self.tally.failed += 1
            flight.ended.set()
        if error is not None and error is flight.cancelled:
            log.info("turn drafted (%s): nothing written to its slot", error)

    def stop(self, signum: int, grace: float) -> None:
        """The server was told to stop: admit no more, and cancel the turns still in flight
        after `grace` seconds (at once when told a second time)."""
        with self._lock:
            again = self.stopping is not None
            self.stopping = signum
            self._stopping_with |= self.flying
            count = len(self.flying)
        if again:
            self.cancel_all()
            return
        if count:
            log.warning(
                "%s: waiting up to %g s for %d turn%s in flight, then drafting those still running",
                signal_name(signum),
                grace,
                count,
                "s" * (count != 1),
            )
        timer = threading.Timer(grace, self.cancel_all)
        timer.daemon = True
        timer.start()

    def cancel_all(self) -> None:
        """Cancel every turn in flight: each is drafted at its next event."""
        with self._lock:
            flying = list(self.flying)
            signum = self.stopping or SIGINT
        if not flying:
            return
        log.warning(
            "grace over: cancelling %d turn%s still running (each kept as a draft)",
            len(flying),
            "s" * (len(flying) != 1),
        )
        for flight in flying:
            flight.cancel("the server is stopping", signum=signum)

    def wait(self, timeout: float) -> int:
        """Wait up to `timeout` seconds for the turns in flight to end; how many did not."""
        deadline = time.monotonic() + timeout
        with self._lock:
            flying = list(self.flying)
        if flying and timeout:
            log.warning(
                "waiting up to %g s for %d cancelled turn%s still waiting on the provider",
                timeout,
                len(flying),
                "s" * (len(flying) != 1),
            )
        return sum(not f.ended.wait(max(0.0, deadline - time.monotonic())) for f in flying)


class Running:
    """The turns this process has in flight, by session and slot: each placed turn's
    flight, marked as it is placed and done with once the flight has landed (a request
    going on from a slot another turn is going on from forks: agctl.serve.chat and
    agctl.serve.responses)."""

    def __init__(self) -> None:
        self._flights: dict[tuple[str, str], list[Flight]] = {}
        self._lock = threading.Lock()

    def mark(self, session: str, slot: str, flight: Flight, *, alone: bool = False) -> bool:
        """Mark `flight` as running on the slot (with `alone`, only when no other flight
        is): whether it was marked."""
        with self._lock:
            self._flights = {
                key: alive
                for key, flights in self._flights.items()
                if (alive := [f for f in flights if not f.ended.is_set()])
            }
            others = self._flights.get((session, slot), [])
            if alone and others:
                return False
            self._flights[(session, slot)] = [*others, flight]
            return True


_running: weakref.WeakKeyDictionary[Store, Running] = weakref.WeakKeyDictionary()
_running_lock = threading.Lock()


def running(store: Store) -> Running:
    """The turns in flight on `store`'s slots, for as long as it is open in this process."""
    with _running_lock:
        return _running.setdefault(store, Running())
