"""One vocabulary (agctl/base/vocab.py): no module re-declares its lists, the models and the CLI
use them, and importing it costs only the standard library."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

import click
import pytest
from pydantic import BaseModel

from agctl.base import vocab
from agctl.cli import cli
from agctl.config.file import Config, Profile
from agctl.context.models import MergeRecord, Message, Session, SlotConfig, SlotSource
from agctl.turn.tools import ToolSpec

PACKAGE = Path(vocab.__file__).parent
# Every closed list vocab.py defines: name -> its values.
LISTS: dict[str, frozenset[str]] = {
    name: frozenset(value)
    for name, value in vars(vocab).items()
    if name.isupper()
    and isinstance(value, tuple)
    and value
    and all(isinstance(v, str) for v in value)
}
LISTS["PRESET_ALIASES"] = frozenset(vocab.PRESET_ALIASES)
# Choices the CLI offers that are its own business, not the library's.
CLI_ONLY_CHOICES = {
    frozenset({"bash", "zsh", "fish"}),
    frozenset({"debug", "info", "warning", "error", "critical"}),
}


def string_lists(source: str) -> Iterator[tuple[int, frozenset[str]]]:
    """(line, values) of each literal tuple, list, set, dict's keys or Literal[...] of two
    or more strings in a module's source."""
    for node in ast.walk(ast.parse(source)):
        items: list[ast.expr | None] = []
        if isinstance(node, ast.Tuple | ast.List | ast.Set):
            items = list(node.elts)
        elif isinstance(node, ast.Dict):
            items = list(node.keys)
        elif isinstance(node, ast.Subscript) and ast.unparse(node.value).endswith("Literal"):
            items = list(node.slice.elts) if isinstance(node.slice, ast.Tuple) else [node.slice]
        strings = [
            i.value for i in items if isinstance(i, ast.Constant) and isinstance(i.value, str)
        ]
        if isinstance(node, ast.expr) and len(strings) >= 2 and len(strings) == len(items):
            yield node.lineno, frozenset(strings)


def copies_in(source: str) -> list[tuple[int, str]]:
    """(line, vocab list name) of each list in `source` that holds a vocab list's values."""
    found = [
        (line, name)
        for line, values in string_lists(source)
        for name, listed in LISTS.items()
        if values == listed
    ]
    return sorted(set(found))  # Literal[...]'s tuple is seen twice


def test_the_scan_finds_a_copy_in_any_form() -> None:
    source = """
MODES = ("full", "focused", "readonly")
Role = Literal["system", "user", "assistant", "tool"]
SETTINGS = frozenset({"auto_compress", "budget", "summary_template", "clear_tool_results"})
TABLE = {"llama.cpp": 1, "lm-studio": 2, "glm": 3, "claude": 4, "google": 5}
choice = click.Choice(["exact", "contains", "regex", "schema"])
partial = ("system", "user")
"""
    assert [name for _, name in copies_in(source)] == [
        "SLOT_MODES",
        "ROLES",
        "SLOT_SETTINGS",
        "PRESET_ALIASES",
        "CHECK_MODES",
    ]


def test_no_module_redeclares_a_vocabulary_list() -> None:
    copies = [
        f"{path.relative_to(PACKAGE.parent)}:{line}: a copy of vocab.{name}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if path != PACKAGE / "vocab.py"
        for line, name in copies_in(path.read_text(encoding="utf-8"))
    ]
    assert copies == []


def literal_values(annotation: Any) -> tuple[Any, ...]:
    """The values a field's `Literal[...]` (or `Literal[...] | None`) admits, in order."""
    if get_origin(annotation) is Literal:
        return get_args(annotation)
    return tuple(v for arg in get_args(annotation) for v in literal_values(arg))


@pytest.mark.parametrize(
    ("model", "field", "listed"),
    [
        (Message, "role", vocab.ROLES),
        (SlotConfig, "mode", vocab.SLOT_MODES),
        (SlotSource, "strategy", vocab.DERIVE_STRATEGIES),
        (MergeRecord, "strategy", vocab.MERGE_STRATEGIES),
        (Profile, "provider", vocab.PROVIDERS),
        (ToolSpec, "args", vocab.TOOL_ARGS_MODES),
        (ToolSpec, "approve", vocab.TOOL_APPROVALS),
    ],
)
def test_the_models_validate_against_the_vocabulary(
    model: type[BaseModel], field: str, listed: tuple[str, ...]
) -> None:
    assert literal_values(model.model_fields[field].annotation) == listed


def test_the_setting_names_are_fields_of_their_documents() -> None:
    assert set(vocab.SESSION_SETTINGS) <= set(Session.model_fields)
    assert set(vocab.SLOT_SETTINGS) <= set(SlotConfig.model_fields)
    settable = set(Config.model_fields) - {"schema_version", "rev"}
    assert {key.split(".")[0] for key in vocab.CONFIG_KEYS} == settable


def choices(command: click.Command, path: str) -> Iterator[tuple[str, frozenset[str]]]:
    """(command path and parameter, choices) of every Choice parameter under `command`."""
    for param in command.params:
        if isinstance(param.type, click.Choice):
            yield f"{path} {param.name}", frozenset(str(c) for c in param.type.choices)
    if isinstance(command, click.Group):
        for name in command.list_commands(click.Context(command)):
            sub = command.get_command(click.Context(command), name)
            assert sub is not None
            yield from choices(sub, f"{path} {name}")


def test_every_choice_the_cli_offers_is_a_whole_vocabulary_list() -> None:
    offered = list(choices(cli, "agctl"))
    assert ("agctl msg append role", frozenset(vocab.ROLES)) in offered
    stray = [
        where
        for where, values in offered
        if values not in LISTS.values() and values not in CLI_ONLY_CHOICES
    ]
    assert stray == []


@pytest.mark.parametrize("path", [["profile", "add"], ["turn", "send"], ["ctx", "compress"]])
def test_provider_flags_offer_the_library_s_provider_kinds(path: list[str]) -> None:
    group = cli.get_command(click.Context(cli), path[0])
    assert isinstance(group, click.Group)
    command = group.get_command(click.Context(group), path[1])
    assert command is not None
    (provider,) = [p for p in command.params if "--provider" in p.opts]
    assert isinstance(provider.type, click.Choice)
    assert tuple(provider.type.choices) == vocab.PROVIDERS


def test_the_profile_help_names_every_preset() -> None:
    group = cli.get_command(click.Context(cli), "profile")
    assert group is not None and group.help is not None
    assert [name for name in vocab.PRESET_NAMES if name not in group.help] == []


def test_importing_the_vocabulary_loads_the_standard_library_only() -> None:
    script = (
        "import sys, json; before = set(sys.modules); import agctl.base.vocab; "
        "print(json.dumps(sorted(set(sys.modules) - before)))"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, check=True, text=True
    )
    loaded = {name.split(".")[0] for name in json.loads(result.stdout)}
    assert "agctl" in loaded
    assert sorted(loaded - set(sys.stdlib_module_names) - {"agctl"}) == []
