"""`agctl turn retry` and `agctl turn edit`: a turn sent again on a new slot, the old one
kept. A module of its own, imported only when one of them runs (agctl.cli.options.LazyGroup),
so that `turn send` does not build their options."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeVar

import click

from agctl.cli.app import NEGATIVE_INDEX, App, pass_app, text_argument
from agctl.cli.options import (
    SAMPLING_FIELDS,
    command_options,
    gathered,
    provider_options,
    sampling_options,
    slot_option,
    source_options,
    stream_options,
    tool_options,
)
from agctl.cli.turn import branch_notice, run_turn

F = TypeVar("F", bound="Callable[..., Any]")

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from agctl.cli.turn import StreamPrinter
    from agctl.turn.branches import Branch
    from agctl.turn.send import TurnResult
    from agctl.turn.setup import ModelChoice, ToolsChoice, TurnPlan


def resend_options(fn: F) -> F:
    """The options of `turn retry` and `turn edit`: those of `turn send` that a turn sent
    again takes (the slot, model, sampling, streaming, sources and tools)."""
    for decorate in reversed(
        (
            slot_option,
            provider_options,
            sampling_options,
            stream_options,
            source_options,
            tool_options,
            gathered("fields", *SAMPLING_FIELDS),
            command_options,
            pass_app,
        )
    ):
        fn = decorate(fn)
    return fn


# The help of `turn retry`.
RETRY_HELP = """Regenerate the slot's last reply on a new slot; the old one is kept as it was.

A new slot NAME-retry-N, derived from the slot (default: the current one) with its
messages before its last prompt, gets that prompt as a turn ('turn send' on it) and,
once it is committed, becomes the current slot. On failure nothing else changes: the
current slot stays, and the new one keeps the draft ('turn send --resume-draft --slot
NAME-retry-N'). Compare the two with 'slot diff'.

\b
Examples:
  agctl turn retry
  agctl turn retry --temperature 1.2
  agctl turn retry --slot option-a --model gpt-4o
"""


@click.command("retry", help=RETRY_HELP)
@resend_options
def retry(app: App, **given: Any) -> None:
    """Plan the turn as `turn send` does, regenerate the reply (agctl.turn.branches)."""
    from agctl.turn.branches import retry_turn

    resend(
        app,
        lambda sid, plan, printer, tell: retry_turn(
            app.store, sid, plan.provider(), plan.options, on_event=printer, on_branch=tell
        ),
        **given,
    )


def resend(
    app: App,
    send: Callable[[str, TurnPlan, StreamPrinter, Callable[[Branch], None]], TurnResult],
    *,
    slot: str | None,
    choice: ModelChoice,
    stream: bool | None,
    jsonl: bool,
    record: Path | None,
    tools: ToolsChoice,
    loop: dict[str, Any],
    fields: dict[str, Any],
) -> None:
    """`turn retry` and `turn edit`: the turn `send` sends again on a new slot (told on
    stderr), planned, streamed and shown as `turn send` does (run_turn)."""
    from agctl.turn.setup import TurnChoice

    sid = app.session_id()
    tell = branch_notice(app)
    run_turn(
        app,
        sid,
        TurnChoice(choice, tools, loop, record, app.no_hooks),
        lambda plan, printer: send(sid, plan, printer, tell),
        stream=stream,
        jsonl=jsonl,
        slot=slot,
        **fields,
    )


# The help of `turn edit`.
EDIT_HELP = """Send TEXT in place of the prompt at INDEX, on a new slot; the old one is kept.

INDEX is a user message of the slot (default: the current one), counted as 'msg list'
shows them (negative from the end). A new slot NAME-edit-N, derived from the slot
with its messages before INDEX, gets TEXT (or stdin) as a turn ('turn send' on it)
and, once it is committed, becomes the current slot (on failure, the new slot keeps
TEXT as its draft); what followed the old prompt stays on the old slot.
'msg edit' changes a message in place instead, sending nothing.

\b
Examples:
  agctl turn edit 2 "What about the second option?"
  agctl turn edit -2 - < better-question.txt
"""


@click.command("edit", help=EDIT_HELP, context_settings=NEGATIVE_INDEX)
@click.argument("index", type=int)
@click.argument("text", required=False)
@resend_options
def edit(app: App, index: int, text: str | None, **given: Any) -> None:
    """Plan the turn as `turn send` does, send the edited prompt (agctl.turn.branches)."""
    from agctl.turn.branches import edit_turn

    prompt = text_argument(text, "TEXT")
    resend(
        app,
        lambda sid, plan, printer, tell: edit_turn(
            app.store, sid, index, prompt, plan.provider(), plan.options, printer, tell
        ),
        **given,
    )
