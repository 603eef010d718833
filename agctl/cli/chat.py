"""`agctl chat`: the chat loop (agctl.chat) with what the command line does for it: turns
sent and shown as `turn send`, `turn retry` and `turn edit` send and show them, and every
other slash command run as the agctl command it is, in this process."""

from __future__ import annotations

import io
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import click

from agctl.cli.app import App, pass_app
from agctl.cli.options import (
    SAMPLING_FIELDS,
    command_options,
    gathered,
    provider_options,
    sampling_options,
    slot_option,
    source_options,
    tool_options,
)
from agctl.cli.output import echo, echo_json

if TYPE_CHECKING:
    from pathlib import Path

    from agctl.base.errors import AgctlError
    from agctl.providers.base import Provider
    from agctl.turn.setup import ModelChoice, ToolsChoice, TurnChoice, TurnPlan
    from agctl.turn.tools import AskFn

CHAT_HELP = """Talk with a model on the session's slot, line by line; /help lists the commands.

With no session named or selected, a new one is started and made current (as 'turn
send' does). Each line is sent as a turn on the slot (--slot, else the current one),
streamed with its reasoning and tool calls, a call set to ask asked about there; the
model, sampling, source and tool options are those of 'turn send', for every turn of
the chat (not a turn's own -t, -f or --schema; it streams on a terminal), and /ctx and
/compress take them too. A line starting with / is a command, each one of agctl's
own, printing what that command prints: /undo,
/retry (turn retry), /edit N, /fork, /slot NAME, /slots, /msgs, /diff (slot diff), /ckpt,
/ckpts, /rollback ID, /compress, /ctx (ctx show), /pin N, /memory, /model [NAME],
/tools, /help. An error is printed and the chat goes on.

On a terminal (prompt_toolkit): Up and Down recall the lines typed in this session's
chats before (kept 0600 in the data dir's chat-history); several lines go between two
\"\"\" lines, or Esc then Enter (Alt-Enter) starts a new line; Ctrl-C while a reply
streams stops it (nothing is written, its prompt is kept as the slot's draft); Ctrl-C
at an empty prompt, then again, or Ctrl-D, leaves (exit 0). SIGTERM or SIGHUP ends the
chat (exit 143, 129), a reply in flight kept as the draft first.

Unless standard input and output are both a terminal (one is a pipe or a file), the
chat reads its lines from standard input, with no prompt and no history, so a script
can drive it; it ends with the input, its exit status that of the last command or turn
that failed (0 if none did); a line that is not UTF-8 ends it (exit 5), as does the
input ending inside a block.

\b
Examples:
  agctl chat
  agctl chat -s design --slot option-a --model gpt-4o -T calc
  printf 'hello\\n/retry\\n/diff\\n' | agctl chat --provider offline
"""


@click.command("chat", help=CHAT_HELP)
@slot_option
@provider_options
@sampling_options
@source_options
@tool_options
@gathered("fields", *SAMPLING_FIELDS)
@command_options
@pass_app
@click.pass_context
def command(
    ctx: click.Context,
    app: App,
    slot: str | None,
    choice: ModelChoice,
    record: Path | None,
    tools: ToolsChoice,
    loop: dict[str, Any],
    fields: dict[str, Any],
) -> None:
    """Start or find the session, read lines from the terminal or a pipe, run the chat."""
    from agctl.chat.lines import PipeReader, TerminalReader
    from agctl.chat.loop import Chat
    from agctl.turn.setup import TurnChoice

    chosen = TurnChoice(choice, tools, loop, record, app.no_hooks)
    sid = checked_session(app, slot, chosen, fields)
    on_terminal = sys.stdin.isatty() and sys.stdout.isatty()
    reader = TerminalReader(getattr(sys.stdout, "stream", sys.stdout)) if on_terminal else None
    actions = CommandLine(ctx, app, chosen, fields)
    chat = Chat(app.store, actions, reader or PipeReader(sys.stdin.buffer), sid, slot)
    ctx.exit(chat.run())


def checked_session(app: App, slot: str | None, chosen: TurnChoice, fields: dict[str, Any]) -> str:
    """The chat's session, started only once its slot, tools and model options are known
    good (a slot or tool that does not exist: exit 3; an option the wire refuses: exit 2),
    so bad input leaves no new session behind."""
    from agctl.cli.turn import started_session
    from agctl.turn.setup import plan_turn

    found = app.selected_session()
    if found is None:
        return started_session(app, slot, chosen, fields)
    if slot is not None:
        app.store.load_slot(found, slot)
    plan_turn(app.store, found, chosen, dry_run=True, **fields)
    return found


class CommandLine:
    """agctl.chat.loop.Actions as the command line does them."""

    def __init__(
        self, ctx: click.Context, app: App, chosen: TurnChoice, fields: dict[str, Any]
    ) -> None:
        self.ctx = ctx
        self.app = app
        self.chosen = chosen
        self.fields = fields
        self.asking: list[AskFn | None] = []  # the question, once made
        self.providers: dict[tuple[Any, ...], Provider] = {}

    def ask(self) -> AskFn | None:
        """The approval question on the terminal, opened once for the whole chat (each
        `turn send` opens it for its one turn)."""
        if not self.asking:
            from agctl.cli.turn import terminal_ask

            self.asking.append(terminal_ask())
        return self.asking[0]

    def provider(self, plan: TurnPlan) -> Provider:
        """The provider of the chat's turns, made once (a script's or cassette's replies
        read in order across the turns, as `turn send` reads them across one turn's steps)
        and again only when the turns' settings change (/model NAME)."""
        setup = plan.setup
        key = (repr(setup.settings), setup.script, setup.cassette, plan.record)
        if key not in self.providers:
            self.providers[key] = plan.provider()
        return self.providers[key]

    def send(self, session: str, slot: str | None, prompt: str) -> str:
        from agctl.turn.send import send_turn

        store = self.app.store
        return self._turn(
            session,
            slot,
            lambda plan, printer: send_turn(
                store, session, prompt, self.provider(plan), plan.options, on_event=printer
            ),
        )

    def retry(self, session: str, slot: str | None) -> str:
        from agctl.cli.turn import branch_notice
        from agctl.turn.branches import retry_turn

        tell, store = branch_notice(self.app), self.app.store
        return self._turn(
            session,
            slot,
            lambda plan, printer: retry_turn(
                store, session, self.provider(plan), plan.options, printer, tell
            ),
        )

    def edit(self, session: str, slot: str | None, index: int, text: str) -> str:
        from agctl.cli.turn import branch_notice
        from agctl.turn.branches import edit_turn

        tell, store = branch_notice(self.app), self.app.store
        return self._turn(
            session,
            slot,
            lambda plan, printer: edit_turn(
                store, session, index, text, self.provider(plan), plan.options, printer, tell
            ),
        )

    def _turn(self, session: str, slot: str | None, send: Any) -> str:
        """A turn as `turn send` plans, streams and shows it; the slot it committed to."""
        from agctl.cli.turn import run_turn

        result = run_turn(
            self.app,
            session,
            self.chosen,
            send,
            stream=None,
            jsonl=False,
            ask=self.ask,
            slot=slot,
            **self.fields,
        )
        return result.slot_id

    def command(self, session: str, argv: list[str]) -> int:
        """agctl ARGV on the chat's session, with the chat's global options, in this
        process: its exit status (its error printed as the command line prints it)."""
        from agctl.cli import cli

        app = self.app
        options = ["-s", session]
        if app.data_dir is not None:
            options += ["--data-dir", str(app.data_dir)]
        if app.store_arg is not None:
            options += ["--store", app.store_arg]
        options += [flag for flag, on in (("--json", app.json), ("-q", app.quiet)) if on]
        options += ["--no-hooks"] if app.no_hooks else []
        with chat_stdin():
            status = cli.main(args=[*options, *argv], prog_name="agctl", standalone_mode=False)
        return status if isinstance(status, int) else 0

    def model(self, session: str, changed: bool) -> None:
        """/model: the model, provider and profile the next turn uses; once `session set
        model` `changed` it (/model NAME), a --model given to the chat no longer overrides
        the session's."""
        from agctl.turn.setup import ModelSetup

        if changed:
            self.chosen.model = self.chosen.model._replace(model=None)
        settings = ModelSetup.chosen(self.app.store, session, self.chosen.model).settings
        if self.app.json:
            fields = ("model", "provider", "profile")
            echo_json({field: getattr(settings, field) for field in fields})
            return
        profile = f", profile {settings.profile}" if settings.profile else ""
        self.say(f"model: {settings.model} (provider {settings.provider}{profile})")

    def tools(self, session: str) -> None:
        """/tools, after `tool list`: the tools this chat's turns offer."""
        offered = self.chosen.tools
        if self.app.json:
            echo_json({"offered": "all" if offered.every else list(offered.names)})
            return
        names = "all" if offered.every else ", ".join(offered.names)
        self.say(f"offered in this chat: {names or 'none (start the chat with -T NAME)'}")

    def passed(self) -> dict[str, list[str]]:
        """The chat's options as argv, by group, for the slash commands that take them
        (/ctx counts the chat's model, tools and system prompt; /compress summarises with
        its model)."""
        model, tools, fields = self.chosen.model, self.chosen.tools, self.fields
        return {
            "model": flags(
                ("--profile", model.profile),
                ("--model", model.model),
                ("--provider", model.provider),
            ),
            "source": flags(("--script", model.script), ("--cassette", model.cassette)),
            "tools": [
                *(flag for name in tools.names for flag in ("-T", name)),
                *(["--tools", "all"] if tools.every else []),
                *flags(("--tools-file", tools.tools_file)),
            ],
            "context": [
                *flags(("--system", fields.get("system"))),
                *(flag for text in fields.get("scratch") or () for flag in ("--scratch", text)),
            ],
        }

    def say(self, text: str, err: bool = True) -> None:
        """Text for the person at the chat (/help, /model), printed with --json too."""
        echo(text, err=err)

    def report(self, error: AgctlError | KeyboardInterrupt) -> int:
        """`error` as every agctl command reports it (RootGroup.report)."""
        root = self.ctx.find_root()
        return int(root.command.report(error, root))  # type: ignore[attr-defined]


def flags(*options: tuple[str, object]) -> list[str]:
    """Each OPTION VALUE whose value is given, as argv."""
    return [part for flag, value in options if value is not None for part in (flag, str(value))]


class ChatInput(io.RawIOBase):
    """Standard input as a slash command sees it: the chat's own lines are not its to read
    (`/memory set k -` would take the rest of a piped chat as the value). It is nothing
    piped, as a terminal is (an argument is not joined with what follows in the chat);
    '-' is a UsageError."""

    def readable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        from agctl.base.errors import UsageError

        raise UsageError("standard input is the chat's: give the value on the line, not '-'")


@contextmanager
def chat_stdin() -> Iterator[None]:
    """sys.stdin a ChatInput while a slash command runs."""
    stdin = sys.stdin
    sys.stdin = io.TextIOWrapper(io.BufferedReader(ChatInput()), encoding="utf-8")
    try:
        yield
    finally:
        sys.stdin = stdin
