"""`agctl ckpt`: checkpoints of a whole session — create, list, show, diff, rollback, fork."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from agctl.base.vocab import ZONES
from agctl.cli.app import App, Count, most_recent, pass_app
from agctl.cli.complete import complete_checkpoints
from agctl.cli.options import command_options, limit_option, select_option
from agctl.cli.output import plain

if TYPE_CHECKING:
    from agctl.context.models import Session, Slot
    from agctl.store.checkpointer import Checkpointer
    from agctl.store.checkpoints import Checkpoint, CheckpointSummary


def checkpointer(app: App) -> Checkpointer:
    from agctl.store.checkpointer import Checkpointer

    return Checkpointer(app.store)


def summary_row(summary: CheckpointSummary) -> dict[str, Any]:
    from agctl.context.models import isoformat

    return {
        "id": summary.id,
        "turn": summary.turn_index,
        "label": summary.label,
        "auto": summary.auto,
        "created_at": isoformat(summary.created_at),
        "current_slot": summary.current_slot,
        "slot": summary.slot,
        "slots": summary.slot_count,
        "messages": summary.message_count,
    }


def _resolve(app: App, session_id: str, prefix: str) -> Checkpoint:
    keeper = checkpointer(app)
    return keeper.load(session_id, keeper.resolve(session_id, prefix))


@click.group("ckpt")
def command() -> None:
    """Checkpoints: snapshots of a whole session.

    Roll back to them, diff them, fork new sessions from them.

    A checkpoint is written after every turn (config auto_checkpoint; turn send
    --no-checkpoint). Ids may be shortened to a unique prefix.

    \b
    Examples:
      agctl ckpt create --label "before the experiment"
      agctl ckpt list
      agctl ckpt diff k3x9
      agctl ckpt rollback k3x9
    """


@command.command("create")
@click.option("--label", metavar="TEXT", help="A note to recognise the checkpoint by.")
@command_options
@pass_app
def create(app: App, label: str | None) -> None:
    """Checkpoint the whole session as it is now.

    \b
    Examples:
      agctl ckpt create --label "good draft"
    """
    checkpoint = checkpointer(app).create(app.session_id(), label=label)
    app.emit(summary_row(checkpoint.summary()), text=checkpoint.id)


@command.command("list")
@limit_option
@command_options
@pass_app
def list_(app: App, limit: int | None) -> None:
    """List checkpoints, newest first; * marks those that hold the live state.

    A checkpoint holds the live state when rolling back to it would change nothing
    (JSON: "live": true); --limit N lists the N newest. SLOT is the slot written by
    the turn a checkpoint was taken for (JSON: "slot", null for other checkpoints),
    else the session's current slot then (JSON: "current_slot").

    \b
    Examples:
      agctl ckpt list
      agctl ckpt list -n 5
      agctl ckpt list --json | jq -r '.[0].id'
      agctl ckpt list --json | jq -r '.[] | select(.live) | .id'
    """
    sid = app.session_id()
    keeper = checkpointer(app)
    summaries = most_recent(keeper.summaries(sid), limit, newest_first=True)
    live = keeper.matching_live(sid, summaries)
    rows = [{**summary_row(s), "live": s.id in live} for s in summaries]
    display = [
        {
            **r,
            "mark": "*" if r["live"] else "",
            "created_at": r["created_at"][:19].replace("T", " "),
            # The slot its turn wrote, else the session's current slot then.
            "slot": r["slot"] or r["current_slot"],
        }
        for r in rows
    ]
    columns = [
        ("mark", ""),
        ("id", "ID"),
        ("turn", "TURN"),
        ("created_at", "CREATED"),
        ("slots", "SLOTS"),
        ("messages", "MSGS"),
        ("slot", "SLOT"),
        ("label", "LABEL"),
    ]
    app.emit_rows(rows, columns, empty="no checkpoints", display=display)


@command.command("show")
@click.argument("checkpoint_id", metavar="ID", shell_complete=complete_checkpoints)
@click.option("--messages", is_flag=True, help="Include every slot's full document.")
@command_options
@pass_app
def show(app: App, checkpoint_id: str, messages: bool) -> None:
    """Show what a checkpoint holds: the session and each slot.

    \b
    Examples:
      agctl ckpt show k3x9
      agctl ckpt show k3x9 --messages --json
    """
    from agctl.reports.usage import with_known_costs

    sid = app.session_id()
    checkpoint = _resolve(app, sid, checkpoint_id)
    state = checkpointer(app).state(sid, checkpoint)
    session = with_known_costs(state.session, app.prices)
    payload = {
        **summary_row(checkpoint.summary()),
        "session": session.model_dump(mode="json"),
        "slot_states": [_slot_state(slot, messages) for slot in state.slots.values()],
    }
    if checkpoint.loss is not None:
        payload["loss"] = checkpoint.loss.model_dump(mode="json")
    if app.json:
        app.emit(payload)
        return
    app.emit(payload, text=_show_text(checkpoint, session, payload))


def _slot_state(slot: Slot, document: bool) -> dict[str, Any]:
    """A slot as a checkpoint holds it: its mode and the size of each zone, and with
    --messages its whole document."""
    row: dict[str, Any] = {
        "id": slot.id,
        "mode": slot.config.mode,
        "immutable": len(slot.immutable),
        "compressed": len(slot.compressed),
        "messages": len(slot.messages),
        "tokens": slot.meta.total_tokens,
    }
    if document:
        row["document"] = slot.model_dump(mode="json")
    return row


def _show_text(checkpoint: Checkpoint, session: Session, payload: dict[str, Any]) -> str:
    """`ckpt show` for people: the checkpoint and its session, then a row a slot."""
    from agctl.cli.output import key_values, table
    from agctl.reports.usage import all_free, cost_text

    head = {
        "checkpoint": checkpoint.id,
        "label": checkpoint.label,
        "turn": checkpoint.turn_index,
        "created": payload["created_at"],
        "current slot": session.current_slot,
        **({"turn's slot": checkpoint.slot} if checkpoint.slot is not None else {}),
        "memory keys": ", ".join(sorted(session.memory)) or None,
        "cost": cost_text(session.cost.cost, free=all_free(session)),
    }
    if checkpoint.loss is not None:
        head["compression lost"] = _loss_counts(checkpoint.loss.lost)
    columns = [
        ("id", "SLOT"),
        ("mode", "MODE"),
        ("immutable", "IMMUTABLE"),
        ("compressed", "COMPRESSED"),
        ("messages", "MESSAGES"),
        ("tokens", "TOKENS"),
    ]
    return f"{key_values(head)}\n\n{table(payload['slot_states'], columns)}"


def _loss_counts(lost: dict[str, int]) -> str:
    """The counts of a stored loss report, as 'ctx compress' says them: '2 paths, 1 id'."""
    from agctl.turn.loss import counted

    return counted(lost) or "nothing"


def _diff_text(diff: dict[str, Any]) -> str:
    lines = [f"from {diff['from']} to {diff['to']}"]
    slots = diff["slots"]
    lines += [f"+ slot {s} (created)" for s in slots["created"]]
    lines += [f"- slot {s} (deleted)" for s in slots["deleted"]]
    for slot_id, change in slots["changed"].items():
        lines.append(f"~ slot {slot_id} ({change['tokens']:+d} tokens)")
        for key, (old, new) in change.get("config", {}).items():
            lines.append(f"    config {key}: {old} -> {new}")
        for zone in ZONES:
            if zone not in change:
                continue
            for item in change[zone]["removed"]:
                lines.append(f"    - {zone}[{item['index']}] {item['role']}: {item['text']}")
            for item in change[zone]["added"]:
                lines.append(f"    + {zone}[{item['index']}] {item['role']}: {item['text']}")
            for item in change[zone]["changed"]:
                lines.append(
                    f"    ~ {zone}[{item['index']}] {item['role']}: {item['old']} -> {item['new']}"
                )
    old, new = diff["current_slot"]
    if old != new:
        lines.append(f"current slot: {old} -> {new}")
    old_turns, new_turns = diff["turn_count"]
    if old_turns != new_turns:
        lines.append(f"turns: {old_turns} -> {new_turns}")
    memory = diff["memory"]
    lines += [f"+ memory {k} = {plain(v)}" for k, v in memory["added"].items()]
    lines += [f"- memory {k}" for k in memory["removed"]]
    lines += [
        f"~ memory {k}: {plain(old)} -> {plain(new)}" for k, (old, new) in memory["changed"].items()
    ]
    lines.append(f"tokens: {diff['tokens']:+d}")
    return "\n".join(lines)


@command.command("diff")
@click.argument("first", metavar="A", shell_complete=complete_checkpoints)
@click.argument("second", metavar="[B]", required=False, shell_complete=complete_checkpoints)
@command_options
@pass_app
def diff(app: App, first: str, second: str | None) -> None:
    """What changed from checkpoint A to checkpoint B (default: the live session).

    Per slot: messages added, removed and changed in each zone, config changes, the token
    delta; slots created and deleted; memory keys; the current slot and turn count.

    \b
    Examples:
      agctl ckpt diff k3x9
      agctl ckpt diff k3x9 m2a1 --json
    """
    sid = app.session_id()
    keeper = checkpointer(app)
    a = keeper.resolve(sid, first)
    b = keeper.resolve(sid, second) if second is not None else None
    result = keeper.diff(sid, a, b)
    app.emit(result, text=_diff_text(result))


@command.command("rollback")
@click.argument("checkpoint_id", metavar="ID", shell_complete=complete_checkpoints)
@command_options
@pass_app
def rollback(app: App, checkpoint_id: str) -> None:
    """Make the session exactly what it was at the checkpoint.

    The state being replaced is checkpointed first, so a rollback can be rolled back.

    \b
    Examples:
      agctl ckpt rollback k3x9
    """
    sid = app.session_id()
    keeper = checkpointer(app)
    restored, saved = keeper.rollback(sid, keeper.resolve(sid, checkpoint_id))
    payload: dict[str, Any] = {
        "restored": restored.id,
        "turn": restored.turn_index,
        "saved_as": saved.id,
    }
    app.observe("PostRollback", sid, payload, checkpoint=restored.id, saved_as=saved.id)
    text = (
        f"rolled back to {restored.id} (turn {restored.turn_index}); "
        f"the replaced state is checkpoint {saved.id}"
    )
    app.done(payload, text=text)


@command.command("fork")
@click.argument("checkpoint_id", metavar="ID", shell_complete=complete_checkpoints)
@click.option("--id", "new_id", metavar="NEW", help="Id of the new session (default: generated).")
@select_option()
@command_options
@pass_app
def fork(app: App, checkpoint_id: str, new_id: str | None, make_current: bool) -> None:
    """Start a new child session from a checkpoint; the original is untouched.

    \b
    Examples:
      agctl ckpt fork k3x9 --id what-if
    """
    sid = app.session_id()
    keeper = checkpointer(app)
    checkpoint = keeper.resolve(sid, checkpoint_id)
    session = keeper.fork(sid, checkpoint, new_id)
    if make_current:
        app.store.set_current_session(session.id)
    payload: dict[str, Any] = {"session": session.id, "parent_id": sid}
    app.observe("PostFork", sid, payload, checkpoint=checkpoint, new_session=session.id)
    app.emit(payload, text=session.id)


@command.command("rm")
@click.argument(
    "checkpoint_ids", metavar="ID...", nargs=-1, required=True, shell_complete=complete_checkpoints
)
@command_options
@pass_app
def rm(app: App, checkpoint_ids: tuple[str, ...]) -> None:
    """Remove checkpoints; the others stay restorable.

    \b
    Examples:
      agctl ckpt rm k3x9 m2a1
    """
    sid = app.session_id()
    keeper = checkpointer(app)
    ids = [keeper.resolve(sid, prefix) for prefix in checkpoint_ids]
    removed = keeper.remove(sid, list(dict.fromkeys(ids)))
    app.done({"removed": removed}, text="\n".join(f"removed {c}" for c in removed))


@command.command("prune")
@click.option("--keep", type=Count(), required=True, metavar="N")
@click.option(
    "--all",
    "everything",
    is_flag=True,
    help="Also prune what 'turn undo' needs for the last N turns.",
)
@command_options
@pass_app
def prune(app: App, keep: int, everything: bool) -> None:
    """Keep only the newest N checkpoints, and those 'turn undo' needs for the last N turns.

    Without --all, the checkpoints that 'turn undo 1' to 'turn undo N' would restore are
    kept even when older than the newest N; the output says which.

    \b
    Examples:
      agctl ckpt prune --keep 20
      agctl ckpt prune --keep 5 --all --json
    """
    pruned = checkpointer(app).prune(app.session_id(), keep, everything=everything)
    text = f"removed {len(pruned.removed)} checkpoint(s); kept the newest {len(pruned.kept)}"
    if pruned.kept_for_undo:
        text += (
            f" and {len(pruned.kept_for_undo)} that 'turn undo' needs for the last {keep} "
            f"turns: {', '.join(pruned.kept_for_undo)}"
        )
    app.done(pruned.to_dict(), text=text)


@command.command("verify")
@command_options
@pass_app
def verify(app: App) -> None:
    """Check the whole checkpoint log: every record's checksum and hash, every link
    between records, and that every checkpoint can be rebuilt. Exits 5 on any problem.

    \b
    Examples:
      agctl ckpt verify
      agctl -s 1q2w ckpt verify --json
    """
    from agctl.base.errors import DataError

    report = checkpointer(app).verify(app.session_id())
    lines = [
        f"{report.path}: {report.records} records, {report.checkpoints} checkpoints, "
        f"{report.bytes} bytes"
    ]
    if not report.checksums:
        lines.append(
            f"note: written before checksums: {report.unverifiable} records cannot be verified"
        )
    if report.torn:
        lines.append(f"note: {report.torn} bytes of a record cut short by a crash (harmless)")
    lines += [f"problem: {problem}" for problem in report.problems]
    lines += [f"checkpoint {bad['id']}: {bad['reason']}" for bad in report.bad_checkpoints]
    if report.ok:
        lines.append("ok")
    app.emit(report.to_dict(), text="\n".join(lines))
    if not report.ok:
        found = len(report.problems) + len(report.bad_checkpoints)
        raise DataError(f"{report.path}: {found} problem(s) found")
