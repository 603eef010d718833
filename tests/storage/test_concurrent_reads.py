"""Readers take no lock, yet never see half a commit: a process reading while another
commits turns sees each slot and session as one commit or another left them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from agctl.providers.offline import OfflineProvider
from agctl.store import Store
from agctl.turn.send import TurnOptions, send_turn

SOURCE_ROOT = str(Path(__file__).resolve().parents[2])

# Reads session, slot, session again until the writer says it is done: the slot, read in
# between, holds two messages a turn of at least the first count and at most the second.
# Once it has seen five states it says so (the writer goes on until then).
READER = r"""
import json, sys
from pathlib import Path
from agctl.store import Store

root, done, ready, enough = (Path(arg) for arg in sys.argv[1:5])
store = Store(root)
reads = problems = 0
seen = set()
while not done.exists() or reads < 50:
    before = store.load_session("s").turn_count
    messages = len(store.load_slot("s").messages)
    after = store.load_session("s").turn_count
    reads += 1
    seen.add(messages)
    if reads == 1:
        ready.touch()  # the writer starts once the reader reads
    if len(seen) == 5:
        enough.touch()
    if not 2 * before <= messages <= 2 * after or messages % 2:
        problems += 1
        print(json.dumps({"before": before, "messages": messages, "after": after}))
print(json.dumps({"reads": reads, "problems": problems, "states": len(seen)}))
"""


def test_a_reader_never_sees_half_a_turn(isolated_env: Path, tmp_path: Path) -> None:
    store = Store(isolated_env)
    store.create_session("s")
    script = tmp_path / "reader.py"
    script.write_text(READER)
    done, ready, enough = tmp_path / "done", tmp_path / "ready", tmp_path / "enough"
    env = {**os.environ, "PYTHONPATH": SOURCE_ROOT}
    reader = subprocess.Popen(
        [sys.executable, str(script), str(isolated_env), str(done), str(ready), str(enough)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        deadline = time.monotonic() + 60
        while not ready.exists() and reader.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        last = None
        options = TurnOptions(model="offline")
        # 150 turns at least, and on until the reader has seen five states (a fast machine
        # commits 150 in a few of its reads), within a bound.
        for number in range(5000):
            result = send_turn(store, "s", f"q{number}", OfflineProvider(), options, reuse=last)
            last = result.slot
            if number >= 149 and (enough.exists() or reader.poll() is not None):
                break
        done.touch()
        out, err = reader.communicate(timeout=120)
    finally:
        if reader.poll() is None:
            reader.kill()
    assert reader.returncode == 0, err
    *torn, summary = (json.loads(line) for line in out.splitlines())
    assert torn == [] and summary["problems"] == 0, torn[:3]
    assert summary["reads"] >= 50
    assert summary["states"] >= 5, "the reads happened while the turns were committed"
