"""Replaying a transcript turn by turn into a session, in one process, with checks.

A transcript is JSON lines, one turn a line (see `TranscriptTurn`), or an exported slot
(an OpenAI message array or `msg export --format jsonl`): then each user message is a
turn and the assistant message after it is the expected reply.
"""

from __future__ import annotations

import contextlib
import difflib
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError

from agctl.base.errors import AgctlError, InvalidInput, ReplayMiss, TurnInterrupted, UsageError
from agctl.base.interrupts import take_held
from agctl.base.validation import validation_summary
from agctl.base.vocab import SYNC_MODES, CheckMode, SyncMode
from agctl.providers.base import Provider
from agctl.store import Store
from agctl.turn.send import TurnOptions, TurnResult, send_turn


class ExpectedCall(BaseModel):
    """A tool call a turn is expected to make: its name, and arguments it must hold (a
    subset: a key left out is not checked; an object value is a subset too)."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1)
    arguments: dict[str, Any] = Field(default_factory=dict)


class TranscriptTurn(BaseModel):
    """One line of a transcript: the input, and optionally what to expect and how to send."""

    model_config = ConfigDict(extra="forbid")

    input: str = Field(min_length=1)
    expect: str | None = None
    # The tool calls the turn makes, in order, over all its steps ([] : none).
    expect_tools: list[ExpectedCall] | None = None
    # The JSON Schema the reply must follow (--check-mode schema): a schema object, or
    # the concise form ('name, age int'); a schema object once parsed.
    expect_schema: dict[str, Any] | str | None = None
    slot: str | None = None
    model: str | None = None
    system: str | None = None
    scratch: list[str] = Field(default_factory=list)
    temperature: float | None = Field(default=None, ge=0, le=2)
    max_tokens: int | None = Field(default=None, ge=1)
    # The transcript line it came from (None: an exported slot's message).
    _line: int | None = PrivateAttr(default=None)

    def __eq__(self, other: object) -> bool:
        """The same turn, whichever line it was read from."""
        if not isinstance(other, TranscriptTurn):
            return NotImplemented
        return self.model_dump() == other.model_dump()

    __hash__ = None  # type: ignore[assignment]

    def where(self, number: int) -> str:
        """The turn, by its number and its line when it has one."""
        return f"turn {number}" + (f" (line {self._line})" if self._line is not None else "")


def _from_messages(
    items: list[Any], source: str, numbers: list[int] | None = None
) -> list[TranscriptTurn]:
    """Turns from an exported slot; `numbers` are the items' line numbers, if lines."""
    from agctl.interchange.formats import parse_messages

    if numbers is None:
        messages = parse_messages(orjson.dumps(items), "openai", source)
    else:
        messages = []
        for number, item in zip(numbers, items, strict=True):
            try:
                messages += parse_messages(orjson.dumps([item]), "openai", source)
            except InvalidInput as exc:
                detail = str(exc).split(" is invalid: ", 1)[-1]
                raise InvalidInput(f"{source}: line {number}: {detail}") from None
    turns: list[TranscriptTurn] = []
    for message in messages:
        if message.role == "user":
            turns.append(TranscriptTurn(input=message.text() or " "))
        elif message.role == "assistant" and turns and turns[-1].expect is None:
            turns[-1].expect = message.text()
    if not turns:
        raise InvalidInput(f"{source}: no turns (the exported messages hold no user message)")
    return turns


def _check_regex(pattern: str, where: str) -> None:
    try:
        re.compile(pattern)
    except re.error as exc:
        raise InvalidInput(f"{where}: the expected reply is not a valid regex: {exc}") from None


def _expected_schema(given: dict[str, Any] | str, source: str, number: int) -> dict[str, Any]:
    """A line's expect_schema as a schema object: the concise form read, a schema object
    checked; InvalidInput naming the line when it is not a usable schema."""
    from agctl.turn.schema import check_schema, concise_schema

    where = f"{source}: line {number}: expect_schema"
    try:
        schema = concise_schema(given) if isinstance(given, str) else given
        check_schema(schema, "it")
    except UsageError as exc:
        raise InvalidInput(f"{where}: {exc}") from None
    return schema


def parse_transcript(
    data: bytes, source: str = "transcript", *, regex: bool = False
) -> list[TranscriptTurn]:
    """Every turn, validated before any is sent (with `regex`, the expected replies must be
    valid patterns); an error names the line."""
    try:
        whole = orjson.loads(data)
    except orjson.JSONDecodeError:
        whole = None
    if isinstance(whole, list):
        return _from_messages(whole, source)
    lines = [(n, line) for n, line in enumerate(data.splitlines(), start=1) if line.strip()]
    items: list[tuple[int, Any]] = []
    for number, line in lines:
        try:
            items.append((number, orjson.loads(line)))
        except orjson.JSONDecodeError as exc:
            raise InvalidInput(f"{source}: line {number} is not valid JSON: {exc}") from None
    if items and all(isinstance(item, dict) and "role" in item for _, item in items):
        return _from_messages([item for _, item in items], source, [n for n, _ in items])
    turns = []
    for number, item in items:
        if isinstance(item, dict) and "input" not in item and "prompt" in item:
            item = {**{k: v for k, v in item.items() if k != "prompt"}, "input": item["prompt"]}
        try:
            turns.append(TranscriptTurn.model_validate(item))
        except ValidationError as exc:
            summary = validation_summary(exc, "line")
            raise InvalidInput(f"{source}: line {number}: {summary}") from None
        turns[-1]._line = number
        if regex and turns[-1].expect is not None:
            _check_regex(turns[-1].expect, f"{source}: line {number}")
        if turns[-1].expect_schema is not None:
            turns[-1].expect_schema = _expected_schema(turns[-1].expect_schema, source, number)
    if not turns:
        raise InvalidInput(f"{source}: no turns")
    return turns


def matches(reply: str, expected: str, mode: CheckMode) -> bool:
    if mode == "exact":
        return reply == expected
    if mode == "contains":
        return expected in reply
    return re.search(expected, reply, re.DOTALL) is not None


def calls_made(result: TurnResult) -> list[tuple[str, str]]:
    """Every tool call a turn's replies asked for, in order: (name, arguments)."""
    return [
        (call.function.name, call.function.arguments)
        for step in result.steps
        for call in step.reply.tool_calls or ()
    ]


def _holds(actual: Any, expected: Any) -> bool:
    if isinstance(expected, dict):
        return isinstance(actual, dict) and all(
            key in actual and _holds(actual[key], value) for key, value in expected.items()
        )
    return bool(actual == expected)


def tools_match(expected: list[ExpectedCall], made: list[tuple[str, str]]) -> bool:
    """Whether the calls made are the expected ones, in order, each holding the expected
    arguments."""
    if len(expected) != len(made):
        return False
    for want, (name, arguments) in zip(expected, made, strict=True):
        try:
            parsed = orjson.loads(arguments)
        except orjson.JSONDecodeError:
            return False
        if want.name != name or not _holds(parsed, want.arguments):
            return False
    return True


def _tool_lines(calls: list[tuple[str, str]]) -> str:
    return "\n".join(f"tool call: {name} {arguments}" for name, arguments in calls)


def mismatch_diff(expected: str, reply: str) -> str:
    """A readable unified diff of an expected reply against the one received."""
    lines = difflib.unified_diff(
        expected.splitlines(), reply.splitlines(), "expected", "received", lineterm=""
    )
    return "\n".join(lines)


@dataclass
class TurnOutcome:
    number: int
    input: str
    result: TurnResult | None = None
    expected: str | None = None
    matched: bool | None = None
    error: str | None = None
    # --check-mode schema: the schema the reply was checked against, and what was wrong.
    expected_schema: dict[str, Any] | None = None
    problem: str | None = None

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"turn": self.number, "input": self.input}
        if self.result is not None:
            whole = self.result.to_dict()
            data.update(
                {
                    "slot": self.result.slot_id,
                    "reply": self.result.reply.text(),
                    "checkpoint": self.result.checkpoint,
                    "usage": whole["usage"],
                }
            )
            data.update({key: whole[key] for key in ("steps", "hooks") if key in whole})
        if self.expected is not None:
            data["expected"] = self.expected
            data["matched"] = self.matched
        if self.expected_schema is not None:
            data["expected_schema"] = self.expected_schema
            data["matched"] = self.matched
            data["problem"] = self.problem
        if self.error is not None:
            data["error"] = self.error
        return data


@dataclass
class Mismatch:
    """A reply that differs from the expected one: only the texts, not the turn's slot."""

    number: int
    input: str
    expected: str
    received: str
    # Why it does not match, when a diff cannot say (--check-mode schema), and the turn
    # as that names it (with its line).
    problem: str | None = None
    where: str | None = None

    def report(self) -> str:
        """The turn, its prompt's head, and the diff of expected against received (or
        what is wrong with the reply, and the reply)."""
        head = f"{self.where or f'turn {self.number}'}: {prompt_head(self.input)}\n"
        if self.problem is not None:
            return f"{head}{self.problem}\nreceived:\n{self.received}"
        return head + mismatch_diff(self.expected, self.received)


@dataclass
class ReplaySummary:
    turns: int = 0
    sent: int = 0
    checked: int = 0
    mismatched: list[int] = field(default_factory=list)
    seconds: float = 0.0
    mismatches: list[Mismatch] = field(default_factory=list)

    def mismatch_report(self, max_diffs: int) -> str:
        """A diff for each of the first `max_diffs` mismatches, then how many are not shown."""
        shown = [m.report() for m in self.mismatches[:max_diffs]]
        hidden = self.mismatches[max_diffs:]
        if hidden:
            numbers = ", ".join(str(m.number) for m in hidden[:20])
            more = " …" if len(hidden) > 20 else ""
            shown.append(
                f"{len(hidden)} more {'reply differs' if len(hidden) == 1 else 'replies differ'}"
                f" (turns {numbers}{more}); --max-diffs N shows more"
            )
        return "\n\n".join(shown)

    def to_dict(self) -> dict[str, Any]:
        return {
            "turns": self.turns,
            "sent": self.sent,
            "checked": self.checked,
            "matched": self.checked - len(self.mismatched),
            "mismatched": self.mismatched,
            "seconds": round(self.seconds, 3),
            "turns_per_second": round(self.sent / self.seconds, 1) if self.seconds else None,
        }


def prompt_head(text: str, width: int = 60) -> str:
    """The start of a prompt on one line, quoted, for naming a turn in a message."""
    flat = " ".join(text.split())
    return orjson.dumps(flat if len(flat) <= width else flat[: width - 1] + "…").decode()


def _stopped_at(
    exc: AgctlError, number: int, turns: list[TranscriptTurn], source: str
) -> AgctlError:
    """The error of a failed turn, naming the turn; no draft was kept (the transcript has
    the prompt), so nothing points at --resume-draft."""
    where = f"turn {number} of {len(turns)} in {source} ({prompt_head(turns[number - 1].input)})"
    if isinstance(exc, ReplayMiss):
        # the message names the cassette: "<cassette>: no recorded response for request …"
        return ReplayMiss(f"{where} is not in the cassette: {exc}")
    done = {1: "no turn was committed", 2: "turn 1 was committed"}.get(
        number, f"turns 1 to {number - 1} were committed"
    )
    exc.add_note(f"the replay stopped at {where}: {done}, nothing of this turn was written")
    return exc


@contextlib.contextmanager
def fresh_session(store: Store, session_id: str | None = None) -> Iterator[str]:
    """A new session to replay into (`session_id`, else a generated id). If what runs
    inside fails before a turn is committed (a missing cassette, a bad profile, a miss
    on the first turn) it is destroyed again, and the selection it took is given back,
    so a replay that got nowhere leaves nothing behind; one that got somewhere is kept,
    to look at."""
    previous = store.current_session_id()
    session = store.create_session(session_id)
    try:
        yield session.id
    except BaseException:
        with contextlib.suppress(AgctlError):
            if store.load_session(session.id).turn_count == 0:
                selected = store.current_session_id() == session.id
                store.destroy_session(session.id)
                if selected and previous is not None:
                    store.set_current_session(previous)
        raise


def replay(
    store: Store,
    session_id: str,
    turns: list[TranscriptTurn],
    provider: Provider,
    base: TurnOptions,
    *,
    check: CheckMode | None = None,
    on_turn: Callable[[TurnOutcome], None] | None = None,
    source: str = "the transcript",
    sync: SyncMode = "per-turn",
) -> ReplaySummary:
    """Send every turn in order; check replies when asked. A failed turn stops the replay
    (its error, naming the turn, is raised after `on_turn` saw it); mismatches do not.
    A failed turn keeps no draft: the transcript holds its prompt.

    `sync="end"` makes the turns durable together when the replay ends, not one by one,
    and commits the turns of a fast provider in groups (see _Groups): much faster. Each
    turn is still whole or not there, and is reported (`on_turn`) once committed; a
    power failure during the replay may lose the turns replayed so far, which the
    transcript can send again."""
    if sync not in SYNC_MODES:
        raise UsageError(f"unknown sync mode {sync!r}; choose from {', '.join(SYNC_MODES)}")
    durable = store.synced_at_end() if sync == "end" else contextlib.nullcontext()
    with durable:
        groups = _Groups(store, session_id, on_turn, enabled=sync == "end")
        return _replay(store, session_id, turns, provider, base, check, groups, source)


class _Groups:
    """Turns committed together: while the provider answers fast, the turns of up to
    GROUP_SECONDS share one transaction, each in a savepoint of it (a failed turn is
    undone alone), so a group costs one commit. A turn is reported when its group is
    committed. The session's lock is held for a group, never for a slow provider's
    answer: a turn starts a group only if the one before it was answered fast."""

    GROUP_SECONDS = 0.1
    FAST_SECONDS = 0.01

    def __init__(
        self,
        store: Store,
        session_id: str,
        on_turn: Callable[[TurnOutcome], None] | None,
        *,
        enabled: bool,
    ) -> None:
        self.store = store
        self.session_id = session_id
        self.on_turn = on_turn
        self.enabled = enabled
        self.fast = False  # the last turn's provider answered within FAST_SECONDS
        self._open: contextlib.ExitStack | None = None
        self._tx: Any = None  # the open group's transaction
        self._opened = 0.0
        self._done: list[TurnOutcome] = []

    @contextlib.contextmanager
    def turn(self) -> Iterator[None]:
        """One turn: in a savepoint of the open group (opened first if the provider has
        been fast), else on its own."""
        import time

        if self._open is None and self.enabled and self.fast:
            stack = contextlib.ExitStack()
            self._tx = stack.enter_context(self.store.transaction(self.session_id))
            self._open, self._opened = stack, time.monotonic()
        if self._open is None:
            yield
            return
        with self._tx.savepoint():
            yield

    def done(self, outcome: TurnOutcome) -> None:
        """A turn that went through: reported now, or when its group is committed (which
        happens now if the group is old enough, or the provider was slow)."""
        import time

        result = outcome.result
        self.fast = result is not None and result.latency <= self.FAST_SECONDS
        self._done.append(outcome)
        old = self._open is not None and time.monotonic() - self._opened >= self.GROUP_SECONDS
        if self._open is None or not self.fast or old:
            self.close()

    def close(self) -> None:
        """Commit the open group, then report its turns."""
        stack, self._open = self._open, None
        if stack is not None:
            stack.close()
        done, self._done = self._done, []
        if self.on_turn is not None:
            for outcome in done:
                self.on_turn(outcome)

    def failed(self, outcome: TurnOutcome) -> None:
        """A turn that failed (undone): the turns before it are committed and reported,
        then it is."""
        self.close()
        if self.on_turn is not None:
            self.on_turn(outcome)


def _replay(
    store: Store,
    session_id: str,
    turns: list[TranscriptTurn],
    provider: Provider,
    base: TurnOptions,
    check: CheckMode | None,
    groups: _Groups,
    source: str,
) -> ReplaySummary:
    import time
    from dataclasses import replace as with_changes

    # The slot the replay began on, not whichever is current when each turn starts: a
    # `slot use` meanwhile (another command, a hook) must not split the replay.
    base = with_changes(
        base, keep_draft=False, slot=base.slot or store.resolve_slot(session_id, None)
    )

    if check == "regex":
        for number, turn in enumerate(turns, start=1):
            if turn.expect is not None:
                _check_regex(turn.expect, f"turn {number}")
    summary = ReplaySummary(turns=len(turns))
    started = time.perf_counter()
    last: dict[str | None, Any] = {}  # slot last committed, per slot option
    take_held()  # an interrupt held before this replay is not this replay's
    try:
        for number, turn, outcome in _each(turns):
            options = _options(base, turn)
            try:
                held = take_held()  # it came while the turn before was committed: stop here
                if held is not None:
                    raise TurnInterrupted("interrupted", signum=held)
                with groups.turn():
                    outcome.result = send_turn(
                        store,
                        session_id,
                        turn.input,
                        provider,
                        options,
                        reuse=last.get(options.slot),
                    )
                last[options.slot] = outcome.result.slot
            except AgctlError as exc:
                error = _stopped_at(exc, number, turns, source)
                outcome.error = str(error)
                groups.failed(outcome)
                if error is exc:
                    raise
                raise error from None
            summary.sent += 1
            expects = turn.expect_schema if check == "schema" else turn.expect
            if check is not None and (expects is not None or turn.expect_tools is not None):
                _check(summary, outcome, turn, check)
            groups.done(outcome)
        groups.close()
    finally:
        groups.close()  # the turns done before an interrupt are kept
        summary.seconds = time.perf_counter() - started
    return summary


def _check(
    summary: ReplaySummary, outcome: TurnOutcome, turn: TranscriptTurn, check: CheckMode
) -> None:
    """Compare a turn with what its line expects: the reply (with --check-mode schema,
    that it follows expect_schema), and the tool calls; a mismatch's diff shows both."""
    assert outcome.result is not None
    summary.checked += 1
    received = outcome.result.reply.text()
    matched = True
    expected_text, received_text = received, received
    if check == "schema":
        if isinstance(turn.expect_schema, dict):
            from agctl.turn.schema import reply_problem

            outcome.expected_schema = turn.expect_schema
            problem = reply_problem(received, turn.expect_schema)[1]
            if problem is not None:
                matched = False
                outcome.problem = f"the reply does not follow expect_schema: {problem}"
    elif turn.expect is not None:
        outcome.expected = turn.expect
        matched = matches(received, turn.expect, check)
        expected_text = turn.expect
    if turn.expect_tools is not None:
        made = calls_made(outcome.result)
        if not tools_match(turn.expect_tools, made):
            matched = False
            wanted = [(c.name, orjson.dumps(c.arguments).decode()) for c in turn.expect_tools]
            expected_text = "\n".join(filter(None, [_tool_lines(wanted), expected_text]))
            received_text = "\n".join(filter(None, [_tool_lines(made), received_text]))
    outcome.matched = matched
    if not matched:
        summary.mismatched.append(outcome.number)
        summary.mismatches.append(
            Mismatch(
                outcome.number,
                turn.input,
                expected_text,
                received_text,
                problem=outcome.problem,
                where=turn.where(outcome.number) if outcome.problem is not None else None,
            )
        )


def _each(turns: list[TranscriptTurn]) -> Iterator[tuple[int, TranscriptTurn, TurnOutcome]]:
    for number, turn in enumerate(turns, start=1):
        yield number, turn, TurnOutcome(number=number, input=turn.input)


def _options(base: TurnOptions, turn: TranscriptTurn) -> TurnOptions:
    from dataclasses import replace

    return replace(
        base,
        slot=turn.slot or base.slot,
        model=turn.model or base.model,
        system=turn.system if turn.system is not None else base.system,
        scratch=[*base.scratch, *turn.scratch],
        temperature=turn.temperature if turn.temperature is not None else base.temperature,
        max_tokens=turn.max_tokens if turn.max_tokens is not None else base.max_tokens,
    )
