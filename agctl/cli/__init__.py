"""The `agctl` command line: a thin Click layer over the agctl library.

Only click and the standard library are imported here, so `--help`, `--version` and shell
completion stay fast; each command imports the core when it runs.
"""

from __future__ import annotations

import atexit
import gc
import importlib
import os
import re
import sys
from collections.abc import Sequence
from typing import Any

import click

from agctl import __version__
from agctl.base.errors import (
    EXIT_USAGE,
    SIGINT,
    AgctlError,
    UsageError,
    interrupt_signal,
    signal_name,
)
from agctl.cli import output
from agctl.cli.app import App, shown
from agctl.cli.options import add_global_options, json_requested, root_options
from agctl.cli.output import echo

# Each command group lives in its own module, imported only when it runs, so that
# `agctl --help` and shell completion load click and nothing else. The one-line help
# shown in `agctl --help` is kept here; a test checks it matches the module's.
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "session": ("agctl.cli.session", "Create, list, select and destroy sessions."),
    "slot": ("agctl.cli.slot", "Context slots: independent, branchable message lists."),
    "msg": ("agctl.cli.msg", "Read and edit a slot's messages (its incremental zone)."),
    "memory": ("agctl.cli.memory", "Session memory: small key/value pairs."),
    "turn": ("agctl.cli.turn", "Send the current slot's context to a model."),
    "ckpt": ("agctl.cli.ckpt", "Checkpoints: snapshots of a whole session."),
    "chat": (
        "agctl.cli.chat",
        "Talk with a model on the session's slot, line by line; /help lists the commands.",
    ),
    "draft": (
        "agctl.cli.draft",
        "The prompts of failed turns, one per slot, kept so that nothing typed is lost.",
    ),
    "ctx": ("agctl.cli.ctx", "The context of the next request: its budget, and compression."),
    "config": ("agctl.cli.config", "Show and change the configuration."),
    "hook": (
        "agctl.cli.hook",
        "Hooks: commands run at the events of a turn, given the event as JSON on stdin.",
    ),
    "profile": ("agctl.cli.profile", "Provider profiles: endpoint, model and key."),
    "tool": (
        "agctl.cli.tool",
        "Tools a model may call: argv commands given their arguments as JSON.",
    ),
    "template": (
        "agctl.cli.template",
        "Templates: a system prompt, a prompt with {{ parameters }}, a model, options, tools.",
    ),
    "mcp": (
        "agctl.cli.mcp",
        "MCP servers: their tools offered to a model as SERVER__TOOL, like argv tools.",
    ),
    "store": (
        "agctl.cli.store",
        "The store itself: its status and schema, and copying sessions between stores.",
    ),
    "completion": ("agctl.cli.completion", "Print the completion script for SHELL."),
    "search": (
        "agctl.cli.search",
        "Find messages whose text contains TEXT, in every session and slot.",
    ),
    "schema": ("agctl.cli.schema", "Print the JSON Schema of a stored document or input format."),
    "demo": ("agctl.cli.demo", "Run a scripted tour of sessions, slots and messages."),
    "eval": (
        "agctl.cli.eval",
        "Measure what compression keeps, over repeated runs, offline or with a model.",
    ),
    "usage": (
        "agctl.cli.usage",
        "Total tokens, cost and cache use across all sessions, by model.",
    ),
    "man": ("agctl.cli.man", "Show the man page of agctl or of one of its commands."),
    "serve": (
        "agctl.cli.serve",
        "Serve OpenAI's chat completions and Responses APIs over agctl sessions.",
    ),
    "doctor": (
        "agctl.cli.doctor",
        "Check the data dir for loose modes, planted files and leftovers.",
    ),
}

EXIT_CODES = """\b
Exit codes:
    0  success
    1  error (file system, an MCP server that cannot be reached, unexpected
       failure); search: no hit (as grep)
    2  usage error (bad option, bad id, ambiguous prefix, no session selected,
       a regular expression invalid or out of time)
    3  not found (session, slot, message index, memory key, profile)
    4  conflict (already exists, readonly slot, protected slot, has children)
    5  corrupt or unsupported data (bad document, newer schema, invalid import, a
       store schema another role owns, a store copy that left damaged sessions out)
    6  provider error (HTTP error, timeout, malformed reply, replay miss)
    7  context full (the request does not fit the model's window)
    8  replay check failed (a reply differs from the expected one)
    9  blocked (tool calls wait for approval with no terminal: decide them with
       --resume-draft --approve-call/--deny-call; or a hook blocked it)
   10  step limit (tools still asked for after --max-steps requests, or more calls
       than --max-calls-per-reply or --max-calls-per-turn allow)
   11  reply not valid (turn send --schema: not JSON, or not valid against the
       schema); nothing was written, the draft is kept
  130  interrupted (Ctrl-C); nothing was written (a turn keeps its draft)
  143  terminated (SIGTERM: timeout, docker stop, a CI cancel), as Ctrl-C
  129  hung up (SIGHUP: the terminal closed), as Ctrl-C
  141  standard output was closed early (agctl ... | head -1); the command's work is
       done all the same (a streamed turn is committed)
"""


class RootGroup(click.Group):
    """Loads subcommands on demand; maps library errors to stderr and an exit code."""

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        """Refuse arguments that cannot be text before anything runs, and report a standard
        output that could not be written (a full disk, a closed pipe) once, at the end, when
        the command's work is done, without a traceback.
        """
        argv = sys.argv[1:] if args is None else list(args)
        completing = bool(os.environ.get(complete_var or "_AGCTL_COMPLETE"))
        self.json_errors = not completing and json_requested(argv)
        with output.guarded() as stdout:
            try:
                problem = None if completing else unusable_input(argv)
                if problem:
                    if not standalone_mode:
                        raise UsageError(problem)
                    self.report(UsageError(problem))
                    sys.exit(EXIT_USAGE)
                return super().main(args, prog_name, complete_var, standalone_mode, **extra)
            finally:
                status = output.settle(stdout) if standalone_mode else None
                if status is not None:
                    sys.exit(status)

    def make_context(
        self,
        info_name: str | None,
        args: list[str],
        parent: click.Context | None = None,
        **extra: Any,
    ) -> click.Context:
        """The root's own options are parsed here, before `invoke`: their errors too are
        reported in agctl's format."""
        try:
            return super().make_context(info_name, args, parent, **extra)
        except (AgctlError, click.ClickException, click.Abort, KeyboardInterrupt) as exc:
            raise click.exceptions.Exit(self.report(exc)) from None

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (AgctlError, click.ClickException, click.Abort, KeyboardInterrupt) as exc:
            ctx.exit(self.report(exc, ctx))

    def report(
        self,
        exc: AgctlError | click.ClickException | click.Abort | KeyboardInterrupt,
        ctx: click.Context | None = None,
    ) -> int:
        """Print `exc` on stderr, as one JSON object with --json or AGCTL_JSON, else as
        `agctl: error: ...` lines (after Click's usage line for a usage error); return the
        exit code."""
        app = ctx.find_object(App) if ctx is not None else None
        described = describe_error(exc)
        if app is not None:  # a message from the store's driver may quote its URL
            for key in ("message", "hint"):
                if described[key]:
                    described[key] = app.scrubbed(described[key])
            if "notes" in described:
                described["notes"] = [app.scrubbed(note) for note in described["notes"]]
        if getattr(self, "json_errors", False) or (app is not None and app.json):
            from agctl.cli.output import echo_json

            echo_json({"error": described}, err=True)
        else:
            if isinstance(exc, click.UsageError) and exc.ctx is not None:
                if isinstance(exc, click.exceptions.NoArgsIsHelpError):
                    exc.show()
                    return exc.exit_code
                echo(exc.ctx.get_usage(), err=True)
                echo(f"{described['hint']}\n", err=True)
            echo(f"agctl: error: {described['message']}", err=True)
            if described["hint"] and not isinstance(exc, click.UsageError):
                echo(f"agctl: hint: {described['hint']}", err=True)
            for note in described.get("notes", ()):
                echo(f"agctl: {note}", err=True)
        return int(described["exit"])

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(SUBCOMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in SUBCOMMANDS:
            return None
        module = importlib.import_module(SUBCOMMANDS[cmd_name][0])
        return add_global_options(module.command)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, SUBCOMMANDS[name][1]) for name in self.list_commands(ctx)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


def describe_error(exc: BaseException) -> dict[str, Any]:
    """An error as scripts read it: its type, exit code, message and hint (and the notes
    a library error carries: the draft kept, the prompt)."""
    if isinstance(exc, (KeyboardInterrupt, click.Abort)):  # Ctrl-C, or Ctrl-D at a prompt
        signum = interrupt_signal(exc)
        by = "" if signum == SIGINT else f" by {signal_name(signum)}"
        return {
            "type": "Interrupted",
            "exit": 128 + signum,
            "message": f"interrupted{by}; nothing was written",
            "hint": None,
        }
    if isinstance(exc, click.ClickException):
        hint = None
        if isinstance(exc, click.UsageError) and exc.ctx is not None:
            command = exc.ctx.command_path
            option = exc.ctx.help_option_names[0] if exc.ctx.help_option_names else "--help"
            hint = f"Try '{command} {option}' for help."
        kind = "UsageError" if isinstance(exc, click.UsageError) else "Error"
        message = exc.format_message()
        if isinstance(exc, click.exceptions.NoArgsIsHelpError):  # help, for people
            group = isinstance(exc.ctx.command, click.Group)
            message = "Missing command." if group else "Missing argument."
        return {"type": kind, "exit": exc.exit_code, "message": message, "hint": hint}
    assert isinstance(exc, AgctlError)
    described: dict[str, Any] = {
        "type": type(exc).__name__,
        "exit": exc.exit_code,
        "message": str(exc),
        "hint": exc.hint,
    }
    notes = list(getattr(exc, "__notes__", ()))
    if notes:
        described["notes"] = notes
    return described


# ---- input that cannot be text ---------------------------------------------------------

# Python decodes argv and the environment with surrogateescape: bytes that are not UTF-8
# become lone surrogates, which no file, JSON document or terminal can take.
_NOT_UTF8 = re.compile("[\ud800-\udfff]")


def unusable_input(argv: list[str]) -> str | None:
    """What is wrong with the command line or agctl's environment variables, if anything:
    a value that is not valid UTF-8, named with its option or position."""
    for index, value in enumerate(argv):
        if _NOT_UTF8.search(value):
            name, param = _argument_name(argv, index)
            if param is not None and isinstance(param.type, click.Path):
                continue  # a file name is bytes on POSIX: any of them is a valid path
            return f"{name} is not valid UTF-8: {shown(value)}"
    for name, value in sorted(os.environ.items()):
        if name in PATH_VARIABLES:
            continue
        if name.startswith("AGCTL_") and _NOT_UTF8.search(value):
            return f"environment variable {name} is not valid UTF-8: {shown(value)}"
    return None


# Variables that name files: any bytes are a valid path.
PATH_VARIABLES = frozenset({"AGCTL_DATA_DIR", "AGCTL_CONFIG"})


def _find_option(command: click.Command, token: str) -> click.Option | None:
    name = token.split("=", 1)[0]
    for param in command.params:
        if isinstance(param, click.Option) and name in (*param.opts, *param.secondary_opts):
            return param
    return None


def _argument_name(argv: list[str], index: int) -> tuple[str, click.Parameter | None]:
    """Which option or argument `argv[index]` is (a name for people, and the parameter),
    found by walking the Click tree as far as the command line goes; its position when
    the walk cannot tell."""
    position = f"argument {index + 1}"
    ctx = click.Context(cli)
    command: click.Command = cli
    path: list[str] = []
    positionals = 0
    only_positionals = False
    i = 0
    while i <= index:
        token = argv[i]
        is_option = not only_positionals and token.startswith("-") and token != "-"
        if is_option and token == "--":
            only_positionals = True
        elif is_option and not re.fullmatch(r"-\d+", token):
            option = _find_option(command, token)
            takes_value = option is not None and not option.is_flag and not option.count
            if i == index:
                if option is not None and "=" in token:
                    return f"the value of {token.split('=', 1)[0]} ({position})", option
                return f"option {position}", None
            if takes_value and "=" not in token:
                i += 1
                if i == index:
                    return f"the value of {token} ({position})", option
        elif isinstance(command, click.Group):
            sub = command.get_command(ctx, token) if i < index else None
            if sub is None:
                return position, None
            command, path = sub, [*path, token]
        elif i < index:
            positionals += 1
        i += 1
    arguments = [p for p in command.params if isinstance(p, click.Argument)]
    for argument in arguments:
        if argument.nargs < 0 or positionals < argument.nargs:
            where = " ".join(["agctl", *path])
            name = f"argument {argument.human_readable_name} of '{where}' ({position})"
            return name, argument
        positionals -= argument.nargs
    return position, None


@click.group(
    cls=RootGroup,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
    epilog=EXIT_CODES,
)
@root_options
# Click's own texts, given here: click would look each default up with gettext (a search
# of the locale directories) when the group is made, for every command and TAB.
@click.version_option(
    __version__,
    "--version",
    prog_name="agctl",
    message="%(prog)s, version %(version)s",
    help="Show the version and exit.",
)
@click.pass_context
def cli(ctx: click.Context) -> None:
    """Manage the context of LLM conversations as data.

    Sessions hold named context slots (branchable message lists); everything is stored
    as plain JSON under the data dir, or, shared by a team, in PostgreSQL (--store).

    The options below are global: each is accepted before the group, after it or after
    the command (agctl -q slot new x, agctl slot -q new x, agctl slot new x -q); given
    twice, the rightmost wins. With --json (or AGCTL_JSON=1) an error too is one JSON
    object on stderr: {"error": {"type", "exit", "message", "hint"}}.

    On a terminal, control characters in what is printed (a reply, a title) are shown as
    escapes such as \\u001b, never sent raw; a pipe, a file and --json get the exact text.

    \b
    Examples:
      agctl session new --system "You are terse."
      agctl msg append user "What is a monad?"
      agctl slot derive experiment --use
      agctl slot show --view --json
      agctl --store ~/agctl-work session list
      AGCTL_STORE='postgresql:///agctl?service=team' agctl session list
    """
    ctx.ensure_object(App)


# The collector's first-generation threshold for a command line process (see main).
STARTUP_GC_THRESHOLD = 10_000


def main(*args: Any, **kwargs: Any) -> Any:
    # agctl's HTTP is synchronous, yet httpcore imports trio and anyio, when installed,
    # just to detect them: about 80 ms and 2 ms of every HTTP turn. The command line never
    # runs either.
    sys.modules.setdefault("trio", None)  # type: ignore[arg-type]
    sys.modules.setdefault("anyio", None)  # type: ignore[arg-type]
    # pydantic looks for its plugins (observability hooks) in the entry points of every
    # installed distribution when it builds its first validator: ~10 ms of every command
    # that reads a document. The command line loads none, unless the variable says which.
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    # A command's start builds some 10^5 objects that live as long as the process (its
    # modules, pydantic's validators); the collector's default first threshold (700
    # allocations) scans that growing heap hundreds of times for garbage it does not hold:
    # 11M instructions of a turn's start (callgrind). Collections still run, less often.
    gc.set_threshold(STARTUP_GC_THRESHOLD, *gc.get_threshold()[1:])
    # As it exits, the interpreter collects that heap twice more before it frees it, for
    # the cycles of a process about to end: 60M instructions of a turn, 20M of --help
    # (callgrind). Frozen after the other exit handlers (they run last to first), the
    # heap is freed as before but not scanned, and a finalizer in a cycle still alive
    # then does not run (Python never promised it would at exit).
    atexit.register(gc.freeze)
    # SIGTERM and SIGHUP stop a command as Ctrl-C does (its tools killed, a turn's draft
    # kept), where by default they would kill agctl on the spot; and what a tool or hook
    # starts that escapes its group comes back to agctl to be ended with its call. Only
    # the command line process does this, never the library on import; a TAB's completion
    # runs nothing of the kind and is spared the signal module (0.5 ms).
    if not os.environ.get("_AGCTL_COMPLETE"):
        from agctl.base.interrupts import adopt_orphans, interrupt_on_signals

        interrupt_on_signals()
        adopt_orphans()
    kwargs.setdefault("prog_name", "agctl")
    try:
        return cli.main(*args, **kwargs)
    except KeyboardInterrupt as exc:  # one that came as the command started or ended
        sys.exit(128 + interrupt_signal(exc))
