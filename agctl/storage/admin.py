"""What `agctl store status` and `agctl store migrate` ask of a backend.

A file store has no store-wide schema (each document carries its own version, and older
ones are read as they are); a PostgreSQL store has one, brought up to date by ordered
migrations (agctl.storage.postgres.schema).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from agctl.storage.base import Backend


@runtime_checkable
class Migrating(Protocol):
    """A backend whose store has a schema of its own, made by ordered migrations."""

    kind: str
    where: str
    latest_version: int

    def version(self) -> int: ...

    def migrate(self) -> list[int]: ...

    def access(self) -> dict[str, Any]: ...


@dataclass
class StoreStatus:
    kind: str  # "file", "postgresql" (or "memory")
    where: str  # the data dir, or the database (password redacted) and schema
    sessions: int | None  # None when the schema is not made yet, or too new to read
    version: int | None  # the schema's migrations (None: a file store has none)
    latest: int | None  # the migrations this agctl knows
    # Whose the schema is and who else may read it (None: a file store, whose files are
    # the user's, 0600): see PostgresBackend.access.
    access: dict[str, Any] | None = None

    @property
    def state(self) -> str:
        if self.version is None or self.latest is None:
            return "ok"
        if self.version > self.latest:
            return "newer"
        return "behind" if self.version < self.latest else "ok"

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "state": self.state}


def status(backend: Backend) -> StoreStatus:
    """The store as it is: nothing is migrated to find out."""
    if not isinstance(backend, Migrating):
        root = getattr(backend, "root", None)
        kind, where = ("file", str(root)) if root is not None else ("memory", "this process")
        return StoreStatus(kind, where, len(backend.session_ids()), None, None)
    version, latest = backend.version(), backend.latest_version
    access = backend.access()
    usable = 0 < version <= latest and access["access"] != "refused"
    sessions = len(backend.session_ids()) if usable else None
    return StoreStatus(backend.kind, backend.where, sessions, version, latest, access)


def migrate(backend: Backend) -> list[int]:
    """Run what the store is behind on; the versions reached (none: it was up to date)."""
    return backend.migrate() if isinstance(backend, Migrating) else []
