"""The global options: one definition, accepted before the group, after it and after the
command (`agctl -s X session show`, `agctl session -s X show`, `agctl session show -s X`).

The root group declares them with their environment variables; every group and command
loaded under it gets a copy without one (`add_global_options`), so a value given further
right wins over one given further left, and an environment variable never overrides the
command line. Each copy writes into the one `App` in the root context.

Imports click and the standard library only.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar, cast

import click

from agctl.base.errors import UsageError
from agctl.base.vocab import APPROVE_MODES, PROVIDERS, TOOLS_COUNTED, TOOLS_MODES
from agctl.cli.app import App, Count, PathType, shown

if TYPE_CHECKING:
    from pathlib import Path

    from click.shell_completion import CompletionItem

F = TypeVar("F", bound=Callable[..., Any])

LOG_LEVELS = ("debug", "info", "warning", "error", "critical")


def env_flag(name: str) -> bool:
    """A flag's environment variable read as click reads it (AGCTL_JSON=1, =yes, =true);
    a value click would refuse counts as unset here, and click reports it."""
    try:
        return bool(click.BOOL.convert(os.environ.get(name, ""), None, None))
    except click.BadParameter:
        return False


def _app(ctx: click.Context) -> App:
    return ctx.ensure_object(App)


def _data_dir(ctx: click.Context, param: click.Parameter, value: Path | None) -> None:
    if value is None:
        return
    app = _app(ctx)
    app.data_dir = value
    source = ctx.get_parameter_source(param.name or "")
    app.data_dir_given = source == click.core.ParameterSource.COMMANDLINE


def _store(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    if value is None:
        return
    app = _app(ctx)
    app.store_arg = value
    source = ctx.get_parameter_source(param.name or "")
    from_env = source == click.core.ParameterSource.ENVIRONMENT
    app.store_origin = "AGCTL_STORE" if from_env else "--store"
    app.store_given = source == click.core.ParameterSource.COMMANDLINE


def _session(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    if value:
        app = _app(ctx)
        app.session_arg = value
        source = ctx.get_parameter_source(param.name or "")
        app.session_given = app.session_given or source == click.core.ParameterSource.COMMANDLINE


def _sessions(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> list[str]:
    """The sessions a command over several takes: each `--session`, else the one the
    global `-s` named on the command line (not AGCTL_SESSION's: all of them then)."""
    app = _app(ctx)
    if values:
        app.session_arg = values[-1]
        app.session_given = True
        return list(values)
    return [app.session_arg] if app.session_given and app.session_arg else []


def sessions_option(what: str) -> Callable[[F], F]:
    """`--session/-s ID`, repeatable, on a command over several sessions (default: every
    one): the global option, taking more than one."""
    return click.option(
        "--session",
        "-s",
        "session_ids",
        multiple=True,
        metavar="ID",
        callback=_sessions,
        help=f"{what} this session only (repeatable; default: every session).",
    )


def _json(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value:
        _app(ctx).json = True


def _quiet(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value:
        _app(ctx).quiet = True


def _no_hooks(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value:
        _app(ctx).no_hooks = True


def _no_color(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value or os.environ.get("NO_COLOR"):
        ctx.color = False


def _verbose(ctx: click.Context, _param: click.Parameter, value: int) -> None:
    if ctx.resilient_parsing:  # TAB completion: nothing is logged
        return
    app = _app(ctx)
    if value or ctx.parent is None:
        app.verbose += value
        configure_logging(app.verbose)


def configure_logging(verbose: int) -> None:
    """-v logs info, -vv debug; without -v, AGCTL_LOG names the level."""
    level_name = os.environ.get("AGCTL_LOG", "")
    if level_name and level_name.lower() not in LOG_LEVELS:
        raise UsageError(
            f"AGCTL_LOG={shown(level_name)} is not a log level: use one of " + ", ".join(LOG_LEVELS)
        )
    if not verbose and not level_name:
        return
    import logging

    if verbose:
        level = logging.INFO if verbose == 1 else logging.DEBUG
    else:
        level = logging.getLevelName(level_name.upper())
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("agctl: %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger("agctl")
    root.handlers[:] = [handler]
    root.setLevel(level)


def _complete_sessions(
    ctx: click.Context, param: click.Parameter, incomplete: str
) -> list[CompletionItem]:
    """agctl.cli.complete's, imported at a TAB: the root's options are made for every
    command, --help too, and that module loads the data dir's layout (and pathlib)."""
    from agctl.cli.complete import complete_sessions

    return complete_sessions(ctx, param, incomplete)


Callback = Callable[[click.Context, click.Parameter, Any], None]

# (declarations, keyword arguments, callback, the root's environment variable)
_GLOBALS: list[tuple[tuple[str, ...], dict[str, Any], Callback, str | None]] = [
    (
        ("--data-dir", "data_dir"),
        {
            "type": PathType(file_okay=False),
            "help": "This machine's data dir: the sessions, unless --store names another "
            "store, and the current-session choice (default: the platform's user data dir).",
        },
        _data_dir,
        "AGCTL_DATA_DIR",
    ),
    (
        ("--store", "store"),
        {
            "metavar": "URL",
            "help": "Where the sessions are: a directory or file:///DIR (a file store, as "
            "--data-dir DIR), or PostgreSQL, shared by a team: postgresql://HOST/DB, "
            "'postgresql:///DB?service=NAME' (passwords from ~/.pgpass, PGPASSWORD). "
            "Default: the config's store.url, else the data dir.",
        },
        _store,
        "AGCTL_STORE",
    ),
    (
        ("--session", "-s", "session"),
        {
            "metavar": "ID",
            "shell_complete": _complete_sessions,
            "help": "Session id or unique prefix (default: the one chosen with 'session use').",
        },
        _session,
        "AGCTL_SESSION",
    ),
    (
        ("--json", "json_output"),
        {"is_flag": True, "is_eager": True, "help": "Print machine-readable JSON."},
        _json,
        "AGCTL_JSON",
    ),
    (
        ("--quiet", "-q", "quiet"),
        {"is_flag": True, "help": "Print no confirmations, only data and errors."},
        _quiet,
        None,
    ),
    (
        ("--no-color", "no_color"),
        {
            "is_flag": True,
            "help": "Never color the output (also when NO_COLOR is set; never on a pipe).",
        },
        _no_color,
        None,
    ),
    (
        ("--no-hooks", "no_hooks"),
        {"is_flag": True, "help": "Run no hook (those of the config, profiles and project)."},
        _no_hooks,
        "AGCTL_NO_HOOKS",
    ),
    (
        ("-v", "--verbose", "verbose"),
        {
            "count": True,
            "help": "Log what the engine does to stderr (-vv for debug). [env var: AGCTL_LOG]",
        },
        _verbose,
        None,
    ),
]

GLOBAL_OPTION_NAMES = frozenset(
    decl for decls, _, _, _ in _GLOBALS for decl in decls if decl.startswith("-")
)


def root_options(fn: F) -> F:
    """The global options on the root group, with their environment variables."""
    for decls, kwargs, callback, envvar in reversed(_GLOBALS):
        extra = {"envvar": envvar, "show_envvar": True} if envvar else {}
        fn = click.option(*decls, expose_value=False, callback=callback, **kwargs, **extra)(fn)
    return fn


def visible(name: str) -> Callable[[F], F]:
    """Declare the global option `name` on a command, shown in its help (the others are
    accepted there too, but documented once, in `agctl --help`)."""
    for decls, kwargs, callback, _envvar in _GLOBALS:
        if name in decls:
            return click.option(*decls, expose_value=False, callback=callback, **kwargs)
    raise LookupError(name)


class LazyGroup(click.Group):
    """A group some of whose subcommands live in modules of their own, imported when one of
    them is looked up (to run, or for its help): running `turn send` builds send's options,
    not those of replay, retry and edit. `lazy` maps a name to (module, attribute, the
    one-line help the group's help lists without importing it)."""

    def __init__(self, *args: Any, lazy: Mapping[str, tuple[str, str, str]], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy = dict(lazy)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.lazy and cmd_name not in self.commands:
            import importlib

            module, attribute, _ = self.lazy[cmd_name]
            self.add_command(getattr(importlib.import_module(module), attribute), cmd_name)
        return super().get_command(ctx, cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        found = [(name, self.commands.get(name)) for name in self.list_commands(ctx)]
        shown = [(name, sub) for name, sub in found if sub is None or not sub.hidden]
        if not shown:
            return
        limit = formatter.width - 6 - max(len(name) for name, _ in shown)
        rows = [
            (name, sub.get_short_help_str(limit))
            if sub is not None
            else (name, click.Command(name, help=self.lazy[name][2]).get_short_help_str(limit))
            for name, sub in shown
        ]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


def add_global_options(command: click.Command) -> click.Command:
    """Give `command` and everything under it the global options it does not declare,
    hidden from its help."""
    if getattr(command, "_agctl_global_options", False):
        return command
    taken = {
        name
        for param in command.params
        for name in (*param.opts, *getattr(param, "secondary_opts", ()))
    }
    for decls, kwargs, callback, _envvar in _GLOBALS:
        if not taken.intersection(d for d in decls if d.startswith("-")):
            command.params.append(
                click.Option(
                    list(decls), expose_value=False, callback=callback, hidden=True, **kwargs
                )
            )
    command._agctl_global_options = True  # type: ignore[attr-defined]
    if isinstance(command, click.Group):
        # A subcommand gets them when it is looked up, so that running one builds the
        # options of that one only (a turn pays for `turn send`'s, not for four others').
        found = command.get_command

        def get_command(ctx: click.Context, name: str) -> click.Command | None:
            sub = found(ctx, name)
            return None if sub is None else add_global_options(sub)

        command.get_command = get_command  # type: ignore[method-assign,assignment]
    return command


def json_requested(argv: list[str]) -> bool:
    """Whether errors go out as JSON: AGCTL_JSON, or --json anywhere before `--`. Read
    from the command line itself, since a usage error stops Click before any option's
    callback runs."""
    if env_flag("AGCTL_JSON"):
        return True
    for token in argv:
        if token == "--":
            return False
        if token == "--json":
            return True
    return False


def json_option(fn: F) -> F:
    """`--json` on a command, shown in its help (the global option)."""
    return visible("--json")(fn)


def session_option(fn: F) -> F:
    """`--session/-s` on a command, shown in its help (the global option)."""
    return visible("--session")(fn)


def command_options(fn: F) -> F:
    """The options every session-scoped command shows: --session and --json."""
    return session_option(json_option(fn))


# ---- options some commands share --------------------------------------------------


def select_option(what: str = "the new session") -> Callable[[F], F]:
    """`--use/--no-use` on the commands that make a session (new, fork, import, replay
    into a new one): the new session is selected unless --no-use. Commands that make a
    slot take a plain --use instead: a new slot is not selected unless asked."""
    return click.option(
        "--use/--no-use",
        "make_current",
        default=True,
        show_default=True,
        help=f"Select {what} (--no-use keeps the current selection).",
    )


def slot_option(fn: F) -> F:
    from agctl.cli.complete import complete_slots

    return click.option(
        "--slot",
        metavar="NAME",
        shell_complete=complete_slots,
        help="Slot to act on (default: the current slot).",
    )(fn)


def limit_option(fn: F) -> F:
    """`--limit/-n N` on a listing: its N most recent entries, as `git log -n` shows."""
    return click.option(
        "--limit",
        "-n",
        type=Count(min=1),
        metavar="N",
        help="Only the N most recent, in the usual order (as git log -n).",
    )(fn)


def regex_options(fn: F) -> F:
    """`--regex` and `--regex-timeout SECONDS`: TEXT as a regular expression, and the most
    time it may spend matching over the whole search (agctl.reports.search.Matcher)."""
    fn = click.option(
        "--regex-timeout",
        type=click.FloatRange(min=0, min_open=True, max=3600),
        default=2.0,
        show_default=True,
        metavar="SECONDS",
        help="With --regex: stop (exit 2) once the pattern has spent this long matching.",
    )(fn)
    return click.option(
        "--regex",
        is_flag=True,
        help="TEXT is a regular expression (Python's, of the regex module; see 'agctl search "
        "--help').",
    )(fn)


def file_option(fn: F) -> F:
    """`-f/--file PATH` (repeatable): a file's text added to the message."""
    return click.option(
        "-f",
        "--file",
        "files",
        multiple=True,
        metavar="PATH",
        help="Add this file's text to the message, under a line naming it. Repeatable.",
    )(fn)


def provider_options(fn: F) -> F:
    """--model, --profile and --provider, for the commands that call a model. The command
    gets them as one `choice` (an agctl.turn.setup.ModelChoice, for ModelSetup.chosen), with
    its --script and --cassette when it has those options."""
    from agctl.cli.complete import complete_models, complete_profiles

    @functools.wraps(fn)
    def with_choice(
        *args: Any, model: str | None, profile: str | None, provider_kind: str | None, **kw: Any
    ) -> Any:
        from agctl.turn.setup import ModelChoice

        choice = ModelChoice(
            profile=profile,
            model=model,
            provider=provider_kind,
            script=kw.pop("script", None),
            cassette=kw.pop("cassette", None),
        )
        return fn(*args, choice=choice, **kw)

    chosen = cast(F, with_choice)
    chosen = click.option(
        "--provider",
        "provider_kind",
        type=click.Choice(PROVIDERS),
        help="Provider kind for this command (overrides AGCTL_PROVIDER and the profile): "
        "offline answers with no network.",
    )(chosen)
    chosen = click.option(
        "--profile",
        metavar="NAME",
        shell_complete=complete_profiles,
        help="Profile (or preset name) to use.",
    )(chosen)
    return click.option(
        "--model",
        metavar="NAME",
        shell_complete=complete_models,
        help="Model (overrides env, session, profile).",
    )(chosen)


class FiniteFloatRange(click.FloatRange):
    """A FloatRange that refuses nan (which passes every comparison) and infinities."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        import math

        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return number


TEMPERATURE = FiniteFloatRange(0, 2)

# The options of `sampling_options`: TurnOptions fields as they are.
SAMPLING_FIELDS = ("temperature", "max_tokens", "model_options", "system", "scratch")


def sampling_options(fn: F) -> F:
    """--temperature, --max-tokens, -o, --system and --scratch: what the commands that send
    a turn (turn send, retry, edit; chat) change of its request (SAMPLING_FIELDS)."""
    fn = click.option(
        "--scratch",
        metavar="TEXT",
        multiple=True,
        help="Extra context for this request only, after the view; never stored. Repeatable.",
    )(fn)
    fn = click.option("--system", metavar="TEXT", help="System prompt for this turn only.")(fn)
    fn = model_options(fn)
    fn = click.option("--max-tokens", type=Count(min=1), metavar="N", help="Reply length cap.")(fn)
    return click.option("--temperature", type=TEMPERATURE, help="Sampling temperature.")(fn)


def stream_options(fn: F) -> F:
    """--stream/--no-stream and --jsonl: how a sent turn's reply is shown as it comes."""
    fn = click.option(
        "--jsonl", is_flag=True, help="Print every stream event as a JSON line, then the result."
    )(fn)
    return click.option(
        "--stream/--no-stream", default=None, help="Stream the reply (default: on a terminal)."
    )(fn)


def recording_options(fn: F) -> F:
    """--cassette and --record: replies from a cassette, and every request recorded."""
    fn = click.option(
        "--record",
        type=PathType(dir_okay=False),
        help="Append every request and its full reply to this cassette.",
    )(fn)
    return click.option(
        "--cassette",
        type=PathType(dir_okay=False),
        help="Replay provider: answer from this recorded cassette; a miss fails (no network).",
    )(fn)


def schema_options(fn: F) -> F:
    """--schema and --schema-multi: the JSON Schema the reply must follow. The command gets
    `schema`, the schema read (agctl.turn.schema.load_schema), or None."""

    @functools.wraps(fn)
    def with_schema(
        *args: Any, schema_text: str | None, schema_multi: str | None, **kw: Any
    ) -> Any:
        if schema_text is not None and schema_multi is not None:
            raise click.UsageError("give either --schema or --schema-multi, not both")
        given = schema_text if schema_multi is None else schema_multi
        schema = None
        if given is not None:
            from agctl.turn.schema import load_schema

            schema = load_schema(given, multi=schema_multi is not None)
        return fn(*args, schema=schema, **kw)

    chosen = click.option(
        "--schema-multi",
        metavar="SCHEMA",
        help='As --schema, for a list of such objects: the reply is {"items": [...]} '
        "(an object, as every wire's structured output wants one at the root).",
    )(cast(F, with_schema))
    return click.option(
        "--schema",
        "schema_text",
        metavar="SCHEMA",
        help="The reply must be JSON valid against SCHEMA: a JSON Schema file, inline "
        "JSON, or fields such as 'name, age int, bio: a short bio' (types str, int, float, "
        "bool); else exit 11, nothing written, the draft kept.",
    )(chosen)


def model_options(fn: F) -> F:
    """`-o/--option KEY VALUE` (repeatable): model options beyond --temperature and
    --max-tokens, passed through in the request body. The command gets `model_options`,
    KEY to VALUE (JSON when it parses, else text; agctl.providers.options.typed_options);
    they are checked against the wire when the turn is planned."""

    @functools.wraps(fn)
    def with_options(*args: Any, option_pairs: tuple[tuple[str, str], ...], **kw: Any) -> Any:
        from agctl.providers.options import typed_options

        return fn(*args, model_options=typed_options(option_pairs), **kw)

    return click.option(
        "-o",
        "--option",
        "option_pairs",
        nargs=2,
        multiple=True,
        metavar="KEY VALUE",
        help="A model option the wire accepts, sent in the request (top_p 0.9, seed 42, "
        "stop '[\"END\"]'; VALUE is JSON when it parses, else text). Repeatable.",
    )(cast(F, with_options))


def template_options(fn: F) -> F:
    """`-t/--template NAME` and `-p/--param KEY VALUE` (repeatable): a template and its
    parameters' values. The command gets `template`, an agctl.config.templates
    TemplateChoice (loaded: an unknown one is exit 3 before the command does anything),
    or None without -t (then -p is a usage error)."""
    from agctl.cli.complete import complete_templates

    @functools.wraps(fn)
    def with_template(
        *args: Any, template_name: str | None, param_pairs: tuple[tuple[str, str], ...], **kw: Any
    ) -> Any:
        if template_name is None:
            if param_pairs:
                raise click.UsageError("-p/--param gives a template's parameters: name one with -t")
            return fn(*args, template=None, **kw)
        from agctl.config.templates import TemplateChoice

        return fn(*args, template=TemplateChoice.load(template_name, dict(param_pairs)), **kw)

    chosen = click.option(
        "-p",
        "--param",
        "param_pairs",
        nargs=2,
        multiple=True,
        metavar="KEY VALUE",
        help="A value for the template's {{ KEY }} (text, as typed). Repeatable.",
    )(cast(F, with_template))
    return click.option(
        "-t",
        "--template",
        "template_name",
        metavar="NAME",
        shell_complete=complete_templates,
        help="Use template NAME ('agctl template list').",
    )(chosen)


def source_options(fn: F) -> F:
    """--script, --cassette and --record: where replies come from, and where they go."""
    fn = recording_options(fn)
    return click.option(
        "--script",
        type=PathType(dir_okay=False),
        help="Offline provider answering from FILE's canned replies, one per turn this "
        "command sends, from the first.",
    )(fn)


def tool_name_option(help: str) -> Callable[[F], F]:
    """`-T/--tool NAME` (repeatable), completing the names of the tools defined."""
    from agctl.cli.complete import complete_tools

    return click.option(
        "-T",
        "--tool",
        "tool_names",
        multiple=True,
        metavar="NAME",
        shell_complete=complete_tools,
        help=help,
    )


# The options of `tool_options` after -T/--tool, in the order its help shows them:
# (declarations, keyword arguments). Each of agctl.turn.setup.TOOL_LOOP_FIELDS is one of them.
_TOOL_LOOP_OPTIONS: list[tuple[tuple[str, ...], dict[str, Any]]] = [
    (
        ("--tools", "tools_mode"),
        {
            "type": click.Choice(TOOLS_MODES),
            "multiple": True,
            "help": "all: offer every tool defined (an MCP server that cannot be reached is "
            "left out, with a warning naming it); live: with --cassette, run the real tools "
            "instead of answering from the cassette. Repeatable.",
        },
    ),
    (
        ("--tools-file",),
        {
            "type": PathType(dir_okay=False),
            "help": "Also offer-able: the tools defined in FILE (a JSON array of tool objects).",
        },
    ),
    (
        ("--tool-choice",),
        {
            "metavar": "auto|none|required|NAME",
            "help": "Which tools the model may call (the wire's tool_choice; NAME: that one).",
        },
    ),
    (
        ("--max-steps",),
        {
            "type": Count(min=1),
            "default": 8,
            "show_default": True,
            "metavar": "N",
            "help": "Requests that may call tools; then one more asks for the answer (exit 10 "
            "if the model still calls tools).",
        },
    ),
    (
        ("--tool-jobs",),
        {
            "type": Count(min=1),
            "default": 1,
            "show_default": True,
            "metavar": "N",
            "help": "Run up to N tool calls of one reply at once (results stay in order).",
        },
    ),
    (
        ("--max-calls-per-reply",),
        {
            "type": Count(min=1),
            "metavar": "N",
            "help": "Tool calls one reply may ask for; a reply asking for more runs none of "
            "them: the turn stops (exit 10), kept in the draft (default: config "
            "max_calls_per_reply, 32).",
        },
    ),
    (
        ("--max-calls-per-turn",),
        {
            "type": Count(min=1),
            "metavar": "N",
            "help": "Tool calls the whole turn may ask for; past N the turn stops (exit 10) "
            "running none of the reply's calls, kept in the draft (default: config "
            "max_calls_per_turn, 128).",
        },
    ),
    (
        ("--approve",),
        {
            "type": click.Choice(APPROVE_MODES),
            "help": "auto: run the tools' calls without asking (even those set to ask); "
            "never: refuse every call (the model is told). Default: each tool's own approve.",
        },
    ),
]


def tool_options(fn: F) -> F:
    """-T/--tool, --tools, --tools-file, --tool-choice, --max-steps, --tool-jobs,
    --max-calls-per-reply, --max-calls-per-turn and --approve: the tools a turn offers and
    its loop's limits. The command gets `tools` (an agctl.turn.setup.ToolsChoice) and `loop`
    (the TurnOptions fields they set; a limit of calls not given is None: the config's)."""

    @functools.wraps(fn)
    def with_tools(
        *args: Any,
        tool_names: tuple[str, ...],
        tools_mode: tuple[str, ...],
        tools_file: Path | None,
        approve: str | None,
        **kw: Any,
    ) -> Any:
        from agctl.turn.setup import TOOL_LOOP_FIELDS, ToolsChoice

        tools = ToolsChoice(
            names=tool_names,
            every="all" in tools_mode,
            live="live" in tools_mode,
            tools_file=tools_file,
            approve=approve,  # type: ignore[arg-type]
        )
        loop = {name: kw.pop(name) for name in TOOL_LOOP_FIELDS}
        return fn(*args, tools=tools, loop=loop, **kw)

    chosen = cast(F, with_tools)
    for decls, kwargs in reversed(_TOOL_LOOP_OPTIONS):
        chosen = click.option(*decls, **kwargs)(chosen)
    offer = "Offer tool NAME to the model ('agctl tool list'). Repeatable."
    return tool_name_option(offer)(chosen)


def counted_tool_options(fn: F) -> F:
    """-T/--tool, --tools all and --tools-file on `ctx show`: the tools whose definitions
    the next request counts. The command gets them as one `tools` (agctl.turn.setup.ToolsChoice)."""

    @functools.wraps(fn)
    def with_tools(
        *args: Any,
        tool_names: tuple[str, ...],
        every_tool: str | None,
        tools_file: Path | None,
        **kw: Any,
    ) -> Any:
        from agctl.turn.setup import ToolsChoice

        tools = ToolsChoice(names=tool_names, every=every_tool == "all", tools_file=tools_file)
        return fn(*args, tools=tools, **kw)

    chosen = click.option(
        "--tools-file",
        type=PathType(dir_okay=False),
        help="Also count-able: the tools defined in FILE (a JSON array of tool objects).",
    )(cast(F, with_tools))
    chosen = click.option(
        "--tools",
        "every_tool",
        type=click.Choice(TOOLS_COUNTED),
        help="all: count the definitions of every tool defined.",
    )(chosen)
    count = "Count tool NAME's definition, as 'turn send -T NAME' offers it. Repeatable."
    return tool_name_option(count)(chosen)


def gathered(name: str, *params: str) -> Callable[[F], F]:
    """Hands the command the values of the options `params` as one dict, `name`: the
    keywords of the library call they are for, however far apart their options stand in
    its help."""

    def decorate(fn: F) -> F:
        @functools.wraps(fn)
        def with_gathered(*args: Any, **kw: Any) -> Any:
            kw[name] = {param: kw.pop(param) for param in params}
            return fn(*args, **kw)

        return cast(F, with_gathered)

    return decorate
