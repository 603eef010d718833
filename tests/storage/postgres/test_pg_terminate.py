"""A client's connection terminated by the server (pg_terminate_backend) in the middle of
a turn's commit: the turn fails (exit 1) with a draft, nothing of it is written, and the
next turn succeeds."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg
from fake_openai import FakeOpenAI
from pgserver import PgStore
from psycopg import sql

from agctl.base.errors import StoreError
from agctl.providers.offline import OfflineProvider
from agctl.providers.openai import HttpSettings, OpenAIProvider
from agctl.storage.postgres.backend import PostgresBackend
from agctl.store import Store
from agctl.store.checkpointer import Checkpointer
from agctl.turn.send import TurnOptions, send_turn

SID = "s"
OPTIONS = TurnOptions(model="fake-model")


def stored_state(store: Store) -> dict[str, Any]:
    """The session, its slots (revisions included) and its checkpoint log, as stored."""
    return {
        "session": store.load_session(SID).model_dump(mode="json"),
        "slots": {
            slot_id: (slot.model_dump(mode="json"), slot.rev)
            for slot_id in store.slot_ids(SID)
            for slot in [store.load_slot(SID, slot_id)]
        },
        "log": store.backend.checkpoint_log(SID).open().read(),
        "checkpoints": Checkpointer(store).ids(SID),
    }


class KillWhileBlocked:
    """Before the fake server answers: hold the slot's row (FOR NO KEY UPDATE) from a
    connection of our own, so the turn's commit, once it holds the session's lock and has
    inserted its messages, waits on the slot's UPDATE; then terminate the waiting client's
    connection from the server side and let the row go."""

    def __init__(self, where: PgStore) -> None:
        self.where = where
        self.killed: list[tuple[int, str]] = []
        self.errors: list[BaseException] = []
        self.thread: threading.Thread | None = None

    def __call__(self) -> None:
        blocker = psycopg.connect(self.where.dsn)  # not autocommit: a transaction is open
        blocker.execute(
            sql.SQL(
                "SELECT 1 FROM {s}.slots WHERE session_id = %s AND id = 'default' FOR NO KEY UPDATE"
            ).format(s=sql.Identifier(self.where.schema)),
            [SID],
        )
        self.thread = threading.Thread(target=self._kill_the_waiter, args=(blocker,))
        self.thread.start()

    def _kill_the_waiter(self, blocker: psycopg.Connection[Any]) -> None:
        try:
            with psycopg.connect(self.where.dsn, autocommit=True) as admin:
                deadline = time.monotonic() + 30
                while time.monotonic() < deadline:
                    found = admin.execute(
                        "SELECT pid FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))",
                        [blocker.info.backend_pid],
                    ).fetchone()
                    if found is not None:
                        break
                    time.sleep(0.02)
                else:
                    raise AssertionError("no connection waited on the slot's row")
                # pg_stat_activity is a snapshot taken when the statement starts, while
                # pg_blocking_pids looks now: the query read with the pid can be the one
                # before (the lock's, idle in its transaction). The waiter cannot move on
                # while the row is held, so a statement of its own reads what it waits in.
                pid, query = admin.execute(
                    "SELECT pid, query FROM pg_stat_activity"
                    " WHERE pid = %s AND %s = ANY(pg_blocking_pids(pid))",
                    [found[0], blocker.info.backend_pid],
                ).fetchone() or (found[0], "(it stopped waiting)")
                admin.execute("SELECT pg_terminate_backend(%s)", [pid])
                self.killed.append((int(pid), str(query)))
        except BaseException as exc:  # reported by the test
            self.errors.append(exc)
        finally:
            blocker.rollback()
            blocker.close()


def test_a_turn_whose_connection_is_terminated_mid_commit_writes_nothing_and_keeps_a_draft(
    server: FakeOpenAI,
    pg_store: PgStore,
    open_backend: Callable[..., PostgresBackend],
) -> None:
    store = Store(backend=open_backend())
    store.create_session(SID)
    send_turn(store, SID, "first", OfflineProvider(), TurnOptions(model="offline"))
    before = stored_state(store)
    provider = OpenAIProvider(HttpSettings(base_url=server.base_url))
    kill = KillWhileBlocked(pg_store)
    server.reply(text="the answer")
    server.before_reply(kill)

    try:
        send_turn(store, SID, "question", provider, OPTIONS)
    except StoreError as exc:
        error: StoreError = exc
    else:
        raise AssertionError("the turn committed although its connection was terminated")
    finally:
        if kill.thread is not None:
            kill.thread.join()

    assert kill.errors == [] and len(kill.killed) == 1
    waited_on = kill.killed[0][1]
    assert waited_on.lstrip().startswith("UPDATE") and "slots" in waited_on  # after inserts
    assert error.exit_code in (1, 6)
    # The server's last word, or (when the statement waited in a pipeline) libpq's.
    said = ("terminating connection", "server closed the connection")
    assert any(text in str(error) for text in said), str(error)
    assert "nothing of this transaction" in str(error)
    assert "kept as a draft" in "\n".join(error.__notes__)
    fresh = Store(backend=open_backend())
    assert stored_state(fresh) == before  # not a message, a count or a checkpoint more
    draft = fresh.load_draft(SID, "default")
    assert draft.prompt == "question" and draft.reply is not None
    assert draft.reply.text() == "the answer"

    server.reply(text="second time")
    result = send_turn(fresh, SID, "question", provider, OPTIONS)

    assert result.reply.text() == "second time" and result.checkpoint is not None
    texts = [m.text() for m in fresh.load_slot(SID).messages]
    assert texts[-2:] == ["question", "second time"]
    assert fresh.load_session(SID).turn_count == before["session"]["turn_count"] + 1
    assert fresh.draft_slots(SID) == []
