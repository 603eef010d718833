"""`agctl slot`: create, derive, switch, inspect, re-mode and delete context slots."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click

from agctl.base.vocab import DERIVE_STRATEGIES, MERGE_STRATEGIES, SLOT_MODES, SLOT_SETTINGS
from agctl.cli.app import App, Count, pass_app, read_input_file
from agctl.cli.complete import complete_slots
from agctl.cli.options import command_options, provider_options, slot_option
from agctl.cli.output import plain

if TYPE_CHECKING:
    from agctl.context.models import ContextBudget, Message, Slot, TokenBudget
    from agctl.turn.merge import MergeResult
    from agctl.turn.setup import ModelChoice

F = TypeVar("F", bound=Callable[..., Any])


def slot_row(slot: Slot, current_slot: str | None = None) -> dict[str, Any]:
    from agctl.context.models import isoformat

    return {
        "id": slot.id,
        "current": slot.id == current_slot,
        "mode": slot.config.mode,
        "source": slot.config.source.kind,
        "parent_id": slot.meta.parent_id,
        "message_count": slot.meta.message_count,
        "total_tokens": slot.meta.total_tokens,
        "updated_at": isoformat(slot.meta.updated_at),
    }


def focus_options(fn: F) -> F:
    """The focused-mode settings, shared by `slot new`, `slot derive` and `slot mode`."""
    fn = click.option(
        "--auto-summary-every",
        type=Count(),
        metavar="N",
        help="Focused: have the model rewrite the summary after every N turns (0: never).",
    )(fn)
    fn = click.option(
        "--summary",
        metavar="TEXT",
        help="Summary shown in place of older messages ('' clears it).",
    )(fn)
    fn = click.option(
        "--stride",
        type=Count(min=1),
        metavar="K",
        help="Focused: drop old messages K at a time, so the start of the view (and the "
        "provider's cache of it) stays put while K messages come (default 16; 1 slides "
        "every turn).",
    )(fn)
    fn = click.option(
        "--recent",
        type=Count(),
        metavar="N",
        help="Focused: keep at least the last N messages.",
    )(fn)
    return click.option(
        "--keep-system/--no-keep-system",
        default=None,
        help="Focused: keep the first system message.",
    )(fn)


def focus_changes(
    keep_system: bool | None,
    recent: int | None,
    summary: str | None,
    auto_summary_every: int | None = None,
    stride: int | None = None,
) -> dict[str, Any]:
    return {
        "keep_system": keep_system,
        "recent_messages": recent,
        "stride": stride,
        "summary_override": summary,
        "auto_summary_every": auto_summary_every,
    }


def transcript(messages: list[Message]) -> str:
    """Messages as people read them: a header line per message, then its text."""
    blocks = []
    for index, message in enumerate(messages):
        header = f"[{index}] {message.role}"
        if message.name:
            header += f" ({message.name})"
        header += f"  ~{message.token_count()} tokens"
        body = message.text()
        for call in message.tool_calls or ():
            body += f"\n→ {call.function.name}({call.function.arguments}) id={call.id}"
        if message.tool_call_id:
            header += f"  for {message.tool_call_id}"
        blocks.append(f"{header}\n{body}")
    return "\n\n".join(blocks)


@click.group("slot")
def command() -> None:
    """Context slots: independent, branchable message lists.

    \b
    Examples:
      agctl slot new scratchpad
      agctl slot derive plan-b --from default --use
      agctl slot mode focused --recent 6
      agctl slot show --view
    """


@command.command("new")
@click.argument("slot_id", metavar="NAME", shell_complete=complete_slots)
@click.option("--mode", type=click.Choice(SLOT_MODES), default="full", show_default=True)
@focus_options
@click.option(
    "--static",
    "static_file",
    metavar="FILE",
    help="Make a static slot whose immutable zone holds the messages in FILE ('-' for stdin).",
)
@click.option("--use", "make_current", is_flag=True, help="Switch to the new slot.")
@command_options
@pass_app
def new(
    app: App,
    slot_id: str,
    mode: str,
    keep_system: bool | None,
    recent: int | None,
    stride: int | None,
    summary: str | None,
    auto_summary_every: int | None,
    static_file: str | None,
    make_current: bool,
) -> None:
    """Create an empty slot, or a static one with preset messages.

    \b
    Examples:
      agctl slot new notes
      agctl slot new recent --mode focused --recent 4
      agctl slot new rules --static rules.json --mode readonly
    """
    immutable: list[Message] = []
    if static_file is not None:
        from agctl.interchange.formats import parse_messages

        data, source = read_input_file(static_file)
        immutable = parse_messages(data, source=source)
    slot = app.store.create_slot(
        app.session_id(),
        slot_id,
        mode=mode,
        focus=focus_changes(keep_system, recent, summary, auto_summary_every, stride),
        immutable=immutable,
        make_current=make_current,
    )
    app.done(slot_row(slot, slot.id if make_current else None), text=f"created slot {slot.id}")


@command.command("derive")
@click.argument("slot_id", metavar="NAME", shell_complete=complete_slots)
@click.option(
    "--from",
    "source",
    metavar="SLOT",
    shell_complete=complete_slots,
    help="Parent slot (default: the current slot).",
)
@click.option(
    "--strategy",
    type=click.Choice(DERIVE_STRATEGIES),
    default="full",
    show_default=True,
    help="full: copy every message; focused: copy the parent's focused view.",
)
@focus_options
@click.option("--use", "make_current", is_flag=True, help="Switch to the new slot.")
@command_options
@pass_app
def derive(
    app: App,
    slot_id: str,
    source: str | None,
    strategy: str,
    keep_system: bool | None,
    recent: int | None,
    stride: int | None,
    summary: str | None,
    auto_summary_every: int | None,
    make_current: bool,
) -> None:
    """Branch a new slot off an existing one; the parent is recorded and left untouched.

    \b
    Examples:
      agctl slot derive plan-b --use
      agctl slot derive short --from default --strategy focused --recent 4
    """
    slot = app.store.derive_slot(
        app.session_id(),
        slot_id,
        source=source,
        strategy=strategy,  # type: ignore[arg-type]
        focus=focus_changes(keep_system, recent, summary, auto_summary_every, stride),
        make_current=make_current,
    )
    text = f"derived slot {slot.id} from {slot.meta.parent_id} ({strategy})"
    app.done(slot_row(slot, slot.id if make_current else None), text=text)


@command.command("use")
@click.argument("slot_id", metavar="NAME", shell_complete=complete_slots)
@command_options
@pass_app
def use(app: App, slot_id: str) -> None:
    """Switch the session's current slot.

    \b
    Examples:
      agctl slot use plan-b
    """
    session = app.store.use_slot(app.session_id(), slot_id)
    payload = {"session": session.id, "current_slot": session.current_slot}
    app.done(payload, text=f"current slot: {session.current_slot}")


@command.command("diff")
@click.argument("first", metavar="[A]", required=False, shell_complete=complete_slots)
@click.argument("second", metavar="[B]", required=False, shell_complete=complete_slots)
@command_options
@pass_app
def diff(app: App, first: str | None, second: str | None) -> None:
    """Compare the messages of slot A with slot B's, as a unified diff.

    B defaults to the current slot, A to the slot B was derived from: after 'turn
    retry' or 'turn edit', what the new reply or prompt changed. Each message starts a
    line '#INDEX ROLE: ', its further lines indented. JSON: {"a", "b", "shared" (how many
    first messages the two have alike), "diff": [lines]}.

    \b
    Examples:
      agctl slot diff
      agctl slot diff default default-retry-1
    """
    from agctl.turn.branches import compare_slots

    result = compare_slots(app.store, app.session_id(), first, second)
    same = f"slots {result.a} and {result.b} hold the same messages"
    app.emit(result.to_dict(), text="\n".join(result.lines) or same)


@command.command("list")
@command_options
@pass_app
def list_(app: App) -> None:
    """List the session's slots; '*' marks the current one.

    \b
    Examples:
      agctl slot list
      agctl -s 1q2w slot list --json
    """
    sid = app.session_id()
    current = app.store.load_session(sid).current_slot
    rows = [slot_row(s, current) for s in app.store.list_slots(sid)]
    display = [{**r, "mark": "*" if r["current"] else ""} for r in rows]
    columns = [
        ("mark", ""),
        ("id", "SLOT"),
        ("mode", "MODE"),
        ("source", "SOURCE"),
        ("parent_id", "PARENT"),
        ("message_count", "MSGS"),
        ("total_tokens", "TOKENS"),
    ]
    app.emit_rows(rows, columns, display=display)


@command.command("show")
@click.argument("slot_id", metavar="[NAME]", required=False, shell_complete=complete_slots)
@click.option(
    "--view",
    is_flag=True,
    help="Print the exact messages a model would receive (system prompt, zones, mode's view).",
)
@command_options
@pass_app
def show(app: App, slot_id: str | None, view: bool) -> None:
    """Show a slot's config and zones, or with --view what the model would see.

    \b
    Examples:
      agctl slot show
      agctl slot show plan-b --view
      agctl slot show --view --json | jq '.messages'
    """
    sid = app.session_id()
    session = app.store.load_session(sid)
    slot = app.store.load_slot(sid, slot_id)
    if view:
        from agctl.context.models import messages_to_openai
        from agctl.context.view import request_view

        messages = request_view(session, slot, window=view_window(app, sid, slot))
        tokens = sum(m.token_count() for m in messages)
        payload = {
            "session": sid,
            "slot": slot.id,
            "mode": slot.config.mode,
            "tokens": tokens,
            "messages": messages_to_openai(messages),
        }
        app.emit(payload, text=transcript(messages) or "(the view is empty)")
    elif app.json:
        app.emit({**slot.model_dump(mode="json"), "current": slot.id == session.current_slot})
    else:
        app.emit(slot_summary(slot, current=slot.id == session.current_slot))


def slot_summary(slot: Slot, *, current: bool) -> dict[str, Any]:
    """What `slot show` says of a slot, for people: its config, merges and zones."""
    from agctl.context.models import isoformat

    config = slot.config
    summary: dict[str, Any] = {
        "slot": slot.id + ("  (current)" if current else ""),
        "mode": config.mode,
        "source": config.source.kind
        + (
            f" from {config.source.parent_id} ({config.source.strategy})"
            if config.source.parent_id
            else ""
        ),
    }
    if config.mode == "focused":
        focus = config.focused
        summary["focused"] = (
            f"keep_system={focus.keep_system} recent_messages={focus.recent_messages}"
            f" stride={focus.stride}"
            f" summary={'set' if focus.summary_override else 'none'}"
        )
    if config.auto_compress is not None:
        summary["auto compress"] = config.auto_compress
    if config.budget is not None:
        summary["budget"] = budget_text(config.budget)
    if config.summary_template is not None:
        summary["summary template"] = " ".join(config.summary_template.split())
    for merge in slot.meta.merges:
        summary.setdefault("merges", "")
        summary["merges"] += (
            f"{'; ' if summary['merges'] else ''}{merge.source} ({merge.strategy}, "
            f"{len(merge.hashes)} messages, {isoformat(merge.at)[:16]})"
        )
    summary.update(
        {
            "immutable": len(slot.immutable),
            "compressed": len(slot.compressed),
            "messages": len(slot.messages),
            "tokens": slot.meta.total_tokens,
            "created": isoformat(slot.meta.created_at),
            "updated": isoformat(slot.meta.updated_at),
        }
    )
    return summary


@command.command("mode")
@click.argument("mode", type=click.Choice(SLOT_MODES))
@click.argument("slot_id", metavar="[NAME]", required=False, shell_complete=complete_slots)
@focus_options
@command_options
@pass_app
def mode(
    app: App,
    mode: str,
    slot_id: str | None,
    keep_system: bool | None,
    recent: int | None,
    stride: int | None,
    summary: str | None,
    auto_summary_every: int | None,
) -> None:
    """Change a slot's mode; messages are kept, the view is filtered when read.

    \b
    Examples:
      agctl slot mode focused --recent 6 --summary "We agreed on plan B."
      agctl slot mode focused --recent 20 --stride 4
      agctl slot mode readonly reference
      agctl slot mode full
    """
    sid = app.session_id()
    slot = app.store.set_mode(
        sid,
        slot_id,
        mode,
        focus=focus_changes(keep_system, recent, summary, auto_summary_every, stride),
    )
    current = app.store.load_session(sid).current_slot
    app.done(slot_row(slot, current), text=f"slot {slot.id} is now {slot.config.mode}")


@command.command("rm")
@click.argument("slot_id", metavar="NAME", shell_complete=complete_slots)
@command_options
@pass_app
def rm(app: App, slot_id: str) -> None:
    """Delete a slot. 'default' and the last slot are protected.

    Deleting the current slot switches the session to 'default'. The session is
    checkpointed first: 'ckpt rollback' undoes it.

    \b
    Examples:
      agctl slot rm plan-b
    """
    sid = app.session_id()
    with app.store.undoable(sid, "slot rm"):
        session = app.store.delete_slot(sid, slot_id)
    payload = {"deleted": slot_id, "current_slot": session.current_slot}
    app.done(payload, text=f"deleted slot {slot_id}; current slot: {session.current_slot}")


@command.command("summarize")
@click.argument("slot_id", metavar="[NAME]", required=False, shell_complete=complete_slots)
@click.option("--instructions", metavar="TEXT", help="How to summarise (replaces the default).")
@provider_options
@command_options
@pass_app
def summarize(
    app: App,
    slot_id: str | None,
    instructions: str | None,
    choice: ModelChoice,
) -> None:
    """Have the model summarise a slot; store it as the slot's focused summary.

    The summary is shown in place of older messages when the slot is in focused mode.

    \b
    Examples:
      agctl slot summarize
      agctl slot summarize research --profile ds && agctl slot mode focused research
    """
    from agctl.turn.compress import summarize_slot
    from agctl.turn.setup import ModelSetup

    sid = app.session_id()
    setup = ModelSetup.chosen(app.store, sid, choice)
    slot = summarize_slot(
        app.store,
        sid,
        slot_id,
        setup.provider(),
        model=setup.settings.model,
        instructions=instructions,
    )
    summary = slot.config.focused.summary_override
    app.emit({"slot": slot.id, "summary": summary}, text=summary)


@command.command("merge")
@click.argument("source", metavar="SRC", shell_complete=complete_slots)
@click.option(
    "--into",
    "target",
    metavar="DST",
    shell_complete=complete_slots,
    help="Target slot (default: SRC's parent).",
)
@click.option(
    "--strategy",
    type=click.Choice(MERGE_STRATEGIES),
    default="append",
    show_default=True,
    help="append: copy what SRC added; summary: append one summary of it.",
)
@provider_options
@command_options
@pass_app
def merge(
    app: App,
    source: str,
    target: str | None,
    strategy: str,
    choice: ModelChoice,
) -> None:
    """Bring back what SRC added since it branched from DST. Merging twice adds nothing.

    The merge is recorded on DST (source, strategy, which messages) and shown by
    'slot show'. The session is checkpointed first: 'ckpt rollback' undoes it.

    \b
    Examples:
      agctl slot merge option-a
      agctl slot merge experiment --into default --strategy summary
    """
    from agctl.turn.merge import merge_slots

    sid = app.session_id()
    provider = None
    chosen_model = "offline"
    if strategy == "summary":
        from agctl.turn.setup import ModelSetup

        setup = ModelSetup.chosen(app.store, sid, choice)
        provider, chosen_model = setup.provider(), setup.settings.model
    with app.store.undoable(sid, "slot merge"):
        result = merge_slots(
            app.store,
            sid,
            source,
            target,
            strategy=strategy,  # type: ignore[arg-type]
            provider=provider,
            model=chosen_model,
        )
    app.done(*merge_report(result))


def merge_report(result: MergeResult) -> tuple[dict[str, Any], str]:
    """What `slot merge` says of a merge: its JSON, and its line for people."""
    payload = {
        "source": result.source,
        "into": result.target,
        "strategy": result.strategy,
        "merged": result.merged,
        "appended": result.appended,
        "already_merged": result.skipped,
    }
    if result.merged:
        text = (
            f"merged {result.merged} message(s) of {result.source} into {result.target} "
            f"({result.strategy}: {result.appended} appended)"
        )
    else:
        text = f"nothing new to merge from {result.source} into {result.target}"
    return payload, text


@command.command("set")
@click.argument("key", type=click.Choice(SLOT_SETTINGS))
@click.argument("value")
@slot_option
@command_options
@pass_app
def set_(app: App, key: str, value: str, slot: str | None) -> None:
    """Set a slot setting: auto_compress (true, false, default), budget (auto or JSON),
    summary_template (text, plain or default) or clear_tool_results (none or JSON).

    summary_template gives the sections a rolling summary ('ctx compress --strategy
    rolling') is written in, as the prompt shows them (default: goal, decisions, user
    instructions, artifacts, open tasks); 'plain' asks for one paragraph instead.

    A budget names some or all of its parts (system, history, tools, tool_results,
    reserve); parts left out keep their value, null puts one back to auto (its share of
    the window). A part is a token count (a whole number: 2000) or a share of the model's
    window (a fraction strictly between 0 and 1: 0.1 is 10 %). A reserve that leaves no
    room in the window of the session's model is refused.

    clear_tool_results sends old tool results as a stub naming the tool, the size and
    the sha256 (the slot keeps them whole): once the slot passes `trigger` (tokens, or a
    share of the window; 0.5), all results but the last `keep_last` (3) are cleared at
    once, if that saves at least `min_tokens` (2048), so the provider's cache is
    rewritten rarely; `exclude` names tools never cleared, `preview` keeps that many
    characters (0). The object replaces the whole setting; none turns it off.

    \b
    Examples:
      agctl slot set auto_compress false
      agctl slot set budget '{"reserve": 0.1}'
      agctl slot set budget '{"system": 2000, "tool_results": 0.2}' --slot notes
      agctl slot set budget auto --slot notes
      agctl slot set summary_template $'## Goal\\n## Risks\\n## Next steps'
      agctl slot set summary_template plain
      agctl slot set clear_tool_results '{"keep_last": 2, "exclude": ["plan"]}'
    """
    from agctl.config.settings import slot_setting_from_text

    setting = slot_setting_from_text(key, value)
    if key == "budget":
        set_budget_setting(app, slot, setting)
        return
    changed = app.store.configure_slot(app.session_id(), slot, {key: setting})
    shown = getattr(changed.config, key)
    app.done({"slot": changed.id, key: shown}, text=f"slot {changed.id}: {key} = {plain(shown)}")


def view_window(app: App, sid: str, slot: Slot) -> int | None:
    """The window of the session's model, when the slot's view needs it (it clears old
    tool results past a share of the window); None otherwise, resolving nothing."""
    if slot.config.clear_tool_results is None:
        return None
    from agctl.turn.setup import ModelSetup

    return ModelSetup.resolve(app.store, sid).window


def set_budget_setting(app: App, slot: str | None, setting: Any) -> None:
    """`slot set budget`: merge the parts given into the slot's budget, then show it in
    tokens for the window of the session's model."""
    from agctl.base.errors import UsageError
    from agctl.context.models import ContextBudget
    from agctl.turn.setup import ModelSetup

    if setting is not None and not isinstance(setting, dict):
        raise UsageError(f"a budget is a JSON object of parts or 'auto', not {plain(setting)}")
    sid = app.session_id()
    setup = ModelSetup.resolve(app.store, sid)
    window, model = setup.window, setup.settings.model
    changed = app.store.set_budget(sid, slot, setting, window=window, model=model)
    budget = changed.config.budget
    tokens = (budget or ContextBudget()).resolve(window)
    payload = {
        "slot": changed.id,
        "budget": None if budget is None else budget.model_dump(),
        "model": model,
        "window": window,
        "tokens": tokens.model_dump(),
        "limit": window - tokens.reserve,
    }
    text = (
        f"slot {changed.id}: budget {budget_text(budget, tokens)} "
        f"(window {window} of {model}, limit {payload['limit']})"
    )
    app.done(payload, text=text)


def budget_text(budget: ContextBudget | None, tokens: TokenBudget | None = None) -> str:
    """Each part as it was given (a count, a share, auto), in tokens when they are known."""
    from agctl.context.models import ContextBudget

    given = (budget or ContextBudget()).model_dump()
    in_tokens = tokens.model_dump() if tokens is not None else {}
    parts = []
    for part, value in given.items():
        how = "auto" if value is None else f"{value:.0%}" if isinstance(value, float) else ""
        if part in in_tokens:
            parts.append(f"{part} {in_tokens[part]}" + (f" ({how})" if how else ""))
        else:
            parts.append(f"{part} {how or value}")
    return ", ".join(parts)
