"""`agctl draft`: the prompt of a failed turn, kept for `turn send --resume-draft`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from agctl.cli.app import App, command_options, echo, pass_app, slot_option

if TYPE_CHECKING:
    from agctl.models import Draft


def draft_row(app: App, session_id: str, draft: Draft) -> dict[str, Any]:
    from agctl.drafts import staleness
    from agctl.errors import NotFound
    from agctl.models import isoformat

    try:
        stale = staleness(app.store, session_id, draft)
    except NotFound as exc:  # its slot was deleted since
        stale = f"is gone ({exc})"
    return {
        "session": session_id,
        "slot": draft.slot,
        "created_at": isoformat(draft.created_at),
        "prompt": draft.prompt,
        "error": draft.error,
        "reply": draft.reply.text() if draft.reply is not None else None,
        "stale": stale,
    }


@click.group("draft")
def command() -> None:
    """The prompt of a failed turn, kept so that nothing typed is lost.

    A turn that fails or is interrupted keeps its prompt (and the reply, if one came but
    could not be written) as the session's draft; 'turn send --resume-draft' sends it
    again, and a later successful turn on its slot drops it.

    \b
    Examples:
      agctl draft show
      agctl draft show --json | jq -r .prompt
      agctl draft rm
    """


@command.command("show")
@slot_option
@command_options
@pass_app
def show(app: App, slot: str | None) -> None:
    """Print the draft's prompt; what it is about goes to stderr (all of it with --json).

    With --slot, only that slot's draft. "stale" says why --resume-draft would refuse
    it (its slot changed since), or is null.

    \b
    Examples:
      agctl draft show
      agctl draft show --slot plan-b --json
      agctl draft show | agctl turn send - --slot other
    """
    from agctl.drafts import find_draft

    sid = app.session_id()
    row = draft_row(app, sid, find_draft(app.store, sid, slot))
    if app.json:
        app.emit(row)
        return
    about = f"draft for slot {row['slot']}, kept {row['created_at']}"
    echo(about + (f" after: {row['error']}" if row["error"] else ""), err=True)
    if row["stale"]:
        echo(f"stale: its slot {row['stale']} (--resume-draft needs --force)", err=True)
    if row["reply"] is not None:
        echo(f"the model's reply, which was not written:\n{row['reply']}", err=True)
    echo(row["prompt"])


@command.command("rm")
@slot_option
@command_options
@pass_app
def rm(app: App, slot: str | None) -> None:
    """Drop the draft (with --slot, only if it is that slot's); a damaged one too.

    \b
    Examples:
      agctl draft rm
      agctl draft rm --slot plan-b --json
    """
    from agctl.drafts import find_draft
    from agctl.errors import CorruptDocument

    sid = app.session_id()
    try:
        draft = find_draft(app.store, sid, slot)
    except CorruptDocument as exc:
        if slot is not None:
            raise
        app.store.clear_draft(sid)
        app.done({"session": sid, "damaged": str(exc)}, text=f"removed a damaged draft: {exc}")
        return
    row = draft_row(app, sid, draft)
    app.store.clear_draft(sid)
    app.done(row, text=f"removed the draft for slot {draft.slot}")
