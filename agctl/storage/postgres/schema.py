"""The PostgreSQL store's tables, and the ordered migrations that make them.

Everything lives in one schema (the `schema` setting, "agctl" by default), so several
teams can share a database. The schema and its tables must belong to the connecting role
or a role it is a member of: a schema another role made first (any role with CREATE on
the database can) would let that role read and change every session written into it, so
it is refused (exit 5, naming its owner) unless the user names that owner as a shared
schema's (`shared_schema_owner`). The check rides on the first statement a process runs
anyway (which finds the schema's version), so it costs no round trip. `meta.version`
says how many migrations a database has had.
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
    checkpoint_log the session's checkpoint log (agctl.store.checkpoints.pack: message
                   nodes chained by offset, content-addressed blobs, checkpoint records),
                   a row an append; `off` is the record's offset, which checkpoint ids
                   are written from
    caches         the checkpoint code's caches, a row an append
    revs           the sequence every document revision is taken from (never reused)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

from agctl.base.errors import DataError
from agctl.storage.urls import SHARED_OWNER

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


# What a process asks first of its schema: whom it belongs to, whether the connecting
# role is that role or a member of it, whether it has a meta table it may read (one of a
# schema closed to it is not read: its owner is what is refused), and the relations in
# it (tables, sequences, views) that belong to a role the connecting one is not a member of.
_STATE = """SELECT current_user, pg_catalog.pg_get_userbyid(n.nspowner),
       pg_catalog.pg_has_role(current_user, n.nspowner, 'MEMBER'),
       EXISTS (SELECT 1 FROM pg_catalog.pg_class AS c WHERE c.relnamespace = n.oid
               AND c.relname = 'meta' AND c.relkind IN ('r', 'p')
               AND pg_catalog.has_schema_privilege(n.oid, 'USAGE')
               AND pg_catalog.has_table_privilege(c.oid, 'SELECT')),
       ARRAY(SELECT ARRAY[c.relname::text, pg_catalog.pg_get_userbyid(c.relowner)::text]
             FROM pg_catalog.pg_class AS c WHERE c.relnamespace = n.oid
             AND c.relkind IN ('r', 'p', 'S', 'v', 'm', 'f')
             AND NOT pg_catalog.pg_has_role(current_user, c.relowner, 'MEMBER')
             ORDER BY c.relname)
FROM (SELECT 1) AS one LEFT JOIN pg_catalog.pg_namespace AS n ON n.nspname = %s"""


class SchemaState(NamedTuple):
    """The schema as the connecting role finds it: its migrations (0: none, or no schema),
    its owner (None: no schema), whether that is the role or one it is a member of, the
    relations of other roles in it ((name, owner), sorted) and the connecting role."""

    version: int
    owner: str | None
    owner_is_ours: bool
    foreign: tuple[tuple[str, str], ...]
    user: str


def schema_state(conn: Connection[tuple[Any, ...]], schema: str) -> SchemaState:
    """What `schema` is and whose (one statement, and one more for its version)."""
    row = conn.execute(_STATE, [schema]).fetchone()
    assert row is not None  # one row, with NULLs when there is no such schema
    user, owner, ours, has_meta, foreign = row
    if owner is None:
        return SchemaState(0, None, True, (), str(user))
    pairs = tuple((str(name), str(role)) for name, role in foreign or ())
    version = 0
    if has_meta:
        found = conn.execute(statement("SELECT value FROM {s}.meta WHERE key = 'version'", schema))
        value = found.fetchone()
        version = int(str(value[0])) if value is not None else 0
    return SchemaState(version, str(owner), bool(ours), pairs, str(user))


# Who else may read the schema: the members of its owner (who act as it), and the roles
# (PUBLIC for everyone) granted USAGE on it or SELECT on a table of it, from the ACLs
# (a NULL ACL is the default: the owner's alone).
_READERS = """SELECT
    ARRAY(SELECT pg_catalog.pg_get_userbyid(m.member)::text FROM pg_catalog.pg_auth_members AS m
          WHERE m.roleid = n.nspowner ORDER BY 1),
    ARRAY(SELECT CASE WHEN a.grantee = 0 THEN 'PUBLIC'
                      ELSE pg_catalog.pg_get_userbyid(a.grantee)::text END
          FROM pg_catalog.aclexplode(coalesce(n.nspacl, pg_catalog.acldefault('n', n.nspowner)))
               AS a
          WHERE a.privilege_type = 'USAGE' AND a.grantee <> n.nspowner ORDER BY 1),
    ARRAY(SELECT ARRAY[g.role, c.relname::text]
          FROM pg_catalog.pg_class AS c,
               pg_catalog.aclexplode(coalesce(c.relacl, pg_catalog.acldefault('r', c.relowner)))
               AS a,
               LATERAL (SELECT CASE WHEN a.grantee = 0 THEN 'PUBLIC'
                                    ELSE pg_catalog.pg_get_userbyid(a.grantee)::text END
                        AS role) AS g
          WHERE c.relnamespace = n.oid AND c.relkind IN ('r', 'p', 'v', 'm', 'f')
          AND a.privilege_type = 'SELECT' AND a.grantee <> c.relowner
          ORDER BY g.role, c.relname)
FROM pg_catalog.pg_namespace AS n WHERE n.nspname = %s"""


def readers(
    conn: Connection[tuple[Any, ...]], schema: str
) -> tuple[list[str], list[dict[str, Any]]]:
    """The members of the schema's owner, and each other role that may read in it: USAGE
    on the schema, and the tables it may SELECT from (`store status`)."""
    row = conn.execute(_READERS, [schema]).fetchone()
    if row is None:
        return [], []
    members, usage, selects = row
    found: dict[str, dict[str, Any]] = {}

    def entry(role: object) -> dict[str, Any]:
        return found.setdefault(str(role), {"role": str(role), "schema_usage": False, "tables": []})

    for role in usage:
        entry(role)["schema_usage"] = True
    for role, table in selects:
        entry(role)["tables"].append(str(table))
    return [str(m) for m in members], [found[role] for role in sorted(found)]


def stored_version(conn: Connection[tuple[Any, ...]], schema: str) -> int:
    """The migrations the schema has had (0: none, or no schema at all)."""
    return schema_state(conn, schema).version


def check_owner(state: SchemaState, where: str, shared_owner: str | None) -> None:
    """Refuse (DataError, exit 5) a schema, or a relation in it, that belongs to a role
    other than the connecting one and those it is a member of, unless that role is
    `shared_owner`: its owner reads and changes everything written there."""
    opt_in = (
        f"if the schema is meant to be shared with that role, say so: ?{SHARED_OWNER}=ROLE "
        f"in the store URL, or 'agctl config set store.{SHARED_OWNER} ROLE'"
    )
    if state.owner is not None and not state.owner_is_ours and state.owner != shared_owner:
        raise DataError(
            f"the schema of the store {where} is owned by role {state.owner!r}, not by "
            f"{state.user!r} or a role it is a member of: that role could read and change "
            f"every session written there, so it is not used ({opt_in})"
        )
    strangers = [(name, owner) for name, owner in state.foreign if owner != shared_owner]
    if strangers:
        listed = ", ".join(f"{name} (owned by {owner!r})" for name, owner in strangers[:5])
        more = f" and {len(strangers) - 5} more" if len(strangers) > 5 else ""
        raise DataError(
            f"the store {where} has tables of another role than {state.user!r}: "
            f"{listed}{more}; that role could read and change the sessions in them, so "
            f"they are not used ({opt_in})"
        )


def migrate_step(
    conn: Connection[tuple[Any, ...]],
    schema: str,
    target: int,
    where: str,
    shared_owner: str | None = None,
) -> int | None:
    """Run the next migration if the schema is behind `target`, in one transaction under
    the schema's advisory lock; the version it is at afterwards, None if it was at or
    past `target` already. Its owner is checked again inside (another role may have made
    it since it was found missing)."""
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", [f"agctl schema {schema}"])
        state = schema_state(conn, schema)
        if state.owner is None:  # made here (a schema made for the role needs no CREATE)
            conn.execute(statement("CREATE SCHEMA IF NOT EXISTS {s}", schema))
            state = schema_state(conn, schema)
        check_owner(state, where, shared_owner)
        conn.execute(statement(META, schema))
        version = state.version
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
