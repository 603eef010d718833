"""The global options: one definition, accepted before the group, after it and after the
command (`agctl -s X session show`, `agctl session -s X show`, `agctl session show -s X`).

The root group declares them with their environment variables; every group and command
loaded under it gets a copy without one (`add_global_options`), so a value given further
right wins over one given further left, and an environment variable never overrides the
command line. Each copy writes into the one `App` in the root context.

Imports click and the standard library only.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from agctl.cli.app import App, PathType, shown
from agctl.cli.complete import complete_sessions
from agctl.errors import UsageError

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


def _session(ctx: click.Context, _param: click.Parameter, value: str | None) -> None:
    if value:
        _app(ctx).session_arg = value


def _json(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value:
        _app(ctx).json = True


def _quiet(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value:
        _app(ctx).quiet = True


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


Callback = Callable[[click.Context, click.Parameter, Any], None]

# (declarations, keyword arguments, callback, the root's environment variable)
_GLOBALS: list[tuple[tuple[str, ...], dict[str, Any], Callback, str | None]] = [
    (
        ("--data-dir", "data_dir"),
        {
            "type": PathType(file_okay=False, path_type=Path),
            "help": "Where sessions are stored (default: the platform's user data dir).",
        },
        _data_dir,
        "AGCTL_DATA_DIR",
    ),
    (
        ("--session", "-s", "session"),
        {
            "metavar": "ID",
            "shell_complete": complete_sessions,
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
        for sub in command.commands.values():
            add_global_options(sub)
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
