"""TAB latency of `agctl slot use <TAB>` in bash, next to `bash -c true` and `import click`.

Usage: python bench/tab.py [--runs N] [--json]

A temporary data dir gets 10 sessions, the current one with slots alpha, beta and default.
"bash TAB" is one whole completion as bash does it, minus nothing: a bash process that
sources the completion script (completions/agctl.bash, else `agctl completion bash`), calls
the function it registers with COMP_WORDS/COMP_CWORD set, which runs agctl, and prints
COMPREPLY (checked to be the real slot names before timing). The `agctl` called is this
interpreter's console script when installed, else a wrapper running `python -m agctl`.
Prints the median wall time of each command over N runs (after one warm-up run) and the
ratio to the click reference. Never part of the test suite's pass/fail.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

from timing import median_wall

REPO = Path(__file__).resolve().parent.parent
SLOTS = ["alpha", "beta", "default"]
TAB = r"""
source "$1"
COMP_WORDS=(agctl slot use "")
COMP_CWORD=3
COMP_LINE="agctl slot use "
COMP_POINT=${#COMP_LINE}
_agctl_completion agctl "" use
printf '%s\n' "${COMPREPLY[@]}"
"""


def agctl_on_path(scratch: Path) -> tuple[Path, str]:
    """A directory whose `agctl` runs this interpreter's agctl, and what that `agctl` is."""
    installed = Path(sysconfig.get_path("scripts")) / "agctl"
    if installed.is_file() and os.access(installed, os.X_OK):
        return installed.parent, f"console script {installed}"
    wrapper = scratch / "bin" / "agctl"
    wrapper.parent.mkdir()
    wrapper.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -m agctl "$@"\n')
    wrapper.chmod(0o755)
    return wrapper.parent, f"wrapper: {sys.executable} -m agctl"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=21)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch_dir:
        scratch = Path(scratch_dir)
        bin_dir, agctl_is = agctl_on_path(scratch)
        env = {
            **os.environ,
            "PATH": os.pathsep.join([str(bin_dir), os.environ.get("PATH", "")]),
            "PYTHONPATH": os.pathsep.join(
                p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p
            ),
            "AGCTL_DATA_DIR": str(scratch / "data"),
            "XDG_CONFIG_HOME": str(scratch / "config"),
        }
        env.pop("AGCTL_SESSION", None)

        def agctl(*argv: str) -> str:
            done = subprocess.run(
                ["agctl", *argv], env=env, capture_output=True, text=True, check=True
            )
            return done.stdout

        for i in range(9):
            agctl("session", "new", f"s{i}", "--no-use")
        agctl("session", "new", "main")
        for slot in SLOTS[:2]:
            agctl("slot", "new", slot)
        committed = REPO / "completions" / "agctl.bash"
        script = committed
        if not committed.is_file():
            script = scratch / "agctl.bash"
            script.write_text(agctl("completion", "bash"))
        tab = ["bash", "--norc", "--noprofile", "-c", TAB, "bash", str(script)]
        got = subprocess.run(tab, env=env, capture_output=True, text=True, check=True).stdout
        if got.split() != SLOTS:
            sys.exit(f"bench/tab.py: the TAB completed to {got.split()}, not {SLOTS}")
        protocol_env = {
            **env,
            "_AGCTL_COMPLETE": "bash_complete",
            "COMP_WORDS": "agctl slot use ",
            "COMP_CWORD": "3",
        }
        commands: dict[str, tuple[list[str], dict[str, str]]] = {
            "python -c 'import click' (reference)": ([sys.executable, "-c", "import click"], env),
            "bash -c true": (["bash", "--norc", "--noprofile", "-c", "true"], env),
            "agctl completion protocol (no shell)": (["agctl"], protocol_env),
            "bash TAB: agctl slot use <TAB>": (tab, env),
        }
        results = {
            name: median_wall(argv, command_env, args.runs)
            for name, (argv, command_env) in commands.items()
        }
    reference = next(iter(results.values()))
    script_shown = str(script.relative_to(REPO)) if script == committed else "generated"
    if args.json:
        print(
            json.dumps(
                {
                    "runs": args.runs,
                    "agctl": agctl_is,
                    "script": script_shown,
                    "median_seconds": results,
                },
                indent=2,
            )
        )
        return
    print(f"agctl: {agctl_is}; script: {script_shown}; {args.runs} runs")
    print(f"{'command':40} {'median ms':>10} {'x click':>8}")
    for name, seconds in results.items():
        print(f"{name:40} {seconds * 1000:10.1f} {seconds / reference:8.2f}")


if __name__ == "__main__":
    main()
