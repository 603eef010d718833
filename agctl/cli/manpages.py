"""The man pages, found where they are, so `agctl man` works without man knowing them.

scripts/generate.py writes them into man/man1 at the top of the source tree (and `--check`
keeps them current). A checkout (an editable install, or PYTHONPATH) reads them there; a
wheel installs that folder, and nothing else of them, into share/man/man1 of its prefix,
where man finds them too, and the wheel's RECORD says where that is (a venv, --user,
--prefix). Standard library only.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from agctl.base.errors import NotFound, UsageError

PROGRAM = "agctl"
SECTION = "1"
# How many close names an unknown command's error lists.
SUGGESTIONS = 3
FOLDER = ("man", f"man{SECTION}")  # in the source tree, and under share/ once installed
MAIN_PAGE = f"{PROGRAM}.{SECTION}"


@dataclass(frozen=True)
class ManPage:
    """One page: `agctl-turn-send` documents the command `agctl turn send`."""

    name: str
    path: Path

    @property
    def command(self) -> str:
        return self.name.replace("-", " ")

    @property
    def roff(self) -> str:
        return self.path.read_text(encoding="utf-8")


def _installed() -> Path | None:
    """share/man/man1 as agctl's wheel installed it, if it did."""
    from importlib.metadata import PackageNotFoundError, distribution

    try:
        found = distribution(PROGRAM)
    except PackageNotFoundError:
        return None
    for file in found.files or ():
        if file.name == MAIN_PAGE and file.parent.parts[-3:] == ("share", *FOLDER):
            page = Path(str(found.locate_file(file))).resolve()
            return page.parent if page.is_file() else None
    return None


def directory() -> Path:
    """Where the pages are: man/man1 beside the package in a checkout, else the share/man
    the wheel installed them in."""
    checkout = Path(__file__).resolve().parents[2].joinpath(*FOLDER)
    if (checkout / MAIN_PAGE).is_file():
        return checkout
    installed = _installed()
    if installed is None:
        raise NotFound(
            f"{PROGRAM}'s man pages are not installed (not in {checkout}, and none in "
            f"share/{'/'.join(FOLDER)} of its install)",
            hint=f"install {PROGRAM} from its wheel, or read '{PROGRAM} COMMAND --help'",
        )
    return installed


def pages() -> dict[str, ManPage]:
    """Every page by name."""
    suffix = f".{SECTION}"
    found = {}
    for entry in directory().iterdir():
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
