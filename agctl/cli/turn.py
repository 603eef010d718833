"""`agctl turn`: send the current slot's context to a model and commit the reply."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, TypeVar

import click

from agctl.cli.app import (
    App,
    pass_app,
    text_argument,
)
from agctl.cli.options import (
    SAMPLING_FIELDS,
    LazyGroup,
    command_options,
    file_option,
    gathered,
    provider_options,
    sampling_options,
    schema_options,
    slot_option,
    source_options,
    stream_options,
    template_options,
    tool_options,
)
from agctl.cli.output import echo, secho

F = TypeVar("F", bound="Callable[..., Any]")

# The one-line helps of the subcommands in modules of their own (LazyGroup; a test checks
# each is its command's).
REPLAY_SHORT = "Replay TRANSCRIPT ('-' for stdin) turn by turn into the session, in one process."
RETRY_SHORT = "Regenerate the slot's last reply on a new slot; the old one is kept as it was."
EDIT_SHORT = "Send TEXT in place of the prompt at INDEX, on a new slot; the old one is kept."

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from pathlib import Path

    from agctl.config.templates import TemplateChoice, TemplatedTurn
    from agctl.providers.base import Event
    from agctl.turn.branches import Branch
    from agctl.turn.send import TurnResult
    from agctl.turn.setup import ModelChoice, ToolsChoice, TurnChoice, TurnPlan
    from agctl.turn.steps import CallRecord
    from agctl.turn.tools import Answer, AskFn


@click.group(
    "turn",
    cls=LazyGroup,
    lazy={
        "replay": ("agctl.cli.replay", "replay", REPLAY_SHORT),
        "retry": ("agctl.cli.resend", "retry", RETRY_SHORT),
        "edit": ("agctl.cli.resend", "edit", EDIT_SHORT),
    },
)
def command() -> None:
    """Send the current slot's context to a model.

    \b
    Examples:
      agctl turn send "Summarise our options."
      git diff | agctl turn send - --model gpt-4o-mini --profile openai
      agctl turn send "Try again" --dry-run
    """


class StreamPrinter:
    """Shows events as they arrive: text to stdout, reasoning to stderr, or JSON lines."""

    def __init__(self, app: App, jsonl: bool, show_text: bool) -> None:
        self.app = app
        self.jsonl = jsonl
        self.show_text = show_text
        self.printed = False
        self.in_reasoning = False
        # The streamed text stopped mid-line: a line on stderr starts on a new one.
        self.mid_line = False

    def __call__(self, event: Event) -> None:
        if self.jsonl:
            from agctl.providers.base import event_to_dict

            self.app.emit_line(event_to_dict(event))
            return
        if not self.show_text:
            return
        if event.type == "reasoning":
            secho(event.text, dim=True, nl=False, err=True)
            self.in_reasoning = True
        elif event.type == "text":
            if self.in_reasoning:
                echo(err=True)
                self.in_reasoning = False
            echo(event.text, nl=False)
            sys.stdout.flush()
            self.printed = True
            self.mid_line = not event.text.endswith("\n")

    def ends_line(self) -> bool:
        """Whether the text streamed so far stopped mid-line on the terminal stderr also
        writes to (then it has ended now)."""
        mid_line, self.mid_line = self.mid_line, False
        return mid_line and sys.stdout.isatty() and sys.stderr.isatty()


# The most characters of a call's tool name, and of its arguments, that its line shows.
CALL_ARGUMENTS_SHOWN = 60


def call_line(record: CallRecord) -> str:
    """A tool call and how it ended, on one line for people: its name and arguments
    escaped (the model chose them) and cut short."""
    from agctl.base.quoting import escaped

    name, arguments = (
        text if len(text) <= CALL_ARGUMENTS_SHOWN else text[: CALL_ARGUMENTS_SHOWN - 1] + "…"
        for text in (record.name, record.arguments)
    )
    if record.outcome == "error" and record.output_bytes is not None:
        ended = "could not start (no such program, or not allowed to run), not run"
    elif record.outcome == "ran":
        size = record.output_bytes
        printed = f", {size} byte{'' if size == 1 else 's'}" if size is not None else ""
        ended = f"exit {record.exit}{printed}, {record.duration_ms} ms"
    else:
        ended = {
            "denied": "denied, not run",
            "error": "refused (unknown tool or invalid arguments), not run",
            "replayed": "answered from the cassette, not run",
            "waiting": "waits for approval in the draft, not run",
        }.get(record.outcome, f"{record.outcome}, not run")
    return f"tool {escaped(name)}({escaped(arguments)}) → {ended}"


def call_printer(
    app: App, shown: bool, mid_line: Callable[[], bool]
) -> Callable[[CallRecord], None] | None:
    """Shows each tool call of a turn on stderr as it is answered, on a line of its own
    (`mid_line`: whether the cursor is not at the start of one); none with --json,
    --jsonl or --quiet (the calls are in the JSON's steps)."""
    if not shown or app.json or app.quiet:
        return None

    def show(record: CallRecord) -> None:
        if mid_line():
            echo(err=True)
        echo(call_line(record), err=True)

    return show


# The help of `turn send`.
SEND_HELP = """Send PROMPT (or stdin) with the slot's view; commit the reply, or nothing on failure.

With both PROMPT and piped stdin, the prompt is PROMPT, a blank line, then stdin (as
llm does); each --file follows under a line naming it. With no session named or
selected, a new session is started, made current and said on stderr (a session named
that does not exist is exit 3; --dry-run and --resume-draft need one).

The request is: session system prompt, the slot's zones through its mode, the
--scratch messages, then PROMPT. On success the prompt and the reply are written to
the slot in one atomic write and the session's turn count and cost go up. On failure
or Ctrl-C nothing is written and the prompt is kept as the slot's draft for
--resume-draft (see 'agctl draft'), which refuses it (exit 4) if the slot changed
since, unless --force. Each slot keeps its own draft; without --slot, --resume-draft
takes the current slot's, else the session's only one, else asks for --slot (exit 2).
A successful turn on a slot drops an older draft of that slot.

Two writers may share a slot: a turn that another turn appended to while the model
answered is written after it. With --if-unchanged it is refused instead (exit 4,
error type SlotMoved, the reply kept in the draft) if the slot was written at all
since its view was built; send it again on the new context with --resume-draft.

With tools offered (-T NAME, --tools all; see 'agctl tool'), the turn is a loop: each
reply that calls tools has its calls run (each an argv command with the arguments
as JSON on stdin, its own process group, a scrubbed environment, a time limit and
capped output) and their results sent back, until the model answers. The whole loop
is one turn: one commit, one checkpoint, undone whole. Each step's results are kept
in the draft as they come, so --resume-draft goes on from where a failed turn stopped
without running a tool twice. A reply asking for more tool calls than
--max-calls-per-reply, or taking the turn past --max-calls-per-turn, runs none of
them: the turn stops with exit 10, its draft kept. --record also records the tools'
results, and --cassette answers calls from them (no tool runs).

A call of a tool set to ask is asked about on the terminal (/dev/tty, whatever
stdin is): yes, no (the model is told it was denied) or always (this tool runs
without asking for the rest of the turn). With no terminal, the turn stops with exit
9 once the other calls of the reply ran, and its draft keeps the calls waiting
('agctl draft show' lists them): decide later with --resume-draft and --approve-call
or --deny-call, each a call's ID or all, repeatable, offering the same tools again.
--approve auto|never decides every call of the turn instead. Each call shows on
stderr as it is answered, one line: the tool, its arguments (escaped, cut short),
then its exit, the bytes it printed and its time, or that it was denied, refused
(unknown tool, invalid arguments) or answered from the cassette; not with --json,
--jsonl or -q, whose JSON has the calls in its steps.

With --schema (or --schema-multi for a list), the reply is asked for as JSON that
follows the schema where the wire can say so (OpenAI's response_format json_schema,
strict when the schema allows it; Anthropic by forcing one tool, so no other tool may
be offered; Gemini's responseJsonSchema; the offline model answers with a small
instance of the schema), then checked: a reply that is not JSON or not valid against
it is exit 11, nothing written, the prompt and the reply kept in the draft, and the
error names the first failing path. --json adds the parsed reply as "parsed".

Model options beyond --temperature and --max-tokens go with -o KEY VALUE (repeatable;
VALUE is JSON when it parses, else text): each is checked against the wire (a key it
does not take, a value of the wrong type or a key agctl sets is exit 2, naming what it
takes) and sent in the body, sorted by key. With -t NAME (see 'agctl template'), the
template's prompt is sent with its {{ parameters }} filled from -p KEY VALUE and its
defaults, PROMPT filling {{ input }} (or following its prompt after a blank line), and
its model, options and tools apply where --model, -o of the same key do not, its
system prompt where neither --system nor the session has one (a session keeps its own,
byte for byte, turn after turn); a parameter left without a value is exit 2 naming
every one, before anything is sent or a session started.

\b
Examples:
  agctl turn send "What are my options?"
  agctl turn send "Name three colours" -o top_p 0.9 -o seed 42
  agctl turn send -t review -p lang Python -f main.py
  agctl turn send - --slot option-a < question.txt
  agctl turn send "Summarise this" < notes.txt
  agctl turn send "Review:" -f main.py -f test_main.py
  agctl turn send "Go on" --profile deepseek --model deepseek-reasoner --stream
  agctl turn send "Hi" --record chat.cassette     # then: --cassette chat.cassette
  agctl turn send --resume-draft
  agctl turn send --resume-draft --force   # even though the slot changed since
  agctl turn send "Go on" --if-unchanged   # exit 4 if the slot moved meanwhile
  agctl turn send "What is 17*23?" -T calc --approve auto
  agctl turn send "Tidy the notes" --tools all --max-steps 4 --record run.cassette
  agctl turn send --resume-draft -T deploy --approve-call call_1   # approved later
  agctl turn send --resume-draft -T deploy --deny-call call_2 --approve-call all
  agctl turn send "Invent a dog" --schema 'name, age int, bio: a short bio'
  agctl turn send "Three dogs" --schema-multi dog.schema.json --json
"""

# The options of `turn send` that are TurnOptions fields as they are.
TURN_FIELDS = (*SAMPLING_FIELDS, "checkpoint", "if_unchanged", "schema")


@command.command("send", help=SEND_HELP)
@click.argument("prompt", required=False)
@slot_option
@provider_options
@sampling_options
@stream_options
@click.option("--dry-run", is_flag=True, help="Print the exact request; send and write nothing.")
@source_options
@file_option
@click.option(
    "--resume-draft",
    is_flag=True,
    help="Send a failed turn's prompt again, to its slot: --slot's draft, else the current "
    "slot's, else the only one.",
)
@click.option(
    "--force",
    is_flag=True,
    help="With --resume-draft: send the draft even if its slot changed since it was kept.",
)
@click.option(
    "--approve-call",
    "approve_calls",
    multiple=True,
    metavar="ID|all",
    help="With --resume-draft: run the draft's waiting tool call ID as if approved on a "
    "terminal (all: every waiting call --deny-call does not name). Repeatable.",
)
@click.option(
    "--deny-call",
    "deny_calls",
    multiple=True,
    metavar="ID|all",
    help="With --resume-draft: do not run the draft's waiting tool call ID; the model is "
    "told it was denied (all: every waiting call --approve-call does not name). Repeatable.",
)
@click.option(
    "--checkpoint/--no-checkpoint",
    default=None,
    help="Checkpoint the session after the turn (default: config auto_checkpoint, on).",
)
@click.option(
    "--if-unchanged",
    is_flag=True,
    help="Refuse to commit (exit 4, the reply kept in the draft) if the slot was written "
    "at all since the view was built, even by another turn's append (allowed by default).",
)
@tool_options
@schema_options
@template_options
@gathered("fields", *TURN_FIELDS)
@gathered("resuming", "resume_draft", "force", "approve_calls", "deny_calls")
@command_options
@pass_app
def send(
    app: App,
    prompt: str | None,
    slot: str | None,
    choice: ModelChoice,
    stream: bool | None,
    jsonl: bool,
    dry_run: bool,
    record: Path | None,
    files: tuple[str, ...],
    tools: ToolsChoice,
    loop: dict[str, Any],
    template: TemplateChoice | None,
    fields: dict[str, Any],
    resuming: dict[str, Any],
) -> None:
    """Parse what was chosen, assemble the turn (agctl.turn.setup.plan_turn), send it, show it."""
    from agctl.turn.send import send_turn
    from agctl.turn.setup import TurnChoice, plan_turn

    if template is not None and resuming["resume_draft"]:
        raise click.UsageError("--resume-draft sends the draft's prompt as it was: no -t")
    prompt, slot, resume, answers = turn_input(app, prompt, slot, files, **resuming)
    if template is not None:  # before a session is started: a bad -p starts none
        prompt, choice, tools, fields = templated(app, template, prompt, choice, tools, fields)
    chosen, store = TurnChoice(choice, tools, loop, record, app.no_hooks), app.store
    # A dry run or a resumed draft needs the session it is about; a turn starts one.
    starts = not dry_run and not resuming.get("resume_draft")
    sid = started_session(app, slot, chosen, fields) if starts else app.session_id()
    streaming = sys.stdout.isatty() if stream is None else stream
    plan = plan_turn(
        store,
        sid,
        chosen,
        dry_run=dry_run,
        ask=terminal_ask,
        answers=answers,
        slot=slot,
        stream=streaming or jsonl,
        on_call=call_printer(app, not jsonl, lambda: printer.ends_line()),
        **fields,
    )
    if dry_run:
        app.emit_json(plan.request(store, sid, prompt))
        return
    printer = StreamPrinter(app, jsonl=jsonl, show_text=streaming and not app.json)
    result = send_turn(
        store, sid, prompt, plan.provider(), plan.options, on_event=printer, resume=resume
    )
    show_turn(app, result, jsonl, printer)


def started_session(
    app: App, slot: str | None, chosen: TurnChoice, fields: Mapping[str, Any]
) -> str:
    """The session a turn goes to: the one named or selected, else a new one, started only
    once the turn's slot, tools and model options are known good (a slot or tool that does
    not exist: exit 3; an option the wire refuses: exit 2), so that bad input on a fresh
    machine leaves no session behind."""
    from agctl.base.errors import NotFound
    from agctl.store.slots import DEFAULT_SLOT
    from agctl.turn.setup import plan_turn

    found = app.selected_session()
    if found is not None:
        return found
    if slot is not None and slot != DEFAULT_SLOT:
        raise NotFound(f"slot {slot!r} not found: a session started now has only {DEFAULT_SLOT!r}")
    plan_turn(app.store, None, chosen, dry_run=True, **fields)
    return app.session_or_new()


def templated(
    app: App,
    template: TemplateChoice,
    prompt: str,
    choice: ModelChoice,
    tools: ToolsChoice,
    fields: dict[str, Any],
) -> TemplatedTurn:
    """`turn send -t`: the template applied to the turn, over the system prompt of the
    session the turn goes to, if it has one (see agctl.config.templates.templated_turn)."""
    sid = app.selected_session()
    own = app.store.load_session(sid).system_prompt if sid is not None else None
    return template.turn(prompt, choice, tools, fields, session_system=own)


def turn_input(
    app: App,
    prompt: str | None,
    slot: str | None,
    files: tuple[str, ...],
    *,
    resume_draft: bool,
    force: bool,
    approve_calls: tuple[str, ...],
    deny_calls: tuple[str, ...],
) -> tuple[str, str | None, list[Any], Mapping[str, Answer]]:
    """What `turn send` sends: PROMPT (with stdin and --file), or with --resume-draft the
    draft's prompt, slot and steps, and the answers --approve-call and --deny-call give."""
    if resume_draft:
        if prompt is not None or files:
            raise click.UsageError("give either PROMPT (or --file) or --resume-draft, not both")
        from agctl.store.drafts import given_answers, resumable_draft

        draft = resumable_draft(app.store.backend, app.session_id(), slot, force=force)
        return (
            draft.prompt,
            draft.slot,
            draft.steps,
            given_answers(draft, approve_calls, deny_calls),
        )
    if force:
        raise click.UsageError("--force applies only with --resume-draft")
    if approve_calls or deny_calls:
        raise click.UsageError(
            "--approve-call and --deny-call decide the tool calls a draft keeps waiting: "
            "give them with --resume-draft"
        )
    return text_argument(prompt, "PROMPT", files=files, may_be_empty=True), slot, [], {}


def show_turn(app: App, result: TurnResult, jsonl: bool, printer: StreamPrinter) -> None:
    """A sent turn: its reply (unless streamed already) and tool calls, with its tokens and
    cost on a terminal's stderr; as JSON with --json, as the last JSON line with --jsonl."""
    data = result.to_dict()
    if jsonl:
        app.emit_line({"type": "result", **data})
        return
    if app.json:
        app.emit(data)
        return
    if printer.printed:
        echo()
    else:
        echo(result.reply.text())
    for call in result.reply.tool_calls or ():
        echo(f"→ {call.function.name}({call.function.arguments})  [{call.id}]")
    if sys.stderr.isatty():
        from agctl.reports.usage import cost_text

        usage = result.usage
        tokens = usage.text(" tokens") if usage else ""
        cost = f" · {cost_text(result.cost, free=result.free)}" if usage else ""
        secho(
            f"[turn {result.turn} · {result.slot_id} · {result.model} · {tokens}{cost}]",
            dim=True,
            err=True,
        )


def terminal_ask() -> AskFn | None:
    """The approval question of a tool set to ask, on the terminal (agctl.cli.ask, loaded
    only by a turn that offers tools)."""
    from agctl.cli.ask import terminal_ask as ask_on_terminal

    return ask_on_terminal()


def run_turn(
    app: App,
    sid: str,
    chosen: TurnChoice,
    send: Callable[[TurnPlan, StreamPrinter], TurnResult],
    *,
    stream: bool | None,
    jsonl: bool,
    ask: Callable[[], AskFn | None] = terminal_ask,
    **fields: Any,
) -> TurnResult:
    """A turn `send` sends with what was `chosen` (as `turn send` plans it, its reply
    streamed on a terminal, its tool calls shown and asked about there by `ask`'s
    question), then shown: what `turn retry`, `turn edit` and the chat share."""
    from agctl.turn.setup import plan_turn

    streaming = sys.stdout.isatty() if stream is None else stream
    printer = StreamPrinter(app, jsonl=jsonl, show_text=streaming and not app.json)
    plan = plan_turn(
        app.store,
        sid,
        chosen,
        ask=ask,
        stream=streaming or jsonl,
        on_call=call_printer(app, not jsonl, printer.ends_line),
        **fields,
    )
    result = send(plan, printer)
    show_turn(app, result, jsonl, printer)
    return result


def branch_notice(app: App) -> Callable[[Branch], None]:
    """Says on stderr (not with --json or -q) which slot a retried or edited turn goes to."""

    def tell(branch: Branch) -> None:
        if not app.json and not app.quiet:
            echo(
                f"agctl: on new slot {branch.slot} (from {branch.parent}, kept as it was)", err=True
            )

    return tell


@command.command("undo")
@click.argument("turns", type=click.IntRange(min=1), default=1)
@command_options
@pass_app
def undo(app: App, turns: int) -> None:
    """Roll the session back by TURNS turns (default 1), using the automatic checkpoints.

    The state being replaced is checkpointed first, so an undo can be rolled back.

    \b
    Examples:
      agctl turn undo
      agctl turn undo 3
    """
    from agctl.store.checkpointer import Checkpointer

    sid = app.session_id()
    restored, saved = Checkpointer(app.store).undo(sid, turns)
    payload = {"restored": restored.id, "turn": restored.turn_index, "saved_as": saved.id}
    app.observe("PostRollback", sid, payload, checkpoint=restored.id, saved_as=saved.id)
    text = f"back at turn {restored.turn_index}; the replaced state is checkpoint {saved.id}"
    app.done(payload, text=text)
