"""The statements of the PostgreSQL backend, by name: written out whole, the schema (`{s}`)
and its sequence (`{revs}`) their only fields, filled in as identifiers once a backend
(agctl.storage.postgres.schema.statement), never a value formatted into one."""

from __future__ import annotations

from agctl.storage.postgres import listing
from agctl.storage.postgres import schema as pg_schema

STAMP = """ARRAY[(SELECT coalesce(max(t.rev), 0) FROM {s}.slots AS t WHERE t.session_id = r.id),
                  (SELECT count(*) FROM {s}.slots AS t WHERE t.session_id = r.id),
                  (SELECT count(*) FROM {s}.drafts AS d WHERE d.session_id = r.id),
                  (SELECT coalesce(max(d.xmin::text::bigint), 0) FROM {s}.drafts AS d
                   WHERE d.session_id = r.id)]"""


SQL = {
    **listing.STATEMENTS,  # the lists a TAB reads too
    "session": "SELECT doc, rev FROM {s}.sessions WHERE id = %s",
    "has_session": "SELECT 1 FROM {s}.sessions WHERE id = %s",
    "lock_timeout": "SELECT set_config('lock_timeout', %s, true)",
    # The session's row locked, with what a transaction starts from: the log's size, the
    # session document, the generation, LOCK_REVS revisions of its own, its id (asked
    # after if the connection is lost while it commits) and the stamp of its slots and
    # drafts ("stamp").
    "lock": """SELECT log_size, doc, rev, gen, ARRAY(SELECT nextval({revs})
                   FROM generate_series(1, %s)), txid_current(), {stamp}
               FROM {s}.sessions AS r WHERE id = %s FOR UPDATE""",
    "lock_or_skip": """SELECT log_size, doc, rev, gen, ARRAY(SELECT nextval({revs})
                           FROM generate_series(1, %s)), txid_current(), {stamp}
                       FROM {s}.sessions AS r WHERE id = %s FOR UPDATE SKIP LOCKED""",
    # What any write to a session's slots or drafts moves, whoever makes it (an agctl
    # from before the generation too): the slots' highest revision (every write takes a
    # new one, in lock order) and count, the drafts' count and newest row version.
    "stamp": "SELECT {stamp} FROM {s}.sessions AS r WHERE id = %s",
    "xact_status": "SELECT txid_status(%s)",
    # What a commit writes last: the log's size and the generation.
    "put_end": "UPDATE {s}.sessions SET log_size = %s, gen = %s WHERE id = %s",
    "put_end_new": "UPDATE {s}.sessions SET log_size = %s, gen = nextval({revs}) WHERE id = %s",
    "slot": """SELECT header, rev, count, CASE WHEN rev = %s THEN NULL ELSE ARRAY(
                   SELECT m.data FROM {s}.slot_messages AS m
                   WHERE m.session_id = t.session_id AND m.slot_id = t.id ORDER BY m.seq)
               END FROM {s}.slots AS t WHERE session_id = %s AND id = %s""",
    "slot_rev": "SELECT rev, count FROM {s}.slots WHERE session_id = %s AND id = %s",
    "draft": "SELECT doc FROM {s}.drafts WHERE session_id = %s AND slot_id = %s",
    "removed": "SELECT removed FROM {s}.sessions WHERE id = %s",
    "cache": """SELECT string_agg(data, ''::bytea ORDER BY seq) FROM {s}.caches
                WHERE session_id = %s AND name = %s""",
    "log_size": "SELECT log_size FROM {s}.sessions WHERE id = %s",
    "log_rows": """(SELECT off, data FROM {s}.checkpoint_log
                    WHERE session_id = %s AND off <= %s ORDER BY off DESC LIMIT %s)
                   UNION ALL
                   (SELECT off, data FROM {s}.checkpoint_log
                    WHERE session_id = %s AND off > %s AND off < %s ORDER BY off LIMIT %s)""",
    "log_last_byte": """SELECT get_byte(data, length(data) - 1) FROM {s}.checkpoint_log
                        WHERE session_id = %s ORDER BY off DESC LIMIT 1""",
    "log_insert": "INSERT INTO {s}.checkpoint_log (session_id, off, data) VALUES (%s, %s, %s)",
    "log_cut": "DELETE FROM {s}.checkpoint_log WHERE session_id = %s AND off >= %s",
    "log_trim": """UPDATE {s}.checkpoint_log
                   SET data = substring(data FROM 1 FOR (%s - off)::integer)
                   WHERE session_id = %s AND off < %s AND off + length(data) > %s""",
    "log_chunks": """INSERT INTO {s}.checkpoint_log (session_id, off, data)
                     SELECT %s, o, d FROM unnest(%s::bigint[], %s::bytea[]) AS t(o, d)""",
    "insert_session": """INSERT INTO {s}.sessions (id, doc, rev, removed, log_size)
                         VALUES (%s, %s, nextval({revs}), %s, %s)
                         ON CONFLICT (id) DO NOTHING RETURNING rev, txid_current()""",
    "put_session": """UPDATE {s}.sessions SET doc = %s, rev = nextval({revs})
                      WHERE id = %s RETURNING rev""",
    "put_session_at": "UPDATE {s}.sessions SET doc = %s, rev = %s WHERE id = %s",
    "put_removed": "UPDATE {s}.sessions SET removed = %s WHERE id = %s",
    "clear_slots": "DELETE FROM {s}.slots WHERE session_id = %s",
    "clear_drafts": "DELETE FROM {s}.drafts WHERE session_id = %s",
    "clear_log": "DELETE FROM {s}.checkpoint_log WHERE session_id = %s",
    "clear_caches": "DELETE FROM {s}.caches WHERE session_id = %s",
    "destroy": "DELETE FROM {s}.sessions WHERE id = %s RETURNING 1",
    "put_slot": """INSERT INTO {s}.slots (session_id, id, header, rev, count)
                   VALUES (%s, %s, %s, nextval({revs}), %s)
                   ON CONFLICT (session_id, id) DO UPDATE
                   SET header = excluded.header, rev = excluded.rev, count = excluded.count
                   RETURNING rev""",
    "put_slot_at": """INSERT INTO {s}.slots (session_id, id, header, rev, count)
                      VALUES (%s, %s, %s, %s, %s)
                      ON CONFLICT (session_id, id) DO UPDATE
                      SET header = excluded.header, rev = excluded.rev, count = excluded.count""",
    "clear_messages": "DELETE FROM {s}.slot_messages WHERE session_id = %s AND slot_id = %s",
    "insert_messages": """INSERT INTO {s}.slot_messages (session_id, slot_id, seq, data)
                          SELECT %s, %s, q, d FROM unnest(%s::integer[], %s::bytea[])
                          AS t(q, d)""",
    "append_slot": """UPDATE {s}.slots SET header = %s, rev = nextval({revs}),
                      count = count + %s WHERE session_id = %s AND id = %s RETURNING rev""",
    "append_slot_at": """UPDATE {s}.slots SET header = %s, rev = %s, count = count + %s
                         WHERE session_id = %s AND id = %s""",
    "delete_slot": "DELETE FROM {s}.slots WHERE session_id = %s AND id = %s RETURNING 1",
    "put_draft": """INSERT INTO {s}.drafts (session_id, slot_id, doc) VALUES (%s, %s, %s)
                    ON CONFLICT (session_id, slot_id) DO UPDATE SET doc = excluded.doc""",
    "delete_draft": "DELETE FROM {s}.drafts WHERE session_id = %s AND slot_id = %s RETURNING 1",
    "drop_cache": "DELETE FROM {s}.caches WHERE session_id = %s AND name = %s",
    "append_cache": "INSERT INTO {s}.caches (session_id, name, data) VALUES (%s, %s, %s)",
    "replace_cache": """WITH gone AS (DELETE FROM {s}.caches WHERE session_id = %s AND name = %s)
                        INSERT INTO {s}.caches (session_id, name, data) VALUES (%s, %s, %s)""",
    # One name for every savepoint: a nested one shadows the one around it, and RELEASE
    # or ROLLBACK TO names the newest.
    "savepoint": "SAVEPOINT agctl",
    "release": "RELEASE SAVEPOINT agctl",
    "rollback_to": "ROLLBACK TO SAVEPOINT agctl",
    "commit": "COMMIT",
}
SQL = {name: text.replace("{stamp}", STAMP) for name, text in SQL.items()}


def statements(schema: str) -> dict[str, bytes]:
    """The statements with the schema in them, rendered once: psycopg caches the parsing
    of a bytes query, but renders a Composed one again at every execute."""
    return {name: pg_schema.statement(text, schema).as_bytes(None) for name, text in SQL.items()}
