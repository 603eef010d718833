"""The server restarting or going away under a backend: the next operation reconnects
(the reader connection and the pooled ones), a short outage is waited out, and a server
gone for good is a clear StoreError that names the store, its password redacted."""

from __future__ import annotations

import contextlib
import json
import threading
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path

import child_backend
import pytest
from backend_docs import SID, rich_draft, seed, snapshot, user
from pg_children import read_line, start, tell
from pgserver import PgServer, PgStore

from agctl.base.errors import StoreError
from agctl.context.models import Session, Slot
from agctl.storage.base import Backend
from agctl.storage.postgres import connection as pg_conn
from agctl.storage.postgres import listing
from agctl.storage.postgres.backend import PostgresBackend


def append(backend: Backend, text: str, session_id: str = SID) -> None:
    with backend.transaction(session_id) as tx:
        slot = tx.load_slot(session_id, "default")
        slot.messages.append(user(text))
        tx.append_messages(slot, 1)


def texts(backend: Backend, session_id: str = SID) -> list[str]:
    return [m.text() for m in backend.load_slot(session_id, "default").messages]


def started_at(server: PgServer) -> str:
    import psycopg

    with psycopg.connect(server.url(), autocommit=True) as conn:
        row = conn.execute("SELECT pg_postmaster_start_time()::text").fetchone()
    assert row is not None
    return str(row[0])


def test_one_backend_reconnects_after_a_restart_and_loses_nothing(
    running_server: PgServer, open_backend: Callable[..., PostgresBackend]
) -> None:
    backend = open_backend()
    seed(backend)
    for other in ("a", "b", "c"):
        backend.create_session(Session(id=other), [Slot(id="default")])
    # Three transactions open at once: three connections idle in the pool afterwards,
    # besides the reader's, all cut by the restart.
    with backend.transaction("a"), backend.transaction("b"), backend.transaction("c"):
        pass
    append(backend, "before")
    with backend.transaction(SID) as tx:
        tx.checkpoint_log().append(lambda offset: b'{"before": true}\n')
    before = snapshot(backend)
    first_start = started_at(running_server)

    running_server.restart()

    assert started_at(running_server) != first_start
    assert snapshot(backend) == before  # the reader, and the log's snapshot connection
    append(backend, "after")  # a pooled connection, found dead, replaced
    with backend.transaction("a") as tx:
        tx.put_session(Session(id="a", title="after the restart"))
    backend.create_session(Session(id="d"), [Slot(id="default")])
    fresh = open_backend()
    assert texts(fresh)[-2:] == ["before", "after"]
    assert fresh.load_session("a").title == "after the restart"
    assert fresh.session_ids() == ["a", "b", "c", "d", SID]
    assert fresh.checkpoint_log(SID).open().read() == b'{"before": true}\n'


# A child that writes, waits (its connections open) while the server restarts, writes again.
WRITE_WAIT_WRITE = f"""
import sys
from agctl.context.models import Message
from child_backend import open_backend

backend = open_backend(sys.argv[1])
who = sys.argv[2]

def append(text):
    with backend.transaction("{SID}") as tx:
        slot = tx.load_slot("{SID}", "default")
        slot.messages.append(Message(role="user", content=text))
        tx.append_messages(slot, 1)

append(who + ":1")
backend.load_session("{SID}")
print("ready", flush=True)
sys.stdin.readline()
append(who + ":2")
print(len(backend.load_slot("{SID}", "default").messages), flush=True)
"""


def test_two_processes_reconnect_after_a_restart_between_their_writes(
    running_server: PgServer,
    pg_store: PgStore,
    open_backend: Callable[..., PostgresBackend],
    tmp_path: Path,
) -> None:
    backend = open_backend()
    seed(backend)
    spec = child_backend.spec("postgres", tmp_path, pg_store.dsn, pg_store.schema)
    children = [start(tmp_path, "writer", WRITE_WAIT_WRITE, spec, who) for who in "xy"]
    try:
        assert [read_line(child) for child in children] == ["ready", "ready"]
        running_server.restart()
        for child in children:
            tell(child)
        counts = sorted(int(read_line(child) or 0) for child in children)
        assert [child.wait(timeout=60) for child in children] == [0, 0]
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait()
    appended = texts(open_backend())[4:]
    assert sorted(appended) == ["x:1", "x:2", "y:1", "y:2"]
    assert appended.index("x:1") < appended.index("x:2")
    assert appended.index("y:1") < appended.index("y:2")
    assert counts[-1] == 8  # the second to write saw all four


@contextlib.contextmanager
def started_in_a_second(server: PgServer) -> Iterator[None]:
    """Start the stopped server from another thread, a second from now."""
    failures: list[BaseException] = []

    def start_later() -> None:
        try:
            threading.Event().wait(1.0)
            server.start()
        except BaseException as exc:  # reported by the test
            failures.append(exc)

    starter = threading.Thread(target=start_later)
    starter.start()
    try:
        yield
    finally:
        starter.join()
    assert failures == []


def read_it(backend: PostgresBackend) -> object:
    return json.dumps(snapshot(backend), default=repr)


def write_it(backend: PostgresBackend) -> object:
    append(backend, "while it was down")
    return texts(backend)[-1]


@pytest.mark.parametrize("operation", [read_it, write_it], ids=["read", "transaction"])
def test_an_operation_while_the_server_is_down_for_a_moment_waits_for_it(
    running_server: PgServer,
    open_backend: Callable[..., PostgresBackend],
    operation: Callable[[PostgresBackend], object],
) -> None:
    backend = open_backend()
    seed(backend)
    expected = operation(open_backend())  # the same operation with the server up
    assert pg_conn.CONNECT_PATIENCE > 1.0

    running_server.stop("fast")
    with started_in_a_second(running_server):
        outcome = operation(backend)  # waits for the server instead of failing

    if operation is read_it:
        assert outcome == expected
    else:
        assert outcome == "while it was down"
        assert texts(open_backend())[-2:] == ["while it was down"] * 2  # both kept


PASSWORD = "secret-pw"


def url_with_password(server: PgServer, database: str) -> str:
    return server.url(database).replace("postgresql://agctl@", f"postgresql://agctl:{PASSWORD}@")


def keywords_with_password(server: PgServer, database: str) -> str:
    return f"host={server.socket_dir} dbname={database} user=agctl password={PASSWORD}"


@pytest.mark.parametrize(
    "form", [url_with_password, keywords_with_password], ids=["url", "keywords"]
)
def test_a_server_gone_for_good_is_a_store_error_naming_the_store_without_its_password(
    running_server: PgServer,
    pg_store: PgStore,
    pg_database: str,
    open_backend: Callable[..., PostgresBackend],
    monkeypatch: pytest.MonkeyPatch,
    form: Callable[[PgServer, str], str],
) -> None:
    monkeypatch.setattr(pg_conn, "CONNECT_PATIENCE", 0.5)
    dsn = form(running_server, pg_database)
    used = open_backend(dsn=dsn)
    seed(used)  # the password is accepted (trust auth): the store works
    never_connected = open_backend(dsn=dsn)

    running_server.stop("fast")

    failures: list[StoreError] = []
    for backend, operation in [
        (used, lambda b: b.load_session(SID)),
        (used, lambda b: append(b, "lost")),
        (never_connected, lambda b: b.session_ids()),
        (never_connected, lambda b: b.checkpoint_log(SID).open()),
    ]:
        with pytest.raises(StoreError) as caught:
            operation(backend)
        failures.append(caught.value)
    for error in failures:
        text = "".join(traceback.format_exception(error)) + "\n".join(
            getattr(error, "__notes__", [])
        )
        assert error.exit_code == 1
        assert PASSWORD not in text and PASSWORD not in str(error)
        assert f"(schema {pg_store.schema})" in str(error)
        assert "***" in str(error) and pg_database in str(error)
    running_server.start()
    assert open_backend().load_session(SID).title == "rich"


def test_a_database_that_does_not_exist_is_reported_at_once(
    pg_server: PgServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A refusal that waiting cannot fix (no such database, role, password) is not
    retried for CONNECT_PATIENCE: the command fails at its first attempt, saying why."""
    attempts = []
    connect = pg_conn.psycopg.connect

    def counted(*args: object, **kwargs: object) -> object:
        attempts.append(args)
        return connect(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(pg_conn.psycopg, "connect", counted)
    backend = PostgresBackend(pg_server.url("no_such_db"), schema="s", local_dir=tmp_path)
    with pytest.raises(StoreError, match="no_such_db"):
        backend.session_ids()
    assert len(attempts) == 1
    pg_server.stop()  # no server at all: that is waited for, and retried
    try:
        monkeypatch.setattr(pg_conn, "CONNECT_PATIENCE", 2.0)  # attempts on a loaded machine too
        attempts.clear()
        with pytest.raises(StoreError):
            PostgresBackend(pg_server.url(), schema="s", local_dir=tmp_path).session_ids()
        assert len(attempts) > 1
    finally:
        pg_server.start()


def test_a_store_found_down_is_waited_for_once_a_process_and_the_wait_is_said(
    running_server: PgServer,
    pg_store: PgStore,
    isolated_env: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A failed turn still tries to keep its draft, step after step: each try waited the
    whole patience again (four of 15 s: a minute with nothing on screen). The first wait
    is said (a warning: stderr) and bounded; the next connects of the process try once,
    until one gets through."""
    attempts = []
    connect = pg_conn.psycopg.connect

    def counted(*args: object, **kwargs: object) -> object:
        attempts.append(args)
        return connect(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(pg_conn.psycopg, "connect", counted)
    backend = PostgresBackend(
        pg_store.dsn, schema=pg_store.schema, local_dir=isolated_env, connect_patience=1.0
    )
    try:
        seed(backend)
        for _round in range(2):
            running_server.stop("fast")
            attempts.clear()
            caplog.clear()
            with caplog.at_level("INFO", logger="agctl.store"), pytest.raises(StoreError):
                backend.load_session(SID)
            assert len(attempts) > 1  # waited out, attempt after attempt
            said = [r for r in caplog.records if r.levelname == "WARNING"]
            assert len(said) == 1 and "does not answer" in said[0].getMessage()
            assert "trying again for up to 1s (store.connect_patience)" in said[0].getMessage()
            assert any("attempt 2 failed" in r.getMessage() for r in caplog.records)  # -v
            attempts.clear()
            caplog.clear()
            for operation in (lambda: append(backend, "lost"), lambda: backend.session_ids()):
                with pytest.raises(StoreError):
                    operation()
            assert len(attempts) == 2, "one attempt each: the store was found down"
            assert not [r for r in caplog.records if r.levelname == "WARNING"]
            running_server.start()
            assert backend.load_session(SID).title == "rich"  # back: the next outage waited
    finally:
        backend.close()


def test_one_connection_attempt_to_a_silent_server_is_bounded(
    tmp_path: Path, pg_store: PgStore, isolated_env: Path
) -> None:
    """A host that takes the connection and never answers (or drops packets) held one
    attempt for psycopg's default, 130 s; CONNECT_TIMEOUT bounds it, and the TCP
    keepalives find a server gone silent under a transaction."""
    import socket

    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)  # never accepted: the kernel completes the handshake, nobody answers
    port = silent.getsockname()[1]
    backend = PostgresBackend(
        f"postgresql://agctl@127.0.0.1:{port}/x", schema="s", local_dir=tmp_path,
        connect_patience=0,
    )  # fmt: skip
    failed: list[BaseException] = []

    def connect() -> None:
        try:
            backend.session_ids()
        except BaseException as exc:
            failed.append(exc)

    worker = threading.Thread(target=connect, daemon=True)
    try:
        worker.start()
        worker.join(timeout=60)  # 12x CONNECT_TIMEOUT; 130 s without it
        assert not worker.is_alive(), "the connection attempt was not bounded"
    finally:
        silent.close()
    assert len(failed) == 1 and isinstance(failed[0], StoreError)
    assert "timeout" in str(failed[0])
    used = PostgresBackend(pg_store.dsn, schema=pg_store.schema, local_dir=isolated_env)
    try:
        conn = used._connect()
        options = {o.keyword.decode(): (o.val or b"").decode() for o in conn.pgconn.info}
        conn.close()
    finally:
        used.close()
    assert options["connect_timeout"] == str(listing.CONNECT_TIMEOUT)
    assert options["keepalives_idle"] == str(listing.KEEPALIVES["keepalives_idle"])
    tab = listing.Listing(pg_store.dsn, pg_store.schema, isolated_env)  # a TAB's too
    try:
        info = {o.keyword.decode(): (o.val or b"").decode() for o in tab._conn.pgconn.info}
    finally:
        tab.close()
    assert info["connect_timeout"] == str(listing.CONNECT_TIMEOUT)


def test_a_draft_the_store_cannot_take_is_kept_here_found_and_removed_with_the_stores(
    running_server: PgServer, pg_store: PgStore, isolated_env: Path
) -> None:
    import stat

    from agctl.store import Store
    from agctl.store.drafts import remove_draft

    backend = PostgresBackend(
        pg_store.dsn, schema=pg_store.schema, local_dir=isolated_env, connect_patience=0.2
    )
    store = Store(backend=backend)
    try:
        seed(backend)
        running_server.stop("fast")
        kept = store.save_draft(SID, rich_draft())
        assert kept is not None and kept.is_relative_to(isolated_env)
        assert stat.S_IMODE(kept.stat().st_mode) == 0o600
        assert stat.S_IMODE(kept.parent.stat().st_mode) == 0o700
        running_server.start()
        assert store.draft_slots(SID) == ["default"]
        assert store.load_draft(SID, "default").prompt == "what next?"
        newer = rich_draft()
        newer.prompt = "asked later, into the store"
        assert store.save_draft(SID, newer) is None  # the store takes it again
        assert store.load_draft(SID, "default").prompt == newer.prompt  # the newer one
        assert backend.draft_slots(SID) == ["default"] and kept.exists()
        removed = remove_draft(store.backend, SID)
        assert not isinstance(removed, Exception) and removed.prompt == newer.prompt
        assert store.draft_slots(SID) == [] and not kept.exists()
    finally:
        backend.close()
