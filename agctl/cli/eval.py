"""`agctl eval`: measure what agctl's context management keeps, over repeated runs."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from agctl.cli.app import App, Count, PathType, pass_app, read_input_file
from agctl.cli.options import json_option, provider_options
from agctl.cli.output import echo, json_text

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from agctl.evals.compaction import Report, Run
    from agctl.turn.setup import ModelChoice


@click.group("eval")
def command() -> None:
    """Measure what compression keeps, over repeated runs, offline or with a model.

    \b
    Examples:
      agctl eval compaction
      agctl eval compaction --profile claude --runs 5
      agctl eval probes --out probes/
    """


# The longest transcript the generator makes: it holds it in memory (about 2 KB a message).
MAX_MESSAGES = 20_000


# The probe generator's knobs, shared by `compaction` and `probes`.
def generator_options(fn: Any) -> Any:
    for option in reversed(
        [
            click.option(
                "--seed",
                type=Count(),
                default=0,
                show_default=True,
                help="The probe generator's seed (run r of an evaluation uses seed+r).",
            ),
            click.option(
                "--messages",
                type=click.IntRange(min=20, max=MAX_MESSAGES),
                default=240,
                show_default=True,
                help=f"Messages in a generated transcript (at most {MAX_MESSAGES:,}).",
            ),
            click.option(
                "--facts",
                type=Count(min=1),
                default=16,
                show_default=True,
                help="Facts planted in it, one probe each.",
            ),
            click.option(
                "--drift",
                type=Count(),
                default=3,
                show_default=True,
                help="Facts whose value changes later on (their probe expects the last).",
            ),
        ]
    ):
        fn = option(fn)
    return fn


COMPACTION_HELP = """Compare compression strategies by what their context still answers.

Each run replays a transcript into a throwaway session in memory (the store is not
touched), compressing with each strategy whenever the context passes --budget-tokens
(checked every --every messages and at the end), then asks the probe questions against
what is left, as the next turn would send it, and checks each answer: it must contain
the expected text (or equal it, or a judge model says it states it). The report gives,
per strategy, probe recall over the runs (mean, spread, range), answers that gave a
value since changed (stale), the tokens kept, the facts the compressions' loss reports
counted lost, the tokens spent and their cost.

Every strategy is held to the same budget: after a compression the context holds at
most --budget-tokens where it can (a truncation keeps as many recent messages as fit; a
summary gets what the --keep-recent messages leave: an extract keeps to it exactly, a
model is asked to; a leading system message, pins and a tool call with its results are
never split or dropped, so KEPT may pass the budget). Strategies: truncate, extractive,
summarize, rolling; add +pins to keep the messages the transcript pins (without, its
pins are dropped).

Without --transcript and --probes, run r uses the probe generator's transcript of seed
--seed + r (facts planted by template, some changing value later), so runs differ; with
them, the same transcript is replayed each run and the model is what varies. The
offline provider summarises extractively and answers with the sentence of the context
that shares most words with the question: no model, deterministic. It is used unless
--profile, --provider or --model names a model (a default profile is not used): then
every summary, answer and judgement is a request to it, and a request that fails counts
its probe wrong, the error in the answer (JSON). Each run's result is printed on stderr
as it ends (a JSON line with --json), so a failed or interrupted evaluation keeps what
it measured.

\b
Examples:
  agctl eval compaction
  agctl eval compaction --strategy truncate,rolling+pins --runs 3 --json
  agctl eval compaction --profile claude --judge-profile gpt
  agctl eval probes --out set/ && agctl eval compaction \\
      --transcript set/transcript.jsonl --probes set/probes.jsonl --profile claude
"""


@command.command("compaction", help=COMPACTION_HELP)
@click.option(
    "--strategy",
    "strategies",
    metavar="LIST",
    default="truncate,extractive,rolling,rolling+pins",
    show_default=True,
    help="Strategies to compare, comma-separated: truncate, extractive, summarize, rolling, "
    "each optionally with +pins.",
)
@click.option(
    "--runs", type=Count(min=1), default=5, show_default=True, help="Runs of each strategy."
)
@click.option(
    "--budget-tokens",
    "budget",
    type=Count(min=128),
    default=2000,
    show_default=True,
    help="What the context may hold after a compression, in tokens.",
)
@click.option(
    "--every",
    type=Count(min=1),
    default=40,
    show_default=True,
    help="Check the budget (and compress) after every N messages replayed.",
)
@click.option(
    "--keep-recent",
    type=Count(),
    default=6,
    show_default=True,
    help="Messages a summary keeps verbatim after it.",
)
@click.option(
    "--transcript",
    metavar="FILE",
    help="Messages to replay: a JSON array or JSON lines (msg export); '-' for stdin.",
)
@click.option(
    "--probes",
    "probes_file",
    metavar="FILE",
    help='JSON lines of {"question", "expect", "match": contains|exact|judge, "stale"}.',
)
@generator_options
@click.option(
    "--judge-profile",
    metavar="NAME",
    help="Profile whose model grades probes of match judge (default: the one evaluated).",
)
@provider_options
@json_option
@pass_app
def compaction(
    app: App,
    strategies: str,
    runs: int,
    budget: int,
    every: int,
    keep_recent: int,
    transcript: str | None,
    probes_file: str | None,
    seed: int,
    messages: int,
    facts: int,
    drift: int,
    judge_profile: str | None,
    choice: ModelChoice,
) -> None:
    """Read the inputs, run the evaluation, report."""
    from agctl.evals.compaction import Settings, Source, evaluate_compaction, parse_strategies

    settings = Settings(parse_strategies(strategies), runs, budget, every, keep_recent)
    source = Source(
        transcript=read_input_file(transcript) if transcript is not None else None,
        probes=read_input_file(probes_file) if probes_file is not None else None,
        seed=seed,
        messages=messages,
        facts=facts,
        drift=drift,
    )
    progress = reporter(app, runs * len(settings.strategies))
    report = evaluate_compaction(
        choice, settings, source, judge_profile=judge_profile, on_run=progress
    )
    app.emit(report.to_dict(), text=report_text(report))


# The table's columns: the key of each cell, its header.
COLUMNS = [
    ("strategy", "STRATEGY"),
    ("recall", "RECALL ±SD"),
    ("range", "RANGE"),
    ("pinned", "PINNED"),
    ("stale", "STALE"),
    ("kept", "KEPT"),
    ("compressions", "COMPRESSED"),
    ("lost", "LOST/FOUND"),
    ("tokens", "TOKENS"),
    ("cost", "COST"),
]
NOTES = (
    "RECALL: probes answered right (mean over runs, ± the standard deviation in points); "
    "PINNED: recall of the probes a pinned message answers (a strategy without +pins drops "
    "the pins); STALE: answers giving a value since changed; KEPT: context tokens after the "
    "last compression; COMPRESSED: compressions a run made; LOST/FOUND: facts the loss "
    "reports counted (per run); TOKENS: spent on summaries, answers and judgements (per run)."
)


def reporter(app: App, total: int) -> Callable[[Run], None]:
    """What says each of `total` runs on stderr as it ends: a model's evaluation takes a
    while, and one that fails or is interrupted keeps what it measured."""
    done: list[Run] = []

    def progress(run: Run) -> None:
        done.append(run)
        if app.quiet:
            return
        right = sum(answer.correct for answer in run.answers)
        said = f"run {len(done)}/{total}: {run.strategy}, recall {right}/{len(run.answers)}"
        if not app.json:
            echo(f"agctl: {said}", err=True)
            return
        measured = {
            "strategy": run.strategy,
            "run": run.run,
            "seed": run.seed,
            "recall": run.recall,
            "kept_tokens": run.kept_tokens,
            "compressions": run.compressions,
        }
        echo(json_text({"progress": said, **measured}), err=True)

    return progress


def report_text(report: Report) -> str:
    """The table of a report, for people."""
    import textwrap

    from agctl.cli.output import table

    settings = report.settings
    head = (
        f"{report.probes} probes, {settings.runs} run(s) per strategy, model {report.model}; "
        f"budget {settings.budget} tokens, checked every {settings.every} messages, "
        f"summaries keep {settings.keep_recent}"
    )
    shown = [_cells(row) for row in report.rows()]
    return "\n".join([head, "", table(shown, COLUMNS), "", textwrap.fill(NOTES, 88)])


def _cells(row: dict[str, Any]) -> dict[str, str]:
    """A strategy's row of the table."""
    recall, pinned, cost = row["recall"], row["pinned_recall"], row["cost"]
    return {
        "strategy": row["strategy"],
        "recall": f"{recall['mean']:.1%} ±{recall['stdev'] * 100:.1f}",
        "range": f"{recall['min']:.0%}..{recall['max']:.0%}",
        "pinned": "-" if pinned is None else f"{pinned:.1%}",
        "stale": f"{row['stale_answers']:.1f}",
        "kept": f"{row['kept_tokens']:,.0f}",
        "compressions": f"{row['compressions']:.1f}",
        "lost": f"{sum(row['lost'].values()):.1f}/{sum(row['found'].values()):.1f}",
        "tokens": f"{row['prompt_tokens'] + row['completion_tokens']:,.0f}",
        "cost": "unpriced" if cost is None else "0" if cost == 0 else f"${cost:.4f}",
    }


@command.command("probes")
@generator_options
@click.option(
    "--out",
    type=PathType(file_okay=False),
    required=True,
    help="Directory to write transcript.jsonl and probes.jsonl into (made if missing).",
)
@json_option
@pass_app
def probes(app: App, seed: int, messages: int, facts: int, drift: int, out: Path) -> None:
    """Write a generated transcript and its probes, to read or to evaluate a model on.

    The transcript is what 'msg export --format jsonl' writes (pins kept); the probes are
    JSON lines of question, expected answer, match and stale values. The same options
    always write the same bytes.

    \b
    Examples:
      agctl eval probes --out set/
      agctl eval probes --seed 7 --messages 600 --facts 40 --out big/
    """
    from agctl.evals.probes import generate, write_probe_set

    made = generate(seed, messages=messages, facts=facts, drift=drift)
    transcript, questions = write_probe_set(made, out)
    payload = {
        "transcript": str(transcript),
        "probes": str(questions),
        "messages": len(made.messages),
        "facts": len(made.probes),
        "seed": seed,
    }
    app.done(
        payload,
        f"wrote {len(made.messages)} messages to {transcript} and {len(made.probes)} probes "
        f"to {questions}",
    )
