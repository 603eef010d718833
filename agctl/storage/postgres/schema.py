"""The PostgreSQL store's tables, and the ordered migrations that make them.

Everything lives in one schema (the `schema` setting, "agctl" by default), so several
teams can share a database. `meta.version` says how many migrations a database has had.
Each migration runs in its own transaction under a transaction-scoped advisory lock on
the schema's name, so CI workers that start together against a new database neither race
nor deadlock: the first one migrates, the others wait and find it done.

    sessions       one row a session: its document, revision, removed checkpoint ids,
                   checkpoint log size and generation (a revision taken by every
                   transaction that commits on the session: a client that finds the one
                   it wrote knows nobody wrote since); locked FOR UPDATE by each
                   transaction on it
    slots          one row a live slot: its document without the `messages` zone (the
                   header), revision and message count
    slot_messages  the `messages` zone, a row a message: a turn inserts its new ones
    drafts         one row a draft
    checkpoint_log the session's checkpoint log (agctl.pack: message nodes chained by
                   offset, content-addressed blobs, checkpoint records), a row an append;
                   `off` is the record's offset, which checkpoint ids are written from
    caches         the checkpoint code's caches, a row an append
    revs           the sequence every document revision is taken from (never reused)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from psycopg import Connection
    from psycopg.sql import Composed

# Each migration: a short name and its statements, with {s} for the schema (an identifier,
# quoted by psycopg.sql, never a value) and {revs} for its sequence's name as a string
# literal (nextval's argument: the quoted identifier, itself quoted as a literal).
MIGRATIONS: list[tuple[str, list[str]]] = [
    (
        "the first schema",
        [
            "CREATE SEQUENCE {s}.revs",
            """CREATE TABLE {s}.sessions (
                id text PRIMARY KEY,
                doc bytea NOT NULL,
                rev bigint NOT NULL,
                removed text[] NOT NULL DEFAULT '{{}}'
            )""",
            """CREATE TABLE {s}.slots (
                session_id text NOT NULL REFERENCES {s}.sessions (id) ON DELETE CASCADE,
                id text NOT NULL,
                header bytea NOT NULL,
                rev bigint NOT NULL,
                count integer NOT NULL,
                PRIMARY KEY (session_id, id)
            )""",
            """CREATE TABLE {s}.slot_messages (
                session_id text NOT NULL,
                slot_id text NOT NULL,
                seq integer NOT NULL,
                data bytea NOT NULL,
                PRIMARY KEY (session_id, slot_id, seq),
                FOREIGN KEY (session_id, slot_id) REFERENCES {s}.slots (session_id, id)
                    ON DELETE CASCADE
            )""",
            """CREATE TABLE {s}.drafts (
                session_id text NOT NULL REFERENCES {s}.sessions (id) ON DELETE CASCADE,
                slot_id text NOT NULL,
                doc bytea NOT NULL,
                PRIMARY KEY (session_id, slot_id)
            )""",
            """CREATE TABLE {s}.checkpoint_log (
                session_id text NOT NULL REFERENCES {s}.sessions (id) ON DELETE CASCADE,
                off bigint NOT NULL,
                data bytea NOT NULL,
                PRIMARY KEY (session_id, off)
            )""",
            """CREATE TABLE {s}.caches (
                session_id text NOT NULL REFERENCES {s}.sessions (id) ON DELETE CASCADE,
                name text NOT NULL,
                seq bigint GENERATED ALWAYS AS IDENTITY,
                data bytea NOT NULL,
                PRIMARY KEY (session_id, name, seq)
            )""",
        ],
    ),
    (
        "the checkpoint log's size kept in the session row",
        [
            "ALTER TABLE {s}.sessions ADD COLUMN log_size bigint NOT NULL DEFAULT 0",
            """UPDATE {s}.sessions AS s SET log_size = l.size FROM (
                SELECT session_id, max(off + length(data)) AS size
                FROM {s}.checkpoint_log GROUP BY session_id
            ) AS l WHERE l.session_id = s.id""",
        ],
    ),
    (
        "a generation on the session row, new at every commit on the session",
        ["ALTER TABLE {s}.sessions ADD COLUMN gen bigint NOT NULL DEFAULT 0"],
    ),
]

VERSION = len(MIGRATIONS)

META = """CREATE TABLE IF NOT EXISTS {s}.meta (
    key text PRIMARY KEY,
    value text NOT NULL
)"""


def statement(text: str, schema: str) -> Composed:
    from psycopg import sql

    return sql.SQL(text).format(
        s=sql.Identifier(schema), revs=sql.Literal(sql.Identifier(schema, "revs").as_string(None))
    )


def stored_version(conn: Connection[tuple[object, ...]], schema: str) -> int:
    """The migrations the schema has had (0: none, or no schema at all)."""
    row = conn.execute(
        "SELECT 1 FROM pg_catalog.pg_tables WHERE schemaname = %s AND tablename = 'meta'",
        [schema],
    ).fetchone()
    if row is None:
        return 0
    found = conn.execute(statement("SELECT value FROM {s}.meta WHERE key = 'version'", schema))
    value = found.fetchone()
    return int(str(value[0])) if value is not None else 0


def migrate_step(conn: Connection[tuple[object, ...]], schema: str, target: int) -> int | None:
    """Run the next migration if the schema is behind `target`, in one transaction under
    the schema's advisory lock; the version it is at afterwards, None if it was at or
    past `target` already."""
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", [f"agctl schema {schema}"])
        conn.execute(statement("CREATE SCHEMA IF NOT EXISTS {s}", schema))
        conn.execute(statement(META, schema))
        version = stored_version(conn, schema)
        if version >= target:
            return None
        for text in MIGRATIONS[version][1]:
            conn.execute(statement(text, schema))
        conn.execute(
            statement(
                "INSERT INTO {s}.meta (key, value) VALUES ('version', %s)"
                " ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                schema,
            ),
            [str(version + 1)],
        )
        return version + 1
