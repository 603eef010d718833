"""Child processes of the PostgreSQL fault tests: scripts run with this tree's agctl
and the storage tests' helpers (child_backend) importable."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import agctl

TREE = Path(agctl.__file__).resolve().parent.parent
STORAGE_TESTS = Path(__file__).resolve().parent.parent


def child_env(**extra: str) -> dict[str, str]:
    path = os.pathsep.join([str(TREE), str(STORAGE_TESTS)])
    return {**os.environ, "PYTHONPATH": path, **extra}


def start(tmp_path: Path, name: str, text: str, *args: str, **env: str) -> subprocess.Popen[str]:
    """A Python child running `text` (dedented) with `args`; its stdin and stdout piped."""
    script = tmp_path / f"{name}.py"
    script.write_text(textwrap.dedent(text))
    return subprocess.Popen(
        [sys.executable, str(script), *args],
        env=child_env(**env),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


def read_line(child: subprocess.Popen[str]) -> str:
    """The child's next line of output (an empty string: it ended without one)."""
    assert child.stdout is not None
    return child.stdout.readline().strip()


def tell(child: subprocess.Popen[str], line: str = "go") -> None:
    assert child.stdin is not None
    child.stdin.write(line + "\n")
    child.stdin.flush()
