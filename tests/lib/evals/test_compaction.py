"""agctl.evals.compaction: each strategy replayed, compressed at the same budget by agctl's
own compress, and probed; what the report counts, over runs."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from helpers import RecordingOffline, msg

from agctl.base.errors import ProviderError, UsageError
from agctl.context.models import Message, Slot
from agctl.evals import probes as generator
from agctl.evals.compaction import (
    Conversation,
    Models,
    Settings,
    Source,
    batches,
    context_tokens,
    evaluate,
    fit,
    parse_strategies,
    run_one,
)
from agctl.evals.probes import Probe
from agctl.providers.base import ChatRequest, Event
from agctl.providers.offline import OfflineProvider

SEEDS = range(5)
STRATEGIES = "truncate,extractive,rolling,rolling+pins"


def generated(number: int) -> Conversation:
    made = generator.generate(number)
    return Conversation(made.messages, made.probes, number)


def slot_of(*messages: Message) -> Slot:
    return Slot(id="default", messages=list(messages))


def calling(*ids: str, pinned: bool = False) -> Message:
    """An assistant message calling tool f once per id."""
    return Message.model_validate(
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": id, "type": "function", "function": {"name": "f", "arguments": "{}"}}
                for id in ids
            ],
            **({"pinned": True} if pinned else {}),
        }
    )


def test_strategies_are_named_once_each_in_order_with_or_without_pins() -> None:
    chosen = parse_strategies(" rolling+pins,truncate,,ROLLING+PINS, extractive ")
    assert [(s.name, s.strategy, s.pins) for s in chosen] == [
        ("rolling+pins", "rolling", True),
        ("truncate", "truncate", False),
        ("extractive", "extractive", False),
    ]
    with pytest.raises(UsageError, match=r"unknown strategy 'fold' \(known: summarize, rolling"):
        parse_strategies("truncate,fold")
    with pytest.raises(UsageError, match="no strategy named"):
        parse_strategies(" , ")


def test_a_truncation_keeps_as_many_recent_messages_as_the_budget_holds_pins_first() -> None:
    texts = [f"message {n} " + "word " * 30 for n in range(10)]
    slot = slot_of(*(msg("user", text) for text in texts))
    each = slot.messages[0].token_count()
    kept, summary = fit(slot, "truncate", 3 * each + each // 2, keep_recent=6)
    assert (kept, summary) == (3, 0)
    # A pinned message counts first, wherever it is, and stays: one fewer recent fits.
    slot.messages[1] = slot.messages[1].model_copy(update={"pinned": True})
    kept, _ = fit(slot, "truncate", 3 * each + each // 2, keep_recent=6)
    assert kept == 2


def test_a_summary_gets_what_the_kept_messages_and_pins_leave() -> None:
    slot = slot_of(*(msg("user", f"message {n} " + "word " * 100) for n in range(10)))
    each = slot.messages[0].token_count()
    empty = msg("system", "").token_count()  # a summary's own overhead
    assert fit(slot, "rolling", 1000, keep_recent=4) == (4, 1000 - empty - 4 * each)
    # Kept messages that would leave the summary less than its least give way.
    budget = 4 * each + 10
    kept, summary = fit(slot, "extractive", budget, keep_recent=4)
    assert kept == 3 and summary == budget - empty - 3 * each
    # The least a summary gets, however little is left.
    assert fit(slot, "summarize", 20, keep_recent=4) == (0, 64)


def test_a_cut_never_keeps_tool_results_without_their_call_or_passes_the_budget() -> None:
    call = calling("c1")
    result = Message(role="tool", tool_call_id="c1", content="x " * 40)
    slot = slot_of(msg("user", "word " * 40), call, result, msg("assistant", "Done."))
    last = slot.messages[-1].token_count()
    # The result fits beside the last message, but not with its call: neither is kept.
    room = last + result.token_count() + 1
    assert fit(slot, "truncate", room, keep_recent=6) == (1, 0)
    whole = sum(m.token_count() for m in slot.messages[1:])
    assert fit(slot, "truncate", whole, keep_recent=6) == (3, 0)


def test_what_no_compression_folds_counts_first_a_system_message_and_pinned_groups() -> None:
    call = calling("c1", pinned=True)
    result = Message(role="tool", tool_call_id="c1", content="x " * 40)
    words = [msg("user", f"message {n} " + "word " * 30) for n in range(6)]
    slot = slot_of(msg("system", "rules " * 60), call, result, *words)
    each = words[0].token_count()
    fixed = sum(m.token_count() for m in slot.messages[:3])
    # The system message and the pinned call with its (unpinned) result come first.
    assert fit(slot, "truncate", fixed + 2 * each + 1, keep_recent=6) == (2, 0)
    empty = msg("system", "").token_count()
    assert fit(slot, "rolling", fixed + 1000, keep_recent=2) == (2, 1000 - empty - 2 * each)


def test_replay_batches_never_end_between_a_call_and_its_results() -> None:
    call = calling("c1", "c2")
    results = [Message(role="tool", tool_call_id=f"c{n}", content="r") for n in (1, 2)]
    messages = [msg("user", "a"), call, *results, msg("assistant", "b"), msg("user", "c")]

    assert [len(batch) for batch in batches(messages, 2)] == [4, 2]
    assert [len(batch) for batch in batches(messages, 3)] == [4, 2]
    assert [len(batch) for batch in batches(messages, 1)] == [1, 3, 1, 1]
    assert [m for batch in batches(messages, 2) for m in batch] == messages


def test_a_probe_the_model_fails_to_answer_counts_wrong_and_keeps_the_error() -> None:
    class Refusing(OfflineProvider):
        def stream(self, request: ChatRequest) -> Iterator[Event]:
            if request.context.purpose == "probe" and "port" in str(request.messages[-1]):
                raise ProviderError("the model refused (finish_reason content_filter)")
            return super().stream(request)

    messages = [msg("user", "The staging database listens on port 5433. The cache is redis.")]
    probes = [
        Probe(question="Which port does the staging database listen on?", expect="5433"),
        Probe(question="What is the cache?", expect="redis"),
    ]
    settings = Settings(parse_strategies("truncate"), runs=1)

    run = run_one(
        Conversation(messages, probes), settings.strategies[0], settings, Models(Refusing(), "m")
    )

    assert [(a.correct, a.error) for a in run.answers] == [
        (False, "the model refused (finish_reason content_filter)"),
        (True, None),
    ]
    assert run.recall == 0.5


@pytest.mark.parametrize("seed", SEEDS)
def test_every_strategy_ends_within_the_budget_and_a_truncation_loses_all_it_folds(
    seed: int,
) -> None:
    settings = Settings(parse_strategies(STRATEGIES), runs=1, budget=1500)
    for strategy in settings.strategies:
        run = run_one(generated(seed), strategy, settings, Models(OfflineProvider(), "offline"))
        assert run.compressions >= 3
        assert 0 < run.kept_tokens <= settings.budget, strategy
        assert run.kept_tokens < run.replayed_tokens / 3
        if strategy.strategy == "truncate":
            assert run.lost == run.found and sum(run.found.values()) > 0
        else:
            assert sum(run.lost.values()) < sum(run.found.values())


def test_pinned_facts_survive_every_compression_of_every_run() -> None:
    """A strategy with +pins answers every probe a pinned message states (over five
    generated conversations, each compressed four times or more)."""
    report = evaluate(
        generated,
        Settings(parse_strategies("truncate+pins,rolling+pins,truncate"), runs=5),
        Models(OfflineProvider(), "offline"),
    )
    rows = {row["strategy"]: row for row in report.rows()}
    assert rows["rolling+pins"]["pinned_recall"] == 1.0
    assert rows["truncate+pins"]["pinned_recall"] == 1.0
    # Without +pins the same facts go with the messages that state them.
    assert rows["truncate"]["pinned_recall"] < 0.75
    assert all(run.compressions >= 4 for run in report.runs)


def test_a_report_is_the_same_every_time_and_runs_differ_by_seed() -> None:
    settings = Settings(parse_strategies("truncate,extractive"), runs=3)
    first = evaluate(generated, settings, Models(OfflineProvider(), "offline"))
    again = evaluate(generated, settings, Models(OfflineProvider(), "offline"))
    assert first.to_dict() == again.to_dict()
    rows = first.rows()
    assert [row["runs"] for row in rows] == [3, 3]
    assert {run.seed for run in first.runs} == {0, 1, 2}
    # The generated conversations differ, and so do the answers they get.
    answers = {tuple(a.answer for a in run.answers) for run in first.of("extractive")}
    assert len(answers) == 3
    recall = rows[1]["recall"]
    assert recall["min"] <= recall["mean"] <= recall["max"]
    assert recall["each"] == [run.recall for run in first.of("extractive")]


def test_a_given_transcript_is_replayed_the_same_each_run() -> None:
    made = generator.generate(3)
    transcript = b"".join(m.model_dump_json().encode() + b"\n" for m in made.messages)
    probes = b"".join(p.model_dump_json().encode() + b"\n" for p in made.probes)
    source = Source(transcript=(transcript, "t.jsonl"), probes=(probes, "p.jsonl"))
    settings = Settings(parse_strategies("rolling+pins"), runs=2)

    report = evaluate(source.conversations(), settings, Models(OfflineProvider(), "offline"))

    (row,) = report.rows()
    assert row["recall"]["stdev"] == 0.0 and row["recall"]["min"] == row["recall"]["max"]
    assert [run.seed for run in report.runs] == [None, None]
    # The same as the generated conversation it was written from.
    again = run_one(generated(3), settings.strategies[0], settings, Models(OfflineProvider(), "o"))
    assert report.runs[0].recall == again.recall


def test_a_transcript_without_its_probes_is_refused() -> None:
    with pytest.raises(UsageError, match="--transcript and --probes go together"):
        Source(transcript=(b"[]", "t.json")).conversations()
    with pytest.raises(UsageError, match="--transcript and --probes go together"):
        Source(probes=(b"{}", "p.jsonl")).conversations()


def test_a_judge_probe_is_graded_by_the_judge_and_its_tokens_counted() -> None:
    messages = [
        msg("user", "The staging database listens on port 5433."),
        msg("assistant", "Noted."),
    ]
    probes = [
        Probe(question="Which port does the staging database listen on?", expect="5433"),
        Probe(
            question="Which port does the staging database listen on?",
            expect="port 5433",
            match="judge",
        ),
        Probe(question="Which port does the staging database listen on?", expect="6543"),
    ]
    judge = RecordingOffline()
    models = Models(OfflineProvider(), "offline", judge=judge, judge_model="judge-model")
    settings = Settings(parse_strategies("truncate"), runs=1)

    run = run_one(Conversation(messages, probes), settings.strategies[0], settings, models)

    assert [a.correct for a in run.answers] == [True, True, False]
    (request,) = judge.requests
    assert request.model == "judge-model" and request.context.purpose == "judge"
    assert request.messages[1]["content"] == (
        "Question: Which port does the staging database listen on?\n"
        "Expected: port 5433\n"
        "Answer: The staging database listens on port 5433."
    )
    # Three answers and one grading, each a request the offline provider counted.
    assert sorted(model for model, _ in run.usages) == ["judge-model"] + ["offline"] * 3
    assert run.compressions == 0 and run.kept_tokens == context_tokens(slot_of(*messages))
    assert run.cost == 0.0
