"""Choosing the store and opening its backend.

The choice, first found wins: the `--store` option, AGCTL_STORE, the config's `store.url`,
else the file store in the data dir (--data-dir, AGCTL_DATA_DIR, the platform's). The data
dir is the machine-local one whatever the store: a PostgreSQL store keeps the "current
session" pointer there (the rest is shared in the database), and tools never run in it.
The schema of a PostgreSQL store: AGCTL_STORE_SCHEMA, else the config's `store.schema`,
else "agctl". A schema another role owns is refused unless that role is named by the
URL's `shared_schema_owner` parameter, else the config's `store.shared_schema_owner`.
How long a command waits out a PostgreSQL server that does not answer: the config's
`store.connect_patience`, else the backend's default.

Standard library only at import (TAB completion chooses the store too); the backends, and
psycopg, are imported when one is opened.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from agctl.base.errors import StoreError, UsageError
from agctl.base.paths import default_config_path, default_data_dir
from agctl.storage.urls import (
    DEFAULT_SCHEMA,
    StoreSpec,
    check_role,
    check_schema,
    file_store,
    parse_store,
    refuse_stored_password,
)

if TYPE_CHECKING:
    from agctl.storage.base import Backend

INSTALL_POSTGRES = "pip install 'agctl[postgres]'"
# The longest store.connect_patience (agctl.config.file's bound too).
MAX_CONNECT_PATIENCE = 3600


class StoreChoice(NamedTuple):
    """The store to open: what it is, its schema (PostgreSQL), the machine-local data
    dir, where the choice came from (--store, AGCTL_STORE, config store.url, data dir),
    the role other than the user's whose schema is accepted and the seconds a connect
    waits out a server that does not answer (PostgreSQL; None: the backend's default)."""

    spec: StoreSpec
    schema: str
    local_dir: Path
    origin: str
    shared_owner: str | None = None
    connect_patience: float | None = None


def file_choice(root: Path) -> StoreChoice:
    """The file store in `root` (`Store(root)`)."""
    return StoreChoice(file_store(root), DEFAULT_SCHEMA, root, "data dir")


def choose_store(
    given: str | None = None,
    *,
    origin: str = "--store",
    data_dir: Path | None = None,
    schema: str | None = None,
    config: Mapping[str, Any] | None = None,
) -> StoreChoice:
    """The store chosen (see the module docstring): `given` names it if not None (from
    `origin`); `config` is the parsed config file, read here when not given and needed."""
    settings: StoreTable | None = None

    def configured() -> StoreTable:
        nonlocal settings
        if settings is None:
            settings = store_settings(read_config() if config is None else config)
        return settings

    text: str | None
    if given:
        text, where = given, origin
    elif os.environ.get("AGCTL_STORE"):
        text, where = os.environ["AGCTL_STORE"], "AGCTL_STORE"
    else:
        text, where = configured().url, "config store.url"
    local = Path(data_dir) if data_dir is not None else default_data_dir()
    if not text:
        return file_choice(local)
    spec = parse_store(text, origin=where)
    if spec.path is not None:  # a file store: its directory is the data dir too
        return StoreChoice(spec, DEFAULT_SCHEMA, spec.path, where)
    if schema is not None:
        named, schema_origin = schema, "store schema"
    elif os.environ.get("AGCTL_STORE_SCHEMA"):
        named, schema_origin = os.environ["AGCTL_STORE_SCHEMA"], "AGCTL_STORE_SCHEMA"
    else:
        named, schema_origin = configured().schema or DEFAULT_SCHEMA, "config store.schema"
    owner = spec.shared_owner
    if owner is None and configured().shared_schema_owner is not None:
        owner = check_role(
            str(configured().shared_schema_owner), "config store.shared_schema_owner"
        )
    schema_name = check_schema(named, schema_origin)
    return StoreChoice(spec, schema_name, local, where, owner, configured().connect_patience)


def read_config() -> Mapping[str, Any]:
    """The config file as JSON, without validating it (agctl.config.file does): {} when
    there is none."""
    import json

    from agctl.base.errors import CorruptDocument, NotFound
    from agctl.base.fsio import read_bytes

    path = default_config_path()
    try:
        data = json.loads(read_bytes(path, "config", follow=True))
    except NotFound:
        return {}
    except ValueError:
        raise CorruptDocument(path, "invalid config: not JSON") from None
    if not isinstance(data, dict):
        raise CorruptDocument(path, "invalid config: not a JSON object")
    return data


class StoreTable(NamedTuple):
    """The config's `store` table (None: not set)."""

    url: str | None
    schema: str | None
    shared_schema_owner: str | None
    connect_patience: float | None


def store_settings(config: Mapping[str, Any]) -> StoreTable:
    """The config's `store` table: its url (never one with a password), schema, shared
    schema's owner and connect patience (seconds, 0 to 3600, as agctl.config.file checks)."""
    table = config.get("store") or {}
    if not isinstance(table, dict):
        raise UsageError('config store must be a table: {"url": ..., "schema": ...}')
    texts: list[str | None] = []
    for key in ("url", "schema", "shared_schema_owner"):
        value = table.get(key)
        if value is not None and not isinstance(value, str):
            raise UsageError(f"config store.{key} must be text")
        texts.append(value)
    url, schema, owner = texts
    if url:
        refuse_stored_password(url)
    return StoreTable(url, schema, owner, _seconds(table.get("connect_patience")))


def _seconds(value: Any) -> float | None:
    """The config's store.connect_patience as seconds (None: not set)."""
    if value is None:
        return None
    try:
        seconds = float(value)  # as pydantic reads the config: "5" and 5 alike
    except (TypeError, ValueError):
        seconds = float("nan")
    if not 0 <= seconds <= MAX_CONNECT_PATIENCE:
        raise UsageError(
            f"config store.connect_patience must be seconds from 0 to "
            f"{MAX_CONNECT_PATIENCE}, not {value!r}"
        )
    return seconds


def open_backend(
    choice: StoreChoice, *, sync: str = "per-turn", migrate: bool = True, patient: bool = True
) -> Backend:
    """The backend of the chosen store. `sync="end"` is the file backend's (see Store);
    `migrate=False` opens a PostgreSQL store as it is (`store status`), else it is
    brought up to date when first used; `patient=False` tries a connection once (a TAB
    must not wait out a server that is down)."""
    if choice.spec.path is not None:
        from agctl.storage.file.backend import FileBackend

        return FileBackend(choice.spec.path, sync=sync)
    assert choice.spec.dsn is not None
    return _postgres(
        choice.spec,
        schema=choice.schema,
        local_dir=choice.local_dir,
        migrate=migrate,
        patience=choice.connect_patience if patient else 0.0,
        shared_owner=choice.shared_owner,
    )


def _postgres(
    spec: StoreSpec,
    *,
    schema: str,
    local_dir: Path,
    migrate: bool = True,
    patience: float | None = None,
    shared_owner: str | None = None,
) -> Backend:
    """The PostgreSQL backend, imported now: psycopg is an extra (agctl[postgres])."""
    try:
        import psycopg  # noqa: F401  - checked first, for the message that says what to install
    except ImportError as exc:
        why = "" if isinstance(exc, ModuleNotFoundError) else f" ({exc})"
        raise StoreError(
            f"the store {spec.shown} is PostgreSQL, which needs psycopg 3{why}: {INSTALL_POSTGRES}",
            hint=f"install the extra ({INSTALL_POSTGRES}), or choose a file store "
            "(--store DIR, or unset AGCTL_STORE and the config's store.url)",
        ) from None
    from agctl.storage.postgres.backend import PostgresBackend

    assert spec.dsn is not None
    backend: Backend = PostgresBackend(
        spec.dsn,
        schema=schema,
        local_dir=local_dir,
        auto_migrate=migrate,
        connect_patience=patience,
        shared_owner=shared_owner,
    )
    return backend
