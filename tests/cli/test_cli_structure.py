"""The lazily loaded command groups: `agctl --help` must describe them as they are."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path
from textwrap import indent as indented

import click
import pytest

import agctl.cli as cli_package
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


# A command parses, makes one library call and renders: none needs more than this.
MAX_FUNCTION_LINES = 50


def long_functions(source: str, limit: int = MAX_FUNCTION_LINES) -> dict[str, int]:
    """Each function (a method or a nested one too, by its dotted name) longer than `limit`
    lines, counted from its `def` line to its last (decorators not counted)."""
    found: dict[str, int] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                name = f"{prefix}{child.name}"
                length = (child.end_lineno or child.lineno) - child.lineno + 1
                if not isinstance(child, ast.ClassDef) and length > limit:
                    found[name] = length
                visit(child, f"{name}.")
            else:
                visit(child, prefix)

    visit(ast.parse(source), "")
    return found


def test_the_line_count_starts_at_def_and_reaches_nested_functions() -> None:
    body = "".join(f"x{i} = {i}\n" for i in range(49))  # with the def, 50 lines
    fits, too_long = (
        f"def fits():\n{indented(body, '    ')}",
        f"def too_long():\n{indented(body + 'y = 0', '    ')}\n",
    )
    source = (
        f"@decorator\n@another\n{fits}{too_long}"
        f"class Holder:\n{indented(too_long.replace('too_long', 'method'), '    ')}"
        f"def outer():\n{indented(too_long.replace('too_long', 'inner'), '    ')}"
    )
    assert long_functions(source) == {
        "too_long": 51,
        "Holder.method": 51,
        "outer": 52,
        "outer.inner": 51,
    }


def test_no_function_of_the_command_line_is_longer_than_50_lines() -> None:
    package = Path(cli_package.__file__).parent
    found = {
        (str(path.relative_to(package)), name): length
        for path in sorted(package.rglob("*.py"))
        for name, length in long_functions(path.read_text()).items()
    }
    assert found == {}, f"longer than {MAX_FUNCTION_LINES} lines: {found}"
