"""Man pages: `agctl man` shows the pages generated into man/man1, and an installed wheel
puts them where `man` looks (share/man/man1 of the environment), where its `agctl man`
reads them too."""

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

from agctl.base.errors import UsageError
from agctl.cli import manpages

Run = Callable[..., Result]
ROOT = Path(__file__).resolve().parents[2]
MAN_DIR = ROOT / "man" / "man1"
# What a build of the project reads: the metadata, the readme it names, the package and
# the man pages it installs.
BUILD_INPUTS = ("pyproject.toml", "README.md", "agctl", "man")
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
    """One source: what `agctl man` reads is man/man1, which generate.py --check guards."""
    assert manpages.directory() == MAN_DIR
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


PIP = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input"]
OFFLINE = ["--no-deps", "--no-index", "--no-build-isolation"]


def source_tree(tmp_path: Path) -> Path:
    """A copy of what a build reads, away from the checkout."""
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
    return source


def fresh_venv(tmp_path: Path, *install: str) -> Path:
    """A venv with `pip install ...install` done in it; agctl's dependencies come from
    this interpreter's site-packages, behind the venv's own."""
    venv = tmp_path / "venv"
    options = ["--without-pip", "--system-site-packages"]
    build([sys.executable, "-m", "venv", *options, str(venv)], cwd=tmp_path)
    build([*PIP, "--python", str(venv / "bin" / "python"), "install", *install], cwd=tmp_path)
    return venv


def installed_env(tmp_path: Path, venv: Path) -> dict[str, str]:
    """The environment of a user of that venv: its bin on PATH, no MANPATH, nothing of the
    test run's Python or agctl settings."""
    env = {
        key: value
        for key, value in os.environ.items()
        if key != "MANPATH" and not key.startswith(("PYTHON", "AGCTL_"))
    }
    env.update(
        PATH=f"{venv / 'bin'}:/usr/bin:/bin",
        MAN_DISABLE_SECCOMP="1",
        LC_ALL="C.UTF-8",
        AGCTL_DATA_DIR=str(tmp_path / "data"),
        AGCTL_CONFIG_DIR=str(tmp_path / "config"),
    )
    return env


def run_installed(
    venv: Path, env: dict[str, str], *args: str, program: str = "agctl"
) -> subprocess.CompletedProcess[str]:
    """`program` of the venv, run from a directory that is no source tree."""
    elsewhere = venv.parent / "elsewhere"
    elsewhere.mkdir(exist_ok=True)
    return subprocess.run(
        [str(venv / "bin" / program), *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=elsewhere,
        timeout=60,
        check=False,
    )


def test_an_installed_wheel_puts_the_pages_where_man_and_agctl_man_find_them(
    tmp_path: Path,
) -> None:
    """sdist, then a wheel from the sdist (as pip installs from an index), then that wheel
    in a fresh venv: `man -w` finds the pages from the venv's PATH alone, no MANPATH, and
    the venv's `agctl man`, run away from the source tree, reads the same ones."""
    man = require_man()
    source = source_tree(tmp_path)
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
    assert {"pyproject.toml", "man/man1/agctl.1", "man/man1/agctl-man.1"} <= members
    build([*PIP, "wheel", *OFFLINE, "--wheel-dir", str(dist), str(sdist)], cwd=tmp_path)
    (wheel,) = dist.glob("agctl-*.whl")
    venv = fresh_venv(tmp_path, *OFFLINE, str(wheel))
    (site_packages,) = venv.glob("lib/python*/site-packages")
    assert not list((site_packages / "agctl").rglob("*.1"))  # one copy, in share/man
    env = installed_env(tmp_path, venv)
    origin = run_installed(venv, env, "-c", "import agctl; print(agctl.__file__)", program="python")
    assert origin.stdout.strip() == str(site_packages / "agctl" / "__init__.py"), origin.stderr

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

    shown = run_installed(venv, env, "--json", "man", "turn", "send")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["roff"] == (MAN_DIR / "agctl-turn-send.1").read_text()
    rendered = run_installed(venv, env, "man", "ckpt", "rollback")
    assert rendered.returncode == 0, rendered.stderr
    assert "AGCTL-CKPT-ROLLBACK(1)" in rendered.stdout
    for page in shared.glob("*.1"):
        page.unlink()
    gone = run_installed(venv, env, "man", "turn", "send")
    assert gone.returncode == 3, gone.stderr
    assert "agctl's man pages are not installed" in gone.stderr


def test_an_editable_install_reads_the_pages_of_its_checkout(tmp_path: Path) -> None:
    """`pip install -e` installs no data files (setuptools #3399): its `agctl man` reads
    man/man1 of the tree it points at."""
    source = source_tree(tmp_path)
    venv = fresh_venv(tmp_path, *OFFLINE, "--editable", str(source))
    env = installed_env(tmp_path, venv)
    origin = run_installed(venv, env, "-c", "import agctl; print(agctl.__file__)", program="python")
    assert origin.stdout.strip() == str(source / "agctl" / "__init__.py"), origin.stderr
    assert not (venv / "share" / "man").exists()
    page = source / "man" / "man1" / "agctl-turn-send.1"
    page.write_text(page.read_text() + '.\\" edited in the checkout\n')
    shown = run_installed(venv, env, "--json", "man", "turn", "send")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["roff"] == page.read_text()
