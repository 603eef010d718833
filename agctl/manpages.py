"""The man pages shipped inside the package, so `agctl man` works without installing them.

scripts/generate.py writes them into agctl/man/man1 (and `--check` keeps them current); the
wheel carries the same files as package data, read here, and in share/man/man1, for man.
Standard library only.
"""

from __future__ import annotations

import contextlib
import difflib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from importlib.resources import as_file, files
from importlib.resources.abc import Traversable
from pathlib import Path

from agctl.errors import UsageError

PROGRAM = "agctl"
SECTION = "1"
# How many close names an unknown command's error lists.
SUGGESTIONS = 3


@dataclass(frozen=True)
class ManPage:
    """One page: `agctl-turn-send` documents the command `agctl turn send`."""

    name: str
    resource: Traversable

    @property
    def command(self) -> str:
        return self.name.replace("-", " ")

    @property
    def roff(self) -> str:
        return self.resource.read_text(encoding="utf-8")


def _directory() -> Traversable:
    return files(PROGRAM).joinpath("man", f"man{SECTION}")


def pages() -> dict[str, ManPage]:
    """Every shipped page by name."""
    suffix = f".{SECTION}"
    found = {}
    for entry in _directory().iterdir():
        if entry.name.startswith(PROGRAM) and entry.name.endswith(suffix) and entry.is_file():
            name = entry.name.removesuffix(suffix)
            found[name] = ManPage(name, entry)
    return found


def find(words: Sequence[str]) -> ManPage:
    """The page of `agctl WORDS...` (no words: agctl's own page).

    An unknown command is a UsageError naming the closest commands that have a page.
    """
    available = pages()
    name = "-".join([PROGRAM, *words])
    if name in available:
        return available[name]
    wanted = " ".join(words)
    commands = sorted(page.command.removeprefix(f"{PROGRAM} ") for page in available.values())
    close = difflib.get_close_matches(wanted, commands, n=SUGGESTIONS, cutoff=0.6)
    hint = (
        "did you mean " + ", ".join(f"'{PROGRAM} man {command}'" for command in close) + "?"
        if close
        else f"'{PROGRAM} --help' lists the commands"
    )
    raise UsageError(f"no man page for '{PROGRAM} {wanted}'", hint=hint)


@contextlib.contextmanager
def page_file(page: ManPage) -> Iterator[Path]:
    """A file system path to the page, for `man -l` (a temporary copy if the package is
    not unpacked on disk)."""
    with as_file(page.resource) as path:
        yield path
