"""A turn's steps: the model requests of a tool loop, and the tool calls run between them.

A step is one request. When its reply asks for tools, the calls run (in index order; with
`jobs` > 1 several at once, their results still in index order) and their results go
back with the next request. Whatever runs a call is a `ToolBox`: the live tools of
agctl.turn.tools, or a cassette's recorded results. The loop itself is in agctl.turn.send.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

from agctl.base.errors import ApprovalNeeded, InvalidInput
from agctl.context.models import Message, ToolCall, utcnow


class CallRecord(NamedTuple):
    """One tool call of a step, as `--json` reports it."""

    id: str
    name: str
    arguments: str
    # "ran" (it ran; see exit), "error" (refused before running: unknown tool, bad
    # arguments), "denied" (by the approval policy or a hook), "replayed" (answered from
    # a cassette; nothing ran); "waiting" is only reported as it happens (TurnOptions.on_call):
    # a call left for a person's approval, kept in the draft, not in a step.
    outcome: str = "ran"
    exit: int | None = None
    duration_ms: int = 0
    truncated: bool = False
    output_sha256: str | None = None
    # The whole output when the model's text is cut (kept in the tool message, not shown).
    output: str | None = None
    # How many bytes the tool printed on stdout (None: it did not run).
    output_bytes: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "arguments": self.arguments,
            "outcome": self.outcome,
            "exit": self.exit,
            "duration_ms": self.duration_ms,
            "truncated": self.truncated,
            "output_sha256": self.output_sha256,
        }


class ToolBox(Protocol):
    """The tools a turn offers, and how a call of one is answered."""

    def definitions(self) -> list[dict[str, Any]]:
        """The request's `tools` (OpenAI's function definitions)."""
        ...

    def run(self, call: ToolCall) -> tuple[str, CallRecord]:
        """Answer one call: the result text the model gets, and the record of the call.
        A call that cannot run (unknown tool, bad arguments, denied) is answered with an
        error text, never an exception; Ctrl-C and a blocked call (agctl.base.errors.Blocked)
        propagate, and a call left for a person to approve later raises ApprovalNeeded."""
        ...

    def begin_turn(self) -> None:
        """A turn starts: what was approved for the rest of the last one ("always") ends."""
        ...

    def end_turn(self) -> None:
        """A turn ended, however it ended: what it opened (an MCP server's process) closes."""
        ...


@dataclass
class Step:
    """One request of a turn: its reply and the calls it asked for."""

    number: int
    reply: Message
    finish_reason: str | None = None
    calls: list[CallRecord] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "step": self.number,
            "finish_reason": self.finish_reason,
            "text": self.reply.text(),
            "tool_calls": [c.to_dict() for c in self.calls],
        }


def tool_message(call_id: str, text: str, record: CallRecord | None = None) -> Message:
    """The message answering a call: the text the model gets, and (kept, not sent) the
    whole output when that text is cut, and its hash."""
    return Message(
        role="tool",
        tool_call_id=call_id,
        content=text,
        created_at=utcnow(),
        output=record.output if record is not None and record.truncated else None,
        output_sha256=record.output_sha256 if record is not None else None,
    )


def unanswered(messages: Sequence[Message]) -> list[ToolCall]:
    """The calls of the last assistant message in `messages` that no tool message after
    it answers (where a resumed turn goes on), in their order."""
    for position in range(len(messages) - 1, -1, -1):
        message = messages[position]
        if message.role == "assistant":
            answered = {m.tool_call_id for m in messages[position + 1 :] if m.role == "tool"}
            return [c for c in message.tool_calls or () if c.id not in answered]
    return []


def check_results(before: Sequence[Message], results: Sequence[Message]) -> None:
    """Refuse (InvalidInput) tool results given by a caller that are not one answer to
    each call waiting at the end of `before` (its last assistant message, followed by tool
    messages only): every wire refuses a request with a call unanswered or an answer to
    no call, and they would be written in the slot."""
    position = len(before)
    while position and before[position - 1].role == "tool":
        position -= 1
    asked = before[position - 1] if position else None
    calls = asked.tool_calls or [] if asked is not None and asked.role == "assistant" else []
    done = {m.tool_call_id for m in before[position:]}
    waiting = [c.id for c in calls if c.id not in done]
    for result in results:
        if result.tool_call_id not in waiting:
            named = f"waiting: {', '.join(waiting)}" if waiting else "none is waiting"
            raise InvalidInput(
                f"tool_call_id {result.tool_call_id!r} answers no call waiting ({named})"
            )
        waiting.remove(result.tool_call_id)
    if waiting:
        raise InvalidInput(
            f"the tool calls {', '.join(waiting)} have no tool message answering them"
        )


def run_calls(
    toolbox: ToolBox,
    calls: Sequence[ToolCall],
    jobs: int,
    answered: Callable[[Message, CallRecord], None],
    waiting: Callable[[ToolCall, ApprovalNeeded], None],
) -> None:
    """Answer `calls`: one at a time in order, or up to `jobs` at once (each tool is its
    own process). Each answer goes to `answered`, in the calls' order, as soon as it is
    in: an error or Ctrl-C later loses no result of a tool that ran. A call left for a
    person's approval (ApprovalNeeded) does not run and goes to `waiting`, and the other
    calls go on; any other error is raised once the answers that came are handed on."""

    def take(call: ToolCall, answer: tuple[str, CallRecord] | ApprovalNeeded) -> None:
        if isinstance(answer, ApprovalNeeded):
            waiting(call, answer)
        else:
            text, record = answer
            answered(tool_message(call.id, text, record), record)

    if jobs <= 1 or len(calls) <= 1:
        for call in calls:
            take(call, _answer(toolbox, call))
        return
    from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait

    failure: BaseException | None = None
    with ThreadPoolExecutor(min(jobs, len(calls))) as pool:
        futures = [pool.submit(_answer, toolbox, call) for call in calls]
        try:
            wait(futures, return_when=FIRST_EXCEPTION)
        except BaseException as exc:  # Ctrl-C: the calls running are still waited for
            failure = exc
        # After an error no call starts that had not (as one at a time, in order).
        pool.shutdown(wait=True, cancel_futures=True)
    for call, future in zip(calls, futures, strict=True):
        if future.cancelled():
            continue
        error = future.exception()
        if error is not None:
            failure = failure or error
            continue
        take(call, future.result())
    if failure is not None:
        raise failure


def _answer(toolbox: ToolBox, call: ToolCall) -> tuple[str, CallRecord] | ApprovalNeeded:
    try:
        return toolbox.run(call)
    except ApprovalNeeded as pending:
        return pending
