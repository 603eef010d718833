"""The session both graph benchmarks draw (bench/graph.py, bench/graph_html.py): `slots`
slots in a derivation tree four wide and `checkpoints` checkpoints, each after one more
exchange in the next slot in turn. Building it takes minutes (each checkpoint plans every
slot, as a turn's does), so `--fixture DIR` builds it once into DIR and reuses it after.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from agctl.context.models import Message
from agctl.store import Store
from agctl.store.checkpointer import Checkpointer

# Raised whenever build() makes a different session, so that a kept fixture is rebuilt.
BUILDER_VERSION = 1
MARKER = "graph-fixture.json"


def arguments(doc: str | None) -> argparse.Namespace:
    """The command line both benchmarks take: the session's size, the runs, the fixture."""
    parser = argparse.ArgumentParser(description=(doc or "").splitlines()[0])
    parser.add_argument("--slots", type=int, default=200)
    parser.add_argument("--checkpoints", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument(
        "--fixture", metavar="DIR", help="Build the session once into DIR, reuse it."
    )
    parser.add_argument("--json", action="store_true")
    return parser.parse_args()


def build(root: Path, slots: int, checkpoints: int) -> str:
    """Build the session under `root` (an agctl data directory); return its id."""
    store = Store(root, sync="end")
    sid = store.create_session("bench", title="graph benchmark").id
    names = ["default"]
    for index in range(1, slots):
        parent = names[(index - 1) // 4]
        name = f"slot-{index:03}"
        store.derive_slot(sid, name, source=parent, strategy="focused" if index % 3 else "full")
        names.append(name)
    keeper = Checkpointer(store)
    for start in range(0, checkpoints, 100):
        # A hundred checkpoints a transaction: each still plans every slot, as a turn's does.
        with store.transaction(sid):
            for step in range(start, min(start + 100, checkpoints)):
                slot = names[step % len(names)]
                exchange = [
                    Message(role="user", content=f"question {step} in {slot}: what next?"),
                    Message(role="assistant", content=f"answer {step}: the next step in {slot}."),
                ]
                store.update_slot(sid, slot, lambda s, added=exchange: s.extend(added))
                label = f"step {step}" if step % 10 == 0 else None
                keeper.create(sid, label=label, auto=step % 10 != 0)
    store.flush()
    return sid


@contextmanager
def fixture(
    directory: str | None, slots: int, checkpoints: int
) -> Iterator[tuple[Path, str, float]]:
    """(data directory, session id, seconds spent building: 0 when reused). Without
    `directory`, a temporary one removed after; with it, the fixture kept there, built
    only when the directory does not hold one of these parameters yet."""
    if directory is None:
        with tempfile.TemporaryDirectory() as tmp:
            started = time.perf_counter()
            sid = build(Path(tmp), slots, checkpoints)
            yield Path(tmp), sid, time.perf_counter() - started
        return
    root = Path(directory)
    wanted = {"builder": BUILDER_VERSION, "slots": slots, "checkpoints": checkpoints}
    marker = root / MARKER
    if marker.exists():
        kept = json.loads(marker.read_text())
        if {k: kept.get(k) for k in wanted} == wanted:
            yield root, kept["session"], 0.0
            return
        shutil.rmtree(root)  # a fixture of other parameters, made here before
    elif root.exists() and any(root.iterdir()):
        raise SystemExit(f"{root} is not empty and holds no graph fixture: give another --fixture")
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    started = time.perf_counter()
    sid = build(root, slots, checkpoints)
    seconds = time.perf_counter() - started
    marker.write_text(json.dumps({**wanted, "session": sid}))
    yield root, sid, seconds
