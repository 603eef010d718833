"""`agctl man`: the man page of a command, shown without installing the pages."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import click

from agctl.base.errors import AgctlError
from agctl.cli.app import App, pass_app
from agctl.cli.options import json_option
from agctl.cli.output import echo


@click.command("man")
@click.argument("words", nargs=-1, metavar="[COMMAND]...")
@click.option(
    "--roff",
    is_flag=True,
    help="Print the page's roff source (to save it, or for 'man -l -').",
)
@json_option
@pass_app
def command(app: App, words: tuple[str, ...], roff: bool) -> None:
    """Show the man page of agctl or of one of its commands.

    The pages ship with agctl, so this works before 'man agctl' does (an editable
    install, a wheel not yet on MANPATH). On a terminal the page opens in man, with its
    pager; to a pipe or a file it is the plain text man prints there, as 'man agctl | grep'
    gives. Without man installed, and with --roff, the roff source is printed instead.
    With --json: {"command", "page", "roff"}.

    \b
    Examples:
      agctl man
      agctl man turn send
      agctl man ckpt rollback | grep -A2 -- --force
      agctl man --roff turn send > agctl-turn-send.1
    """
    from agctl.cli import manpages

    page = manpages.find(words)
    if app.json:
        app.emit({"command": page.command, "page": f"{page.name}.1", "roff": page.roff})
        return
    man = None if roff else shutil.which("man")
    if man is None:
        if not roff:
            echo("agctl: man is not installed; this is the page's roff source", err=True)
        echo(page.roff, nl=False)
        return
    if sys.stdout.isatty():
        # man and its pager take the terminal; their status is agctl's.
        status = subprocess.run([man, "-l", str(page.path)], check=False).returncode
        if status:
            raise click.exceptions.Exit(status)
        return
    result = subprocess.run(
        [man, "-l", str(page.path)],
        capture_output=True,
        encoding="utf-8",
        errors="replace",
        env={**os.environ, "MANPAGER": "cat", "PAGER": "cat"},
        check=False,
    )
    if result.returncode:
        why = " ".join(result.stderr.split()) or f"exit status {result.returncode}"
        raise AgctlError(f"man could not show {page.name}: {why} ('agctl man --roff' prints it)")
    echo(result.stderr, err=True, nl=False)
    echo(result.stdout, nl=False)
