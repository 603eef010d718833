"""The PostgreSQL backend's schema, as a connection finds it: brought up to date on the
first connection (agctl.storage.postgres.schema's migrations), refused when another role
owns it or a newer agctl made it, and described for `store status`."""

from __future__ import annotations

from typing import Any

import psycopg

from agctl.base.errors import DataError, StoreError
from agctl.storage.postgres import schema as pg_schema
from agctl.storage.postgres.connection import Conn, Connections, first_line


class Migrations(Connections):
    """Connections whose first one brings the schema up to date (`auto_migrate`, which
    every command but `store status` asks for); `shared_owner`: the role other than the
    connecting one whose schema is accepted (agctl.storage.postgres.schema.check_owner)."""

    latest_version = pg_schema.VERSION

    def __init__(
        self,
        dsn: str,
        *,
        schema: str,
        connect_patience: float | None,
        auto_migrate: bool,
        shared_owner: str | None,
    ) -> None:
        super().__init__(dsn, schema=schema, connect_patience=connect_patience)
        self.shared_owner = shared_owner
        # Whether the first connection brings the schema up to date (`store status` looks
        # at it as it is).
        self._migrated = not auto_migrate

    def _ready(self, conn: Conn) -> None:
        if not self._migrated:
            self._migrated = True
            try:
                self.migrate(conn)
            except BaseException:
                self._migrated = False
                raise

    def migrate(self, conn: Conn | None = None) -> list[int]:
        """Run the migrations the schema is behind on, each in its own transaction;
        the versions reached. A schema another role owns, unless it is `shared_owner`,
        and one from a newer agctl are refused (exit 5)."""
        if conn is None:
            with self._connection() as fresh:
                return self.migrate(fresh)
        try:
            state = pg_schema.schema_state(conn, self.schema)
            pg_schema.check_owner(state, self.where, self.shared_owner)
            found = state.version
            self.check_version(found)
            reached = []
            while found < pg_schema.VERSION:
                step = pg_schema.migrate_step(
                    conn, self.schema, pg_schema.VERSION, self.where, self.shared_owner
                )
                if step is None:
                    break
                reached.append(step)
                found = step
        except psycopg.Error as exc:  # no right to make the schema or its tables, say
            raise StoreError(
                f"the store {self.where} could not be brought up to date: {first_line(exc)}"
            ) from None
        return reached

    def check_version(self, found: int) -> None:
        if found > pg_schema.VERSION:
            raise DataError(
                f"the store {self.where} has schema version {found}, from a newer agctl; "
                f"this agctl knows versions up to {pg_schema.VERSION}: upgrade agctl"
            )

    def version(self) -> int:
        with self._connection() as conn:
            return pg_schema.stored_version(conn, self.schema)

    def access(self) -> dict[str, Any]:
        """Whose the schema is and who else may read it (`store status`), and whether
        this backend uses it ("own", "member", "shared": the accepted `shared_owner`'s,
        "refused", or "none": no schema yet)."""
        with self._connection() as conn:
            state = pg_schema.schema_state(conn, self.schema)
            found = pg_schema.readers(conn, self.schema) if state.owner is not None else None
        try:
            pg_schema.check_owner(state, self.where, self.shared_owner)
            refusal = None
        except DataError as exc:
            refusal = str(exc)
        if state.owner is None:
            verdict = "none"
        elif refusal is not None:
            verdict = "refused"
        elif state.owner == state.user:
            verdict = "own"
        else:
            verdict = "member" if state.owner_is_ours else "shared"
        members, grants = found if found is not None else ([], [])
        return {
            "user": state.user,
            "owner": state.owner,
            "access": verdict,
            "refusal": refusal,
            "owner_members": members,
            "foreign_tables": [{"table": t, "owner": o} for t, o in state.foreign],
            "readers": grants,
        }
