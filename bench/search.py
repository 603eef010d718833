"""Wall time of `agctl search` over 1,000 sessions of 100 messages each.

Usage: python bench/search.py [--sessions N] [--messages N] [--runs N] [--json]
Printed next to `grep -ri` over the same data dir (a search that parses nothing) and the
start-up floor of our stack, both measured in the same run. One message in 997 holds the
needle. Never part of the test suite's pass/fail.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from timing import median_wall

from agctl.base.fsio import make_dirs, write_atomic
from agctl.context.models import Message
from agctl.store import Store

NEEDLE = "needle"
FILLER = "lorem ipsum dolor sit amet, consectetur adipiscing elit " * 4


def fill(root: Path, sessions: int, messages: int) -> int:
    """Sessions made by the Store, their messages written as the Store writes them (but
    without an fsync each, so that setting up takes seconds); the number of needles."""
    store = Store(root)
    needles = 0
    for number in range(sessions):
        sid = f"s{number:04d}"
        session = store.create_session(sid, title=f"bench {number}")
        slot = store.load_slot(sid, "default")
        for index in range(messages):
            hit = (number * messages + index) % 997 == 0
            needles += hit
            text = f"message {index} of {sid}: " + ("a Needle here, " if hit else "") + FILLER
            role = "user" if index % 2 == 0 else "assistant"
            slot.messages.append(Message(role=role, content=text))
        slot.refresh_meta()
        directory = store.sessions_dir / session.id / "slots"
        make_dirs(directory)
        write_atomic(
            directory / "default.json", slot.model_dump_json(indent=2).encode(), durable=False
        )
    return needles


def measure(runs: int, sessions: int = 1000, messages: int = 100) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        needles = fill(Path(tmp), sessions, messages)
        env = {**os.environ, "AGCTL_DATA_DIR": tmp}
        agctl = [sys.executable, "-m", "agctl", "search"]
        results = {
            "floor": median_wall([sys.executable, "-c", "import click, pydantic"], env, runs),
            "grep": median_wall(["grep", "-ric", NEEDLE, str(Path(tmp) / "sessions")], env, runs),
            "search": median_wall([*agctl, NEEDLE], env, runs),
            "regex": median_wall([*agctl, "--regex", "[Nn]eedle h"], env, runs),
            "json": median_wall([*agctl, NEEDLE, "--json"], env, runs),
        }
    return {"sessions": sessions, "messages": messages, "hits": needles, "seconds": results}


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--messages", type=int, default=100)
    parser.add_argument("--runs", type=int, default=11)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = measure(args.runs, args.sessions, args.messages)
    if args.json:
        print(json.dumps({"runs": args.runs, **result}, indent=2))
        return
    seconds = result["seconds"]
    print(f"{result['sessions']} sessions x {result['messages']} messages, {result['hits']} hits")
    print(f"{'command':45} {'median ms':>10} {'x grep':>8}")
    for name, label in [
        ("floor", "python -c 'import click, pydantic'"),
        ("grep", f"grep -ric {NEEDLE} sessions/"),
        ("search", f"agctl search {NEEDLE}"),
        ("regex", "agctl search --regex '[Nn]eedle h'"),
        ("json", f"agctl search {NEEDLE} --json"),
    ]:
        value = seconds[name]
        print(f"{label:45} {value * 1000:10.1f} {value / seconds['grep']:8.2f}")


if __name__ == "__main__":
    main()
