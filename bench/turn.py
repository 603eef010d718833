"""Wall time of one `agctl turn send` against a local fake OpenAI-compatible server.

Usage: python bench/turn.py [--runs N] [--sizes 10,1000] [--json]
Each size is the number of messages already in the slot. Printed next to the floor of
our stack, `python -c "import click, pydantic, httpx"`, measured in the same run.
Never part of the test suite's pass/fail.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from fake_openai import FakeOpenAI
from timing import median_wall

from agctl.context.models import Message
from agctl.store import Store


def fill(store: Store, session_id: str, count: int) -> None:
    store.create_session(session_id, system_prompt="You are a benchmark.")
    messages = [
        Message(role="user" if i % 2 == 0 else "assistant", content=f"message {i} " + "x" * 200)
        for i in range(count)
    ]
    store.update_slot(session_id, None, lambda slot: slot.extend(messages))


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--sizes", default="10,1000")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    results: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp, FakeOpenAI() as server:
        # A window large enough that no slot size here triggers compression.
        config = Path(tmp) / "config.json"
        config.write_text(json.dumps({"context_windows": {"fake-model": 100_000_000}}))
        env = {
            **os.environ,
            "AGCTL_DATA_DIR": tmp,
            "AGCTL_CONFIG": str(Path(tmp) / "config.json"),
            "AGCTL_PROVIDER": "openai",
            "AGCTL_BASE_URL": server.base_url,
            "AGCTL_MODEL": "fake-model",
            "AGCTL_API_KEY": "bench-key",
        }
        floor = [sys.executable, "-c", "import click, pydantic, httpx"]
        results["python -c 'import click, pydantic, httpx'"] = median_wall(floor, env, args.runs)
        store = Store(tmp)
        for size in sizes:
            fill(store, f"s{size}", size)
            argv = [sys.executable, "-m", "agctl", "-s", f"s{size}", "turn", "send", "hi"]
            results[f"agctl turn send, {size} messages"] = median_wall(
                [*argv, "--no-stream"], env, args.runs
            )
    if args.json:
        print(json.dumps({"runs": args.runs, "median_seconds": results}, indent=2))
        return
    reference = next(iter(results.values()))
    print(f"{'command':45} {'median ms':>10} {'x floor':>8}")
    for name, seconds in results.items():
        print(f"{name:45} {seconds * 1000:10.1f} {seconds / reference:8.2f}")


if __name__ == "__main__":
    main()
