"""`agctl draft`: the prompts of failed turns, one per slot, kept for `turn send --resume-draft`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from agctl.base.quoting import escaped
from agctl.cli.app import App, pass_app
from agctl.cli.complete import complete_draft_slots
from agctl.cli.options import command_options
from agctl.cli.output import echo

F = TypeVar("F", bound=Callable[..., Any])


def draft_slot_option(fn: F) -> F:
    """`--slot` for drafts: a removed slot's draft is still named by its slot."""
    return click.option(
        "--slot",
        metavar="NAME",
        shell_complete=complete_draft_slots,
        help="The slot whose draft (default: the current slot's, else the only one).",
    )(fn)


@click.group("draft")
def command() -> None:
    """The prompts of failed turns, one per slot, kept so that nothing typed is lost.

    A turn that fails or is interrupted keeps its prompt (and the reply, if one came but
    could not be written) as its slot's draft; 'turn send --resume-draft' sends it again,
    and a later successful turn on that slot drops it. Without --slot, a command means
    the current slot's draft, else the session's only one; with drafts on several other
    slots it names them and asks for --slot.

    \b
    Examples:
      agctl draft show
      agctl draft show --all
      agctl draft show --json | jq -r .prompt
      agctl draft rm --slot plan-b
    """


@command.command("show")
@draft_slot_option
@click.option("--all", "every", is_flag=True, help="List every draft of the session.")
@command_options
@pass_app
def show(app: App, slot: str | None, every: bool) -> None:
    """Print a draft's prompt; what it is about goes to stderr (all of it with --json).

    "stale" says why --resume-draft would refuse it (its slot changed since, or is
    gone), or is null. "waiting_calls" are the tool calls of its last step with no
    result yet, each with its id, tool, arguments and whether it awaits approval:
    'turn send --resume-draft' answers them first, --approve-call ID|all and
    --deny-call ID|all deciding those that await approval. --all lists every draft, one
    row per slot (a JSON array).

    \b
    Examples:
      agctl draft show
      agctl draft show --slot plan-b --json
      agctl draft show --all --json | jq -r '.[].slot'
      agctl draft show --json | jq -r '.waiting_calls[].id'
      agctl draft show | agctl turn send - --slot other
    """
    from agctl.store.drafts import draft_document, find_draft

    sid = app.session_id()
    if every:
        if slot is not None:
            raise click.UsageError("give either --slot or --all, not both")
        _show_all(app, sid)
        return
    row = draft_document(app.store.backend, sid, find_draft(app.store.backend, sid, slot))
    if app.json:
        app.emit(row)
        return
    echo(_about_text(row), err=True)
    echo(row["prompt"])


def _show_all(app: App, sid: str) -> None:
    """`draft show --all`: a row a draft, a damaged one said as such."""
    from agctl.base.errors import CorruptDocument
    from agctl.store.drafts import all_drafts, damaged_document, draft_document

    rows = [
        damaged_document(sid, d)
        if isinstance(d, CorruptDocument)
        else draft_document(app.store.backend, sid, d)
        for d in all_drafts(app.store.backend, sid)
    ]
    display = [
        {
            "slot": r["slot"],
            "created_at": r.get("created_at", ""),
            "state": "damaged" if "damaged" in r else ("stale" if r["stale"] else "fresh"),
            "prompt": (r.get("prompt") or r.get("damaged", "")).split("\n", 1)[0][:60],
        }
        for r in rows
    ]
    columns = [
        ("slot", "SLOT"),
        ("created_at", "KEPT"),
        ("state", "STATE"),
        ("prompt", "PROMPT"),
    ]
    app.emit_rows(rows, columns, empty=f"session {sid} has no draft", display=display)


def _about_text(row: dict[str, Any]) -> str:
    """What a draft is about, for stderr: its slot and when it was kept, after what, why it
    is stale, the reply that was not written and the tool calls waiting."""
    from agctl.store.drafts import GONE

    about = f"draft for slot {row['slot']}, kept {row['created_at']}"
    lines = [about + (f" after: {row['error']}" if row["error"] else "")]
    if row["stale"] and row["stale"].startswith(GONE):
        again = f"agctl draft show --slot {row['slot']} | agctl turn send - --slot NAME"
        lines.append(f"its slot {row['stale']}: to send it elsewhere, {again}")
    elif row["stale"]:
        lines.append(f"stale: its slot {row['stale']} (--resume-draft needs --force)")
    if row["reply"] is not None:
        lines.append(f"the model's reply, which was not written:\n{row['reply']}")
    if row["waiting_calls"]:
        lines.append(waiting_text(row["waiting_calls"]))
    return "\n".join(lines)


def waiting_text(calls: list[dict[str, Any]]) -> str:
    """The waiting tool calls for people: one line each, id, tool and arguments escaped
    (a model wrote them), and how to decide those awaiting approval."""
    lines = [f"tool calls waiting ({len(calls)}), run first by 'agctl turn send --resume-draft':"]
    for call in calls:
        awaits = "  awaits approval" if call["awaiting_approval"] else ""
        lines.append(
            f"  {escaped(call['id'])}  {escaped(call['tool'])}  "
            f"{escaped(call['arguments'])}{awaits}"
        )
    if any(call["awaiting_approval"] for call in calls):
        lines.append(
            "decide with --resume-draft --approve-call ID|all or --deny-call ID|all "
            "(repeatable), offering the same tools (-T)"
        )
    return "\n".join(lines)


@command.command("rm")
@draft_slot_option
@command_options
@pass_app
def rm(app: App, slot: str | None) -> None:
    """Drop a draft (the one 'draft show' prints with the same --slot); a damaged one too.

    \b
    Examples:
      agctl draft rm
      agctl draft rm --slot plan-b --json
    """
    from agctl.base.errors import CorruptDocument
    from agctl.store.drafts import damaged_document, draft_document, remove_draft

    sid = app.session_id()
    removed = remove_draft(app.store.backend, sid, slot)
    if isinstance(removed, CorruptDocument):
        app.done(damaged_document(sid, removed), text=f"removed a damaged draft: {removed}")
        return
    app.done(
        draft_document(app.store.backend, sid, removed),
        text=f"removed the draft for slot {removed.slot}",
    )
