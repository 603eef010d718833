"""Errors raised by the agctl library; the CLI maps `exit_code` to the process status.

This module imports nothing heavy (not even pathlib, until an error names a path): the
CLI catches these on its start-up path.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path

EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_NOT_FOUND = 3
EXIT_CONFLICT = 4
EXIT_DATA = 5
EXIT_PROVIDER = 6
EXIT_CONTEXT_FULL = 7
EXIT_CHECK_FAILED = 8
EXIT_BLOCKED = 9
EXIT_STEP_LIMIT = 10
EXIT_REPLY_INVALID = 11
EXIT_INTERRUPTED = 130


class AgctlError(Exception):
    """Base of every error the library raises on purpose."""

    exit_code = EXIT_ERROR
    # What to do about it: shown after the message (`agctl: hint: ...`), and as "hint" in
    # a JSON error, so that a script can show the message alone.
    hint: str | None = None

    def __init__(self, *args: object, hint: str | None = None) -> None:
        super().__init__(*args)
        if hint is not None:
            self.hint = hint


class UsageError(AgctlError):
    """The request itself is malformed: a bad id, an ambiguous prefix, a bad index."""

    exit_code = EXIT_USAGE


class InvalidId(UsageError):
    pass


class AmbiguousId(UsageError):
    def __init__(self, kind: str, prefix: str, candidates: list[str]) -> None:
        self.candidates = candidates
        shown = ", ".join(candidates[:10]) + (" …" if len(candidates) > 10 else "")
        super().__init__(f"{kind} id prefix {prefix!r} is ambiguous: {shown}")


class NoSessionSelected(UsageError):
    def __init__(self) -> None:
        super().__init__(
            "no session selected",
            hint="pass --session ID, set AGCTL_SESSION, or run 'agctl session use ID'",
        )


class NotFound(AgctlError):
    exit_code = EXIT_NOT_FOUND


class Conflict(AgctlError):
    """The operation clashes with the current state: exists, protected, has children."""

    exit_code = EXIT_CONFLICT


class AlreadyExists(Conflict):
    pass


class ProtectedSlot(Conflict):
    pass


class SlotChanged(Conflict):
    """The slot changed while the model was answering, other than by appended turns."""

    def __init__(self, slot_id: str, what: str) -> None:
        self.slot_id = slot_id
        super().__init__(
            f"slot {slot_id!r} changed while the model was answering ({what}): the reply, "
            "computed from the old context, was not written"
        )


class SlotMoved(SlotChanged):
    """A turn sent with --if-unchanged found its slot written since its view was built,
    by a change that is allowed by default (another turn's append): fenced out too."""

    def __init__(self, slot_id: str, what: str) -> None:
        super().__init__(slot_id, f"{what}; --if-unchanged refuses any change")


class StaleDraft(Conflict):
    """The draft's slot changed after the draft was kept: its prompt was written for a
    context that is gone."""

    def __init__(self, slot_id: str, what: str) -> None:
        self.slot_id = slot_id
        super().__init__(
            f"the draft is older than the last change of slot {slot_id!r} ({what}): its "
            "prompt was written for a context that is gone",
            hint="send it anyway with 'agctl turn send --resume-draft --force', read it "
            "with 'agctl draft show', or drop it with 'agctl draft rm'",
        )


class HasChildren(Conflict):
    def __init__(self, session_id: str, children: list[str]) -> None:
        self.children = children
        super().__init__(
            f"session {session_id!r} has children: {', '.join(children)}",
            hint="destroy them too with --recursive, or keep them as orphans with --orphan",
        )


class ReadonlySlot(Conflict):
    def __init__(self, slot_id: str, action: str) -> None:
        self.slot_id = slot_id
        self.action = action
        super().__init__(
            f"slot {slot_id!r} is readonly: cannot {action}",
            hint=f"change it with 'agctl slot mode full {slot_id}'",
        )


class DataError(AgctlError):
    """A stored document is corrupt, of the wrong shape or from an unsupported version."""

    exit_code = EXIT_DATA


class CorruptDocument(DataError):
    def __init__(self, path: Path | str, reason: str) -> None:
        from pathlib import Path

        self.path = Path(path)
        self.reason = reason
        super().__init__(f"{path}: {reason}")


class DamagedDraft(CorruptDocument):
    """A slot's draft that cannot be read; `slot` names it (None: older agctl's one draft)."""

    def __init__(self, path: Path | str, reason: str, slot: str | None) -> None:
        super().__init__(path, reason)
        self.slot = slot


class SchemaTooNew(DataError):
    def __init__(
        self, kind: str, found: str, supported: str, path: Path | str | None = None
    ) -> None:
        from pathlib import Path

        self.kind = kind
        self.found = found
        self.supported = supported
        self.path = Path(path) if path is not None else None
        where = f"{path}: " if path is not None else ""
        super().__init__(
            f"{where}{kind} document has schema version {found}, but this agctl "
            f"supports {kind} schema version {supported} at most; upgrade agctl to read it"
        )


class InvalidInput(AgctlError):
    """Input given to agctl (a file to import, stdin) does not have the expected shape."""

    exit_code = EXIT_DATA


class StoreError(AgctlError):
    """The file system refused an operation (permissions, full disk, read-only mount)."""


class CommitPending(StoreError):
    """A change was committed (its redo journal is durable), but applying it failed: the
    next agctl command on the session finishes it, so it must not be done again."""

    def __init__(self, session_id: str, cause: AgctlError) -> None:
        super().__init__(
            f"the change was committed, but applying it failed ({cause}); the next agctl "
            f"command on {session_id!r} finishes it: do not repeat it"
        )
        self.exit_code = cause.exit_code


class ProviderError(AgctlError):
    """The model call failed: network, HTTP status, timeout or a malformed response."""

    exit_code = EXIT_PROVIDER

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        retryable: bool = False,
        hint: str | None = None,
    ) -> None:
        super().__init__(message, hint=hint)
        self.status = status
        self.retryable = retryable


class McpServerError(AgctlError):
    """An MCP server whose tools a turn offers could not be started, reached or listed in
    time (agctl.turn.mcp); a failure during a call is the call's error result instead."""


class ReplayMiss(ProviderError):
    """A cassette holds no response for this request."""


# The signal of Ctrl-C, without importing the signal module on the start-up path.
SIGINT = 2


def signal_name(signum: int) -> str:
    """SIGTERM for 15: the name people know a signal by."""
    import signal

    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


class Interrupted(KeyboardInterrupt):
    """Ctrl-C, SIGTERM or SIGHUP, raised in the main thread by the command line's handlers
    (agctl.base.interrupts.interrupt_on_signals): a KeyboardInterrupt, so every place that handles
    Ctrl-C handles the others alike; the command exits 128 + the signal."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal_name(signum))
        self.signum = signum


def interrupt_signal(interrupt: BaseException) -> int:
    """The signal that raised `interrupt` (a KeyboardInterrupt): Ctrl-C's unless it says."""
    return getattr(interrupt, "signum", SIGINT)


class TurnInterrupted(AgctlError):
    """The user interrupted a turn (Ctrl-C), or it was told to stop (SIGTERM, SIGHUP);
    nothing was written. Exit 128 + the signal: 130, 143, 129."""

    exit_code = EXIT_INTERRUPTED

    def __init__(self, message: str, *, signum: int = SIGINT) -> None:
        super().__init__(message if signum == SIGINT else f"{message} ({signal_name(signum)})")
        self.signum = signum
        self.exit_code = 128 + signum


class ContextFull(AgctlError):
    """The request would not fit in the model's window, and it was not compressed."""

    exit_code = EXIT_CONTEXT_FULL

    def __init__(
        self,
        total: int,
        limit: int,
        window: int,
        reserve: int,
        model: str,
        compressed_from: str | None = None,
    ) -> None:
        self.total = total
        self.limit = limit
        self.over = total - limit
        self.compressed_from = compressed_from
        needs = (
            f"the request needs {total} tokens, but {model} allows {limit} "
            f"({window} window - {reserve} reserve): {self.over} tokens over"
        )
        if compressed_from is None:
            super().__init__(
                f"context full: {needs}",
                hint="compress with 'agctl ctx compress', or turn auto-compress on",
            )
        else:
            super().__init__(
                f"context full even after compressing the slot (the originals are in "
                f"checkpoint {compressed_from}): {needs}",
                hint="the messages kept and the input are too large: lower "
                "compress_keep_recent or shorten the input",
            )


class PinsOverBudget(ContextFull):
    """A compression that could fit the slot only by dropping pinned messages: refused."""

    def __init__(self, slot: str, pinned: int, tokens: int, limit: int) -> None:
        self.total = tokens
        self.limit = limit
        self.over = tokens - limit
        self.compressed_from = None
        AgctlError.__init__(
            self,
            f"context full: the {pinned} pinned message{'s' * (pinned != 1)} of slot "
            f"{slot!r} {'hold' if pinned != 1 else 'holds'} {tokens} tokens, over the "
            f"{limit} its budget gives the messages zone (history + tool results) by "
            f"{self.over}; nothing was compressed or dropped",
            hint="unpin some with 'agctl msg unpin INDEX', or raise the slot's budget "
            "('agctl slot set budget')",
        )


class CheckFailed(AgctlError):
    """A replayed reply did not match the one the transcript expected."""

    exit_code = EXIT_CHECK_FAILED


class Blocked(AgctlError):
    """Refused before it ran: a tool call its approval denies (or that cannot be asked
    about, with no terminal), or an event a hook blocks."""

    exit_code = EXIT_BLOCKED


class ApprovalNeeded(Blocked):
    """One tool call needs a person's approval and none can be asked now (no terminal, or
    no answer): the call is left pending, never run, for a decision later."""

    def __init__(self, tool: str, reason: str) -> None:
        self.tool = tool
        self.reason = reason
        super().__init__(f"tool {tool!r} needs approval (approve: ask), and {reason}")


class ApprovalPending(Blocked):
    """A turn stopped on tool calls that wait for approval: they are kept in the draft,
    with the results of the calls that ran, for `turn send --resume-draft` to approve or
    deny (the hint says how)."""

    def __init__(self, pending: list[tuple[str, str]], reason: str, *, kept: bool) -> None:
        self.pending = pending  # (call id, tool name) in the reply's order
        # repr: a model chose the ids, and repr escapes what is not printable (bidi too).
        listed = ", ".join(f"{tool} {call_id!r}" for call_id, tool in pending)
        calls = "a tool call needs" if len(pending) == 1 else f"{len(pending)} tool calls need"
        later = (
            "see them with 'agctl draft show', then go on with 'agctl turn send "
            "--resume-draft --approve-call ID|all' or '--deny-call ID|all' (repeatable); or "
            if kept
            else ""
        )
        super().__init__(
            f"{calls} approval (approve: ask), and {reason}: {listed}",
            hint=f"{later}answer on a terminal, or run such tools without asking (--approve auto)",
        )


class StepLimit(AgctlError):
    """A turn's tool loop reached its step limit and the model still asked for tools."""

    exit_code = EXIT_STEP_LIMIT


class ReplyInvalid(AgctlError):
    """A reply asked to follow a JSON Schema (turn send --schema) that is not JSON or does
    not validate: nothing is written, the prompt and the reply are kept in the draft."""

    exit_code = EXIT_REPLY_INVALID
