"""Man pages: `agctl man` shows the shipped pages, and an installed wheel puts them where
`man` looks (share/man/man1 of the environment)."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import Result
from terminal import on_terminal

from agctl import manpages
from agctl.errors import UsageError

Run = Callable[..., Result]
ROOT = Path(__file__).resolve().parents[2]
MAN_DIR = ROOT / "agctl" / "man" / "man1"
# What a build of the project reads: the metadata, the readme it names, the package.
BUILD_INPUTS = ("pyproject.toml", "README.md", "agctl")
TIMEOUT = 300


def require_man() -> str:
    man = shutil.which("man")
    if man is None:
        pytest.skip("man is not installed (apt: man-db)")
    return man


@pytest.fixture
def man_env(monkeypatch: pytest.MonkeyPatch) -> None:
    # man-db's seccomp sandbox fails in some containers; rendering needs no sandbox.
    monkeypatch.setenv("MAN_DISABLE_SECCOMP", "1")
    monkeypatch.setenv("LC_ALL", "C.UTF-8")


# ---- the library -----------------------------------------------------------------------


def test_the_shipped_pages_are_the_generated_ones() -> None:
    """One source: what `agctl man` reads is agctl/man/man1, which generate.py --check guards."""
    shipped = manpages.pages()
    assert sorted(f"{name}.1" for name in shipped) == sorted(p.name for p in MAN_DIR.glob("*.1"))
    assert shipped["agctl-turn-send"].roff == (MAN_DIR / "agctl-turn-send.1").read_text()


def test_words_name_a_page() -> None:
    assert manpages.find([]).name == "agctl"
    page = manpages.find(["turn", "send"])
    assert (page.name, page.command) == ("agctl-turn-send", "agctl turn send")


@pytest.mark.parametrize(
    ("words", "suggested"),
    [
        (["turn", "sned"], "'agctl man turn send'"),
        (["send"], "'agctl man turn send'"),
        (["sesion"], "'agctl man session'"),
    ],
)
def test_an_unknown_command_names_the_close_ones(words: list[str], suggested: str) -> None:
    with pytest.raises(UsageError) as caught:
        manpages.find(words)
    assert f"no man page for 'agctl {' '.join(words)}'" in str(caught.value)
    assert suggested in str(caught.value.hint)


@pytest.mark.parametrize("words", [["xyzzy"], ["..", "..", "etc", "passwd"], ["man1/agctl"]])
def test_a_name_that_is_no_command_finds_no_file(words: list[str]) -> None:
    with pytest.raises(UsageError, match="no man page for"):
        manpages.find(words)


# ---- the command -----------------------------------------------------------------------


def test_man_to_a_pipe_is_the_plain_text_man_prints(run: Run, man_env: None) -> None:
    require_man()
    result = run("man", "turn", "send")
    assert result.exit_code == 0, result.output
    assert "AGCTL-TURN-SEND(1)" in result.stdout
    assert "SYNOPSIS" in result.stdout
    assert "agctl turn send [OPTIONS] [PROMPT]" in result.stdout
    # Rendered: no roff requests, no overstrike bold, no escape sequences.
    assert ".TH" not in result.stdout
    assert "\b" not in result.stdout
    assert "\x1b" not in result.stdout


def test_man_without_words_is_agctls_page(run: Run, man_env: None) -> None:
    require_man()
    result = run("man")
    assert result.exit_code == 0, result.output
    assert result.stdout.lstrip().startswith("AGCTL(1)")
    assert "EXIT STATUS" in result.stdout


def test_roff_prints_the_source_exactly(run: Run) -> None:
    result = run("man", "--roff", "ckpt", "rollback")
    assert result.exit_code == 0
    assert result.stdout == (MAN_DIR / "agctl-ckpt-rollback.1").read_text()
    assert result.stderr == ""


def test_json_gives_the_command_the_page_and_its_source(run: Run) -> None:
    result = run("--json", "man", "turn", "send")
    assert result.exit_code == 0
    assert json.loads(result.stdout) == {
        "command": "agctl turn send",
        "page": "agctl-turn-send.1",
        "roff": (MAN_DIR / "agctl-turn-send.1").read_text(),
    }


def test_an_unknown_command_is_a_usage_error(run: Run) -> None:
    result = run("man", "turn", "sned")
    assert result.exit_code == 2
    assert result.stdout == ""
    assert "agctl: error: no man page for 'agctl turn sned'" in result.stderr
    assert "'agctl man turn send'" in result.stderr


def test_without_man_the_roff_source_is_printed_and_said(
    run: Run, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    result = run("man", "turn", "send")
    assert result.exit_code == 0
    assert result.stdout == (MAN_DIR / "agctl-turn-send.1").read_text()
    assert result.stderr == "agctl: man is not installed; this is the page's roff source\n"


def test_on_a_terminal_the_page_opens_in_man(tmp_path: Path, isolated_env: Path) -> None:
    require_man()
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "MANPAGER": "cat",
        "PAGER": "cat",
        "MAN_DISABLE_SECCOMP": "1",
        "LC_ALL": "C.UTF-8",
    }
    status, received = on_terminal(env, "man", "turn", "undo")
    assert status == 0, received
    assert b"AGCTL-TURN-UNDO(1)" in received
    assert b".TH" not in received


# ---- installed -------------------------------------------------------------------------


def can_build_wheels_offline() -> bool:
    """Whether the running interpreter has a backend that builds wheels with no download:
    setuptools 70.1 or later (bdist_wheel built in), or an older one with `wheel`."""
    if importlib.util.find_spec("setuptools") is None:
        return False
    import setuptools

    major, minor = (int(part) for part in setuptools.__version__.split(".")[:2])
    return (major, minor) >= (70, 1) or importlib.util.find_spec("wheel") is not None


def build(args: list[str], cwd: Path) -> None:
    result = subprocess.run(
        args, cwd=cwd, capture_output=True, text=True, timeout=TIMEOUT, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_an_installed_wheel_puts_the_pages_where_man_finds_them(tmp_path: Path) -> None:
    """sdist, then a wheel from the sdist (as pip installs from an index), then that wheel
    in a fresh venv: `man -w` finds the pages from the venv's PATH alone, no MANPATH."""
    man = require_man()
    if not can_build_wheels_offline():
        pytest.skip("setuptools>=70.1 (in the test extra) is needed to build offline")
    source = tmp_path / "source"
    source.mkdir()
    skip_caches = shutil.ignore_patterns("__pycache__")
    for name in BUILD_INPUTS:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, source / name, ignore=skip_caches)
        else:
            shutil.copy2(ROOT / name, source / name)
    dist = tmp_path / "dist"
    build(
        [
            sys.executable,
            "-c",
            "import sys; from setuptools import build_meta; build_meta.build_sdist(sys.argv[1])",
            str(dist),
        ],
        cwd=source,
    )
    (sdist,) = dist.glob("agctl-*.tar.gz")
    with tarfile.open(sdist) as archive:
        members = {Path(*Path(name).parts[1:]).as_posix() for name in archive.getnames()}
    assert {"pyproject.toml", "agctl/man/man1/agctl.1", "agctl/man/man1/agctl-man.1"} <= members
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input"]
    offline = ["--no-deps", "--no-index", "--no-build-isolation"]
    build([*pip, "wheel", *offline, "--wheel-dir", str(dist), str(sdist)], cwd=tmp_path)
    (wheel,) = dist.glob("agctl-*.whl")
    venv = tmp_path / "venv"
    build([sys.executable, "-m", "venv", "--without-pip", str(venv)], cwd=tmp_path)
    install = ["install", "--no-deps", "--no-index", str(wheel)]
    build([*pip, "--python", str(venv / "bin" / "python"), *install], cwd=tmp_path)
    (site_packages,) = venv.glob("lib/python*/site-packages")
    assert (site_packages / "agctl" / "man" / "man1" / "agctl-turn-send.1").is_file()

    env = {key: value for key, value in os.environ.items() if key != "MANPATH"}
    env.update(PATH=f"{venv / 'bin'}:/usr/bin:/bin", MAN_DISABLE_SECCOMP="1", LC_ALL="C.UTF-8")
    found = subprocess.run(
        [man, "-w", "agctl", "agctl-turn-send"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert found.returncode == 0, found.stderr
    shared = venv / "share" / "man" / "man1"
    assert found.stdout.split() == [str(shared / "agctl.1"), str(shared / "agctl-turn-send.1")]
    assert (shared / "agctl.1").read_text() == (MAN_DIR / "agctl.1").read_text()
