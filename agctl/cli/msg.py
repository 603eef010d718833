"""`agctl msg`: read and edit the messages of a slot's incremental zone."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click

from agctl.base.vocab import EXPORT_FORMATS, IMPORT_FORMATS, ROLES
from agctl.cli.app import (
    NEGATIVE_INDEX,
    App,
    most_recent,
    pass_app,
    read_input_file,
    text_argument,
    write_output,
)
from agctl.cli.options import (
    command_options,
    file_option,
    limit_option,
    regex_options,
    slot_option,
)

if TYPE_CHECKING:
    from agctl.context.models import Message, Slot

LIST_COLUMNS = [
    ("index", "#"),
    ("pin", "PIN"),
    ("role", "ROLE"),
    ("tokens", "TOKENS"),
    ("text", "CONTENT"),
]
UNPINNED_COLUMNS = [column for column in LIST_COLUMNS if column[0] != "pin"]


def message_row(index: int, message: Message) -> dict[str, Any]:
    return {"index": index, **message.model_dump(mode="json")}


def _list_rows(slot: Slot, indices: list[int]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    rows = [message_row(i, slot.messages[i]) for i in indices]
    display = [
        {
            "index": i,
            "pin": "P" if slot.messages[i].pinned else "",
            "role": slot.messages[i].role,
            "tokens": slot.messages[i].token_count(),
            "text": slot.messages[i].text()
            or ", ".join(c.function.name + "()" for c in slot.messages[i].tool_calls or ()),
        }
        for i in indices
    ]
    return rows, display


def _change_message(
    app: App,
    slot: str | None,
    verb: str,
    change: Callable[[Slot], tuple[int, Message]],
    text_only: bool = False,
    undoable: str | None = None,
) -> None:
    """Run one message edit under the session lock and report the message it touched;
    an `undoable` command ("msg rm") checkpoints the session first."""

    def run(target: Slot) -> tuple[str, int, Message]:
        position, message = change(target)
        return target.id, position, message

    sid = app.session_id()
    with app.store.undoable(sid, undoable):
        slot_id, position, message = app.store.update_slot(sid, slot, run)
    text = (
        message.text()
        if text_only
        else f"{verb} message {position} ({message.role}) in slot {slot_id}"
    )
    show = app.emit if text_only else app.done
    show(message_row(position, message), text=text)


def message_options(fn: Any) -> Any:
    fn = click.option(
        "--tool-call-id", metavar="ID", help="For a tool message: the call it answers."
    )(fn)
    return click.option("--name", metavar="NAME", help="Optional participant name.")(fn)


@click.group("msg")
def command() -> None:
    """Read and edit a slot's messages (its incremental zone).

    Indexes count from 0; negative ones count from the end (-1 is the last).

    \b
    Examples:
      agctl msg append user "Summarise this file" < notes.txt
      agctl msg list
      agctl msg get -1
      agctl msg export --format jsonl > backup.jsonl
    """


@command.command("list")
@click.option("--role", "roles", multiple=True, type=click.Choice(ROLES), help="Only these roles.")
@limit_option
@click.option("--full", is_flag=True, help="Print whole messages, not one cut line each.")
@slot_option
@command_options
@pass_app
def list_(
    app: App, roles: tuple[str, ...], limit: int | None, full: bool, slot: str | None
) -> None:
    """List the messages of a slot, oldest first.

    --limit N lists the last N (after --role), each with its own index; --full prints
    each message whole under a line "#INDEX ROLE (N tokens)" (--json always has whole
    messages). A pinned message ('msg pin') is marked P (--full: "pinned"; --json:
    "pinned": true).

    \b
    Examples:
      agctl msg list
      agctl msg list -n 3 --full
      agctl msg list --slot plan-b --role user --json
    """
    target = app.store.load_slot(app.session_id(), slot)
    indices = target.find(set(roles)) if roles else list(range(len(target.messages)))
    indices = most_recent(indices, limit, newest_first=False)
    rows, display = _list_rows(target, indices)
    if full and rows and not app.json:
        app.emit(rows, text="\n\n".join(whole_message(i, target.messages[i]) for i in indices))
        return
    # The PIN column only where a message shown is pinned: the table stays as it was else.
    columns = LIST_COLUMNS if any(row["pin"] for row in display) else UNPINNED_COLUMNS
    app.emit_rows(rows, columns, empty=f"slot {target.id} has no messages", display=display)


def whole_message(index: int, message: Message) -> str:
    """A message for people, whole: a header line, its text, then its tool calls."""
    header = [f"#{index}", message.role]
    if message.pinned:
        header.append("pinned")
    if message.name:
        header.append(f"name={message.name}")
    if message.tool_call_id:
        header.append(f"tool_call_id={message.tool_call_id}")
    header.append(f"({message.token_count()} tokens)")
    lines = [" ".join(header)]
    if message.text():
        lines.append(message.text())
    for call in message.tool_calls or ():
        lines.append(f"call {call.id}: {call.function.name}({call.function.arguments})")
    return "\n".join(lines)


@command.command("find")
@click.argument("roles", nargs=-1, type=click.Choice(ROLES))
@click.option("--text", metavar="TEXT", help="Only messages whose text contains TEXT.")
@regex_options
@slot_option
@command_options
@pass_app
def find(
    app: App,
    roles: tuple[str, ...],
    text: str | None,
    regex: bool,
    regex_timeout: float,
    slot: str | None,
) -> None:
    """Print the indexes of the messages with one of ROLES and/or whose text matches.

    --text matches as 'agctl search' does: a case-insensitive substring, or with --regex
    a regular expression (case-sensitive unless it starts with (?i)) that may spend at
    most --regex-timeout seconds matching (exit 2 past it).

    \b
    Examples:
      agctl msg find assistant
      agctl msg find user system --json
      agctl msg find --text "stack trace"
      agctl msg find assistant --text '^Error' --regex
    """
    from agctl.base.errors import UsageError

    if text is None and regex:
        raise UsageError("--regex needs --text")
    if text is None and not roles:
        raise UsageError("give ROLES, --text TEXT or both")
    target = app.store.load_slot(app.session_id(), slot)
    if text is None:
        indices = target.find(set(roles))
    else:
        from agctl.reports.search import Matcher, find_messages

        matcher = Matcher(text, regex=regex, timeout=regex_timeout)
        indices = find_messages(target.messages, matcher, set(roles))
    app.emit(indices, text="\n".join(str(i) for i in indices))


@command.command("get", context_settings=NEGATIVE_INDEX)
@click.argument("index", type=int)
@slot_option
@command_options
@pass_app
def get(app: App, index: int, slot: str | None) -> None:
    """Print one message's text (the whole message with --json).

    \b
    Examples:
      agctl msg get 0
      agctl msg get -1 --json
    """
    target = app.store.load_slot(app.session_id(), slot)
    message = target.get(index)
    app.emit(message_row(target.position(index), message), text=message.text())


@command.command("append")
@click.argument("role", type=click.Choice(ROLES))
@click.argument("text", required=False)
@message_options
@file_option
@click.option("--pin", is_flag=True, help="Pin it: every compression keeps it verbatim.")
@slot_option
@command_options
@pass_app
def append(
    app: App,
    role: str,
    text: str | None,
    name: str | None,
    tool_call_id: str | None,
    files: tuple[str, ...],
    pin: bool,
    slot: str | None,
) -> None:
    """Append a message; TEXT comes from stdin when absent or '-'.

    With both TEXT and piped stdin, the message is TEXT, a blank line, then stdin; each
    --file follows under a line naming it. --pin pins it (see 'msg pin').

    \b
    Examples:
      agctl msg append user "Hello"
      git diff | agctl msg append user -
      git diff | agctl msg append user "Review this diff:"
      agctl msg append user "Compare these:" -f a.py -f b.py
      agctl msg append tool '{"ok": true}' --tool-call-id call_1
      agctl msg append user "Never touch prod/." --pin
    """
    from agctl.context.messages import typed_message

    message = typed_message(
        role, text_argument(text, files=files), name=name, tool_call_id=tool_call_id
    )
    if pin:
        message.pinned = True
    _change_message(app, slot, "appended", lambda s: (s.append(message), message))


@command.command("insert", context_settings=NEGATIVE_INDEX)
@click.argument("index", type=int)
@click.argument("role", type=click.Choice(ROLES))
@click.argument("text", required=False)
@message_options
@slot_option
@command_options
@pass_app
def insert(
    app: App,
    index: int,
    role: str,
    text: str | None,
    name: str | None,
    tool_call_id: str | None,
    slot: str | None,
) -> None:
    """Insert a message before INDEX (INDEX may equal the length to append).

    \b
    Examples:
      agctl msg insert 0 system "Answer in French."
    """
    from agctl.context.messages import typed_message

    message = typed_message(role, text_argument(text), name=name, tool_call_id=tool_call_id)
    _change_message(app, slot, "inserted", lambda s: (s.insert(index, message), message))


@command.command("edit", context_settings=NEGATIVE_INDEX)
@click.argument("index", type=int)
@click.argument("text", required=False)
@slot_option
@command_options
@pass_app
def edit(app: App, index: int, text: str | None, slot: str | None) -> None:
    """Replace the text of the message at INDEX.

    The session is checkpointed first: 'ckpt rollback' undoes it.

    \b
    Examples:
      agctl msg edit -1 "A shorter answer."
      sed s/foo/bar/ draft.txt | agctl msg edit 2 -
    """
    content = text_argument(text)
    _change_message(app, slot, "edited", lambda s: s.edit(index, content), undoable="msg edit")


@command.command("rm", context_settings=NEGATIVE_INDEX)
@click.argument("index", type=int)
@slot_option
@command_options
@pass_app
def rm(app: App, index: int, slot: str | None) -> None:
    """Remove the message at INDEX.

    The session is checkpointed first: 'ckpt rollback' undoes it.

    \b
    Examples:
      agctl msg rm 3
      agctl msg rm -1 --slot plan-b
    """
    _change_message(app, slot, "removed", lambda s: s.remove(index), undoable="msg rm")


@command.command("pop", context_settings=NEGATIVE_INDEX)
@click.argument("index", type=int, default=-1)
@slot_option
@command_options
@pass_app
def pop(app: App, index: int, slot: str | None) -> None:
    """Remove the message at INDEX (default: the last) and print its text.

    The session is checkpointed first: 'ckpt rollback' undoes it.

    \b
    Examples:
      agctl msg pop
      agctl msg pop 0 --json
    """
    _change_message(app, slot, "popped", lambda s: s.pop(index), text_only=True, undoable="msg pop")


def _pin(app: App, slot: str | None, indices: tuple[int, ...], pinned: bool) -> None:
    """`msg pin` and `msg unpin`: one undoable change of the slot, then what it touched."""
    verb = "pinned" if pinned else "unpinned"

    def change(target: Slot) -> tuple[str, list[int], int]:
        positions = target.pin(indices, pinned=pinned)
        return target.id, positions, len(target.pinned())

    sid = app.session_id()
    with app.store.undoable(sid, "msg pin" if pinned else "msg unpin"):
        slot_id, positions, total = app.store.update_slot(sid, slot, change)
    shown = ", ".join(str(p) for p in positions)
    app.done(
        {"slot": slot_id, verb: positions, "pinned_count": total},
        text=f"{verb} message{'s' * (len(positions) != 1)} {shown} in slot {slot_id} "
        f"({total} pinned now)",
    )


@command.command("pin", context_settings=NEGATIVE_INDEX)
@click.argument("indices", metavar="INDEX...", nargs=-1, required=True, type=int)
@slot_option
@command_options
@pass_app
def pin(app: App, indices: tuple[int, ...], slot: str | None) -> None:
    """Pin the messages at INDEX...: every compression keeps them verbatim, in place.

    A pinned message stays in the messages zone, in its order among the messages kept,
    and is never summarised or truncated; what it sends is unchanged. Pins count against
    the budget first: a compression that cannot fit them in the slot's budget for the
    messages zone fails (exit 7) instead of dropping one. A pinned tool call keeps its
    results, and a pinned result its call. The session is checkpointed first: 'ckpt
    rollback' undoes it.

    \b
    Examples:
      agctl msg pin 0
      agctl msg pin 2 5 -1 --json
    """
    _pin(app, slot, indices, pinned=True)


@command.command("unpin", context_settings=NEGATIVE_INDEX)
@click.argument("indices", metavar="INDEX...", nargs=-1, required=True, type=int)
@slot_option
@command_options
@pass_app
def unpin(app: App, indices: tuple[int, ...], slot: str | None) -> None:
    """Unpin the messages at INDEX...: a compression may fold them again.

    The session is checkpointed first: 'ckpt rollback' undoes it.

    \b
    Examples:
      agctl msg unpin 0
      agctl msg unpin -1 --slot plan-b
    """
    _pin(app, slot, indices, pinned=False)


@command.command("retain")
@click.argument("roles", nargs=-1, required=True, type=click.Choice(ROLES))
@slot_option
@command_options
@pass_app
def retain(app: App, roles: tuple[str, ...], slot: str | None) -> None:
    """Keep only the messages with one of ROLES; drop the rest.

    The session is checkpointed first: 'ckpt rollback' undoes it.

    \b
    Examples:
      agctl msg retain user assistant
    """
    sid = app.session_id()
    with app.store.undoable(sid, "msg retain"):
        dropped = app.store.update_slot(sid, slot, lambda s: s.retain(set(roles)))
    app.done({"dropped": dropped}, text=f"dropped {dropped} message{'s' * (dropped != 1)}")


@command.command("clear")
@slot_option
@command_options
@pass_app
def clear(app: App, slot: str | None) -> None:
    """Remove every message of the slot's incremental zone.

    The session is checkpointed first: 'ckpt rollback' undoes it.

    \b
    Examples:
      agctl msg clear --slot scratchpad
    """
    sid = app.session_id()
    with app.store.undoable(sid, "msg clear"):
        dropped = app.store.update_slot(sid, slot, lambda s: s.clear())
    app.done({"dropped": dropped}, text=f"dropped {dropped} message{'s' * (dropped != 1)}")


@command.command("export")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(EXPORT_FORMATS),
    default="openai",
    show_default=True,
    help="openai: a JSON array of chat messages; jsonl: one message a line with metadata; "
    "markdown or text: for people.",
)
@click.option("--view", is_flag=True, help="Export the request view instead of the messages.")
@click.option(
    "--output", "-o", metavar="FILE", default="-", help="Write to FILE instead of stdout."
)
@slot_option
@command_options
@pass_app
def export(app: App, fmt: str, view: bool, output: str, slot: str | None) -> None:
    """Export a slot's messages (or its view) as OpenAI JSON, JSON lines, Markdown or text.

    \b
    Examples:
      agctl msg export > chat.json
      agctl msg export --view --format jsonl -o view.jsonl
      agctl msg export --format markdown -o chat.md
    """
    from agctl.interchange.formats import export_messages

    sid = app.session_id()
    target = app.store.load_slot(sid, slot)
    if view:
        from agctl.cli.slot import view_window
        from agctl.context.view import request_view

        session = app.store.load_session(sid)
        messages = request_view(session, target, window=view_window(app, sid, target))
    else:
        messages = target.messages
    if app.json:
        fmt = "openai"  # the one format that is a single JSON document
    write_output(output, export_messages(messages, fmt))  # type: ignore[arg-type]


@command.command("import")
@click.argument("source", metavar="FILE")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(IMPORT_FORMATS),
    default="auto",
    show_default=True,
)
@click.option("--replace", is_flag=True, help="Replace the slot's messages instead of appending.")
@slot_option
@command_options
@pass_app
def import_(app: App, source: str, fmt: str, replace: bool, slot: str | None) -> None:
    """Import messages from FILE ('-' for stdin); all are validated before any is written.

    With --replace the session is checkpointed first: 'ckpt rollback' undoes it.

    \b
    Examples:
      agctl msg import chat.json
      agctl msg export --slot a | agctl msg import - --slot b --replace
    """
    from agctl.interchange.formats import parse_messages

    data, name = read_input_file(source)
    messages = parse_messages(data, fmt, name)  # type: ignore[arg-type]
    sid = app.session_id()

    def change(target: Slot) -> tuple[str, int]:
        target.extend(messages, replace=replace)
        return target.id, len(target.messages)

    with app.store.undoable(sid, "msg import --replace" if replace else None):
        slot_id, total = app.store.update_slot(sid, slot, change)
    payload = {"slot": slot_id, "imported": len(messages), "message_count": total}
    app.done(payload, text=f"imported {len(messages)} messages into slot {slot_id} ({total} now)")
