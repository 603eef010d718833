"""What a TAB lists of a PostgreSQL store, with psycopg and the standard library only.

Every TAB runs the CLI again; on a file store it reads directory listings, and here it
reads the same few things straight from the tables: session ids (and each one's title or
system prompt), a session's slots and the slots with a draft. No pydantic, no agctl.store,
no migration (a TAB only reads), one connection attempt, bounded (a TAB must not wait
for a server that is not there). The statements are the backend's own (`STATEMENTS`, which
agctl.storage.postgres.backend uses too), and so is the current-session pointer
(`pointer_path`), so a TAB offers what a command would find.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from pathlib import Path
from typing import Any

import psycopg

from agctl.storage.postgres.schema import statement
from agctl.storage.urls import redact

# Seconds libpq waits for one connection attempt (a host that drops packets; psycopg's
# default is 130), unless the URL or PGCONNECT_TIMEOUT says; and the TCP keepalives that
# find a server gone silent under a transaction (else the kernel's: two hours), unless
# the URL says. Every connection agctl opens has them: a command's, and a TAB's.
CONNECT_TIMEOUT = 5
KEEPALIVES = {"keepalives_idle": 10, "keepalives_interval": 2, "keepalives_count": 3}

STATEMENTS = {
    "session_ids": 'SELECT id FROM {s}.sessions ORDER BY id COLLATE "C"',
    "session_docs": 'SELECT id, doc FROM {s}.sessions ORDER BY id COLLATE "C"',
    "slot_ids": 'SELECT id FROM {s}.slots WHERE session_id = %s ORDER BY id COLLATE "C"',
    "drafts": 'SELECT slot_id FROM {s}.drafts WHERE session_id = %s ORDER BY slot_id COLLATE "C"',
}


def connect_bounds(dsn: str) -> dict[str, Any]:
    """The connection parameters that bound a wait (CONNECT_TIMEOUT, KEEPALIVES), for
    those the URL (or PGCONNECT_TIMEOUT) leaves unset."""
    given = _given_parameters(dsn)
    bounds: dict[str, Any] = {k: v for k, v in KEEPALIVES.items() if k not in given}
    if "connect_timeout" not in given and not os.environ.get("PGCONNECT_TIMEOUT"):
        bounds["connect_timeout"] = CONNECT_TIMEOUT
    return bounds


@functools.lru_cache(maxsize=8)
def _given_parameters(dsn: str) -> frozenset[str]:
    try:
        return frozenset(psycopg.conninfo.conninfo_to_dict(dsn))
    except psycopg.ProgrammingError:
        return frozenset()  # malformed: psycopg.connect says why


def store_key(dsn: str, schema: str) -> str:
    """The name of this store's folder in a data dir (its pointer, its local drafts)."""
    return hashlib.sha256(f"{redact(dsn)}\0{schema}".encode()).hexdigest()[:16]


def pointer_path(local_dir: Path, dsn: str, schema: str) -> Path:
    """Where this machine's data dir keeps this store's current-session pointer."""
    from agctl.storage.file import layout

    return layout.store_pointer(local_dir, store_key(dsn, schema))


class Listing:
    """One connection to the store's schema, for the lists a TAB offers; close it after.
    `local_dir`: this machine's data dir, where the current-session pointer is. Errors are
    psycopg's own (a TAB offers nothing on any of them)."""

    def __init__(self, dsn: str, schema: str, local_dir: Path) -> None:
        self.dsn, self.schema, self.local_dir = dsn, schema, local_dir
        self._conn: psycopg.Connection[tuple[Any, ...]] = psycopg.connect(
            dsn, autocommit=True, **connect_bounds(dsn)
        )

    def current_session_id(self) -> str | None:
        """The session `agctl session use` chose on this machine for this store."""
        from agctl.base.fsio import read_pointer

        return read_pointer(pointer_path(self.local_dir, self.dsn, self.schema))

    def close(self) -> None:
        self._conn.close()

    def _column(self, name: str, *values: str) -> list[str]:
        rows = self._conn.execute(statement(STATEMENTS[name], self.schema), values).fetchall()
        return [str(row[0]) for row in rows]

    def session_ids(self) -> list[str]:
        return self._column("session_ids")

    def sessions(self) -> list[tuple[str, dict[str, Any]]]:
        """Each session's id and document (an empty one where it does not parse)."""
        found = []
        rows = self._conn.execute(statement(STATEMENTS["session_docs"], self.schema)).fetchall()
        for sid, doc in rows:
            try:
                document = json.loads(bytes(doc))
            except ValueError:
                document = {}
            found.append((str(sid), document if isinstance(document, dict) else {}))
        return found

    def slot_ids(self, session_id: str) -> list[str]:
        return self._column("slot_ids", session_id)

    def draft_slots(self, session_id: str) -> list[str]:
        return self._column("drafts", session_id)
