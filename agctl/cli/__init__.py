"""The `agctl` command line: a thin Click layer over the agctl library.

Only click and the standard library are imported here, so `--help`, `--version` and shell
completion stay fast; each command imports the core when it runs.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import click

from agctl import __version__
from agctl.cli import demo as demo
from agctl.cli import memory as memory
from agctl.cli import msg as msg
from agctl.cli import session as session
from agctl.cli import slot as slot
from agctl.cli.app import App
from agctl.errors import AgctlError

EXIT_CODES = """\b
Exit codes:
  0  success
  1  error (file system, unexpected failure)
  2  usage error (bad option, bad id, ambiguous prefix, no session selected)
  3  not found (session, slot, message index, memory key)
  4  conflict (already exists, readonly slot, protected slot, has children)
  5  corrupt or unsupported data (bad document, newer schema, invalid import)
"""


class RootGroup(click.Group):
    """Maps library errors to a one-line message on stderr and a documented exit code."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except AgctlError as exc:
            click.echo(f"agctl: error: {exc}", err=True)
            ctx.exit(exc.exit_code)


def _configure_logging(verbose: int) -> None:
    level_name = os.environ.get("AGCTL_LOG", "").upper()
    if verbose:
        level = logging.INFO if verbose == 1 else logging.DEBUG
    elif level_name:
        level = getattr(logging, level_name, logging.INFO)
    else:
        return
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
    show_envvar=True,
    help="Session id or unique prefix (default: the one chosen with 'session use').",
)
@click.option("--json", "json_output", is_flag=True, help="Print machine-readable JSON.")
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
    ctx.obj = App(data_dir=data_dir, session=session, json=json_output)


for module in (session, slot, msg, memory, demo):
    cli.add_command(module.command)


def main(*args: Any, **kwargs: Any) -> Any:
    kwargs.setdefault("prog_name", "agctl")
    return cli.main(*args, **kwargs)
