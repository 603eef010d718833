"""The lazily loaded command groups: `agctl --help` must describe them as they are."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path
from textwrap import indent as indented

import click
import pytest

import agctl.cli as cli_package
from agctl.cli import SUBCOMMANDS, cli
from agctl.cli.options import LazyGroup


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


def lazy_groups() -> list[tuple[str, str]]:
    """(group, subcommand) of every subcommand a LazyGroup imports when it is looked up."""
    found = []
    for name, (module_name, _) in sorted(SUBCOMMANDS.items()):
        group = importlib.import_module(module_name).command
        if isinstance(group, LazyGroup):
            found.extend((name, sub) for sub in sorted(group.lazy))
    return found


@pytest.mark.parametrize(("group", "name"), lazy_groups())
def test_a_lazy_subcommands_help_line_is_its_own(group: str, name: str) -> None:
    """A group lists a subcommand it has not imported by the line kept beside its module's
    name: that line must be the command's, cut as Click cuts it."""
    command = importlib.import_module(SUBCOMMANDS[group][0]).command
    module_name, attribute, short_help = command.lazy[name]
    sub = getattr(importlib.import_module(module_name), attribute)
    assert sub.name == name
    for limit in (45, 60, 200):
        shown = click.Command(name, help=short_help).get_short_help_str(limit)
        assert shown == sub.get_short_help_str(limit)


def test_the_turn_groups_help_lists_its_lazy_subcommands_without_importing_them() -> None:
    """`agctl turn --help` lists replay, retry and edit; `turn send` builds none of them."""
    script = (
        "import sys\n"
        "from agctl.cli import cli\n"
        "cli.main(['turn', '--help'], standalone_mode=False)\n"
        "print(sorted(m for m in sys.modules if m in LAZY))\n"
    )
    lazy = {"agctl.cli.replay", "agctl.cli.resend"}
    done = subprocess.run(
        [sys.executable, "-c", f"LAZY = {sorted(lazy)!r}\n{script}"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert all(f"  {name} " in done.stdout for name in ("edit", "replay", "retry", "send"))
    assert done.stdout.rstrip().endswith("[]")


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
