"""What a TAB lists of a PostgreSQL store, with psycopg and the standard library only.

Every TAB runs the CLI again; on a file store it reads directory listings, and here it
reads the same few things straight from the tables: session ids (and each one's title or
system prompt), a session's slots and the slots with a draft. No pydantic, no agctl.store,
no migration (a TAB only reads), one connection attempt (a TAB must not wait for a
server that is not there). The statements are the backend's own (`STATEMENTS`, which
agctl.storage.postgres.backend uses too), and so is the current-session pointer
(`pointer_path`), so a TAB offers what a command would find.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import psycopg

from agctl.storage.postgres.schema import statement
from agctl.storage.urls import redact

STATEMENTS = {
    "session_ids": 'SELECT id FROM {s}.sessions ORDER BY id COLLATE "C"',
    "session_docs": 'SELECT id, doc FROM {s}.sessions ORDER BY id COLLATE "C"',
    "slot_ids": 'SELECT id FROM {s}.slots WHERE session_id = %s ORDER BY id COLLATE "C"',
    "drafts": 'SELECT slot_id FROM {s}.drafts WHERE session_id = %s ORDER BY slot_id COLLATE "C"',
}


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
        self._conn: psycopg.Connection[tuple[Any, ...]] = psycopg.connect(dsn, autocommit=True)

    def current_session_id(self) -> str | None:
        """The session `agctl session use` chose on this machine for this store."""
        from agctl.fsio import read_pointer

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
