"""`agctl serve`: an OpenAI-compatible endpoint that keeps each conversation as a session.

`serve` opens the listening socket itself (so a port in use is an error that says so,
and port 0 picks a free one), then runs the application (agctl.serve.app) on Uvicorn
until SIGINT or SIGTERM: it stops accepting, gives the turns in flight `grace` seconds
to finish, then cancels those still running, each kept as a draft (agctl.serve.flights),
and waits for them to end.
"""

from __future__ import annotations

import ipaddress
import logging
import socket
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from agctl.base.errors import AgctlError, UsageError, interrupt_signal
from agctl.serve.flights import GRACE_SECONDS, MAX_CONCURRENT, Flights, Tally

if TYPE_CHECKING:
    from pathlib import Path

    from agctl.store import Store
    from agctl.turn.setup import ModelChoice

# The hosts `serve` listens on without a token: this machine's own.
LOOPBACK_NAMES = ("localhost",)


@dataclass(frozen=True)
class Stopped:
    """How the server stopped: the signal, and what became of the turns then in flight
    (`abandoned`: still waiting on their provider when the server gave up on them)."""

    signum: int
    tally: Tally
    abandoned: int = 0


def is_loopback(host: str) -> bool:
    """Whether `host` is this machine only (127.0.0.0/8, ::1, localhost)."""
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_exposure(host: str, token: str | None) -> None:
    """Listening beyond this machine needs a token: refuse it without one."""
    if not is_loopback(host) and not token:
        raise UsageError(
            f"--host {host} listens beyond this machine: give a token (--token or "
            "AGCTL_SERVE_TOKEN) that clients send as 'Authorization: Bearer TOKEN'"
        )


def log_line(record: dict[str, Any]) -> None:
    """A request's record as an INFO line of the agctl.serve logger."""
    shown = " ".join(f"{key}={value}" for key, value in record.items() if value is not None)
    logging.getLogger("agctl.serve").info("%s", shown)


# Allocations between the garbage collector's youngest passes: a 1,000-message request
# makes some 30,000 objects, which at Python's default (700) is dozens of passes and a
# few full ones, each walking the server's whole heap.
COLLECT_EVERY = 20_000


def settle_collector() -> None:
    """Ready the collector for a long-running server: what start-up made (imports, the
    store, the app) frozen out of its passes, and passes less often. bench/proxy.py, the
    1,000-message whole-history turn: 12.9 ms added, 15.5 ms without, in one run."""
    import gc

    gc.collect()
    gc.freeze()
    gc.set_threshold(COLLECT_EVERY, 20, 20)


def listening_socket(host: str, port: int) -> socket.socket:
    """A socket bound to `host:port` and listening, or an error naming why not."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(128)
    except OSError as exc:
        sock.close()
        raise AgctlError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    return sock


def serve(
    store: Store,
    choice: ModelChoice,
    *,
    host: str = "127.0.0.1",
    port: int = 8765,
    token: str | None = None,
    max_body: int | None = None,
    on_ready: Callable[[str, str], None] | None = None,
    check: bool = False,
    log: Callable[[dict[str, Any]], None] | None = None,
    max_concurrent: int = MAX_CONCURRENT,
    grace: float = GRACE_SECONDS,
    record: Path | None = None,
) -> Stopped | None:
    """Serve `store`'s sessions with the model `choice` resolves to, until stopped;
    `on_ready` hears the base URL clients use and the model once the socket listens.
    With `check`, stop there: the extra, the model's settings and the port are fine.
    `log` hears one record per request once it is answered (default: the agctl.serve
    logger's INFO lines, which -v shows). At most `max_concurrent` turns run at once (a
    request beyond gets 429). Returns how a signal (SIGINT, SIGTERM) stopped it, once the
    turns in flight finished, or were drafted after `grace` seconds. With `record`, every
    request and its reply are appended to that cassette."""
    check_exposure(host, token)
    # The command line stubs anyio and trio out for httpcore's sake (agctl.cli.main);
    # Starlette runs on anyio.
    for name in ("anyio", "trio"):
        if name in sys.modules and sys.modules[name] is None:
            del sys.modules[name]
    try:
        import uvicorn
    except ImportError:
        raise AgctlError(
            "agctl serve needs its extra: pip install 'agctl[serve]' (Starlette and Uvicorn)"
        ) from None
    from agctl.serve.app import MAX_BODY_BYTES, Served, build_app
    from agctl.serve.watch import StoppingServer
    from agctl.turn.setup import ModelSetup

    setup = ModelSetup.chosen(None, "", choice)
    setup.provider()  # a missing key or cassette is said now, not at the first request
    # The store opened now (a PostgreSQL server connected to, its schema checked): one
    # that cannot be reached is said now, and the first turn finds the connection open.
    store.session_ids()
    flights = Flights(max_concurrent)
    served = Served(
        store,
        choice,
        setup.settings.model,
        token,
        max_body or MAX_BODY_BYTES,
        log or log_line,
        flights,
        record,
    )
    sock = listening_socket(host, port)
    bound = sock.getsockname()[1]
    shown = f"[{host}]" if ":" in host else host
    config = uvicorn.Config(
        build_app(served), log_level="warning", access_log=False, lifespan="off"
    )
    server = StoppingServer(config, flights, grace)
    try:
        if on_ready is not None:
            on_ready(f"http://{shown}:{bound}/v1", served.model)
        if not check:
            settle_collector()
            server.run(sockets=[sock])
    except KeyboardInterrupt as stop:
        # Uvicorn raises again the signal it stopped on once it has shut down; the
        # command line's handler makes it this (agctl.cli.main). A turn whose client left
        # may still be waiting on its provider, cancelled: it gets the grace once more.
        abandoned = flights.wait(grace)
        return Stopped(interrupt_signal(stop), flights.tally, abandoned)
    finally:
        sock.close()
    return None
