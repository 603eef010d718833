"""A backend opened from a spec on a child's command line: the backends that several
processes can share (the file store in a data dir, a PostgreSQL schema)."""

from __future__ import annotations

import json
from pathlib import Path

from agctl.storage.base import Backend


def spec(kind: str, root: Path, dsn: str = "", schema: str = "") -> str:
    return json.dumps({"kind": kind, "root": str(root), "dsn": dsn, "schema": schema})


def open_backend(text: str) -> Backend:
    given = json.loads(text)
    root = Path(given["root"])
    if given["kind"] == "postgres":
        from agctl.storage.postgres.backend import PostgresBackend

        return PostgresBackend(given["dsn"], schema=given["schema"], local_dir=root)
    from agctl.storage.file.backend import FileBackend

    return FileBackend(root)
