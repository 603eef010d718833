"""The schema's migrations: from an empty database, from the first schema with data in
it, by eight processes at once, and a schema from a newer agctl refused."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest
from pg_children import read_line, start, tell
from pgserver import PgStore
from psycopg import sql

from agctl.base.errors import DataError
from agctl.providers.offline import OfflineProvider
from agctl.storage.postgres import schema as pg_schema
from agctl.storage.postgres.backend import PostgresBackend
from agctl.store import Store
from agctl.store.checkpointer import Checkpointer
from agctl.turn.send import TurnOptions, send_turn

SID = "s"
OFFLINE = TurnOptions(model="offline")
TABLES = ["caches", "checkpoint_log", "drafts", "meta", "sessions", "slot_messages", "slots"]


def connect(where: PgStore) -> psycopg.Connection[Any]:
    return psycopg.connect(where.dsn, autocommit=True)


def tables(conn: psycopg.Connection[Any], schema: str) -> list[str]:
    rows = conn.execute(
        "SELECT tablename FROM pg_catalog.pg_tables WHERE schemaname = %s ORDER BY 1", [schema]
    ).fetchall()
    return [str(row[0]) for row in rows]


def meta_version(conn: psycopg.Connection[Any], schema: str) -> str:
    query = sql.SQL("SELECT value FROM {s}.meta WHERE key = 'version'")
    row = conn.execute(query.format(s=sql.Identifier(schema))).fetchone()
    assert row is not None
    return str(row[0])


def test_an_empty_database_is_migrated_to_the_current_version_on_first_use(
    pg_store: PgStore, open_backend: Callable[..., PostgresBackend]
) -> None:
    with connect(pg_store) as conn:
        assert tables(conn, pg_store.schema) == []
        assert pg_schema.stored_version(conn, pg_store.schema) == 0
    backend = open_backend()

    assert backend.session_ids() == []

    assert backend.version() == pg_schema.VERSION == len(pg_schema.MIGRATIONS)
    with connect(pg_store) as conn:
        assert tables(conn, pg_store.schema) == TABLES
        assert meta_version(conn, pg_store.schema) == str(pg_schema.VERSION)
    assert backend.migrate() == []  # nothing left to do


def copy_rows(source: str, target: str, conn: psycopg.Connection[Any]) -> None:
    """The rows of the first schema's tables, copied from a current schema (its columns
    of the first schema only): what agctl at version 1 would have written."""
    columns = {
        "sessions": "id, doc, rev, removed",
        "slots": "session_id, id, header, rev, count",
        "slot_messages": "session_id, slot_id, seq, data",
        "drafts": "session_id, slot_id, doc",
        "checkpoint_log": "session_id, off, data",
    }
    for table, names in columns.items():
        conn.execute(
            sql.SQL("INSERT INTO {t}.{n} ({c}) SELECT {c} FROM {s}.{n}").format(
                t=sql.Identifier(target),
                s=sql.Identifier(source),
                n=sql.Identifier(table),
                c=sql.SQL(names),
            )
        )
    conn.execute(
        sql.SQL("SELECT setval(%s, (SELECT max(rev) FROM {s}.sessions) + 1000)").format(
            s=sql.Identifier(source)
        ),
        [f'{sql.Identifier(target).as_string(conn)}."revs"'],
    )


def test_a_first_schema_with_a_checkpoint_log_is_migrated_and_its_log_reads_whole(
    pg_store: PgStore, open_backend: Callable[..., PostgresBackend], tmp_path: Path
) -> None:
    # A session written by the current code, with turns and checkpoints: its rows.
    written = Store(backend=open_backend())
    written.create_session(SID)
    send_turn(written, SID, "question 0", OfflineProvider(), OFFLINE)
    after_first = (Checkpointer(written).ids(SID)[0], written.load_slot(SID).messages)
    for number in (1, 2):
        send_turn(written, SID, f"question {number}", OfflineProvider(), OFFLINE)
    log = written.backend.checkpoint_log(SID).open().read()
    checkpoints = Checkpointer(written).ids(SID)
    old = f"{pg_store.schema}_v1"
    with connect(pg_store) as conn:
        assert pg_schema.migrate_step(conn, old, 1, old) == 1
        assert pg_schema.stored_version(conn, old) == 1
        copy_rows(pg_store.schema, old, conn)
        log_rows = conn.execute(
            sql.SQL("SELECT count(*) FROM {s}.checkpoint_log").format(s=sql.Identifier(old))
        ).fetchone()
    assert log_rows is not None and log_rows[0] >= 4  # several rows to add up

    migrated = PostgresBackend(pg_store.dsn, schema=old, local_dir=tmp_path / "old")
    try:
        store = Store(backend=migrated)
        assert store.load_slot(SID).messages == written.load_slot(SID).messages
        assert migrated.version() == pg_schema.VERSION
        assert migrated.checkpoint_log(SID).size() == len(log)
        assert migrated.checkpoint_log(SID).open().read() == log
        assert Checkpointer(store).ids(SID) == checkpoints
        Checkpointer(store).rollback(SID, after_first[0])
        assert store.load_slot(SID).messages == after_first[1]
        send_turn(store, SID, "after the migration", OfflineProvider(), OFFLINE)
        assert len(Checkpointer(store).ids(SID)) > len(checkpoints)
    finally:
        migrated.close()


# A child that connects, says so, and migrates when told: the versions it reached.
MIGRATOR = """
import json, sys
from pathlib import Path
import psycopg
from agctl.storage.postgres.backend import PostgresBackend

dsn, schema, local_dir = sys.argv[1:]
backend = PostgresBackend(dsn, schema=schema, local_dir=Path(local_dir))
conn = psycopg.connect(dsn, autocommit=True)
print("ready", flush=True)
sys.stdin.readline()
reached = backend.migrate(conn)
print(json.dumps({"reached": reached, "sessions": backend.session_ids()}), flush=True)
"""
MIGRATORS = 8


def test_eight_processes_opening_a_new_schema_at_once_apply_each_migration_once(
    pg_store: PgStore, open_backend: Callable[..., PostgresBackend], tmp_path: Path
) -> None:
    children = [
        start(tmp_path, "migrator", MIGRATOR, pg_store.dsn, pg_store.schema, str(tmp_path))
        for _ in range(MIGRATORS)
    ]
    try:
        assert [read_line(child) for child in children] == ["ready"] * MIGRATORS
        for child in children:
            tell(child)  # all at once, as CI workers starting together
        outcomes = [json.loads(read_line(child) or "null") for child in children]
        assert [child.wait(timeout=120) for child in children] == [0] * MIGRATORS
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait()

    reached = sorted(step for outcome in outcomes for step in outcome["reached"])
    assert reached == list(range(1, pg_schema.VERSION + 1))  # each migration ran once
    assert all(outcome["sessions"] == [] for outcome in outcomes)
    assert open_backend().version() == pg_schema.VERSION


def test_a_schema_from_a_newer_agctl_is_refused_naming_both_versions(
    pg_store: PgStore, open_backend: Callable[..., PostgresBackend]
) -> None:
    open_backend().session_ids()  # migrated to the current version
    newer = pg_schema.VERSION + 1
    with connect(pg_store) as conn:
        conn.execute(
            sql.SQL("UPDATE {s}.meta SET value = %s WHERE key = 'version'").format(
                s=sql.Identifier(pg_store.schema)
            ),
            [str(newer)],
        )

    for operation in (
        lambda backend: backend.session_ids(),
        lambda backend: backend.migrate(),
        lambda backend: backend.transaction(SID).__enter__(),
    ):
        with pytest.raises(DataError) as caught:
            operation(open_backend())
        message = str(caught.value)
        assert caught.value.exit_code == 5
        assert f"schema version {newer}, from a newer agctl" in message
        assert f"versions up to {pg_schema.VERSION}" in message
        assert pg_store.schema in message

    with connect(pg_store) as conn:
        assert meta_version(conn, pg_store.schema) == str(newer)  # left as it was
