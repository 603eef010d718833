"""The `agctl` command line: a thin Click layer over the agctl library.

Only click and the standard library are imported here, so `--help`, `--version` and shell
completion stay fast; each command imports the core when it runs.
"""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path
from typing import Any

import click

from agctl import __version__
from agctl.cli.app import App
from agctl.cli.complete import complete_sessions
from agctl.errors import EXIT_INTERRUPTED, AgctlError

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
    "ctx": ("agctl.cli.ctx", "The context of the next request: its budget, and compression."),
    "config": ("agctl.cli.config", "Show and change the configuration."),
    "profile": ("agctl.cli.profile", "Provider profiles: endpoint, model and key."),
    "completion": ("agctl.cli.completion", "Print the completion script for SHELL."),
    "schema": ("agctl.cli.schema", "Print the JSON Schema of a stored document or input format."),
    "demo": ("agctl.cli.demo", "Run a scripted tour of sessions, slots and messages."),
}

EXIT_CODES = """\b
Exit codes:
    0  success
    1  error (file system, unexpected failure)
    2  usage error (bad option, bad id, ambiguous prefix, no session selected)
    3  not found (session, slot, message index, memory key, profile)
    4  conflict (already exists, readonly slot, protected slot, has children)
    5  corrupt or unsupported data (bad document, newer schema, invalid import)
    6  provider error (HTTP error, timeout, malformed reply, replay miss)
    7  context full (the request does not fit the model's window)
    8  replay check failed (a reply differs from the expected one)
  130  interrupted (Ctrl-C); nothing was written
"""


class RootGroup(click.Group):
    """Loads subcommands on demand; maps library errors to stderr and an exit code."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(SUBCOMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in SUBCOMMANDS:
            return None
        module = importlib.import_module(SUBCOMMANDS[cmd_name][0])
        command: click.Command = module.command
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, SUBCOMMANDS[name][1]) for name in self.list_commands(ctx)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except AgctlError as exc:
            click.echo(f"agctl: error: {exc}", err=True)
            for note in getattr(exc, "__notes__", ()):
                click.echo(f"agctl: {note}", err=True)
            ctx.exit(exc.exit_code)
        except KeyboardInterrupt:
            click.echo("agctl: interrupted", err=True)
            ctx.exit(EXIT_INTERRUPTED)


def _configure_logging(verbose: int) -> None:
    level_name = os.environ.get("AGCTL_LOG", "").upper()
    if not verbose and not level_name:
        return
    import logging

    if verbose:
        level = logging.INFO if verbose == 1 else logging.DEBUG
    else:
        level = getattr(logging, level_name, logging.INFO)
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("agctl: %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger("agctl")
    root.handlers[:] = [handler]
    root.setLevel(level)


@click.group(
    cls=RootGroup,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
    epilog=EXIT_CODES,
)
@click.option(
    "--data-dir",
    type=click.Path(file_okay=False, path_type=Path),
    envvar="AGCTL_DATA_DIR",
    show_envvar=True,
    help="Where sessions are stored (default: the platform's user data dir).",
)
@click.option(
    "--session",
    "-s",
    metavar="ID",
    envvar="AGCTL_SESSION",
    shell_complete=complete_sessions,
    show_envvar=True,
    help="Session id or unique prefix (default: the one chosen with 'session use').",
)
@click.option("--json", "json_output", is_flag=True, help="Print machine-readable JSON.")
@click.option("--quiet", "-q", is_flag=True, help="Print no confirmations, only data and errors.")
@click.option(
    "--no-color",
    is_flag=True,
    help="Never color the output (also when NO_COLOR is set; never on a pipe).",
)
@click.option(
    "-v",
    "--verbose",
    count=True,
    help="Log what the engine does to stderr (-vv for debug). [env var: AGCTL_LOG]",
)
@click.version_option(__version__, "--version", prog_name="agctl")
@click.pass_context
def cli(
    ctx: click.Context,
    data_dir: Path | None,
    session: str | None,
    json_output: bool,
    quiet: bool,
    no_color: bool,
    verbose: int,
) -> None:
    """Manage the context of LLM conversations as data.

    Sessions hold named context slots (branchable message lists); everything is stored
    as plain JSON under the data dir.

    \b
    Examples:
      agctl session new --system "You are terse."
      agctl msg append user "What is a monad?"
      agctl slot derive experiment --use
      agctl slot show --view --json
    """
    _configure_logging(verbose)
    if no_color or os.environ.get("NO_COLOR"):
        ctx.color = False
    ctx.obj = App(data_dir=data_dir, session=session, json=json_output, quiet=quiet)


def main(*args: Any, **kwargs: Any) -> Any:
    # agctl's HTTP is synchronous, yet httpcore imports trio, when installed, just to
    # detect it: about 80 ms of every turn. The command line never runs trio.
    sys.modules.setdefault("trio", None)  # type: ignore[arg-type]
    kwargs.setdefault("prog_name", "agctl")
    return cli.main(*args, **kwargs)
