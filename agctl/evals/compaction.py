"""`agctl eval compaction`: how much of what mattered each compression strategy keeps.

A run replays a conversation into a throwaway session (in memory: nothing of the user's
store is read or written), message by message; after every `every` messages, and at the
end, a context over the token budget is compressed with the strategy under test, by
agctl's own `compress` (checkpoints and loss report included). Then each probe question
is asked against what is left, as the next turn's request would carry it, and its answer
checked: contained or exact, or graded by a judge model. Recall is the share of probes
answered right.

Every strategy is held to the same token budget: after each compression the compressed
zone and the messages left hold at most `budget` tokens (a truncation keeps as many recent
messages as fit; a summary gets what the `keep_recent` messages leave, asked of a model in
words, kept exactly by an extract). A strategy named with `+pins` keeps the messages the
transcript pins; without, pins are dropped before the replay.

Runs differ: run r of a generated probe set uses seed `seed + r` (other facts, values and
places); a given transcript is replayed the same each run, and a model's answers and
summaries are what vary. Reports give each strategy's mean recall and its spread.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agctl.base.errors import ProviderError, UsageError
from agctl.base.vocab import COMPRESS_STRATEGIES, CompressStrategy
from agctl.context.artifacts import KINDS
from agctl.context.models import Message, Slot
from agctl.context.view import tool_safe_cut

if TYPE_CHECKING:
    from agctl.context.pricing import Prices
    from agctl.evals.probes import Probe
    from agctl.providers.base import Provider, Usage
    from agctl.store import Store
    from agctl.turn.setup import ModelChoice

# The strategies compared when none is named: the table.
DEFAULT_STRATEGIES = "truncate,extractive,rolling,rolling+pins"
PINS_SUFFIX = "+pins"
# The name an input read from stdin goes by (agctl.cli.app.read_input_file).
STDIN = "<stdin>"
# The least a summary is given, in tokens, however little the kept messages leave.
MIN_SUMMARY = 64
# What the question a probe asks is followed by, so a model answers with the fact only.
ASK_BRIEFLY = "Answer from the conversation above, with the fact only, in a few words."
JUDGE_INSTRUCTIONS = (
    "You grade answers. Reply YES if the answer states the expected fact (wording may "
    "differ), NO otherwise. Reply with YES or NO only."
)


@dataclass(frozen=True)
class Strategy:
    """A strategy under test, as named: a compression strategy, pins kept or not."""

    name: str
    strategy: CompressStrategy
    pins: bool


def parse_strategies(spec: str) -> list[Strategy]:
    """`truncate,rolling+pins`: the strategies named, in order, each once; UsageError
    naming the known ones for any other word."""
    chosen: dict[str, Strategy] = {}
    for word in (part.strip().lower() for part in spec.split(",")):
        if not word:
            continue
        pins = word.endswith(PINS_SUFFIX)
        base = word.removesuffix(PINS_SUFFIX)
        strategy = next((known for known in COMPRESS_STRATEGIES if known == base), None)
        if strategy is None:
            known = ", ".join(COMPRESS_STRATEGIES)
            raise UsageError(
                f"unknown strategy {word!r} (known: {known}; add {PINS_SUFFIX} to keep pins)"
            )
        chosen.setdefault(word, Strategy(word, strategy, pins))
    if not chosen:
        raise UsageError("no strategy named (for example: truncate,extractive,rolling+pins)")
    return list(chosen.values())


@dataclass(frozen=True)
class Conversation:
    """What one run replays and asks: the messages, and the probes."""

    messages: list[Message]
    probes: list[Probe]
    seed: int | None = None  # the generator's seed, for a generated one


@dataclass
class Settings:
    """How the runs go (see the module)."""

    strategies: list[Strategy]
    runs: int = 5
    budget: int = 2000
    every: int = 40
    keep_recent: int = 6


@dataclass
class Models:
    """Who summarises and answers (`provider`, `model`), who grades judge probes
    (`judge`, `judge_model`: the same unless given), and what their tokens cost."""

    provider: Provider
    model: str
    judge: Provider | None = None
    judge_model: str | None = None
    prices: Prices = field(default_factory=dict)


@dataclass
class Answer:
    """One probe's answer in one run."""

    probe: int  # its index in the probe list
    answer: str
    correct: bool
    stale: bool
    pinned: bool  # whether the transcript pins a message stating the expected answer
    error: str | None = None  # why the model gave no answer (counted wrong)


@dataclass
class Run:
    """One strategy's run: what it kept, what it lost, how it answered."""

    strategy: str
    run: int
    seed: int | None
    answers: list[Answer]
    compressions: int
    kept_tokens: int  # the context's tokens after the replay (and its last compression)
    replayed_tokens: int  # the tokens of every message replayed
    # The distinct facts found in what the compressions folded, and those of them a
    # compression lost (what replaced them did not hold them), by kind.
    found_facts: dict[str, set[str]]
    lost_facts: dict[str, set[str]]
    # Every request's usage, with the model it was asked of.
    usages: list[tuple[str, Usage]] = field(default_factory=list)
    cost: float | None = 0.0

    @property
    def recall(self) -> float:
        return sum(a.correct for a in self.answers) / len(self.answers) if self.answers else 0.0

    @property
    def stale(self) -> int:
        return sum(a.stale for a in self.answers)

    @property
    def pinned_recall(self) -> float | None:
        """Recall of the probes whose answer a pinned message states (None: none is)."""
        pinned = [a.correct for a in self.answers if a.pinned]
        return sum(pinned) / len(pinned) if pinned else None

    @property
    def found(self) -> dict[str, int]:
        return {kind: len(items) for kind, items in self.found_facts.items()}

    @property
    def lost(self) -> dict[str, int]:
        return {kind: len(items) for kind, items in self.lost_facts.items()}


@dataclass
class Report:
    """Every run of every strategy, and their summary."""

    settings: Settings
    model: str
    probes: int
    runs: list[Run]

    def of(self, strategy: str) -> list[Run]:
        return [run for run in self.runs if run.strategy == strategy]

    def rows(self) -> list[dict[str, Any]]:
        """One summary per strategy: recall's mean, spread and range over the runs, and
        the means of the rest."""
        rows = []
        for strategy in self.settings.strategies:
            runs = self.of(strategy.name)
            recalls = [run.recall for run in runs]
            costs = [run.cost for run in runs]
            rows.append(
                {
                    "strategy": strategy.name,
                    "runs": len(runs),
                    "recall": {
                        "mean": statistics.fmean(recalls),
                        "stdev": statistics.stdev(recalls) if len(recalls) > 1 else 0.0,
                        "min": min(recalls),
                        "max": max(recalls),
                        "each": recalls,
                    },
                    "pinned_recall": _mean_known([run.pinned_recall for run in runs]),
                    "stale_answers": statistics.fmean(run.stale for run in runs),
                    "kept_tokens": statistics.fmean(run.kept_tokens for run in runs),
                    "replayed_tokens": statistics.fmean(run.replayed_tokens for run in runs),
                    "compressions": statistics.fmean(run.compressions for run in runs),
                    "found": _mean_counts([run.found for run in runs]),
                    "lost": _mean_counts([run.lost for run in runs]),
                    "prompt_tokens": statistics.fmean(
                        sum(u.prompt_tokens for _, u in run.usages) for run in runs
                    ),
                    "completion_tokens": statistics.fmean(
                        sum(u.completion_tokens for _, u in run.usages) for run in runs
                    ),
                    "cost": None if None in costs else statistics.fmean(c or 0.0 for c in costs),
                }
            )
        return rows

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "probes": self.probes,
            "runs": self.settings.runs,
            "budget_tokens": self.settings.budget,
            "every": self.settings.every,
            "keep_recent": self.settings.keep_recent,
            "strategies": self.rows(),
            "answers": [
                {
                    "strategy": run.strategy,
                    "run": run.run,
                    "seed": run.seed,
                    "probe": answer.probe,
                    "correct": answer.correct,
                    "stale": answer.stale,
                    "pinned": answer.pinned,
                    "answer": answer.answer,
                    **({"error": answer.error} if answer.error is not None else {}),
                }
                for run in self.runs
                for answer in run.answers
            ],
        }


def _mean_known(values: Sequence[float | None]) -> float | None:
    known = [value for value in values if value is not None]
    return statistics.fmean(known) if known else None


def _mean_counts(counts: Sequence[dict[str, int]]) -> dict[str, float]:
    return {kind: statistics.fmean(c.get(kind, 0) for c in counts) for kind in KINDS}


def evaluate(
    conversations: Callable[[int], Conversation],
    settings: Settings,
    models: Models,
    *,
    on_run: Callable[[Run], None] | None = None,
) -> Report:
    """Run every strategy `settings.runs` times, run r on `conversations(r)`; `on_run`
    hears of each run as it ends (progress)."""
    runs: list[Run] = []
    probes = 0
    for number in range(settings.runs):
        conversation = conversations(number)
        probes = len(conversation.probes)
        for strategy in settings.strategies:
            run = run_one(conversation, strategy, settings, models, number)
            runs.append(run)
            if on_run is not None:
                on_run(run)
    return Report(settings, models.model, probes, runs)


def run_one(
    conversation: Conversation,
    strategy: Strategy,
    settings: Settings,
    models: Models,
    number: int = 0,
) -> Run:
    """Replay `conversation` compressing with `strategy`, then ask its probes."""
    from agctl.storage.memory import MemoryBackend
    from agctl.store import Store

    store = Store(backend=MemoryBackend())
    session = store.create_session("eval", title=f"eval compaction: {strategy.name}")
    messages = conversation.messages
    if not strategy.pins:
        messages = [m.model_copy(update={"pinned": None}) if m.pinned else m for m in messages]
    run = Run(
        strategy=strategy.name,
        run=number,
        seed=conversation.seed,
        answers=[],
        compressions=0,
        kept_tokens=0,
        replayed_tokens=sum(m.token_count() for m in messages),
        found_facts={kind: set() for kind in KINDS},
        lost_facts={kind: set() for kind in KINDS},
    )
    for batch in batches(messages, settings.every):

        def replay(slot: Slot, batch: list[Message] = batch) -> None:
            slot.messages.extend(batch)

        store.update_slot(session.id, None, replay)
        _compress(store, session.id, strategy, settings, models, run)
    slot = store.load_slot(session.id, None)
    run.kept_tokens = context_tokens(slot)
    pinned = [m.text().casefold() for m in conversation.messages if m.pinned]
    for index, probe in enumerate(conversation.probes):
        answer = _ask(store, session.id, index, probe, models, run)
        answer.pinned = any(probe.expect.casefold() in text for text in pinned)
        run.answers.append(answer)
    run.cost = _cost(models, run.usages)
    return run


def batches(messages: Sequence[Message], every: int) -> list[list[Message]]:
    """`messages` in runs of `every`, each run longer where it would end between a tool
    call and its results (a compression there would fold the call without them)."""
    runs: list[list[Message]] = []
    start = 0
    while start < len(messages):
        end = min(start + every, len(messages))
        while end < len(messages) and messages[end].role == "tool":
            end += 1
        runs.append(list(messages[start:end]))
        start = end
    return runs


def context_tokens(slot: Slot) -> int:
    """The tokens of a slot's compressed zone and messages: what the budget bounds."""
    return sum(m.token_count() for m in (*slot.compressed, *slot.messages))


def fit(slot: Slot, strategy: CompressStrategy, budget: int, keep_recent: int) -> tuple[int, int]:
    """How many recent messages a compression keeps, and the summary's token budget, for
    the slot to hold at most `budget` tokens after it where it can: what no compression
    folds counts first (a leading system message, pinned messages with their tool-call
    groups); a truncation keeps as many recent messages as fit; a summary keeps
    `keep_recent` (fewer, if they leave it less than MIN_SUMMARY) and gets the rest."""
    from agctl.turn.compress import pinned_groups

    messages = slot.messages
    head = 1 if messages and messages[0].role == "system" else 0
    fixed = set(range(head)) | set(pinned_groups(messages, head, len(messages)))
    held = sum(messages[i].token_count() for i in fixed)
    if strategy == "truncate":
        room = budget - held - sum(m.token_count() for m in slot.compressed)
        kept = 0
        while kept < len(messages) - head and _kept_tokens(slot, kept + 1, fixed) <= room:
            kept += 1
        return kept, 0
    room = budget - held - Message(role="system", content="").token_count()
    kept = min(keep_recent, len(messages) - head)
    while kept and _kept_tokens(slot, kept, fixed) > room - MIN_SUMMARY:
        kept -= 1
    return kept, max(MIN_SUMMARY, room - _kept_tokens(slot, kept, fixed))


def _kept_tokens(slot: Slot, count: int, fixed: set[int]) -> int:
    """The tokens of the messages a compression keeping the last `count` keeps, those
    in `fixed` aside (counted apart): its cut moves back over tool results to their call."""
    if not count:
        return 0
    start = tool_safe_cut(slot.messages, len(slot.messages) - count)
    return sum(
        m.token_count() for i, m in enumerate(slot.messages) if i >= start and i not in fixed
    )


def _compress(
    store: Store,
    session_id: str,
    strategy: Strategy,
    settings: Settings,
    models: Models,
    run: Run,
) -> None:
    """Compress the slot when it holds more than the budget, held to it."""
    from agctl.turn.compress import compress

    slot = store.load_slot(session_id, None)
    if context_tokens(slot) <= settings.budget:
        return
    kept, budget = fit(slot, strategy.strategy, settings.budget, settings.keep_recent)
    result = compress(
        store,
        session_id,
        None,
        strategy=strategy.strategy,
        keep_recent=kept,
        provider=models.provider if strategy.strategy in ("summarize", "rolling") else None,
        model=models.model,
        checkpoint=False,
        budget_tokens=budget if strategy.strategy != "truncate" else None,
    )
    if not result.folded:
        return
    run.compressions += 1
    if result.loss is not None:
        for kind in KINDS:
            run.found_facts[kind].update(getattr(result.loss.found, kind))
            run.lost_facts[kind].update(getattr(result.loss.lost, kind))
    summary = store.load_slot(session_id, None).compressed
    if summary and summary[0].usage is not None and strategy.strategy != "extractive":
        from agctl.providers.base import Usage

        run.usages.append((models.model, Usage(**summary[0].usage)))


def _ask(
    store: Store, session_id: str, index: int, probe: Probe, models: Models, run: Run
) -> Answer:
    """Ask `probe` as the next turn would, check (or have the judge grade) its answer."""
    from agctl.context.view import request_messages

    session = store.load_session(session_id)
    slot = store.load_slot(session_id, None)
    # The question on one line, then how to answer (the offline reader reads the first).
    asked = " ".join(probe.question.split())
    question = Message(role="user", content=f"{asked}\n{ASK_BRIEFLY}")
    view = request_messages(session, slot, user_input=question)
    try:
        said, usage = _request(models.provider, models.model, view.requests, "probe", session_id)
    except ProviderError as exc:  # a refusal, an empty reply, a request that failed
        return Answer(index, "", False, False, pinned=False, error=str(exc))
    if usage is not None:
        run.usages.append((models.model, usage))
    if probe.match == "judge":
        correct = _judged(probe, said, models, run, session_id)
        verdict_stale = not correct and any(_holds(said, value) for value in probe.stale)
        return Answer(index, said, correct, verdict_stale, pinned=False)
    verdict = probe.check(said)
    return Answer(index, said, verdict.correct, verdict.stale, pinned=False)


def _holds(text: str, value: str) -> bool:
    return " ".join(value.split()).casefold() in " ".join(text.split()).casefold()


def _judged(probe: Probe, said: str, models: Models, run: Run, session_id: str) -> bool:
    """The judge's grade of `said` for `probe`: its reply starts with YES."""
    judge = models.judge or models.provider
    model = models.judge_model or models.model
    grading = "\n".join(
        [
            f"Question: {' '.join(probe.question.split())}",
            f"Expected: {' '.join(probe.expect.split())}",
            f"Answer: {' '.join(said.split())}",
        ]
    )
    messages = [
        {"role": "system", "content": JUDGE_INSTRUCTIONS},
        {"role": "user", "content": grading},
    ]
    reply, usage = _request(judge, model, messages, "judge", session_id)
    if usage is not None:
        run.usages.append((model, usage))
    return reply.strip().upper().startswith("YES")


def _request(
    provider: Provider,
    model: str,
    messages: list[dict[str, Any]],
    purpose: str,
    session_id: str,
) -> tuple[str, Usage | None]:
    """Send one request, whole; its text and usage."""
    from agctl.providers.base import ChatRequest, TurnContext
    from agctl.turn.reply import ReplyBuilder

    context = TurnContext(session_id=session_id, slot_id="default", purpose=purpose)
    builder = ReplyBuilder()
    for event in provider.stream(ChatRequest(model=model, messages=messages, context=context)):
        builder.feed(event)
    return builder.message(model).text(), builder.usage


def _cost(models: Models, usages: Sequence[tuple[str, Usage]]) -> float | None:
    """What the requests of a run cost (0 for a provider that answers free; None when a
    model's price is unknown)."""
    from agctl.context.price_sheets import PriceSheets
    from agctl.context.pricing import add_costs, answers_free, charge

    if answers_free(models.provider.name) and (
        models.judge is None or answers_free(models.judge.name)
    ):
        return 0.0
    sheets = PriceSheets()
    return add_costs(charge(model, usage, models.prices, sheets).cost for model, usage in usages)


@dataclass(frozen=True)
class Source:
    """What the runs replay: a transcript and its probes given as files (`transcript`,
    `probes`: their bytes and names), else the probe generator's, from `seed`."""

    transcript: tuple[bytes, str] | None = None
    probes: tuple[bytes, str] | None = None
    seed: int = 0
    messages: int = 240
    facts: int = 16
    drift: int = 3

    def conversations(self) -> Callable[[int], Conversation]:
        """Run r's conversation: the given one every run, or generated from `seed + r`."""
        from agctl.evals import probes as generator

        if self.transcript is None and self.probes is None:

            def generated(number: int) -> Conversation:
                made = generator.generate(
                    self.seed + number,
                    messages=self.messages,
                    facts=self.facts,
                    drift=self.drift,
                )
                return Conversation(made.messages, made.probes, self.seed + number)

            return generated
        if self.transcript is None or self.probes is None:
            raise UsageError(
                "--transcript and --probes go together: the probes ask about the transcript "
                "(give neither to use the probe generator's)"
            )
        if self.transcript[1] == self.probes[1] == STDIN:
            raise UsageError("--transcript and --probes cannot both be read from stdin")
        given = Conversation(read_transcript(*self.transcript), generator.read_probes(*self.probes))
        return lambda number: given


def read_transcript(data: bytes, source: str) -> list[Message]:
    """A transcript's messages: any form `msg import` reads (a JSON array of chat
    messages, or one a line as `msg export --format jsonl` writes them, pins kept)."""
    from agctl.interchange.formats import parse_messages

    return parse_messages(data, "auto", source)


def evaluate_compaction(
    choice: ModelChoice,
    settings: Settings,
    source: Source,
    *,
    judge_profile: str | None = None,
    on_run: Callable[[Run], None] | None = None,
) -> Report:
    """Evaluate the strategies of `settings` on `source`'s conversations with the model
    `choice` resolves to, the offline provider unless it names a profile, a provider or
    a model (a default profile never makes an evaluation's hundreds of requests; no
    session has a say: the runs' sessions are thrown away), judge probes graded by
    `judge_profile`'s model (default: the same)."""
    from agctl.config.file import ConfigFile
    from agctl.turn.setup import ModelChoice, ModelSetup

    conversations = source.conversations()
    config = ConfigFile().load()
    if not (choice.profile or choice.provider or choice.model):
        choice = ModelChoice(provider="offline", model="offline")
    setup = ModelSetup.chosen(None, "", choice, config=config)
    models = Models(setup.provider(), setup.settings.model, prices=config.price_overrides())
    if judge_profile is not None:
        judging = ModelSetup.chosen(None, "", ModelChoice(profile=judge_profile), config=config)
        models.judge, models.judge_model = judging.provider(), judging.settings.model
    return evaluate(conversations, settings, models, on_run=on_run)
