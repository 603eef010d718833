"""`agctl memory`: a small key/value store kept with each session."""

from __future__ import annotations

import click

from agctl.cli.app import App, pass_app, text_argument
from agctl.cli.options import command_options


@click.group("memory")
def command() -> None:
    """Session memory: small key/value pairs.

    \b
    Examples:
      agctl memory set user.name Ada
      agctl memory get user.name
      agctl memory list --json
    """


@command.command("set")
@click.argument("key")
@click.argument("value", required=False)
@command_options
@pass_app
def set_(app: App, key: str, value: str | None) -> None:
    """Set KEY to VALUE (VALUE from stdin when absent or '-').

    \b
    Examples:
      agctl memory set project agctl
      date | agctl memory set last-run -
    """
    text = text_argument(value, "VALUE")
    app.store.memory_set(app.session_id(), key, text)
    app.done({"key": key, "value": text}, text=f"{key} set")


@command.command("get")
@click.argument("key")
@command_options
@pass_app
def get(app: App, key: str) -> None:
    """Print the value of KEY.

    \b
    Examples:
      agctl memory get project
    """
    value = app.store.memory_get(app.session_id(), key)
    app.emit({"key": key, "value": value}, text=value)


@command.command("list")
@command_options
@pass_app
def list_(app: App) -> None:
    """List every key and value (a JSON object with --json).

    \b
    Examples:
      agctl memory list
    """
    memory = app.store.load_session(app.session_id()).memory
    if app.json:
        app.emit(memory)
        return
    rows = [{"key": k, "value": v} for k, v in sorted(memory.items())]
    app.emit_rows(rows, [("key", "KEY"), ("value", "VALUE")], empty="memory is empty")


@command.command("rm")
@click.argument("key")
@command_options
@pass_app
def rm(app: App, key: str) -> None:
    """Remove KEY.

    \b
    Examples:
      agctl memory rm project
    """
    value = app.store.memory_remove(app.session_id(), key)
    app.done({"key": key, "value": value}, text=f"{key} removed")
