"""Parallel writers on one slot: the session lock must not lose or reorder any update."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from agctl.store import Store

WORKERS = 8
APPENDS = 50

# One process per worker: it imports agctl once, signals it is ready, waits for the go
# file so that every worker starts appending at the same moment, then calls the CLI
# entry point APPENDS times.
WORKER = """
import os, sys, time
from pathlib import Path
from agctl.cli import main

worker, count, ready, go = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3]), Path(sys.argv[4])
ready.touch()
while not go.exists():
    time.sleep(0.002)
failed = []
for i in range(count):
    status = main(
        ["-s", "race", "msg", "append", "user", f"w{worker}-{i}"], standalone_mode=False
    )
    if status:
        failed.append((i, status))
if failed:
    print(f"worker {worker}: failed appends {failed}", file=sys.stderr)
    sys.exit(1)
"""


@pytest.fixture
def env(isolated_env: Path) -> dict[str, str]:
    return {**os.environ, "AGCTL_DATA_DIR": str(isolated_env)}


@pytest.fixture
def race(store: Store) -> str:
    store.create_session("race")
    return "race"


def assert_each_worker_in_order(contents: list[str], workers: int, appends: int) -> None:
    by_worker: dict[str, list[int]] = {}
    for content in contents:
        worker, _, index = content.partition("-")
        by_worker.setdefault(worker, []).append(int(index))
    assert sorted(by_worker) == sorted(f"w{w}" for w in range(workers))
    for worker, indexes in by_worker.items():
        assert indexes == list(range(appends)), worker


def wait_for(paths: list[Path], procs: list[subprocess.Popen[bytes]]) -> None:
    """Wait until every path exists; give up (and fail) if a worker died or after 60 s."""
    deadline = time.monotonic() + 60
    while not all(p.exists() for p in paths):
        dead = [p for p in procs if p.poll() is not None]
        assert not dead, dead[0].communicate()[1].decode()
        assert time.monotonic() < deadline, "workers never became ready"
        time.sleep(0.01)


def test_parallel_processes_lose_no_append(
    race: str, env: dict[str, str], tmp_path: Path, store: Store, isolated_env: Path
) -> None:
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    go = tmp_path / "go"
    ready = [tmp_path / f"ready-{w}" for w in range(WORKERS)]
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), str(w), str(APPENDS), str(ready[w]), str(go)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        for w in range(WORKERS)
    ]
    try:
        wait_for(ready, procs)
        go.touch()
        errors = [p.communicate(timeout=120)[1].decode() for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert [p.returncode for p in procs] == [0] * WORKERS, errors
    assert errors == [""] * WORKERS

    path = isolated_env / "sessions" / race / "slots" / "default.json"
    document = json.loads(path.read_text())
    assert len(document["messages"]) == WORKERS * APPENDS

    slot = store.load_slot(race, "default")
    contents = [m.text() for m in slot.messages]
    assert len(set(contents)) == WORKERS * APPENDS
    assert_each_worker_in_order(contents, WORKERS, APPENDS)
    assert slot.meta.message_count == WORKERS * APPENDS
    leftovers = [p.name for p in path.parent.iterdir() if p.name.endswith(".tmp")]
    assert leftovers == []


def test_separate_agctl_processes_lose_no_append(
    race: str, env: dict[str, str], store: Store
) -> None:
    lanes, per_lane = 4, 5
    statuses: list[tuple[str, int, bytes]] = []
    lock = threading.Lock()

    def lane(worker: int) -> None:
        for i in range(per_lane):
            argv = ["-s", race, "msg", "append", "user", f"w{worker}-{i}"]
            result = subprocess.run(
                [sys.executable, "-m", "agctl", *argv],
                env=env,
                capture_output=True,
                timeout=60,
                check=False,
            )
            with lock:
                statuses.append((f"w{worker}-{i}", result.returncode, result.stderr))

    threads = [threading.Thread(target=lane, args=(w,)) for w in range(lanes)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert len(statuses) == lanes * per_lane
    assert [s for s in statuses if s[1] != 0] == []
    contents = [m.text() for m in store.load_slot(race, "default").messages]
    assert len(contents) == lanes * per_lane
    assert_each_worker_in_order(contents, lanes, per_lane)
