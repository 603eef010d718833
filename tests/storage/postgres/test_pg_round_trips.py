"""How the PostgreSQL backend saves round trips, and that it never costs correctness:
writes sent with the next statement that needs an answer (a pipeline), a transaction
starting from what the last one on its session knew while the session's generation says
nobody wrote since, and a connection lost while committing answered by the server.

The round trips are counted where they happen: PgTx._round_trip (a pipeline or a
statement inside a transaction) and PostgresBackend._begun (BEGIN and the lock)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import psycopg.sql
import pytest

from agctl.base.errors import StoreError
from agctl.context.models import Draft, Message, utcnow
from agctl.providers.offline import OfflineProvider
from agctl.storage.postgres import backend as pg_backend
from agctl.storage.postgres.backend import PostgresBackend
from agctl.storage.postgres.tx import PgTx
from agctl.store import Store
from agctl.store.checkpointer import Checkpointer
from agctl.turn.send import TurnOptions, send_turn

OFFLINE = TurnOptions(model="offline")
SID = "s"


@pytest.fixture
def trips(monkeypatch: pytest.MonkeyPatch) -> Iterator[Counter[str]]:
    """Round trips inside transactions, by kind: 'begin' (BEGIN and the lock) and
    'send' (what was pending and a statement, or COMMIT)."""
    counted: Counter[str] = Counter()
    send, begun = PgTx._round_trip, PostgresBackend._begun

    def counting_send(self: PgTx, last: Any) -> Any:
        counted["send"] += 1
        return send(self, last)

    def counting_begun(self: PostgresBackend, *args: Any, **kwargs: Any) -> Any:
        counted["begin"] += 1
        return begun(self, *args, **kwargs)

    monkeypatch.setattr(PgTx, "_round_trip", counting_send)
    monkeypatch.setattr(PostgresBackend, "_begun", counting_begun)
    yield counted


def texts(store: Store) -> list[str]:
    return [m.text() for m in store.load_slot(SID).messages]


def test_a_turn_on_a_session_nobody_else_wrote_takes_two_round_trips_in_its_transaction(
    open_backend: Callable[..., PostgresBackend], trips: Counter[str]
) -> None:
    store = Store(backend=open_backend())
    store.create_session(SID)
    last = send_turn(store, SID, "first", OfflineProvider(), OFFLINE).slot
    trips.clear()

    for i in range(3):
        last = send_turn(store, SID, f"turn {i}", OfflineProvider(), OFFLINE, reuse=last).slot

    # Each turn: BEGIN with the lock, then its writes, checkpoint and COMMIT together.
    assert trips == {"begin": 3, "send": 3}
    fresh = Store(backend=open_backend())
    assert texts(fresh)[::2] == ["first", "turn 0", "turn 1", "turn 2"]
    assert Checkpointer(fresh).verify(SID).problems == []
    assert len(Checkpointer(fresh).ids(SID)) == 5  # before the first turn, after each


def test_a_transaction_reads_afresh_after_another_machine_wrote(
    open_backend: Callable[..., PostgresBackend], tmp_path: Path, trips: Counter[str]
) -> None:
    laptop = Store(backend=open_backend(tmp_path / "laptop"))
    runner = Store(backend=open_backend(tmp_path / "runner"))
    laptop.create_session(SID)
    mine = send_turn(laptop, SID, "laptop 1", OfflineProvider(), OFFLINE).slot
    send_turn(runner, SID, "runner 1", OfflineProvider(), OFFLINE)
    runner.save_draft(SID, Draft(prompt="kept on the runner", slot="default"))
    trips.clear()

    # The laptop's knowledge is a generation old: its next turn reads what it needs.
    send_turn(laptop, SID, "laptop 2", OfflineProvider(), OFFLINE, reuse=mine)

    assert trips["send"] > 1
    for machine in (laptop, runner, Store(backend=open_backend())):
        assert texts(machine)[::2] == ["laptop 1", "runner 1", "laptop 2"]
        assert machine.load_session(SID).turn_count == 3
        # The runner's draft, older than the laptop's turn, was superseded by it: seen.
        assert machine.draft_slots(SID) == []
        assert Checkpointer(machine).verify(SID).problems == []
    checkpoints = Checkpointer(runner)
    assert len(checkpoints.ids(SID)) == 4
    checkpoints.undo(SID)  # the laptop's checkpoint chain continues the runner's
    assert texts(Store(backend=open_backend()))[::2] == ["laptop 1", "runner 1"]


def test_a_draft_kept_by_another_machine_is_seen_by_the_next_transaction(
    open_backend: Callable[..., PostgresBackend], tmp_path: Path
) -> None:
    laptop = Store(backend=open_backend(tmp_path / "laptop"))
    runner = Store(backend=open_backend(tmp_path / "runner"))
    laptop.create_session(SID)
    started = utcnow()
    assert not laptop.clear_draft(SID, "default", before=started)  # none known: none there
    runner.save_draft(SID, Draft(prompt="old", slot="default", created_at=started))

    assert laptop.clear_draft(SID, "default", before=started + timedelta(seconds=1))
    assert runner.draft_slots(SID) == []


def test_a_write_that_fails_when_its_pipeline_is_sent_commits_nothing(
    open_backend: Callable[..., PostgresBackend],
) -> None:
    store = Store(backend=open_backend())
    store.create_session(SID)
    send_turn(store, SID, "kept", OfflineProvider(), OFFLINE)
    before = (texts(store), store.load_session(SID).turn_count, Checkpointer(store).ids(SID))

    failed = pytest.raises(StoreError, match="nothing of this transaction was committed")
    with failed, store.transaction(SID) as tx:
        slot = store.load_slot(SID)
        store.append_messages(SID, slot, [slot.messages[0]])  # waits, unsent
        assert isinstance(tx, PgTx) and tx._pending
        tx._execute("log_insert", [SID, 0, b"x"])  # offset 0 is taken: a key violation

    after = Store(backend=open_backend())
    assert (texts(after), after.load_session(SID).turn_count, Checkpointer(after).ids(SID)) == (
        before
    )
    send_turn(store, SID, "next", OfflineProvider(), OFFLINE)  # the backend goes on
    assert texts(Store(backend=open_backend()))[::2] == ["kept", "next"]


def test_a_savepoint_undone_before_anything_was_sent_sends_nothing(
    open_backend: Callable[..., PostgresBackend], trips: Counter[str]
) -> None:
    store = Store(backend=open_backend())
    store.create_session(SID)
    send_turn(store, SID, "kept", OfflineProvider(), OFFLINE)
    trips.clear()

    with store.transaction(SID) as tx:
        slot = store.load_slot(SID)
        sent = trips["send"]
        with pytest.raises(RuntimeError), tx.savepoint():
            store.append_messages(SID, slot, [slot.messages[0]])
            raise RuntimeError("the unit of work fails")
        assert isinstance(tx, PgTx) and tx._pending == []

    assert trips["send"] == sent + 1  # COMMIT, with nothing before it
    assert texts(Store(backend=open_backend()))[::2] == ["kept"]


def test_a_savepoint_undone_after_its_statements_were_sent_is_rolled_back_on_the_server(
    open_backend: Callable[..., PostgresBackend],
) -> None:
    store = Store(backend=open_backend())
    store.create_session(SID)
    send_turn(store, SID, "kept", OfflineProvider(), OFFLINE)

    with store.transaction(SID) as tx:
        slot = store.load_slot(SID)
        with pytest.raises(RuntimeError), tx.savepoint():
            store.append_messages(SID, slot, [slot.messages[0]])
            tx.draft_slots(SID)  # a read: the append and the savepoint go to the server
            raise RuntimeError("the unit of work fails")
        session = tx.load_session(SID)
        session.title = "written after the undone unit"
        tx.put_session(session)

    fresh = Store(backend=open_backend())
    assert texts(fresh)[::2] == ["kept"]
    assert fresh.load_session(SID).title == "written after the undone unit"


def test_a_connection_lost_after_the_server_committed_is_a_committed_turn(
    open_backend: Callable[..., PostgresBackend], monkeypatch: pytest.MonkeyPatch
) -> None:
    store = Store(backend=open_backend())
    store.create_session(SID)
    finish = PgTx.finish

    def commit_then_lose_the_connection(self: PgTx) -> Any:
        finish(self)
        self._conn.close()  # the answer never arrives
        raise psycopg.OperationalError("server closed the connection unexpectedly")

    monkeypatch.setattr(PgTx, "finish", commit_then_lose_the_connection)
    result = send_turn(store, SID, "committed anyway", OfflineProvider(), OFFLINE)
    monkeypatch.undo()

    assert result.checkpoint is not None
    fresh = Store(backend=open_backend())
    assert texts(fresh)[::2] == ["committed anyway"]
    assert fresh.draft_slots(SID) == []
    send_turn(store, SID, "and the next", OfflineProvider(), OFFLINE)
    assert texts(Store(backend=open_backend()))[::2] == ["committed anyway", "and the next"]


def test_the_server_says_what_became_of_a_transaction(
    open_backend: Callable[..., PostgresBackend],
) -> None:
    backend = open_backend()
    with psycopg.connect(backend.dsn, autocommit=True) as conn:
        conn.execute("BEGIN")
        aborted = conn.execute("SELECT txid_current()").fetchone()
        conn.execute("ROLLBACK")
        conn.execute("BEGIN")
        committed = conn.execute("SELECT txid_current()").fetchone()
        conn.execute("COMMIT")
    assert aborted is not None and committed is not None
    assert backend._outcome(int(committed[0])) == "committed"
    assert backend._outcome(int(aborted[0])) == "aborted"
    assert backend._outcome(None) is None


def test_a_transaction_without_revisions_left_commits_a_generation_it_does_not_know(
    open_backend: Callable[..., PostgresBackend],
    monkeypatch: pytest.MonkeyPatch,
    trips: Counter[str],
) -> None:
    monkeypatch.setattr(pg_backend, "LOCK_REVS", 1)  # the slot takes it; none for the gen
    store = Store(backend=open_backend())
    store.create_session(SID)
    last = send_turn(store, SID, "first", OfflineProvider(), OFFLINE).slot
    trips.clear()

    send_turn(store, SID, "second", OfflineProvider(), OFFLINE, reuse=last)
    send_turn(store, SID, "third", OfflineProvider(), OFFLINE, reuse=last)

    assert trips["send"] > 2  # each read what it needed: no generation was known
    fresh = Store(backend=open_backend())
    assert texts(fresh)[::2] == ["first", "second", "third"]
    assert Checkpointer(fresh).verify(SID).problems == []


def test_a_turn_in_a_new_process_opens_one_connection(
    open_backend: Callable[..., PostgresBackend], monkeypatch: pytest.MonkeyPatch
) -> None:
    setup = Store(backend=open_backend())
    setup.create_session(SID)
    send_turn(setup, SID, "first", OfflineProvider(), OFFLINE)
    opened: list[PostgresBackend] = []
    connect = PostgresBackend._connect

    def counting_connect(self: PostgresBackend) -> Any:
        opened.append(self)
        return connect(self)

    monkeypatch.setattr(PostgresBackend, "_connect", counting_connect)
    store = Store(backend=open_backend())  # as a new command opens it
    send_turn(store, SID, "second", OfflineProvider(), OFFLINE)

    # The reads before the transaction and the transaction share it.
    assert opened == [store.backend]
    assert texts(store)[::2] == ["first", "second"]
    assert len(opened) == 1


def _as_old_agctl(pg_store: Any, statement: str, params: list[Any]) -> None:
    """One statement as an agctl from before the generation wrote it: no generation, no
    session row touched."""
    schema = psycopg.sql.Identifier(pg_store.schema)
    revs = psycopg.sql.Literal(f'"{pg_store.schema}"."revs"')
    with psycopg.connect(pg_store.dsn) as old:
        old.execute(psycopg.sql.SQL(statement).format(s=schema, revs=revs), params)


def test_a_draft_kept_by_an_agctl_that_knows_no_generation_is_seen(
    open_backend: Callable[..., PostgresBackend], pg_store: Any
) -> None:
    """An agctl from before the generation, still running through the migration, writes
    a draft without one: the drafts' stamp in the lock's answer still tells."""
    store = Store(backend=open_backend())
    store.create_session(SID)
    started = utcnow()
    assert not store.clear_draft(SID, "default", before=started)  # known: no draft
    draft = Draft(prompt="kept by an old agctl", slot="default", created_at=started)
    _as_old_agctl(
        pg_store,
        "INSERT INTO {s}.drafts (session_id, slot_id, doc) VALUES (%s, %s, %s)",
        [SID, "default", draft.model_dump_json().encode()],
    )

    assert store.clear_draft(SID, "default", before=started + timedelta(seconds=1))
    assert Store(backend=open_backend()).draft_slots(SID) == []


def test_a_slot_written_by_an_agctl_that_knows_no_generation_is_checkpointed_as_written(
    open_backend: Callable[..., PostgresBackend], pg_store: Any
) -> None:
    """An old agctl appends a message to the slot (its row and the slot's new revision
    only): the next checkpoint of a backend that knew the slot one write earlier holds
    that message, since the slots' stamp moved."""
    store = Store(backend=open_backend())
    store.create_session(SID)
    send_turn(store, SID, "first", OfflineProvider(), OFFLINE)
    checkpoints = Checkpointer(store)
    before = len(store.load_slot(SID).messages)
    row = Message(role="user", content="appended by an old agctl").model_dump_json().encode()
    _as_old_agctl(
        pg_store,
        "INSERT INTO {s}.slot_messages (session_id, slot_id, seq, data) VALUES (%s, %s, %s, %s)",
        [SID, "default", before, row],
    )
    _as_old_agctl(
        pg_store,
        "UPDATE {s}.slots SET rev = nextval({revs}), count = count + 1"
        " WHERE session_id = %s AND id = %s",
        [SID, "default"],
    )

    made = checkpoints.create(SID, label="after the old agctl")

    state = Checkpointer(Store(backend=open_backend())).state(SID, made)
    texts_then = [m.text() for m in state.slots["default"].messages]
    assert texts_then[-1] == "appended by an old agctl"
    assert len(texts_then) == before + 1
    assert Checkpointer(store).verify(SID).problems == []


def _lose_the_connection_before_commit(self: PgTx) -> Any:
    self._conn.close()  # the server rolls the transaction back
    raise psycopg.OperationalError("server closed the connection unexpectedly")


def test_a_connection_lost_before_the_server_committed_commits_nothing_and_says_so(
    open_backend: Callable[..., PostgresBackend], monkeypatch: pytest.MonkeyPatch
) -> None:
    store = Store(backend=open_backend())
    store.create_session(SID)
    send_turn(store, SID, "kept", OfflineProvider(), OFFLINE)
    monkeypatch.setattr(PgTx, "finish", _lose_the_connection_before_commit)

    with pytest.raises(StoreError, match="nothing of this transaction was committed"):
        send_turn(store, SID, "lost", OfflineProvider(), OFFLINE)

    monkeypatch.undo()
    fresh = Store(backend=open_backend())
    assert texts(fresh)[::2] == ["kept"]
    assert fresh.load_session(SID).turn_count == 1


def test_a_lost_commit_the_server_cannot_be_asked_about_is_reported_unknown(
    open_backend: Callable[..., PostgresBackend], monkeypatch: pytest.MonkeyPatch
) -> None:
    store = Store(backend=open_backend())
    store.create_session(SID)
    send_turn(store, SID, "kept", OfflineProvider(), OFFLINE)
    monkeypatch.setattr(PgTx, "finish", _lose_the_connection_before_commit)

    def unreachable(self: PostgresBackend) -> Any:
        raise StoreError("cannot connect to the store")

    monkeypatch.setattr(PostgresBackend, "_connect", unreachable)
    with pytest.raises(StoreError, match="may or may not have been committed"):
        send_turn(store, SID, "unknown", OfflineProvider(), OFFLINE)


def test_a_lost_commit_the_server_still_runs_is_asked_about_again_until_it_ends(
    open_backend: Callable[..., PostgresBackend], pg_store: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A client learns of its lost connection before the server does: the transaction is
    "in progress" for a moment. The backend asks again until the server says how it
    ended, and says "in progress" (may or may not) only when that takes too long."""
    import threading

    backend = open_backend()
    other = psycopg.connect(pg_store.dsn)  # a transaction open on the server
    try:
        xid = other.execute("SELECT txid_current()").fetchone()[0]  # type: ignore[index]
        monkeypatch.setattr(pg_backend, "OUTCOME_PATIENCE", 0.3)
        assert backend._outcome(xid) == "in progress"  # never ends within the patience

        monkeypatch.setattr(pg_backend, "OUTCOME_PATIENCE", 30.0)
        ending = threading.Timer(0.4, other.commit)
        ending.start()
        try:
            assert backend._outcome(xid) == "committed"
        finally:
            ending.join()
    finally:
        other.close()
