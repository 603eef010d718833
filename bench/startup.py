"""Start-up time of agctl next to `python -c "import click"`, measured in the same run.

Usage: python bench/startup.py [--runs N] [--json]
Prints the median wall time of each command over N runs (after one warm-up run) and the
ratio to the click reference. Never part of the test suite's pass/fail.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

from timing import median_wall

COMMANDS = {
    "python -c 'import click' (reference)": [sys.executable, "-c", "import click"],
    "agctl --help": [sys.executable, "-m", "agctl", "--help"],
    "agctl --version": [sys.executable, "-m", "agctl", "--version"],
    "agctl session list (10 sessions)": [sys.executable, "-m", "agctl", "session", "list"],
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=21)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as data_dir:
        env = {**os.environ, "AGCTL_DATA_DIR": data_dir}
        for i in range(10):
            subprocess.run(
                [sys.executable, "-m", "agctl", "session", "new", f"s{i}", "--no-use"],
                env=env,
                capture_output=True,
                check=True,
            )
        results = {name: median_wall(argv, env, args.runs) for name, argv in COMMANDS.items()}
    reference = next(iter(results.values()))
    if args.json:
        print(json.dumps({"runs": args.runs, "median_seconds": results}, indent=2))
        return
    print(f"{'command':40} {'median ms':>10} {'x click':>8}")
    for name, seconds in results.items():
        print(f"{name:40} {seconds * 1000:10.1f} {seconds / reference:8.2f}")


if __name__ == "__main__":
    main()
