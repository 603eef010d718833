"""The lazily loaded command groups: `agctl --help` must describe them as they are."""

from __future__ import annotations

import importlib

import click
import pytest

from agctl.cli import SUBCOMMANDS, cli


@pytest.mark.parametrize("name", sorted(SUBCOMMANDS))
def test_root_help_line_matches_the_command(name: str) -> None:
    module_name, short_help = SUBCOMMANDS[name]
    command = importlib.import_module(module_name).command
    assert command.name == name
    assert command.get_short_help_str(limit=200) == short_help


def test_root_lists_every_group_and_nothing_else() -> None:
    ctx = click.Context(cli)
    assert cli.list_commands(ctx) == sorted(SUBCOMMANDS)
    assert cli.get_command(ctx, "nope") is None
    assert all(isinstance(cli.get_command(ctx, n), click.Command) for n in SUBCOMMANDS)
