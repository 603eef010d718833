"""`agctl turn replay`: a transcript replayed turn by turn into a session, in one process.
A module of its own, imported only when it runs (agctl.cli.options.LazyGroup), so that
`turn send` does not build its options."""

from __future__ import annotations

import sys
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import click

from agctl.base.vocab import CHECK_MODES, SYNC_MODES
from agctl.cli.app import App, Count, pass_app, read_input_file
from agctl.cli.options import (
    command_options,
    gathered,
    provider_options,
    select_option,
    slot_option,
    source_options,
    tool_options,
)
from agctl.cli.output import echo
from agctl.cli.turn import call_printer, terminal_ask

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from contextlib import AbstractContextManager
    from pathlib import Path

    from agctl.base.vocab import CheckMode, SyncMode
    from agctl.turn.setup import ModelChoice, ToolsChoice
    from agctl.turn.transcripts import ReplaySummary


# `--new-session` with no value: a generated id (NUL is never in a command line).
GENERATED_ID = "\0"


# The help of `turn replay`.
REPLAY_HELP = """Replay TRANSCRIPT ('-' for stdin) turn by turn into the session, in one process.

TRANSCRIPT is JSON lines, one turn a line: {"input": ..., "expect": ..., "slot": ...,
"model": ..., "system": ..., "scratch": [...], "temperature": ..., "max_tokens": ...}
(only "input" is required), or an exported slot, whose user messages become the turns
and whose assistant messages the expected replies. With --check, each reply that
differs from the expected one is reported with a diff (the first --max-diffs of
them), then the summary, and the command exits 8 after the last turn; an error stops
the replay at once, naming the turn. --check-mode schema checks instead that each
reply is JSON valid against its line's "expect_schema" (a JSON Schema object, or the
concise form 'name, age int'), naming the turn and its line when it is not; a check
only, the request is the same. --check-mode alone checks too: it implies --check.

With --new-session the replay goes into a new session, made current unless --no-use
(as 'session new' does), so the same replay can run again and again; it is printed
with the summary, and a replay that cannot start leaves no session behind.

Each turn commits whole. By default each is also made durable as it commits (one
fsync a turn); --sync end makes them durable together when the replay ends, for
replays in CI that can simply run again. With --sync end, while the provider answers
fast (a cassette, the offline model) the turns of a tenth of a second commit
together, each still whole (a failed turn is undone alone), and each is printed once
its group is committed; the session is never held locked while a provider thinks.

Another writer's turn on the slot during the replay lands between two replayed turns;
with --if-unchanged the replay stops at that turn instead (exit 4; the turns before
it stay, and no draft is kept: the transcript has the prompt).

\b
Examples:
  agctl turn replay chat.jsonl --cassette chat.cassette --check --new-session
  agctl turn replay chat.jsonl --cassette chat.cassette --new-session --sync end
  agctl turn replay chat.jsonl --record chat.cassette --profile openai
  agctl turn replay chat.jsonl --cassette chat.cassette --new-session ci-42
  agctl turn replay chat.jsonl --cassette chat.cassette --if-unchanged
  agctl msg export --slot good | agctl turn replay - --check-mode contains
  agctl turn replay dogs.jsonl --cassette dogs.cassette --check-mode schema
"""


@click.command("replay", help=REPLAY_HELP)
@click.argument("transcript", metavar="TRANSCRIPT")
@slot_option
@provider_options
@source_options
@click.option("--check", is_flag=True, help="Compare each reply with the expected one.")
@click.option(
    "--check-mode",
    type=click.Choice(CHECK_MODES),
    default=None,
    help="How --check compares (given, it implies --check): the reply equals (exact, the "
    "default), contains or matches (a regex) the line's expect; schema: it is JSON valid "
    "against the line's expect_schema.",
)
@click.option(
    "--max-diffs",
    type=Count(),
    default=5,
    show_default=True,
    metavar="N",
    help="With --check, print the diffs of the first N mismatches.",
)
@click.option(
    "--new-session",
    is_flag=False,
    flag_value=GENERATED_ID,
    default=None,
    metavar="[ID]",
    help="Replay into a new session ID (no ID: a generated one); give it after TRANSCRIPT.",
)
@select_option("the new session of --new-session")
@click.option(
    "--checkpoint/--no-checkpoint",
    default=None,
    help="Checkpoint after each turn (default: config auto_checkpoint, on).",
)
@click.option(
    "--sync",
    type=click.Choice(SYNC_MODES),
    default="per-turn",
    show_default=True,
    help="per-turn: each turn is on disk for good when it commits; end: all at once when "
    "the replay ends, and the turns of a fast provider committed a group at a time "
    "(much faster; a crash of the machine meanwhile may lose the turns replayed so far, "
    "never half of one).",
)
@click.option(
    "--if-unchanged",
    is_flag=True,
    help="Stop at a turn (exit 4) whose slot was written at all while the model answered, "
    "even by another writer's append (allowed by default).",
)
@tool_options
@gathered("fields", "slot", "checkpoint", "if_unchanged")
@command_options
@pass_app
def replay(
    app: App,
    transcript: str,
    choice: ModelChoice,
    record: Path | None,
    check: bool,
    check_mode: CheckMode | None,
    max_diffs: int,
    new_session: str | None,
    make_current: bool,
    sync: SyncMode,
    tools: ToolsChoice,
    loop: dict[str, Any],
    fields: dict[str, Any],
) -> None:
    """Parse the transcript, assemble the turns (agctl.turn.setup.plan_turn), replay, report."""
    from agctl.turn.setup import TurnChoice, plan_turn
    from agctl.turn.transcripts import parse_transcript
    from agctl.turn.transcripts import replay as run_replay

    data, source = read_input_file(transcript)
    checking = (check_mode or "exact") if check or check_mode else None  # a mode asks to check
    turns = parse_transcript(data, source, regex=checking == "regex")
    bar_shown = sys.stderr.isatty() and not app.json
    with replay_session(app, new_session) as sid:
        plan = plan_turn(
            app.store,
            sid,
            TurnChoice(choice, tools, loop, record, app.no_hooks),
            ask=terminal_ask,
            on_call=call_printer(app, True, lambda: bar_shown),
            **fields,
        )
        provider = plan.provider()
        if new_session is not None and make_current:
            app.store.set_current_session(sid)
        with replay_progress(app, len(turns), bar_shown) as on_turn:
            summary = run_replay(
                app.store,
                sid,
                turns,
                provider,
                plan.options,
                check=checking,
                on_turn=on_turn,
                source=source,
                sync=sync,
            )
    report_replay(app, summary, sid, into=new_session is not None, check=checking, diffs=max_diffs)


def replay_session(app: App, new_session: str | None) -> AbstractContextManager[str]:
    """The session a replay goes into: the current one, or a new one (--new-session, its
    id or a generated one) that is destroyed again if the replay gets nowhere."""
    if new_session is None:
        import contextlib

        return contextlib.nullcontext(app.session_id())
    from agctl.turn.transcripts import fresh_session

    return fresh_session(app.store, None if new_session == GENERATED_ID else new_session)


@contextmanager
def replay_progress(app: App, turns: int, shown: bool) -> Iterator[Callable[[Any], None]]:
    """What a replay tells of each turn as it ends: a JSON line with --json, a step of the
    progress bar on a terminal's stderr (`shown`), finished however the replay ends."""
    bar = click.progressbar(length=turns, label="replaying", file=sys.stderr) if shown else None

    def on_turn(outcome: Any) -> None:
        if app.json:
            app.emit_line({"type": "turn", **outcome.to_dict()})
        if bar is not None:
            bar.update(1)

    try:
        yield on_turn
    finally:
        if bar is not None:
            bar.render_finish()


def report_replay(
    app: App, summary: ReplaySummary, sid: str, *, into: bool, check: CheckMode | None, diffs: int
) -> None:
    """A replay's summary: a JSON line with --json, else the first `diffs` mismatches'
    diffs on stderr and one line (the session when `into` a new one); CheckFailed (exit
    8) when a reply differed from the expected one by the `check` mode."""
    result = {"session": sid, **summary.to_dict()}
    if app.json:
        app.emit_line({"type": "summary", **result})
    else:
        if summary.mismatches:
            echo(summary.mismatch_report(diffs) + "\n", err=True)
        rate = f" ({result['turns_per_second']} turns/s)" if result["turns_per_second"] else ""
        shown = f" into session {sid}" if into else ""
        line = f"{summary.sent} turns replayed{shown} in {summary.seconds:.2f} s{rate}"
        if check:
            line += f"; {summary.checked} checked, {result['matched']} matched" + (
                f", {len(summary.mismatched)} differ" if summary.mismatched else ""
            )
        echo(line)
    if summary.mismatched:
        from agctl.base.errors import CheckFailed

        numbers = ", ".join(str(n) for n in summary.mismatched[:20])
        raise CheckFailed(
            f"{len(summary.mismatched)} of {summary.checked} replies differ "
            f"({check}); turns: {numbers}"
        )
