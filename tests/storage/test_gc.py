"""`store gc` over each backend: after a prune, the log holds only what live checkpoints
reach, each restoring what it did under its new id; a crash mid-gc leaves one log or
the other."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

from test_backend_transactions import child_env
from test_domain import SID, at, live, log_size, turn

from agctl.context.models import Draft
from agctl.storage.file.backend import FileBackend
from agctl.store import Store
from agctl.store.checkpointer import Checkpointer


def log_bytes(store: Store, sid: str = SID) -> bytes:
    storage = store.backend.checkpoint_log(sid)
    if not storage.size():
        return b""
    with storage.open() as handle:
        data: bytes = handle.read()
    return data


def branched(store: Store) -> dict[str, dict[str, Any]]:
    """Six turns, a rollback to turn 2, three turns more: the live state each
    checkpoint saw (the abandoned branch's messages only removed checkpoints reach once
    it is pruned)."""
    store.create_session(SID, system_prompt="Be brief.")
    keeper = Checkpointer(store)
    seen: dict[str, dict[str, Any]] = {}
    for number in range(1, 7):
        result = turn(store, f"first branch {number} " + "x" * 200)
        assert result.checkpoint is not None
        seen[result.checkpoint] = live(store)
        store.memory_set(SID, "first", str(number))  # a session blob of its own, each
    second = list(seen)[1]
    keeper.rollback(SID, second)
    for number in range(1, 4):
        result = turn(store, f"second branch {number}")
        assert result.checkpoint is not None
        seen[result.checkpoint] = live(store)
        store.memory_set(SID, "last", str(number))
    return seen


def test_gc_after_prune_shrinks_the_log_and_every_kept_checkpoint_restores_the_same(
    store: Store,
) -> None:
    seen = branched(store)
    keeper = Checkpointer(store)
    pruned = keeper.prune(SID, 2)
    kept = keeper.ids(SID)
    states = {identifier: at(store, identifier) for identifier in kept}
    before, state_before = log_size(store), live(store)

    report = keeper.gc(SID)

    assert report.rewritten
    assert report.bytes_before == before
    assert report.bytes_after == log_size(store) < before
    assert report.checkpoints_dropped == len(pruned.removed) > 0
    assert report.nodes_dropped > 0  # the abandoned branch's messages
    assert report.blobs_dropped > 0
    assert sorted(report.ids) == sorted(kept)
    assert [report.ids[i] for i in kept] == keeper.ids(SID)  # newest first still
    for old, new in report.ids.items():
        assert at(store, new) == states[old]
        if old in seen:
            assert at(store, new) == seen[old]
    assert store.backend.removed_checkpoints(SID) == set()
    assert live(store) == state_before
    assert keeper.verify(SID).ok


def test_rollback_undo_fork_and_diff_work_on_the_rewritten_log(store: Store) -> None:
    branched(store)
    keeper = Checkpointer(store)
    keeper.prune(SID, 2)
    kept = keeper.ids(SID)
    newest, older = at(store, kept[0]), at(store, kept[1])
    ids = keeper.gc(SID).ids

    compared = keeper.diff(SID, ids[kept[1]], ids[kept[0]])
    assert (compared["from"], compared["to"]) == (ids[kept[1]], ids[kept[0]])
    assert compared["slots"]["changed"]  # the turn between them
    fork = keeper.fork(SID, ids[kept[1]], "forked")
    assert fork.parent_id == SID
    assert live(store, "forked")["slots"] == older["slots"]
    keeper.undo(SID)  # the last turn, along the lineage kept
    assert live(store)["slots"] == older["slots"]
    keeper.rollback(SID, ids[kept[0]])
    assert live(store)["slots"] == newest["slots"]
    result = turn(store, "after gc")
    assert result.checkpoint is not None
    assert keeper.verify(SID).ok
    assert at(store, ids[kept[0]]) == newest


def test_the_next_checkpoint_after_gc_costs_only_what_changed(store: Store) -> None:
    branched(store)
    keeper = Checkpointer(store)
    keeper.prune(SID, 2)
    keeper.gc(SID)
    size = log_size(store)
    turn(store, "one more")
    # Two new messages and a record, not the whole conversation again.
    assert log_size(store) - size < 3000


def test_a_second_gc_reclaims_nothing_and_rewrites_nothing(store: Store) -> None:
    branched(store)
    keeper = Checkpointer(store)
    keeper.prune(SID, 2, everything=True)
    keeper.gc(SID)
    data = log_bytes(store)

    again = keeper.gc(SID)

    assert not again.rewritten
    assert again.bytes_before == again.bytes_after == len(data)
    assert again.ids == {i: i for i in keeper.ids(SID)}
    assert log_bytes(store) == data


def test_a_session_whose_checkpoints_were_never_removed_is_unchanged(store: Store) -> None:
    branched(store)
    data, removed = log_bytes(store), store.backend.removed_checkpoints(SID)
    keeper = Checkpointer(store)

    report = keeper.gc(SID)

    assert not report.rewritten and report.reclaimed == 0
    assert log_bytes(store) == data
    assert store.backend.removed_checkpoints(SID) == removed


def test_a_dry_run_says_what_would_go_and_changes_nothing(store: Store) -> None:
    branched(store)
    keeper = Checkpointer(store)
    keeper.prune(SID, 2)
    data, kept = log_bytes(store), keeper.ids(SID)

    report = keeper.gc(SID, dry_run=True)

    assert report.dry_run and not report.rewritten
    assert report.bytes_after < report.bytes_before == len(data)
    assert log_bytes(store) == data and keeper.ids(SID) == kept
    assert keeper.gc(SID).bytes_after == report.bytes_after


def test_everything_removed_leaves_an_empty_history_and_a_working_session(
    store: Store,
) -> None:
    branched(store)
    keeper = Checkpointer(store)
    keeper.prune(SID, 0, everything=True)
    report = keeper.gc(SID)
    assert report.bytes_after == log_size(store) == 0
    assert keeper.ids(SID) == []
    result = turn(store, "afresh")
    assert result.checkpoint is not None
    assert keeper.verify(SID).ok


def test_a_removed_head_leaves_the_lineage_undo_followed(store: Store) -> None:
    branched(store)
    keeper = Checkpointer(store)
    newest = keeper.ids(SID)[0]
    keeper.remove(SID, [newest])  # the checkpoint the live session descends from
    targets = {t: c.id for t, c in keeper.undo_targets(SID, 3).items()}
    report = keeper.gc(SID)
    after = {t: c.id for t, c in keeper.undo_targets(SID, 3).items()}
    assert after == {t: report.ids[i] for t, i in targets.items()}


def test_a_draft_naming_a_checkpoint_is_remapped(store: Store) -> None:
    branched(store)
    keeper = Checkpointer(store)
    keeper.prune(SID, 2)
    kept = keeper.ids(SID)[1]
    error = f"context full even after compressing the slot (the originals are in checkpoint {kept})"
    store.save_draft(SID, Draft(prompt="p", slot="default", error=error))

    report = keeper.gc(SID)

    assert report.drafts_updated == 1
    assert store.load_draft(SID, "default").error == error.replace(kept, report.ids[kept])


# Runs gc, stopping (for the test to kill it) at its `stop`-th fsync, rename or replace:
# the moments a crash can land between what is durable and what is not.
GC = """
import os, sys, time
from agctl.store.checkpointer import Checkpointer
from agctl.storage.file.backend import FileBackend
from agctl.store import Store

store = Store(backend=FileBackend(__import__("pathlib").Path(sys.argv[1])))
stop, steps = int(sys.argv[2]), 0

def stopping(real):
    def step(*args, **kwargs):
        global steps
        steps += 1
        if steps == stop:
            print("stopped", flush=True)
            time.sleep(600)
        return real(*args, **kwargs)
    return step

for name in ("fsync", "rename", "replace"):
    setattr(os, name, stopping(getattr(os, name)))
Checkpointer(store).gc("s")
print("done", steps, flush=True)
"""


def test_gc_killed_at_any_durable_step_leaves_the_old_log_or_the_new(
    tmp_path: Path, isolated_env: Path
) -> None:
    """kill -9 at each of gc's fsyncs, renames and replaces in turn (then one past the
    last, which finishes): every kill leaves the old log or the new, both seen."""
    template = tmp_path / "template"
    store = Store(backend=FileBackend(template))
    store.create_session(SID)
    for number in range(12):  # a log past the size written aside and moved into place
        turn(store, f"turn {number} " + "y" * 30_000)
    keeper = Checkpointer(store)
    keeper.prune(SID, 3, everything=True)
    old_log, old_removed = log_bytes(store), store.backend.removed_checkpoints(SID)
    kept = {i: at(store, i) for i in keeper.ids(SID)}
    assert len(old_log) > 256 * 1024
    reference = tmp_path / "reference"
    shutil.copytree(template, reference)
    done = Checkpointer(Store(backend=FileBackend(reference))).gc(SID)
    new_log = log_bytes(Store(backend=FileBackend(reference)))
    assert done.rewritten and len(new_log) < len(old_log)

    gc_script = tmp_path / "gc.py"
    gc_script.write_text(textwrap.dedent(GC))
    outcomes = []
    for stop in range(1, 500):
        root = tmp_path / f"run{stop}"
        shutil.copytree(template, root)
        child = subprocess.Popen(
            [sys.executable, str(gc_script), str(root), str(stop)],
            env=child_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        assert child.stdout is not None
        said = child.stdout.readline().decode().split()
        if said == ["stopped"]:
            child.send_signal(signal.SIGKILL)
            assert child.wait(timeout=60) == -signal.SIGKILL
        child.communicate(timeout=60)
        finished = said != ["stopped"]
        if finished:  # no step left to stop at: gc ran to its end
            assert child.returncode == 0 and said == ["done", str(stop - 1)], said
        after = Store(backend=FileBackend(root))
        with after.transaction(SID):  # finishes a commit the kill interrupted
            pass
        data = log_bytes(after)
        assert data in (old_log, new_log)
        keeper = Checkpointer(after)
        assert keeper.verify(SID).ok
        if data == old_log:
            assert after.backend.removed_checkpoints(SID) == old_removed
            ids = {i: i for i in kept}
        else:
            assert after.backend.removed_checkpoints(SID) == set()
            ids = done.ids
        for old, state in kept.items():
            assert at(after, ids[old]) == state
        outcomes.append("old" if data == old_log else "new")
        if finished:
            break
    else:
        raise AssertionError("gc never finished")
    assert outcomes[-1] == "new" and "old" in outcomes, outcomes
    assert len(outcomes) > 3, outcomes  # gc stopped at several steps
