"""`agctl store`: the store itself — its status and migrations, copying sessions
between stores, and reclaiming what removed checkpoints held."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import click

from agctl.cli.app import App, pass_app
from agctl.cli.options import json_option, sessions_option

if TYPE_CHECKING:
    from agctl.interchange.transfer import Transfer
    from agctl.storage.base import Backend


@contextlib.contextmanager
def _opened(app: App) -> Iterator[Backend]:
    """The chosen store's backend as it is: a PostgreSQL schema is not migrated by
    opening it (these commands look at it, or migrate it, themselves)."""
    from agctl.cli.app import warnings_to_stderr
    from agctl.storage.factory import open_backend

    warnings_to_stderr(json=app.json)  # a wait for a server that does not answer is said
    backend = open_backend(app.store_choice(), migrate=False)
    try:
        yield backend
    finally:
        close = getattr(backend, "close", None)
        if close is not None:
            close()


@click.group("store")
def command() -> None:
    """The store itself: its status and schema, and copying sessions between stores.

    The store is the file store in the data dir unless --store, AGCTL_STORE or the
    config's store.url names another (a directory, or a postgresql:// URL).

    \b
    Examples:
      agctl store status
      AGCTL_STORE=postgresql:///agctl?service=team agctl store migrate
      agctl store copy ~/.local/share/agctl postgresql:///agctl?service=team
      agctl store gc --dry-run
    """


@command.command("status")
@json_option
@pass_app
def status(app: App) -> None:
    """Show which store is used, its sessions and its schema version, changing nothing.

    A PostgreSQL store's schema is made and brought up to date by migrations, run by the
    first command that uses it (or by 'agctl store migrate'); status shows it as it is,
    with its owner and the other roles that may read it (members of the owner, and
    grants of USAGE on the schema or SELECT on its tables, PUBLIC meaning everyone).
    Exits 5 when the store's schema is from a newer agctl, or owned by another role
    than yours and not accepted (?shared_schema_owner=ROLE, store.shared_schema_owner).

    \b
    Examples:
      agctl store status
      agctl --store postgresql:///agctl?service=team store status --json
    """
    from agctl.base.errors import DataError
    from agctl.storage import admin

    with _opened(app) as backend:
        found = admin.status(backend)
    payload = {**found.to_dict(), "origin": app.store_choice().origin}
    lines = [f"{found.kind} store: {found.where}", f"chosen by: {payload['origin']}"]
    if found.sessions is not None:
        lines.append(f"sessions: {found.sessions}")
    if found.version is not None:
        notes = {
            "ok": "up to date",
            "behind": "behind: the next command, or 'agctl store migrate', brings it up",
            "newer": "from a newer agctl: upgrade agctl to use it",
        }
        lines.append(f"schema: version {found.version} of {found.latest} ({notes[found.state]})")
    if found.access is not None:
        lines += _access_lines(found.access)
    app.emit(payload, text="\n".join(lines))
    if found.access is not None and found.access["refusal"]:
        raise DataError(found.access["refusal"])
    if found.state == "newer":
        raise DataError(
            f"the store {found.where} has schema version {found.version}; this agctl knows "
            f"versions up to {found.latest}: upgrade agctl"
        )


def _access_lines(access: dict[str, Any]) -> list[str]:
    """`store status`'s lines on whose the schema is and who else may read it."""
    if access["owner"] is None:
        return [f"owner: none yet (the first command makes the schema, owned by {access['user']})"]
    notes = {
        "own": "you",
        "member": f"a role {access['user']} is a member of",
        "shared": "another role, accepted as the shared schema's owner",
        "refused": f"not {access['user']} or a role of it: refused",
    }
    lines = [f"owner: {access['owner']} ({notes[access['access']]})"]
    for table in access["foreign_tables"]:
        lines.append(f"  table {table['table']} is owned by {table['owner']}")
    if access["owner_members"]:
        lines.append(f"members of {access['owner']}: {', '.join(access['owner_members'])}")
    readers = []
    for reader in access["readers"]:
        can = ["USAGE on the schema"] if reader["schema_usage"] else []
        if reader["tables"]:
            can.append(f"SELECT on {len(reader['tables'])} table(s)")
        readers.append(f"{reader['role']} ({', '.join(can)})")
    lines.append(f"others who may read: {'; '.join(readers) or 'none'}")
    return lines


@command.command("migrate")
@json_option
@pass_app
def migrate(app: App) -> None:
    """Bring the store's schema up to date (a PostgreSQL store; a file store has none).

    Each migration runs in its own transaction under a lock, so several machines may run
    this at once: one migrates, the others find it done. A schema from a newer agctl is
    refused (exit 5).

    \b
    Examples:
      agctl --store postgresql:///agctl?service=team store migrate
      agctl store migrate --json | jq .version
    """
    from agctl.storage import admin

    with _opened(app) as backend:
        reached = admin.migrate(backend)
        found = admin.status(backend)
    payload = {"kind": found.kind, "where": found.where, "migrated": reached,
               "version": found.version}  # fmt: skip
    if found.version is None:
        text = f"{found.where}: a file store has no schema to migrate"
    elif reached:
        text = f"{found.where}: migrated to version {found.version} ({len(reached)} step(s))"
    else:
        text = f"{found.where}: up to date (version {found.version})"
    app.done(payload, text)


@command.command("copy")
@click.argument("source", metavar="SRC")
@click.argument("target", metavar="DST")
@sessions_option("Copy")
@click.option("--source-schema", metavar="NAME", help="The schema of SRC, a PostgreSQL store.")
@click.option("--target-schema", metavar="NAME", help="The schema of DST, a PostgreSQL store.")
@json_option
@pass_app
def copy(
    app: App,
    source: str,
    target: str,
    session_ids: list[str],
    source_schema: str | None,
    target_schema: str | None,
) -> None:
    """Copy sessions from store SRC to store DST, each with its whole checkpoint history.

    SRC and DST are stores as --store takes them: a directory (a file store) or a
    postgresql:// URL. Each session is copied whole or not at all, and verified on the
    way in; its checkpoints keep their ids (--json prints the old -> new map). A session
    DST already holds identically is skipped, so a copy can be run again; one DST holds
    differently stops the copy (exit 4), the sessions before it copied. A damaged session
    (a document that does not parse, a log failing its checksums) is not copied, and
    nothing of it is left in DST: the others are, and the copy exits 5 at the end, naming
    each failed one and why (--json: its "error"). Drafts stay in SRC. Afterwards
    'session export --checkpoints' of SRC and DST print the same.

    \b
    Examples:
      agctl store copy ~/.local/share/agctl postgresql:///agctl?service=team
      agctl store copy postgresql:///agctl?service=team ./backup --session review-42
      agctl store copy ./a ./b --json | jq '.sessions[] | {id, outcome}'
    """
    from agctl.interchange.transfer import copy_between
    from agctl.storage.factory import choose_store

    source_store, target_store = (
        choose_store(given, origin=origin, data_dir=app.data_dir, schema=schema)
        for given, origin, schema in (
            (source, "SRC", source_schema),
            (target, "DST", target_schema),
        )
    )
    transfer = copy_between(source_store, target_store, list(session_ids) or None)
    app.done(_copy_document(transfer), _copy_text(transfer))
    failure = transfer.failure()
    if failure is not None:
        raise failure


def _copy_document(transfer: Transfer) -> dict[str, Any]:
    """`store copy --json`: the stores, and each session's outcome, checkpoint map and
    error (as the CLI describes errors)."""
    from agctl.cli import describe_error

    return {
        "source": transfer.source,
        "target": transfer.target,
        "sessions": [
            {
                "id": c.session_id,
                "outcome": c.outcome,
                "checkpoints": c.checkpoints,
                "error": None if c.error is None else describe_error(c.error),
            }
            for c in transfer.sessions
        ],
    }


def _copy_text(transfer: Transfer) -> str:
    """`store copy` for people: a line a session, its outcome and how many checkpoints."""
    lines = [
        f"{c.outcome:7}  {c.session_id}  "
        + ("(not copied)" if c.error else f"({len(c.checkpoints)} checkpoint(s))")
        for c in transfer.sessions
    ]
    if not transfer.sessions:
        lines.append(f"{transfer.source} holds no session")
    return "\n".join(lines)


@command.command("gc")
@sessions_option("Reclaim in")
@click.option("--dry-run", is_flag=True, help="Say what would be reclaimed, changing nothing.")
@json_option
@pass_app
def gc(app: App, session_ids: list[str], dry_run: bool) -> None:
    """Reclaim the space only removed checkpoints used ('ckpt prune', 'ckpt rm').

    Each session's checkpoint log is written again, in one transaction, with only what
    its live checkpoints reach; each is verified first, and every live checkpoint still
    restores the same state. Checkpoint ids are offsets in the log, so the kept ones get
    new ids (--json prints the old -> new map). A session with nothing to reclaim is left
    as it is. A fork keeps no checkpoint id of its origin, so nothing elsewhere changes.

    \b
    Examples:
      agctl ckpt prune --keep 5 && agctl store gc
      agctl store gc --session review-42 --dry-run
      agctl store gc --json | jq '.sessions[] | {session, bytes_before, bytes_after}'
    """
    from agctl.store.checkpointer import Checkpointer

    store = app.store
    keeper = Checkpointer(store)
    wanted = list(session_ids) or store.session_ids()
    reports = [keeper.gc(session_id, dry_run=dry_run) for session_id in wanted]
    payload = {"dry_run": dry_run, "sessions": [r.to_dict() for r in reports]}
    lines = []
    for r in reports:
        if r.bytes_after == r.bytes_before:
            outcome = "nothing to reclaim"
        else:
            verb = "would reclaim" if dry_run else "reclaimed"
            renamed = sum(old != new for old, new in r.ids.items())
            outcome = (
                f"{verb} {r.reclaimed} bytes ({r.bytes_before} -> {r.bytes_after}; "
                f"{r.checkpoints_dropped} removed checkpoint(s), {r.nodes_dropped} message "
                f"node(s), {r.blobs_dropped} blob(s)); {renamed} checkpoint(s) renamed"
            )
        lines.append(f"{r.session}  {outcome}")
    if not reports:
        lines.append("the store holds no session")
    app.done(payload, "\n".join(lines))
