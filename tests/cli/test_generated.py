"""The files generated from the Click tree (completions, man pages, README) are current."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import click
import pytest
from click.testing import Result

from agctl.cli import cli
from agctl.cli.completion import SHELLS

ROOT = Path(__file__).resolve().parents[2]
MAN_DIR = ROOT / "man" / "man1"
COMPLETION_FILES = {"bash": "agctl.bash", "zsh": "_agctl", "fish": "agctl.fish"}


def page_names(command: click.Command, ctx: click.Context, path: str) -> Iterator[str]:
    yield path
    if isinstance(command, click.Group):
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            if sub is not None and not sub.hidden:
                yield from page_names(
                    sub, click.Context(sub, info_name=name, parent=ctx), f"{path}-{name}"
                )


def render_command() -> list[str]:
    """man if installed (what users run), else groff; both with every warning enabled."""
    if shutil.which("man"):
        return ["man", "--warnings=w", "-l"]
    if shutil.which("groff"):
        return ["groff", "-man", "-Tutf8", "-ww", "-P-cbou"]
    reason = "neither man (apt: man-db) nor groff (apt: groff-base) is installed"
    if os.environ.get("CI"):
        pytest.fail(f"{reason}; CI must render the man pages")
    pytest.skip(reason)


def render(pages: list[Path]) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "MANWIDTH": "80",
        "MANPAGER": "cat",
        "PAGER": "cat",
        "LC_ALL": "C.UTF-8",
        # man-db's seccomp sandbox fails in some containers; rendering needs no sandbox.
        "MAN_DISABLE_SECCOMP": "1",
    }
    return subprocess.run(
        [*render_command(), *map(str, pages)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )


def test_generated_files_are_current() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "generate.py"), "--check"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_command_has_its_man_page_and_no_other() -> None:
    expected = {
        f"{name}.1" for name in page_names(cli, click.Context(cli, info_name="agctl"), "agctl")
    }
    assert {path.name for path in MAN_DIR.glob("*.1")} == expected


def test_root_man_page_renders() -> None:
    result = render([MAN_DIR / "agctl.1"])
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert "NAME" in result.stdout
    assert "SYNOPSIS" in result.stdout
    assert "EXIT STATUS" in result.stdout


def test_every_man_page_renders_without_warnings() -> None:
    pages = sorted(MAN_DIR.glob("*.1"))
    result = render(pages)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert result.stdout.count("SYNOPSIS") == len(pages)


@pytest.mark.parametrize("shell", SHELLS)
def test_completion_command_prints_the_committed_script(
    shell: str, run: Callable[..., Result]
) -> None:
    committed = (ROOT / "completions" / COMPLETION_FILES[shell]).read_text(encoding="utf-8")
    assert run("completion", shell).stdout == committed
