"""`agctl ctx`: where the tokens of the next request go, and compression on demand."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from agctl.base.vocab import COMPRESS_STRATEGIES
from agctl.cli.app import App, Count, PathType, pass_app
from agctl.cli.options import (
    command_options,
    counted_tool_options,
    provider_options,
    slot_option,
)

if TYPE_CHECKING:
    from agctl.context.cache import CacheOutlook
    from agctl.turn.compress import Compression, CompressionPreview
    from agctl.turn.next_request import NextRequest
    from agctl.turn.setup import ModelChoice, ToolsChoice


@click.group("ctx")
def command() -> None:
    """The context of the next request: its budget, and compression.

    \b
    Examples:
      agctl ctx show
      agctl ctx compress --keep-recent 4
    """


@command.command("show")
@click.argument("prompt", required=False)
@slot_option
@provider_options
@click.option("--system", metavar="TEXT", help="System prompt for this turn only.")
@click.option("--scratch", metavar="TEXT", multiple=True, help="Scratch context. Repeatable.")
@counted_tool_options
@click.option(
    "--cache",
    is_flag=True,
    help="Also the part of the next request expected from the provider's cache (the "
    "prefix it shares with the last request sent on the slot) and its input's cost.",
)
@command_options
@pass_app
def show(
    app: App,
    prompt: str | None,
    slot: str | None,
    choice: ModelChoice,
    system: str | None,
    scratch: tuple[str, ...],
    tools: ToolsChoice,
    cache: bool,
) -> None:
    """Every zone of the next request with its tokens, against the budget and the window.

    Zones, in the order a request holds them: system prompt, immutable, compressed, the
    messages view, tool results, memory (when in context), scratch, PROMPT (when given),
    then the definitions of the tools offered (-T NAME, --tools all; MSGS counts the
    definitions). What changes least comes first, so a provider's prefix cache keeps it:
    a memory change re-sends only the memory and what follows. The limit is the model's
    window minus the reserve kept for the reply. Wire parts (what a reply holds that only
    its wire understands and is sent back: Anthropic's thinking signatures, Gemini's
    thought signatures) are counted by wire. Pinned messages ('msg pin') are counted
    against the budget of the messages zone (history + tool results), which they use first.

    With --cache: how much of the request is expected from the provider's cache, by the
    prefix it shares with the last request a turn sent on the slot, and the expected
    cost of its input (cache reads at a tenth of the input price). See docs/cache.md.

    \b
    Examples:
      agctl ctx show
      agctl ctx show "next question" --cache
      agctl ctx show "next question" --model gpt-4o --json
      agctl ctx show "How many words in notes.txt?" -T wc
    """
    from agctl.turn.next_request import next_request

    sid = app.session_id()
    found = next_request(
        app.store,
        sid,
        slot,
        choice,
        tools,
        prompt=prompt,
        system=system,
        scratch=scratch,
        cache=cache,
    )
    emit_next_request(app, sid, found)


def emit_next_request(app: App, sid: str, found: NextRequest) -> None:
    """`ctx show`'s output: the zones and the budget as JSON, or as tables for people."""
    from agctl.turn.compress import slot_pins

    payload: dict[str, Any] = {
        "session": sid,
        "slot": found.slot.id,
        "provider": found.setup.settings.provider,
        **found.breakdown.to_dict(),
        "wire_parts": found.wire_parts,
        "pinned": slot_pins(found.slot, found.breakdown.window).to_dict(),
    }
    if found.outlook is not None:
        payload["cache"] = found.outlook.to_dict()
    app.emit(payload, text=None if app.json else show_text(found, payload))


def show_text(found: NextRequest, payload: dict[str, Any]) -> str:
    """What `ctx show` says, for people: the zones, then the budget's parts, then the total."""
    from agctl.cli.output import table

    result = found.breakdown
    rows = [
        {**zone, "share": f"{zone['tokens'] / max(result.limit, 1):.1%}"}
        for zone in payload["zones"]
    ]
    heading = (
        f"slot {found.slot.id} · {found.setup.settings.provider} model {result.model} · "
        f"window {result.window} · "
        f"reserve {result.budget.reserve} · limit {result.limit}"
    )
    columns = [
        ("zone", "ZONE"),
        ("messages", "MSGS"),
        ("tokens", "TOKENS"),
        ("share", "OF LIMIT"),
        ("budget", "BUDGET"),
    ]
    parts = [
        {
            "part": part,
            "used": v["used"],
            "budget": v["budget"],
            "over": f"over by {v['used'] - v['budget']}" if v["over"] else "",
        }
        for part, v in payload["budget"].items()
    ]
    part_columns = [("part", "BUDGET"), ("used", "USED"), ("budget", "OF"), ("over", "")]
    state = "over by" if result.room < 0 else "room left"
    total = f"total {result.total} of {result.limit}: {state} {abs(result.room)}"
    lines = [heading, table(rows, columns), "", table(parts, part_columns), "", total]
    pins = payload["pinned"]
    if pins["messages"]:
        lines.append(
            f"pinned: {pins['messages']} message{'s' * (pins['messages'] != 1)}, "
            f"{pins['tokens']} tokens of the {pins['limit']} the messages zone's budget "
            "gives them ('msg pin': kept by every compression)"
        )
    if result.cleared is not None:
        lines.append(cleared_line(*result.cleared))
    if found.wire_parts:
        counts = ", ".join(f"{count} {wire}" for wire, count in found.wire_parts.items())
        lines.append(f"wire parts: {counts}")
    if found.outlook is not None:
        lines.append(cache_line(found.outlook))
    return "\n".join(lines)


def cleared_line(results: int, saved: int) -> str:
    """What `ctx show` says of the tool results the view sends cleared (clear_tool_results)."""
    kept = "the store keeps them whole"
    return f"tool results cleared in the view: {results}, {saved} tokens saved ({kept})"


def cache_line(outlook: CacheOutlook) -> str:
    """What `ctx show --cache` says of the cache, in one line."""
    if outlook.last_sent is None:
        said = "no turn sent on this slot yet: nothing expected from the cache"
    else:
        said = (
            f"cache: ~{outlook.cached_tokens} of {outlook.input_tokens} input tokens "
            f"({outlook.share:.0%}) expected from the cache, the first "
            f"{outlook.cached_messages} messages of the last request ({outlook.last_sent})"
        )
    if outlook.cost is None or outlook.cost_uncached is None:
        return said + "; input unpriced"
    from agctl.reports.usage import money

    return f"{said}; input ~{money(outlook.cost)} ({money(outlook.cost_uncached)} uncached)"


# The help of `ctx compress`.
COMPRESS_HELP = """Fold older messages of a slot into its compressed zone, keeping the recent ones.

The session is checkpointed before and after, so the originals can be recovered with
'agctl ckpt rollback'. A compression changes the request from the compressed zone on
(a truncation: from the first folded message), so the provider's cache of it is lost
once; fewer than --min-tokens to fold is not worth that, and nothing is done.
--dry-run says what would be folded and invalidated.

Every compression reports its loss: the user instructions, URLs, file paths, ids and
numbers in what it folded that what replaces it does not hold (a truncation replaces
it with nothing: all of them); the checkpoint after the compression keeps the report
('agctl ckpt show ID --json'). A dry run of a truncation reports the loss exactly; a
dry run of a summary calls no model, so it cannot know the summary: it lists every fact
of what would be folded as at risk. --fail-on-loss KINDS (or the config's
compress_fail_on_loss, which automatic compression in a turn follows too) refuses a
compression that would lose a fact of those kinds: exit 7, nothing written; a dry run
says whether it would be refused (of a summary: what the summary must keep).

\b
Examples:
  agctl ctx compress --dry-run
  agctl ctx compress
  agctl ctx compress --strategy truncate --keep-recent 10
  agctl ctx compress --strategy rolling
  agctl ctx compress --strategy extractive --budget-tokens 500
  agctl ctx compress --instructions "Keep every date and amount."
  agctl ctx compress --fail-on-loss instructions,paths
"""


@command.command("compress", help=COMPRESS_HELP)
@slot_option
@click.option(
    "--strategy",
    type=click.Choice(COMPRESS_STRATEGIES),
    default="summarize",
    show_default=True,
    help="summarize: the provider folds the previous summary and older messages into one "
    "paragraph; rolling: the provider updates the previous summary with them, in the "
    "sections of the slot's summary_template, keeping their instructions and artifacts "
    "verbatim; extractive: keep their sentences that carry instructions, paths, ids, "
    "numbers and URLs, verbatim, no model asked; truncate: drop them.",
)
@click.option("--keep-recent", type=Count(), metavar="K", help="Messages kept.")
@click.option(
    "--min-tokens",
    type=Count(),
    metavar="N",
    help="Fold at least N tokens or none: a compression invalidates the provider's cache "
    "of what follows the immutable zone (default: compress_min_tokens, 2048; 0: always).",
)
@click.option(
    "--dry-run",
    is_flag=True,
    help="Say what would be folded, what cached tokens it would invalidate and what facts "
    "it would lose (of a summary: put at risk); change nothing, call no model.",
)
@click.option(
    "--instructions",
    metavar="TEXT",
    help="How to summarise: replaces summarize's prompt, or rolling's sections.",
)
@click.option(
    "--budget-tokens",
    type=Count(),
    metavar="N",
    help="The summary's size: extractive keeps at most N tokens of sentences (default: a "
    "quarter of the tokens folded, at least 128); summarize and rolling ask the model to "
    "stay under N tokens (the offline provider's extract does).",
)
@click.option(
    "--fail-on-loss",
    metavar="KINDS",
    callback=lambda ctx, param, value: None if value is None else fact_kinds(value),
    help="Refuse (exit 7, nothing written) a compression that would lose a fact of these "
    "kinds: a comma list of instructions, urls, paths, ids, numbers; any; none "
    "(default: compress_fail_on_loss, none).",
)
@provider_options
@click.option(
    "--script",
    type=PathType(dir_okay=False),
    help="Offline provider with canned replies (summaries stay deterministic).",
)
@click.option("--cassette", type=PathType(dir_okay=False), help="Replay.")
@command_options
@pass_app
def compress(
    app: App,
    slot: str | None,
    strategy: str,
    keep_recent: int | None,
    min_tokens: int | None,
    dry_run: bool,
    instructions: str | None,
    budget_tokens: int | None,
    fail_on_loss: tuple[str, ...] | None,
    choice: ModelChoice,
) -> None:
    """Resolve the model setup, compress (or preview), report."""
    from agctl.turn.compress import compress as run_compress
    from agctl.turn.setup import ModelSetup
    from agctl.turn.summaries import check_options

    check_options(strategy, instructions=instructions, budget_tokens=budget_tokens)

    sid = app.session_id()
    setup = ModelSetup.chosen(app.store, sid, choice)
    kept = setup.config.compress_keep_recent if keep_recent is None else keep_recent
    least = setup.config.compress_min_tokens if min_tokens is None else min_tokens
    kinds = setup.config.fail_on_loss() if fail_on_loss is None else fail_on_loss
    # What a preview and the compression itself are both told.
    shared: dict[str, Any] = dict(
        strategy=strategy, keep_recent=kept, min_tokens=least, window=setup.window,
        fail_on_loss=kinds,
    )  # fmt: skip
    if dry_run:
        from agctl.turn.compress import preview_compression

        preview = preview_compression(app.store, sid, slot, **shared)
        app.emit(preview.to_dict(), text=preview_text(preview))
        return
    result = run_compress(
        app.store,
        sid,
        slot,
        provider=setup.provider() if strategy in ("summarize", "rolling") else None,
        model=setup.settings.model,
        instructions=instructions,
        hooks=setup.hooks(no_hooks=app.no_hooks),
        budget_tokens=budget_tokens,
        **shared,
    )
    app.done(*compression_report(result, least))


def fact_kinds(spec: str) -> tuple[str, ...]:
    """--fail-on-loss's kinds, or a usage error naming the known ones."""
    from agctl.context.artifacts import kinds_of

    try:
        return kinds_of(spec)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


def compression_report(result: Compression, least: int) -> tuple[dict[str, Any], str]:
    """What `ctx compress` says of a compression: its JSON, and its line for people."""
    payload = {
        "slot": result.slot,
        "strategy": result.strategy,
        "folded": result.folded,
        "kept": result.kept,
        "checkpoint_before": result.before,
        "checkpoint_after": result.after,
        "summary": result.summary,
        "loss": result.loss.to_dict() if result.loss is not None else None,
    }
    if result.cancelled:
        payload["cancelled"] = True
        text = f"a PreCompress hook cancelled the compression of slot {result.slot}"
    elif result.too_little is not None:
        payload["too_little"] = result.too_little
        text = (
            f"nothing compressed in slot {result.slot}: only ~{result.too_little} tokens to "
            f"fold, under --min-tokens {least} (the provider's cache it would invalidate "
            "costs more); --min-tokens 0 compresses anyway"
        )
    elif result.folded == 0:
        text = f"nothing to compress in slot {result.slot} ({result.kept} messages kept)"
    else:
        text = (
            f"compressed slot {result.slot}: {result.folded} messages folded ({result.strategy}), "
            f"{result.kept} kept; the originals are in checkpoint {result.before}"
        )
        if result.loss is not None:
            text += "\n" + result.loss.text()
    return payload, text


def preview_text(preview: CompressionPreview) -> str:
    """What `ctx compress --dry-run` says, for people."""
    if not preview.folded:
        return f"nothing to compress in slot {preview.slot} ({preview.kept} messages kept)"
    lines = [
        f"would fold {preview.folded} messages (~{preview.folded_tokens} tokens) of slot "
        f"{preview.slot} ({preview.strategy}), keeping {preview.kept}",
        f"invalidates ~{preview.invalidated} cached tokens (sent anew once); "
        f"~{preview.cached_kept} stay cached",
    ]
    if not preview.enough:
        lines.append(
            f"under --min-tokens {preview.min_tokens}: nothing would be compressed "
            "(--min-tokens 0 compresses anyway)"
        )
    if preview.loss is not None:
        from agctl.turn.loss import refusal_text

        lines.append(preview.loss.text())
        refusal = refusal_text(preview.loss, preview.fail_on_loss)
        if refusal is not None:
            lines.append(refusal)
    return "\n".join(lines)
