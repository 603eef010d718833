"""Every backend's transactions: own writes seen, all or nothing, nested, exclusive."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import textwrap
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import pytest
from backend_docs import SID, rich_draft, seed, snapshot, user

import agctl
from agctl.base.errors import Conflict, NotFound
from agctl.context.models import Session, Slot
from agctl.storage.base import Backend

T = TypeVar("T")


def in_other_thread(read: Callable[[], T]) -> T:
    """What another thread sees (its result, or its exception raised here)."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(read).result()


def record(offset: int, **fields: Any) -> bytes:
    return json.dumps({"at": offset, **fields}).encode() + b"\n"


def change_everything(tx: Any) -> None:
    """One write of each kind, through one Tx."""
    session = tx.load_session(SID)
    session.title = "changed"
    tx.put_session(session)
    slot = tx.load_slot(SID, "default")
    slot.messages.append(user("appended"))
    tx.append_messages(slot, 1)
    tx.put_slot(Slot(id="added", messages=[user("new slot")]))
    tx.delete_slot("other")
    tx.put_draft(rich_draft())
    tx.checkpoint_log().append(lambda offset: record(offset, what="changed"))
    tx.set_removed_checkpoints(["0001"])
    tx.write_cache("heads", b"heads\n")


def test_a_transaction_reads_its_own_writes(backend: Backend) -> None:
    seed(backend, SID, "other")
    with backend.transaction(SID) as tx:
        change_everything(tx)
        assert tx.load_session(SID).title == "changed"
        assert tx.load_slot(SID, "default").messages[-1].text() == "appended"
        assert tx.slot_ids(SID) == ["added", "default"]
        assert tx.slot_rev(SID, "other") is None
        assert tx.slot_rev(SID, "added") == tx.load_slot(SID, "added").rev
        assert tx.draft_slots(SID) == ["default"]
        assert json.loads(tx.checkpoint_log().open().read()) == {"at": 0, "what": "changed"}
        assert tx.removed_checkpoints(SID) == {"0001"}
        assert tx.cache(SID, "heads") == b"heads\n"
        assert tx.has_session(SID) and tx.session_ids() == [SID]
    after = snapshot(backend)
    assert after["session"]["title"] == "changed"
    assert sorted(after["slots"]) == ["added", "default"]
    assert list(after["drafts"]) == ["default"]
    assert after["removed"] == {"0001"} and after["caches"]["heads"] == b"heads\n"


def test_a_transaction_that_raises_leaves_nothing(backend: Backend) -> None:
    seed(backend, SID, "other")
    with backend.transaction(SID) as tx:
        tx.checkpoint_log().append(lambda offset: record(offset, what="before"))
        tx.write_cache("index", b"index\n")
    before = snapshot(backend)
    with pytest.raises(RuntimeError, match="half way"), backend.transaction(SID) as tx:
        change_everything(tx)
        raise RuntimeError("half way")
    assert snapshot(backend) == before
    assert backend.in_transaction(SID) is None
    with backend.transaction(SID) as tx:  # the lock was let go
        assert tx.load_session(SID).title == "rich"


def test_others_see_the_old_state_until_the_commit(backend: Backend) -> None:
    seed(backend, SID, "other")
    before = snapshot(backend)
    with backend.transaction(SID) as tx:
        change_everything(tx)
        assert in_other_thread(lambda: snapshot(backend)) == before
        assert in_other_thread(lambda: backend.in_transaction(SID)) is None
        assert backend.in_transaction(SID) is tx
    committed = snapshot(backend)
    assert committed != before
    assert in_other_thread(lambda: snapshot(backend)) == committed


def test_a_nested_transaction_is_the_outer_one_committed_with_it(backend: Backend) -> None:
    seed(backend, SID, "other")
    before = snapshot(backend)
    with backend.transaction(SID) as outer:
        with backend.transaction(SID) as inner:
            assert inner is outer
            change_everything(inner)
        assert in_other_thread(lambda: snapshot(backend)) == before
        assert backend.in_transaction(SID) is outer
        assert outer.load_session(SID).title == "changed"
    assert backend.load_session(SID).title == "changed"
    assert backend.in_transaction(SID) is None


def test_an_outer_transaction_that_raises_drops_the_inner_writes(backend: Backend) -> None:
    seed(backend, SID, "other")
    before = snapshot(backend)
    with pytest.raises(RuntimeError), backend.transaction(SID) as outer:
        with backend.transaction(SID) as inner:
            change_everything(inner)
        outer.put_session(Session(id=SID, title="also dropped"))
        raise RuntimeError("after the inner block")
    assert snapshot(backend) == before


def test_transactions_of_two_sessions_are_independent(backend: Backend) -> None:
    seed(backend)
    seed(backend, "t")
    with backend.transaction(SID) as tx_s, backend.transaction("t") as tx_t:
        assert tx_s is not tx_t and tx_t.session_id == "t"
        tx_t.put_session(Session(id="t", title="t changed"))
        assert tx_s.load_session(SID).title == "rich"
    assert backend.load_session("t").title == "t changed"
    assert backend.load_session(SID).title == "rich"


def test_a_transaction_on_a_missing_session_is_not_found(backend: Backend) -> None:
    seed(backend)
    backend.destroy_session(SID)
    with pytest.raises(NotFound), backend.transaction(SID):
        pass


def test_a_session_cannot_be_replaced_or_destroyed_from_its_own_transaction(
    backend: Backend,
) -> None:
    seed(backend)
    before = snapshot(backend)
    with backend.transaction(SID):
        with pytest.raises(Conflict):
            backend.destroy_session(SID)
        with pytest.raises(Conflict):
            backend.replace_session(Session(id=SID), [])
    assert snapshot(backend) == before


WRITERS, APPENDS = 8, 50


def test_exclusive_transactions_of_threads_lose_no_append(backend: Backend) -> None:
    seed(backend)

    def append_all(writer: int) -> None:
        for number in range(APPENDS):
            with backend.transaction(SID) as tx:
                slot = tx.load_slot(SID, "default")
                slot.messages.append(user(f"{writer}:{number}"))
                tx.append_messages(slot, 1)

    with ThreadPoolExecutor(WRITERS) as pool:
        list(pool.map(append_all, range(WRITERS)))
    assert_every_append_kept(backend.load_slot(SID, "default"))


def assert_every_append_kept(slot: Slot) -> None:
    """All WRITERS x APPENDS appends after the seeded 4 messages, each writer's in order."""
    texts = [m.text() for m in slot.messages[4:]]
    assert len(texts) == WRITERS * APPENDS
    for writer in range(WRITERS):
        mine = [text for text in texts if text.startswith(f"{writer}:")]
        assert mine == [f"{writer}:{number}" for number in range(APPENDS)]


# ---- several processes (the backends other processes can share) -----------------------

PYTHONPATH = str(Path(agctl.__file__).resolve().parent.parent)

APPENDER = f"""
import sys
from pathlib import Path
from agctl.context.models import Message
from child_backend import open_backend

backend = open_backend(sys.argv[1])
for number in range({APPENDS}):
    with backend.transaction("{SID}") as tx:
        slot = tx.load_slot("{SID}", "default")
        slot.messages.append(Message(role="user", content=f"{{sys.argv[2]}}:{{number}}"))
        tx.append_messages(slot, 1)
"""

# Each commit: a turn of two messages, the counter in the session's memory, a log record.
TURNS = """
import json, sys
from pathlib import Path
from agctl.context.models import Message
from child_backend import open_backend

backend = open_backend(sys.argv[1])
while True:
    with backend.transaction("s") as tx:
        session = tx.load_session("s")
        counter = int(session.memory.get("counter", "0")) + 1
        slot = tx.load_slot("s", "default")
        slot.messages.append(Message(role="user", content=f"q{counter}"))
        slot.messages.append(Message(role="assistant", content=f"a{counter}"))
        tx.append_messages(slot, 2)
        session.memory["counter"] = str(counter)
        tx.put_session(session)
        line = lambda offset: json.dumps({"counter": counter, "at": offset}).encode() + b"\\n"
        tx.checkpoint_log().append(line)
    print(counter, flush=True)
"""


def child_env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([PYTHONPATH, str(Path(__file__).parent)])}


def script(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def test_exclusive_transactions_of_processes_lose_no_append(
    shared_backend: tuple[str, Callable[[], Backend]], tmp_path: Path
) -> None:
    spec, new_backend = shared_backend
    seed(new_backend())
    appender = script(tmp_path, "appender.py", APPENDER)
    children = [
        subprocess.Popen([sys.executable, str(appender), spec, str(writer)], env=child_env())
        for writer in range(WRITERS)
    ]
    assert [child.wait(timeout=300) for child in children] == [0] * WRITERS
    assert_every_append_kept(new_backend().load_slot(SID, "default"))


KILLS = 20


def test_a_commit_killed_at_any_moment_leaves_the_old_state_or_the_new(
    shared_backend: tuple[str, Callable[[], Backend]], tmp_path: Path
) -> None:
    spec, new_backend = shared_backend
    new_backend().create_session(Session(id="s"), [Slot(id="default")])
    turns = script(tmp_path, "turns.py", TURNS)
    delays = random.Random(12).uniform
    for kill in range(1, KILLS + 1):
        child = subprocess.Popen(
            [sys.executable, str(turns), spec],
            env=child_env(),
            stdout=subprocess.PIPE,
        )
        assert child.stdout is not None
        assert child.stdout.readline().strip(), "the child committed nothing"
        try:
            child.wait(timeout=delays(0.0, 0.03))
        except subprocess.TimeoutExpired:
            child.send_signal(signal.SIGKILL)
        assert child.wait(timeout=60) == -signal.SIGKILL
        child.stdout.close()

        backend = new_backend()
        with backend.transaction("s"):  # finishes a commit the kill interrupted
            pass
        assert backend.pending("s") is False
        counter = int(backend.load_session("s").memory["counter"])
        assert counter >= kill
        texts = [m.text() for m in backend.load_slot("s", "default").messages]
        assert texts == [f"{kind}{n}" for n in range(1, counter + 1) for kind in "qa"]
        log = backend.checkpoint_log("s").open().read()
        complete = log[: log.rfind(b"\n") + 1]  # an unsealed torn tail may follow
        records = [json.loads(line) for line in complete.splitlines()]
        assert [r["counter"] for r in records] == list(range(1, counter + 1))
        assert records[-1]["at"] == complete.rfind(b"\n", 0, len(complete) - 1) + 1
