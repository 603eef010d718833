"""agctl as users run it: this tree built into a wheel and installed, bytecode compiled, in
a temporary venv that takes its dependencies from the running interpreter's environment.

`python bench/installed.py` builds one and prints where its agctl comes from. Built
offline (no index, no build isolation), as tests/cli/test_man.py builds its wheel.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# What a build of the project reads: the metadata, the readme it names, the package and
# the man pages (installed into share/man/man1 from man/man1).
BUILD_INPUTS = ("pyproject.toml", "README.md", "agctl", "man")
TIMEOUT = 300


@dataclass(frozen=True)
class Installed:
    """Where the installed agctl is; `form` says which form a figure was measured in."""

    python: str
    # The argv that runs agctl.
    agctl: list[str]
    form: str

    def env(self, environ: dict[str, str]) -> dict[str, str]:
        """`environ` without what would load this tree's source instead of the wheel."""
        return {k: v for k, v in environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}


def _run(args: list[str], cwd: Path) -> None:
    subprocess.run(args, cwd=cwd, capture_output=True, check=True, timeout=TIMEOUT)


@contextlib.contextmanager
def installed_wheel(revision: str | None = None) -> Iterator[Installed]:
    """A venv holding this tree's wheel, or that of the commit `revision` names (for a
    figure before and after a change, measured in one run); raises CalledProcessError if
    it cannot be built."""
    with tempfile.TemporaryDirectory(prefix="agctl-bench-") as tmp:
        work = Path(tmp)
        source = work / "source"
        source.mkdir()
        if revision is not None:
            archive = subprocess.run(
                ["git", "-C", str(ROOT), "archive", revision, *BUILD_INPUTS],
                capture_output=True,
                check=True,
                timeout=TIMEOUT,
            ).stdout
            subprocess.run(["tar", "-x", "-C", str(source)], input=archive, check=True)
        else:
            for name in BUILD_INPUTS:
                if (ROOT / name).is_dir():
                    ignore = shutil.ignore_patterns("__pycache__")
                    shutil.copytree(ROOT / name, source / name, ignore=ignore)
                else:
                    shutil.copy2(ROOT / name, source / name)
        pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input"]
        offline = ["--no-deps", "--no-index", "--no-build-isolation"]
        dist = work / "dist"
        _run([*pip, "wheel", *offline, "--wheel-dir", str(dist), str(source)], work)
        (wheel,) = dist.glob("agctl-*.whl")
        venv = work / "venv"
        venv_args = ["--system-site-packages", "--without-pip", str(venv)]
        _run([sys.executable, "-m", "venv", *venv_args], work)
        python = str(venv / "bin" / "python")
        # pip compiles the installed modules' bytecode, as for any user's install.
        _run([*pip, "--python", python, "install", "--no-deps", "--no-index", str(wheel)], work)
        at = f" of {revision}" if revision is not None else ""
        installed = Installed(
            python=python,
            agctl=[str(venv / "bin" / "agctl")],
            form=f"installed wheel {wheel.name}{at} (bytecode compiled) in a venv",
        )
        # Run from the temporary directory: `python -c` puts the working directory first
        # on sys.path, and this tree's own agctl/ may be there.
        where = subprocess.run(
            [python, "-c", "import agctl; print(agctl.__file__)"],
            cwd=work,
            env=installed.env(dict(os.environ)),
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        if not where.startswith(str(venv)):
            raise RuntimeError(f"the venv imports agctl from {where}, not from its wheel")
        if not list(Path(where).parent.glob("__pycache__/*.pyc")):
            raise RuntimeError(f"pip compiled no bytecode in {Path(where).parent}")
        yield installed


def source_tree() -> Installed:
    """This tree run as `python -m agctl`, for when no wheel can be built offline."""
    return Installed(
        python=sys.executable,
        agctl=[sys.executable, "-m", "agctl"],
        form="source tree (python -m agctl; bytecode as the environment allows)",
    )


def main() -> None:
    with installed_wheel() as installed:
        print(installed.form)
        print(" ".join(installed.agctl))


if __name__ == "__main__":
    main()
