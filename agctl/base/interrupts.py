"""What stops agctl: Ctrl-C (SIGINT), SIGTERM (`timeout`, `docker stop`, a CI cancel) and
SIGHUP (a closed terminal), alike.

The command line calls `interrupt_on_signals`, which makes each raise
agctl.base.errors.Interrupted (a KeyboardInterrupt carrying the signal) in the main thread, so
every place that handles Ctrl-C — a tool's processes killed, a turn's draft kept, a commit
finished first (agctl.base.fsio.deferred_interrupts) — handles them too, and the command exits
128 + the signal. Calls running in other threads (`turn send --tool-jobs`) see
`interrupted_since` and stop as well. It also says whether the calls of this process may
adopt orphans (`adopt_orphans`, agctl.base.procs). The library installs no handler of its own.

Imports the signal module only: the command line imports this as it starts.
"""

from __future__ import annotations

import signal
from types import FrameType

from agctl.base.errors import Interrupted

INTERRUPTING = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

# How many interrupts the handlers have raised, and the last one's signal.
_interrupts = 0
_last_signal: int | None = None
_adopting = False
# An interrupt that came while a unit of work finished, for its loop to stop at (`hold`).
_held: int | None = None


def _interrupt(signum: int, frame: FrameType | None) -> None:
    global _interrupts, _last_signal
    _interrupts += 1
    _last_signal = signum
    raise Interrupted(signum)


def interrupt_on_signals() -> None:
    """Make SIGINT, SIGTERM and SIGHUP raise Interrupted in the main thread; a signal the
    process was started ignoring stays ignored (`nohup agctl ...` keeps its hang-ups away)."""
    for signum in INTERRUPTING:
        if signal.getsignal(signum) is not signal.SIG_IGN:
            signal.signal(signum, _interrupt)


def interrupt_count() -> int:
    """How many interrupts were raised so far: a call notes it when it starts."""
    return _interrupts


def interrupted_since(count: int) -> int | None:
    """The signal of an interrupt raised since `interrupt_count()` was `count`, else None:
    a call running in a worker thread stops when the main thread was interrupted."""
    return _last_signal if _interrupts != count else None


def raise_if_interrupted() -> None:
    """In a worker thread, raise Interrupted once the main thread was interrupted, so a
    call that had not started (or a question still waiting for its answer) starts nothing
    after the signal; in the main thread nothing: the handler raised there itself."""
    import threading

    worker = threading.current_thread() is not threading.main_thread()
    if worker and _interrupts and _last_signal is not None:
        raise Interrupted(_last_signal)


def hold(signum: int) -> None:
    """Remember an interrupt that came while a unit of work finished (a commit), for the
    loop around it to stop at its next step (`take_held`)."""
    global _held
    _held = signum if _held is None else _held


def take_held() -> int | None:
    """The interrupt held since the last call, if any (then forgotten)."""
    global _held
    signum, _held = _held, None
    return signum


def adopt_orphans() -> None:
    """Let the calls of this process adopt the orphans of what they started: the first
    call makes it a child subreaper (Linux), so that a tool's child that leaves its group
    and loses its parent (setsid, a daemon's double fork) comes back to agctl, not to
    init, and ends with its call (agctl.base.procs). Only the command line asks this: a process
    that starts daemons of its own (a test's database) must never take them for a call's."""
    global _adopting
    _adopting = True


def adopting() -> bool:
    """Whether `adopt_orphans` was asked."""
    return _adopting
