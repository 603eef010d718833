"""Document versions: an ordered chain of upgrades per document kind.

A document records `schema_version` as "MAJOR.MINOR". Older documents are upgraded step
by step before validation; a newer minor version is read as is (its unknown fields are
kept and the version is preserved on rewrite); a newer major version is refused.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agctl.base.errors import SchemaTooNew

Version = tuple[int, int]
Upgrade = Callable[[dict[str, Any]], dict[str, Any]]

CURRENT: dict[str, Version] = {"session": (1, 0), "slot": (1, 0), "draft": (1, 0)}

# kind -> [(version the step produces, step)], in ascending order of version.
MIGRATIONS: dict[str, list[tuple[Version, Upgrade]]] = {"session": [], "slot": [], "draft": []}


def parse_version(value: Any) -> Version:
    if isinstance(value, int):
        return (value, 0)
    if isinstance(value, str):
        major, _, minor = value.partition(".")
        if major.isdigit() and (minor.isdigit() or not minor):
            return (int(major), int(minor or 0))
    raise ValueError(f"schema_version must look like '1.0', not {value!r}")


def format_version(version: Version) -> str:
    return f"{version[0]}.{version[1]}"


def upgrade(kind: str, data: Any) -> Any:
    """Bring `data` up to the current version of `kind`, or refuse a newer major version."""
    if not isinstance(data, dict):
        return data
    current = CURRENT[kind]
    found = parse_version(data.get("schema_version", format_version(current)))
    if found[0] > current[0]:
        raise SchemaTooNew(kind, format_version(found), format_version(current))
    if found >= current:
        return data
    data = dict(data)
    for target, step in MIGRATIONS[kind]:
        if found < target:
            data = step(data)
            found = target
    data["schema_version"] = format_version(max(found, current))
    return data
