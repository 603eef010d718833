"""`agctl doctor`: check the data dir for loose modes, planted files and leftovers."""

from __future__ import annotations

import click

from agctl.cli.app import App, pass_app
from agctl.cli.options import json_option


@click.command("doctor")
@click.option("--fix", is_flag=True, help="Repair what can be repaired safely.")
@json_option
@pass_app
def command(app: App, fix: bool) -> None:
    """Check the data dir for loose modes, planted files and leftovers.

    Reports modes open to other users, links and FIFOs where agctl keeps its files, files
    owned by another user, temp files and directories left by killed writers, untrusted
    recovery journals, and checkpoint records that fail their checks or cannot be
    verified (written before checksums).

    With a PostgreSQL store (--store), checks this machine's data dir, where it keeps the
    current-session choice; the database's own health is the server's.

    Exits 0 when nothing is wrong (or everything found was fixed), 5 otherwise.

    \b
    Examples:
      agctl doctor
      agctl doctor --fix
      agctl doctor --json | jq '.findings[].kind'
    """
    from agctl.base.errors import DataError
    from agctl.reports.checkup import diagnose

    store = app.store
    findings = diagnose(store, fix=fix)
    unresolved = [f for f in findings if not f.fixed and not f.notice]
    checked = str(store.local_dir)
    payload = {
        "data_dir": checked,
        "store": store.shown,
        "ok": not unresolved,
        "findings": [f.to_dict() for f in findings],
    }
    lines = []
    if store.files is None:
        lines.append(f"the sessions are in {store.shown}: this checks this machine's data dir")
    for finding in findings:
        state = "fixed" if finding.fixed else ("note" if finding.notice else "found")
        lines.append(f"{state:5}  {finding.kind:12}  {finding.path}: {finding.detail}")
    if not findings:
        lines.append(f"{checked}: nothing to report")
    elif unresolved and not fix and any(f.fixable for f in unresolved):
        lines.append("run 'agctl doctor --fix' to repair what can be repaired")
    app.emit(payload, text="\n".join(lines))
    if unresolved:
        raise DataError(f"{len(unresolved)} problem(s) in {checked} not fixed")
