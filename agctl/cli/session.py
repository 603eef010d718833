"""`agctl session`: create, list, show, select and destroy sessions."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from agctl.base.vocab import GRAPH_FORMATS, SESSION_EXPORT_FORMATS, SESSION_SETTINGS
from agctl.cli.app import App, most_recent, pass_app, text_argument
from agctl.cli.complete import (
    complete_models,
    complete_profiles,
    complete_sessions,
    complete_slots,
)
from agctl.cli.options import (
    json_option,
    limit_option,
    select_option,
    session_option,
    template_options,
)
from agctl.cli.output import echo, plain

if TYPE_CHECKING:
    from agctl.config.templates import TemplateChoice
    from agctl.context.models import Session
    from agctl.context.pricing import Prices
    from agctl.graph.render import Drawing
    from agctl.reports.usage import ModelUsage
    from agctl.store import Replaced, SessionInfo


def parent_label(row: dict[str, Any]) -> str | None:
    """The PARENT column: the id, marked when it is gone or its chain loops."""
    if row["looped"]:
        return f"{row['parent_id']} (loop)"
    return f"{row['parent_id']} (gone)" if row["orphan"] else row["parent_id"]


def session_row(info: SessionInfo, current: str | None, prices: Prices) -> dict[str, Any]:
    from agctl.context.models import isoformat
    from agctl.reports.usage import all_free, with_known_costs

    session = with_known_costs(info.session, prices)
    return {
        "id": session.id,
        "current": session.id == current,
        "parent_id": session.parent_id,
        "orphan": info.orphan,
        "looped": info.looped,
        "children": info.children,
        "title": session.title,
        "created_at": isoformat(session.created_at),
        "turn_count": session.turn_count,
        "current_slot": session.current_slot,
        "cost": session.cost.cost,
        "free": all_free(session),
    }


def session_document(session: Session) -> dict[str, Any]:
    return session.model_dump(mode="json")


@click.group("session")
def command() -> None:
    """Create, list, select and destroy sessions.

    \b
    Examples:
      agctl session new --system "You are a careful reviewer."
      agctl session list
      agctl session use 1q2w
      agctl session tree
    """


@command.command("new")
@click.argument("session_id", metavar="[ID]", required=False, shell_complete=complete_sessions)
@click.option("--system", "system_prompt", metavar="TEXT", help="System prompt ('-' for stdin).")
@click.option("--title", metavar="TEXT", help="A title shown in listings and completion.")
@click.option(
    "--parent",
    "parent_id",
    metavar="ID",
    help="Record this session as a child of ID.",
    shell_complete=complete_sessions,
)
@click.option(
    "--profile",
    metavar="NAME",
    help="Profile the session's turns use by default.",
    shell_complete=complete_profiles,
)
@click.option(
    "--model",
    metavar="NAME",
    help="Model the session's turns use by default.",
    shell_complete=complete_models,
)
@template_options
@select_option()
@click.option(
    "--replace", is_flag=True, help="Replace an existing session ID (with its checkpoints)."
)
@click.option(
    "--recursive", "-r", is_flag=True, help="With --replace, also destroy its descendants."
)
@click.option("--orphan", is_flag=True, help="With --replace, keep its children, detached from it.")
@json_option
@pass_app
def new(
    app: App,
    session_id: str | None,
    system_prompt: str | None,
    title: str | None,
    parent_id: str | None,
    profile: str | None,
    model: str | None,
    template: TemplateChoice | None,
    make_current: bool,
    replace: bool,
    recursive: bool,
    orphan: bool,
) -> None:
    """Create a session (with its 'default' slot) and print its id.

    Without ID a short id that sorts by creation time is generated. With --replace an
    existing session ID is replaced by the new one in one step (a failure leaves it as it
    was); one with children is refused unless --recursive or --orphan.

    \b
    Examples:
      agctl session new
      agctl session new review --system "You review Python code." --title "PR 42"
      sid=$(agctl session new --no-use)
      agctl session new ci --replace
    """
    if (recursive or orphan) and not replace:
        raise click.UsageError("--recursive and --orphan go with --replace")
    if replace and session_id is None:
        raise click.UsageError("--replace needs the ID of the session to replace")
    if system_prompt == "-":
        system_prompt = text_argument("-", "the system prompt")
    settings: dict[str, Any] = dict(
        system_prompt=system_prompt, parent_id=parent_id, title=title, profile=profile, model=model
    )
    settings.update(template.session_settings(system_prompt, model) if template else {})
    if replace and session_id is not None:
        outcome = app.store.replace_session(
            session_id, recursive=recursive, orphan=orphan, **settings
        )
        session, payload = outcome.session, _replaced_document(app, outcome)
    else:
        session = app.store.create_session(session_id, **settings)
        payload = session_document(session)
    if make_current:
        app.store.set_current_session(session.id)
    app.emit(payload, text=session.id)


def _replaced_document(app: App, outcome: Replaced) -> dict[str, Any]:
    """`session new --replace`'s document; for people, each session it destroyed or
    detached is said on stderr (with --json, in the document only)."""
    if not app.json:
        for sid in outcome.destroyed:
            echo(f"agctl: destroyed {sid}", err=True)
        for sid in outcome.detached:
            echo(f"agctl: detached {sid} (its parent was the replaced session)", err=True)
    return {
        **session_document(outcome.session),
        "replaced": outcome.replaced,
        "destroyed": outcome.destroyed,
        "detached": outcome.detached,
    }


@command.command("list")
@limit_option
@json_option
@pass_app
def list_(app: App, limit: int | None) -> None:
    """List sessions, oldest first, with parents and orphans.

    --limit N lists the N newest (still oldest first).

    \b
    Examples:
      agctl session list
      agctl session list -n 5
      agctl session list --json | jq -r '.[].id'
    """
    from agctl.base.errors import AgctlError
    from agctl.reports.usage import cost_text

    problems: list[AgctlError] = []
    infos = most_recent(app.store.list_sessions(problems=problems), limit, newest_first=False)
    current = app.store.current_session_id()
    for problem in problems:
        app.warn(f"skipped {problem}")
    rows = [session_row(info, current, app.prices) for info in infos]
    display = [
        {
            **row,
            "mark": "*" if row["current"] else "",
            "created_at": row["created_at"][:16].replace("T", " "),
            "parent": parent_label(row),
            "cost": cost_text(row["cost"], free=row["free"]),
        }
        for row in rows
    ]
    columns = [
        ("mark", ""),
        ("id", "ID"),
        ("created_at", "CREATED"),
        ("turn_count", "TURNS"),
        ("cost", "COST"),
        ("current_slot", "SLOT"),
        ("parent", "PARENT"),
        ("title", "TITLE"),
    ]
    app.emit_rows(
        rows, columns, empty="no sessions (create one with 'agctl session new')", display=display
    )


@command.command("show")
@click.argument("session_id", metavar="[ID]", required=False, shell_complete=complete_sessions)
@json_option
@pass_app
def show(app: App, session_id: str | None) -> None:
    """Show a session (default: the selected one) and its slots.

    \b
    Examples:
      agctl session show
      agctl session show 1q2w --json
    """
    from agctl.cli.slot import slot_row
    from agctl.reports.usage import all_free, cost_text, session_usage, with_known_costs

    sid = app.session_id(session_id)
    session = with_known_costs(app.store.load_session(sid), app.prices)
    payload = session_document(session)
    payload["children"] = app.store.children(sid)
    payload["slots"] = [slot_row(s, session.current_slot) for s in app.store.list_slots(sid)]
    if app.json:
        app.emit(payload)
        return
    from agctl.context.models import isoformat

    summary = {
        "id": session.id,
        "title": session.title,
        "parent": session.parent_id,
        "children": ", ".join(payload["children"]) or None,
        "created": isoformat(session.created_at),
        "system prompt": session.system_prompt,
        "profile": session.profile,
        "model": session.model,
        "current slot": session.current_slot,
        "turns": session.turn_count,
        "tokens": f"{session.cost.prompt_tokens} prompt + "
        f"{session.cost.completion_tokens} completion",
        "cost": cost_text(session.cost.cost, free=all_free(session)),
        "memory keys": len(session.memory),
        "slots": ", ".join(s["id"] for s in payload["slots"]),
    }
    for row in session_usage(session, app.prices):
        summary.update(_model_lines(row))
    app.emit(summary)


def _model_lines(row: ModelUsage) -> dict[str, str]:
    """`session show`'s lines on one model: its cost and requests, its cache, its reasoning."""
    usage = row.counts
    free = usage.free_requests
    unbilled = f", {free} free: offline or from a cassette" if 0 < free < usage.requests else ""
    lines = {
        f"cost of {row.model}": f"{row.cost_text()} ({usage.requests} "
        f"request{'s' if usage.requests != 1 else ''}{unbilled}, {usage.prompt_tokens} "
        f"prompt + {usage.completion_tokens} completion tokens)",
        f"cache of {row.model}": _cache_line(row),
    }
    if usage.reasoning_tokens is not None:
        lines[f"reasoning of {row.model}"] = f"{usage.reasoning_tokens} tokens"
    return lines


def _cache_line(row: ModelUsage) -> str:
    """What a model's provider said of its cache, for people: 'not reported' when it
    said nothing (never 0), else the share of the input read from it and the saving."""
    if row.cache_share is None:
        return row.cache_text()
    line = f"{row.counts.cached_tokens} tokens read ({row.cache_text()} of the input)"
    if row.counts.cache_write_tokens is not None:
        line += f", {row.counts.cache_write_tokens} written"
        if row.counts.cache_write_1h_tokens is not None:
            line += f" ({row.counts.cache_write_1h_tokens} kept 1 h)"
    return f"{line}, saved {row.saved_text()}"


@command.command("use")
@click.argument("session_id", metavar="ID", shell_complete=complete_sessions)
@json_option
@pass_app
def use(app: App, session_id: str) -> None:
    """Select the session that commands act on when no --session is given.

    \b
    Examples:
      agctl session use 1q2w
    """
    sid = app.store.resolve_session(session_id)
    app.store.set_current_session(sid)
    app.done({"current_session": sid}, text=f"current session: {sid}")


@command.command("rm")
@click.argument(
    "session_ids", metavar="ID...", nargs=-1, required=True, shell_complete=complete_sessions
)
@click.option("--recursive", "-r", is_flag=True, help="Also destroy the session's descendants.")
@click.option("--orphan", is_flag=True, help="Leave the session's children as orphans.")
@json_option
@pass_app
def rm(app: App, session_ids: tuple[str, ...], recursive: bool, orphan: bool) -> None:
    """Destroy sessions. A session with children is refused unless --recursive or --orphan.

    \b
    Examples:
      agctl session rm 1q2w
      agctl session rm --recursive experiment-root
      agctl session rm --orphan old-parent
    """
    removal = app.store.remove_sessions(session_ids, recursive=recursive, orphan=orphan)
    lines = [f"destroyed {s}" for s in removal.destroyed]
    lines += [f"orphaned {s}" for s in removal.orphaned]
    app.done(removal.to_dict(), text="\n".join(lines))


@command.command("children")
@click.argument("session_id", metavar="[ID]", required=False, shell_complete=complete_sessions)
@json_option
@pass_app
def children(app: App, session_id: str | None) -> None:
    """List the sessions whose parent is ID (default: the selected session).

    \b
    Examples:
      agctl session children
      agctl session children 1q2w --json
    """
    kids = app.store.children(app.session_id(session_id))
    app.emit(kids, text="\n".join(kids))


@command.command("parent")
@click.argument("session_id", metavar="[ID]", required=False, shell_complete=complete_sessions)
@json_option
@pass_app
def parent(app: App, session_id: str | None) -> None:
    """Print the parent of ID; nothing (null with --json) when it has none or it was destroyed.

    \b
    Examples:
      agctl session parent what-if
    """
    found = app.store.parent(app.session_id(session_id))
    app.emit({"parent": found}, text=found or "")


@command.command("tree")
@click.argument("session_id", metavar="[ID]", required=False, shell_complete=complete_sessions)
@json_option
@pass_app
def tree(app: App, session_id: str | None) -> None:
    """Show sessions as a tree (or the subtree under ID); orphans are marked.

    \b
    Examples:
      agctl session tree
      agctl session tree 1q2w --json
    """
    from agctl.base.errors import AgctlError
    from agctl.store.sessions import session_forest

    problems: list[AgctlError] = []
    nodes = session_forest(app.store.backend, session_id, problems=problems)
    for problem in problems:
        app.warn(f"skipped {problem}")
    forest = [node.to_dict() for node in nodes]
    if app.json:
        app.emit(forest if session_id is None else forest[0])
        return
    lines: list[str] = []

    def draw(entry: dict[str, Any], prefix: str, last: bool, top: bool) -> None:
        branch = "" if top else ("└── " if last else "├── ")
        flags = ("orphan" if entry["orphan"] else None, "parent loop" if entry["looped"] else None)
        notes = [n for n in (entry["title"], *flags) if n]
        mark = "* " if entry["current"] else ""
        suffix = f"  ({', '.join(notes)})" if notes else ""
        lines.append(f"{prefix}{branch}{mark}{entry['id']}{suffix}")
        inner = prefix + ("" if top else ("    " if last else "│   "))
        for index, child in enumerate(entry["children"]):
            draw(child, inner, index == len(entry["children"]) - 1, False)

    for entry in forest:
        draw(entry, "", True, True)
    app.emit(forest, text="\n".join(lines))


@command.command("set")
@click.argument(
    "key",
    type=click.Choice(SESSION_SETTINGS),
)
@click.argument("value")
@json_option
@session_option
@pass_app
def set_(app: App, key: str, value: str) -> None:
    """Change a session setting ('default', 'none' or 'null' unsets profile, model and
    auto_compress).

    memory_in_context true renders the session memory as one system message in every
    request; auto_compress true/false overrides the config for this session's slots.

    \b
    Examples:
      agctl session set memory_in_context true
      agctl session set auto_compress false
      agctl session set system_prompt "You are terse."
    """
    session = app.store.set_session_setting(app.session_id(), key, value)
    shown = getattr(session, key)
    text = f"{key} = {plain(shown)}" if shown is not None else f"{key} unset (the default)"
    app.done({"session": session.id, key: shown}, text=text)


@command.command("export")
@click.argument("session_id", metavar="[ID]", required=False, shell_complete=complete_sessions)
@click.option("--output", "-o", metavar="FILE", default="-", help="Write to FILE ('-': stdout).")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(SESSION_EXPORT_FORMATS),
    default="json",
    show_default=True,
    help="json: the whole session, for 'session import'; html: one slot's conversation as a "
    "self-contained page that works offline.",
)
@click.option(
    "--checkpoints",
    "with_checkpoints",
    is_flag=True,
    help="Include the checkpoint history (verified), for ckpt rollback after import.",
)
@click.option(
    "--slot",
    metavar="NAME",
    shell_complete=complete_slots,
    help="With --format html: the slot whose view to show (default: the current slot).",
)
@click.option("--redact", is_flag=True, help="With --format html: leave out all message text.")
@json_option
@pass_app
def export(
    app: App,
    session_id: str | None,
    output: str,
    fmt: str,
    with_checkpoints: bool,
    slot: str | None,
    redact: bool,
) -> None:
    """Export a whole session — every slot, memory, checkpoint metadata — as one JSON document,
    or one conversation as an HTML page.

    'session import' reads the JSON back into an identical session. With --checkpoints the
    checkpoint history goes along (the log is verified first, and the export is schema
    version 2.0, which an agctl that cannot restore it refuses), so 'ckpt list',
    'ckpt rollback' and 'turn undo' work on the imported session. A session exports
    the same, byte for byte, from every store it is copied to.

    --format html writes the request view of one slot (tool calls and results folded) as
    one file that needs no network and opens from disk; --redact drops the message text
    so the page can be shared.

    \b
    Examples:
      agctl session export > backup.json
      agctl session export 1q2w -o 1q2w.json
      agctl session export --checkpoints | agctl --store /tmp/copy session import -
      agctl session export --format html --slot draft -o chat.html
    """
    from agctl.cli.app import write_output

    sid = app.session_id(session_id)
    if fmt == "html":
        if with_checkpoints:
            raise click.UsageError("--checkpoints goes with --format json")
        from agctl.pages.conversation import conversation_page

        write_output(output, conversation_page(app.store, sid, slot, redact=redact).encode())
        return
    if slot is not None or redact:
        raise click.UsageError("--slot and --redact go with --format html")
    from agctl.interchange.formats import export_session

    document = export_session(app.store, sid, checkpoints=with_checkpoints)
    write_output(output, document.model_dump_json(indent=2, exclude_none=False).encode() + b"\n")


@command.command("import")
@click.argument("source", metavar="FILE")
@click.option("--as", "as_id", metavar="NEW", help="Import under this id (e.g. on a collision).")
@select_option("the imported session")
@json_option
@pass_app
def import_(app: App, source: str, as_id: str | None, make_current: bool) -> None:
    """Import a session export ('-' for stdin); everything is validated before anything is
    written, and an existing id is refused unless --as NEW.

    An export made with --checkpoints brings its checkpoint history, verified before the
    session is written. Messages with the 'developer' role are stored as 'system'.

    \b
    Examples:
      agctl session import backup.json
      agctl session export | agctl --store /tmp/copy session import -
      agctl session import backup.json --as restored --no-use
    """
    from agctl.cli.app import read_input_file
    from agctl.interchange.formats import import_session

    data, name = read_input_file(source)
    session = import_session(app.store, data, as_id=as_id, source=name)
    if make_current:
        app.store.set_current_session(session.id)
    app.done({"session": session.id}, text=f"imported session {session.id}")


def _locale_is_utf8() -> bool:
    """Whether the locale the user set (LC_ALL, else LC_CTYPE, else LANG) is UTF-8: Python
    prints UTF-8 even in the C locale, but the terminal of a user who chose it may not."""
    import os

    for name in ("LC_ALL", "LC_CTYPE", "LANG"):
        value = os.environ.get(name)
        if value:
            return value.lower().replace("-", "").endswith("utf8")
    return False


@command.command("graph")
@click.argument("session_id", metavar="[SESSION]", required=False, shell_complete=complete_sessions)
@click.option("--all", "all_sessions", is_flag=True, help="Draw every session, not one tree.")
@click.option(
    "--checkpoints", is_flag=True, help="Draw every checkpoint, not only fork and rollback ends."
)
@click.option("--turns", is_flag=True, help="Show each slot's messages under it.")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(GRAPH_FORMATS),
    default="text",
    show_default=True,
    help="What to draw: text lanes, Mermaid, Graphviz DOT, one HTML page, or the model.",
)
@click.option("--output", "-o", metavar="FILE", default="-", help="Write to FILE ('-': stdout).")
@click.option("--redact", is_flag=True, help="Leave message text out (roles and counts stay).")
@click.option("--ascii", "ascii_only", is_flag=True, help="Draw text lanes in ASCII only.")
@json_option
@pass_app
def graph(
    app: App,
    session_id: str | None,
    all_sessions: bool,
    checkpoints: bool,
    turns: bool,
    fmt: str,
    output: str,
    redact: bool,
    ascii_only: bool,
) -> None:
    """Draw how sessions, slots and checkpoints came from one another.

    Nodes: sessions, slots (mode, messages, tokens; '*' marks the current session and
    slot) and checkpoints (with --checkpoints; else only those a fork or a rollback
    starts or ends at). Edges: derived, forked, parent (dashed to a parent that is
    gone), merged and rolled back. SESSION (default: the current one) is drawn with
    its descendants. Text lanes use box-drawing characters in a UTF-8 locale and fit
    80 columns; Mermaid warns past its default size; DOT is for Graphviz ('dot
    -Tsvg'). --json prints the model ('agctl schema graph') like --format json.

    \b
    Examples:
      agctl session graph
      agctl session graph --all --checkpoints
      agctl session graph --format mermaid -o graph.mmd
      agctl session graph 1q2w --format dot | dot -Tsvg > graph.svg
      agctl session graph --format html --redact -o graph.html
    """
    from agctl.graph.render import draw

    if all_sessions and session_id:
        from agctl.base.errors import UsageError

        raise UsageError("give SESSION or --all, not both")
    fmt = "json" if app.json and output == "-" else fmt
    drawing = draw(
        app.store,
        None if all_sessions else app.session_id(session_id),
        fmt,
        all_sessions=all_sessions,
        checkpoints=checkpoints,
        turns=turns,
        unicode=not ascii_only and _locale_is_utf8(),
        redact=redact,
    )
    _write_drawing(app, drawing, output, fmt)


def _write_drawing(app: App, drawing: Drawing, output: str, fmt: str) -> None:
    """Write the drawing to stdout or FILE; a file written is reported, with its counts."""
    from agctl.cli.app import write_output

    if drawing.too_big is not None:
        app.warn(f"the Mermaid graph has {drawing.too_big}: try --format html")
    write_output(output, drawing.text.encode())
    if output == "-":
        return
    report = {"file": output, "format": fmt, "nodes": drawing.nodes, "edges": drawing.edges}
    app.done(report, text=f"wrote {output} ({fmt}, {drawing.nodes} nodes)")
