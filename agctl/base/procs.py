"""The processes a tool or hook call starts, and ending every one of them with the call.

A call runs in a process group and session of its own, but a child may leave them (setsid,
a daemon's double fork) and outlive the call and agctl. `CallProcesses` follows a call's
descendants through /proc on Linux, adopts its orphans when the command line asked
(agctl.base.interrupts.adopt_orphans), and ends what is left when the call ends; elsewhere only
the process group is signalled.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable
from typing import IO, Any, NamedTuple, Protocol, TypeVar

from agctl.base.interrupts import adopting

# How often a running call looks at what it started, and whether agctl was interrupted.
WATCH_S = 0.05


# ---- the processes of a call ---------------------------------------------------------------


class Process(NamedTuple):
    """A process as it is known across pid reuse: its pid and its start time (in clock
    ticks since boot, /proc/PID/stat field 22)."""

    pid: int
    start: int


class _Spawned(Protocol):
    @property
    def pid(self) -> int: ...


Leader = TypeVar("Leader", bound=_Spawned)


class _Stat(NamedTuple):
    state: str
    ppid: int
    group: int
    session: int
    start: int


_PROC = "/proc"
# Whether this process became the reaper of its calls' orphans (see _become_reaper).
_reaper = False
_lock = threading.RLock()
_calls: set[CallProcesses] = set()
# The orphans adopted while calls ran, each with the calls that may have started it.
_owners: dict[Process, set[CallProcesses]] = {}


def _become_reaper() -> None:
    global _reaper
    if _reaper or not adopting():
        return
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        _reaper = libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):  # not Linux: the process group is what is killed
        _reaper = False


_PR_SET_CHILD_SUBREAPER = 36


def _stat(pid: int) -> _Stat | None:
    """What /proc says of `pid`, or None when it is gone (or there is no /proc)."""
    try:
        with open(f"{_PROC}/{pid}/stat", "rb") as file:
            data = file.read()
    except OSError:
        return None
    fields = data[data.rindex(b")") + 2 :].split()
    return _Stat(
        fields[0].decode(), int(fields[1]), int(fields[2]), int(fields[3]), int(fields[19])
    )


def _children(pid: int) -> list[int]:
    """The children of `pid` (of each of its threads)."""
    found: list[int] = []
    try:
        threads = os.listdir(f"{_PROC}/{pid}/task")
    except OSError:
        return found
    for thread in threads:
        try:
            with open(f"{_PROC}/{pid}/task/{thread}/children", "rb") as file:
                found.extend(int(child) for child in file.read().split())
        except OSError:
            continue
    return found


def _present(process: Process) -> bool:
    """Whether `process` is there, running or a zombie (its pid not reused)."""
    stat = _stat(process.pid)
    return stat is not None and stat.start == process.start


def _running(process: Process) -> _Stat | None:
    """`process`'s stat while it runs (not a zombie, its pid not reused), else None."""
    stat = _stat(process.pid)
    if stat is None or stat.start != process.start or stat.state in ("Z", "X"):
        return None
    return stat


def _send(process: Process, signum: int) -> None:
    """Signal `process`, never another that took its pid: the pid is pinned (pidfd) before
    its start time is checked."""
    try:
        pinned = os.pidfd_open(process.pid)
    except (AttributeError, OSError):
        pinned = None
    try:
        if _running(process) is None:
            return
        if pinned is not None:
            signal.pidfd_send_signal(pinned, signum)
        else:
            os.kill(process.pid, signum)
    except OSError:
        pass
    finally:
        if pinned is not None:
            os.close(pinned)


class CallProcesses:
    """Every process one call (a tool's or a hook's run, led by `leader`, the head of its
    own process group and session) starts, so that none outlives the call.

    While the call runs, `watch` follows the leader's descendants through /proc (each
    known by pid and start time, so a reused pid is never taken for one), the subtrees of
    those that lost their parent included. In a process that adopts orphans
    (agctl.base.interrupts.adopt_orphans), an orphan re-parented to agctl is the call's when it
    was seen in the call's tree or is in one of the call's sessions; one that cannot be
    told apart (it left its session and its parent died before any look) is the call's
    when only this call runs, and otherwise belongs to every call running when it came,
    so it is ended with the last of them: never while a call that may need it runs, never
    after the step. `start` starts it, `stop` ends what is left, `release` forgets it."""

    def __init__(self) -> None:
        """Made before the leader starts: the orphans already there are not its own."""
        self.leader = 0
        self.head: Process | None = None
        self.seen: set[Process] = set()
        self.sessions: set[int] = set()
        self.claimed: set[Process] = set()
        self.baseline: set[Process] = set()
        self.term_at: float | None = None
        with _lock:
            _become_reaper()
            if _reaper:
                self.baseline = set(_orphans())

    def start(self, spawn: Callable[[], Leader]) -> Leader:
        """Start the call's leader (a child in a session of its own) with `spawn`, and
        follow it; other calls look for orphans only before or after, never taking a
        leader being started for one."""
        with _lock:
            leader = spawn()
            self.leader = leader.pid
            stat = _stat(leader.pid)  # a child of agctl's, not reaped yet: its pid is its own
            self.head = Process(leader.pid, stat.start) if stat is not None else None
            self.sessions.add(leader.pid)
            _calls.add(self)
        return leader

    def watch(self) -> None:
        """Take note of what the call runs now."""
        if not self.leader:
            return
        with _lock:
            # The gone are forgotten (a zombie is kept until reaped): a call that runs
            # many short commands is not looked at ever more slowly.
            self.seen = {p for p in self.seen if _present(p)}
            roots = [self.leader, *(p.pid for p in self.seen | self.claimed if _running(p))]
            visited: set[int] = set()
            while roots:
                pid = roots.pop()
                for child in _children(pid):
                    stat = _stat(child) if child not in visited else None
                    if stat is None or child == self.leader:
                        continue
                    visited.add(child)
                    self.seen.add(Process(child, stat.start))
                    self.sessions.add(stat.session)
                    roots.append(child)
            if _reaper:
                _adopt()

    def signal(self, signum: int) -> None:
        """Send `signum` to the call's group and to every process of it seen running."""
        if signum == signal.SIGTERM and self.term_at is None:
            self.term_at = time.monotonic()
        if self.leader:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.leader, signum)
        for process in self._own():
            _send(process, signum)

    def stop(self, grace_s: float) -> None:
        """End what the call left running: SIGTERM, then SIGKILL `grace_s` after the first
        SIGTERM (at once when 0), waiting (boundedly) until it is gone; adopted processes
        are reaped."""
        if self.term_at is None and grace_s > 0:
            self.signal(signal.SIGTERM)
        kill_at = (self.term_at or time.monotonic()) + grace_s
        killed_at: float | None = None
        while True:
            self.watch()
            left = [p for p in [*self._own(), *filter(None, [self.head])] if _running(p)]
            now = time.monotonic()
            if killed_at is None and (now >= kill_at or not left):
                self.signal(signal.SIGKILL)
                killed_at = now
            elif left and killed_at is not None:
                for process in left:
                    _send(process, signal.SIGKILL)
            if not left or (killed_at is not None and now >= killed_at + _KILLED_WAIT_S):
                break
            time.sleep(_STOP_POLL_S)
        self._reap()

    def release(self) -> None:
        """Forget the call (after its leader is reaped, or when it could not start); an
        adopted orphan no other running call may own is killed and reaped now."""
        with _lock:
            _calls.discard(self)
            for process in self.claimed:
                owners = _owners.get(process)
                if owners is None:
                    continue
                owners.discard(self)
                if not owners:
                    del _owners[process]
                    _send(process, signal.SIGKILL)
                    _reap(process)

    def _own(self) -> list[Process]:
        """The processes this call alone answers for: those seen in its tree, and those
        adopted that no other running call may have started."""
        with _lock:
            alone = [p for p in self.claimed if _owners.get(p, {self}) == {self}]
            return [*self.seen, *alone]

    def _reap(self) -> None:
        for process in self._own():
            _reap(process)


def call_exited(pid: int) -> bool:
    """Whether the child `pid` exited, leaving it unreaped: its id, its group's, cannot be
    reused meanwhile."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


# After the SIGKILL, how long `stop` waits for the processes to go; how often it looks.
_KILLED_WAIT_S = 1.0
_STOP_POLL_S = 0.02


def _orphans() -> list[Process]:
    """This process's children that a call may have started: in another session than
    agctl's (each call has its own), and no call's leader."""
    me, session = os.getpid(), os.getsid(0)
    leaders = {call.leader for call in _calls}
    found = []
    for child in _children(me):
        stat = _stat(child)
        if stat is None or child in leaders or stat.session == session:
            continue
        found.append(Process(child, stat.start))
    return found


def _adopt() -> None:
    """Give each orphan new since the calls started to the calls that may own it."""
    for orphan in _orphans():
        if orphan in _owners:
            continue
        stat = _stat(orphan.pid)
        if stat is None:
            continue
        owners = {
            call for call in _calls if orphan in call.seen or stat.session in call.sessions
        } or {call for call in _calls if orphan not in call.baseline}
        if not owners:
            continue
        _owners[orphan] = owners
        for call in owners:
            call.claimed.add(orphan)


def _reap(process: Process) -> None:
    """Collect `process` if it is an exited child of agctl's (an adopted orphan)."""
    stat = _stat(process.pid)
    if stat is None or stat.start != process.start or stat.ppid != os.getpid():
        return
    if stat.state in ("Z", "X"):
        with contextlib.suppress(ChildProcessError):
            os.waitpid(process.pid, os.WNOHANG)


def child_writing_to(file: IO[Any]) -> Process | None:
    """agctl's child whose stderr is `file`: a server a library started for agctl, found by
    the file it was given for its errors (Linux, through /proc; None elsewhere)."""
    try:
        target = os.fstat(file.fileno())
    except (OSError, ValueError):
        return None
    for child in _children(os.getpid()):
        try:
            stderr = os.stat(f"{_PROC}/{child}/fd/2")
        except OSError:
            continue
        stat = _stat(child)
        if stat is not None and (stderr.st_dev, stderr.st_ino) == (target.st_dev, target.st_ino):
            return Process(child, stat.start)
    return None


def kill_group(process: Process) -> None:
    """SIGKILL the process group `process` leads (a session of its own), while it runs."""
    if _running(process) is None:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
