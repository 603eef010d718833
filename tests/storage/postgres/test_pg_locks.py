"""The session's row lock held by another process: a waiter gives up after the lock
timeout with a clear Conflict, and a holder killed with SIGKILL mid-transaction lets the
lock go with nothing of its transaction kept."""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import child_backend
import pytest
from backend_docs import SID, seed, snapshot, user
from pg_children import read_line, start
from pgserver import PgStore

from agctl.base.errors import Conflict
from agctl.storage.postgres.backend import PostgresBackend

# A child that writes in a transaction on the session, says so, and keeps it open.
HOLDER = f"""
import sys, time
from agctl.context.models import Message
from child_backend import open_backend

backend = open_backend(sys.argv[1])
with backend.transaction("{SID}") as tx:
    session = tx.load_session("{SID}")
    session.title = "half written"
    tx.put_session(session)
    slot = tx.load_slot("{SID}", "default")
    slot.messages.append(Message(role="user", content="never committed"))
    tx.append_messages(slot, 1)
    tx.checkpoint_log().append(lambda offset: b'{{"never": true}}\\n')
    print("locked", flush=True)
    time.sleep(300)
"""


@pytest.fixture
def holder(
    pg_store: PgStore, open_backend: Callable[..., PostgresBackend], tmp_path: Path
) -> Iterator[subprocess.Popen[str]]:
    """A seeded session, and a child holding its lock over writes it has not committed."""
    seed(open_backend())
    spec = child_backend.spec("postgres", tmp_path, pg_store.dsn, pg_store.schema)
    child = start(tmp_path, "holder", HOLDER, spec)
    try:
        assert read_line(child) == "locked"
        yield child
    finally:
        if child.poll() is None:
            child.kill()
        child.wait(timeout=60)


def append(backend: PostgresBackend, text: str) -> None:
    with backend.transaction(SID) as tx:
        slot = tx.load_slot(SID, "default")
        slot.messages.append(user(text))
        tx.append_messages(slot, 1)


def test_a_waiter_gives_up_after_the_lock_timeout_with_a_conflict(
    holder: subprocess.Popen[str],
    open_backend: Callable[..., PostgresBackend],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AGCTL_LOCK_TIMEOUT", "1")
    backend = open_backend()
    before = snapshot(backend)  # readers are not blocked: they see the committed state

    with pytest.raises(Conflict) as caught:
        append(backend, "mine")

    message = str(caught.value)
    assert caught.value.exit_code == 4
    assert f"another writer holds session {SID!r}" in message
    assert "lock timeout (AGCTL_LOCK_TIMEOUT)" in message and "***" not in message
    assert holder.poll() is None  # still holding it
    assert snapshot(backend) == before
    assert backend.in_transaction(SID) is None


def test_a_holder_killed_mid_transaction_releases_the_lock_and_keeps_the_old_state(
    holder: subprocess.Popen[str],
    open_backend: Callable[..., PostgresBackend],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AGCTL_LOCK_TIMEOUT", "10")
    backend = open_backend()
    before = snapshot(backend)

    holder.send_signal(signal.SIGKILL)
    assert holder.wait(timeout=60) == -signal.SIGKILL

    with backend.transaction(SID) as tx:  # within the lock timeout, or Conflict
        assert tx.load_session(SID).title == "rich"
        assert tx.checkpoint_log().size() == 0
    assert snapshot(backend) == before
    append(backend, "after the kill")
    texts = [m.text() for m in open_backend().load_slot(SID, "default").messages]
    assert texts[-1] == "after the kill" and "never committed" not in texts
