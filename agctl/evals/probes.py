"""Probes for `agctl eval compaction`: questions about the facts of a transcript, their file
format, and a deterministic generator of a long transcript that plants those facts.

A probe is a question and the answer a reader of the compressed context should give;
`Probe.check` marks an answer correct, or stale when it holds a value the fact had before
it changed (drift). `generate(seed)` writes a conversation about a software project from
templates: filler full of distractors (numbers, paths, ids, URLs and names no probe asks
about) and, at spread positions, one sentence per fact, some of which change later, once or
twice. Each value a fact takes occurs in exactly one sentence of the conversation, and each
question shares more words with its fact's sentences than with any other sentence, the
latest of them carrying the value expected: a reader that answers with the sentence sharing
the most words with the question (the latest on a tie) is right when, and only when, that
sentence survived the compression. The same seed gives the same bytes.
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated, Any, NamedTuple

import orjson
from pydantic import AfterValidator, BaseModel, ConfigDict, ValidationError, field_validator

from agctl.base.errors import InvalidInput, UsageError
from agctl.base.validation import validation_summary
from agctl.base.vocab import ProbeMatch
from agctl.context.models import Message, ToolCall, ToolCallFunction

_SPACE = re.compile(r"\s+")


def _not_blank(text: str) -> str:
    """A blank expected answer would be held by every answer."""
    if not text.strip():
        raise ValueError("must hold more than white space")
    return text


Text = Annotated[str, AfterValidator(_not_blank)]


class Verdict(NamedTuple):
    """How an answer fared: right, and if not, whether it gave a value the fact had before."""

    correct: bool
    stale: bool


class Probe(BaseModel):
    """One question about a transcript's fact, and the answer that shows the fact was kept."""

    model_config = ConfigDict(extra="forbid")

    question: Text
    expect: Text
    match: ProbeMatch = "contains"
    # The values the fact had before it changed, oldest first.
    stale: list[Text] = []
    # The kind of artifact the fact is (agctl.context.artifacts.KINDS), for per-kind recall.
    kind: str | None = None
    id: str | None = None

    @field_validator("kind")
    @classmethod
    def _known_kind(cls, kind: str | None) -> str | None:
        from agctl.context.artifacts import KINDS

        if kind is not None and kind not in KINDS:
            raise ValueError(f"unknown kind {kind!r} (known: {', '.join(KINDS)})")
        return kind

    def check(self, answer: str) -> Verdict:
        """`exact`: the answer is the expected text; `contains`: it holds it; both ignoring
        case and how white space is spaced. Stale: not correct, and a stale value matches
        by the same rule. A `judge` probe is the runner's to ask a model about: UsageError."""
        if self.match == "judge":
            raise UsageError(
                f"probe {self.id or self.question!r} is checked by a judge model, not by text"
            )
        said = _normalized(answer)

        def matches(text: str) -> bool:
            wanted = _normalized(text)
            return said == wanted if self.match == "exact" else wanted in said

        correct = matches(self.expect)
        return Verdict(correct, not correct and any(matches(value) for value in self.stale))


def _normalized(text: str) -> str:
    return _SPACE.sub(" ", text).strip().casefold()


def read_probes(data: bytes, source: str) -> list[Probe]:
    """Every probe of a JSON-lines file (blank lines skipped), all validated before any is
    asked; an error names the source, the line and the field."""
    probes: list[Probe] = []
    lines_of_ids: dict[str, int] = {}
    for number, line in enumerate(data.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            item = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            raise InvalidInput(f"{source}: line {number} is not valid JSON: {exc}") from None
        try:
            probe = Probe.model_validate(item)
        except ValidationError as exc:
            summary = validation_summary(exc, "probe")
            raise InvalidInput(f"{source}: line {number}: {summary}") from None
        if probe.id is not None:
            first = lines_of_ids.setdefault(probe.id, number)
            if first != number:
                raise InvalidInput(
                    f"{source}: line {number}: id: {probe.id!r} is line {first}'s id too"
                )
        probes.append(probe)
    if not probes:
        raise InvalidInput(f"{source}: no probes (one JSON object a line: question, expect)")
    return probes


class ProbeSet(NamedTuple):
    """A generated transcript and the probes about its facts."""

    messages: list[Message]
    probes: list[Probe]


def write_probe_set(probe_set: ProbeSet, directory: Path) -> tuple[Path, Path]:
    """transcript.jsonl (as `msg export --format jsonl` writes it, pins kept) and
    probes.jsonl in `directory`, each replaced atomically and readable by its owner only."""
    from agctl.base.fsio import make_dirs, write_atomic
    from agctl.interchange.formats import export_messages

    make_dirs(directory)
    transcript, probes = directory / "transcript.jsonl", directory / "probes.jsonl"
    write_atomic(transcript, export_messages(probe_set.messages, "jsonl"))
    lines = (
        probe.model_dump_json(exclude_none=True).encode() + b"\n" for probe in probe_set.probes
    )
    write_atomic(probes, b"".join(lines))
    return transcript, probes


# The generator. Every random choice comes from one random.Random(seed), in one order, and
# nothing iterates a set: the same seed gives the same bytes in any process.

# The first message's time; each next message is a minute later.
EPOCH = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)

Draw = Callable[[random.Random], str]


def _hex(rng: random.Random, digits: int) -> str:
    """Hex digits with a letter among them (all digits would read as a number, not an id)."""
    while True:
        text = f"{rng.getrandbits(4 * digits):0{digits}x}"
        if not text.isdigit():
            return text


def _uuid(rng: random.Random) -> str:
    text = f"{rng.getrandbits(128):032x}"
    variant = "89ab"[int(text[16], 16) % 4]
    return f"{text[:8]}-{text[8:12]}-4{text[13:16]}-{variant}{text[17:20]}-{text[20:]}"


def _integer(low: int, high: int, step: int = 1) -> Draw:
    return lambda rng: str(rng.randrange(low, high, step))


def _thousands(low: int, high: int, step: int = 1) -> Draw:
    """An amount written with thousands separators (1,500)."""
    return lambda rng: f"{rng.randrange(low, high, step):,}"


def _one_of(*choices: str) -> Draw:
    return lambda rng: rng.choice(choices)


class _Fact(NamedTuple):
    """A fact a transcript can plant: its probe's id and kind, the sentence stating it (with
    `{value}`; lower-case and unended for a value, to go after a lead-in), the question, and
    how to draw a value. Values change (drift); instructions do not."""

    id: str
    kind: str
    sentence: str
    question: str
    draw: Draw

    @property
    def drifts(self) -> bool:
        return self.kind != "instructions"


def _value(id: str, kind: str, subject: str, draw: Draw) -> _Fact:
    """A fact 'the SUBJECT is VALUE', asked as 'What is the SUBJECT?': the question's words
    are the sentence's, and no other fact's subject shares more than one of them."""
    return _Fact(id, kind, f"the {subject} is {{value}}", f"What is the {subject}?", draw)


FACTS: tuple[_Fact, ...] = (
    _value("staging-db-port", "numbers", "staging database port", _integer(1100, 65000)),
    _value(
        "gateway-timeout",
        "numbers",
        "payments gateway timeout in milliseconds",
        _integer(1200, 9000, 50),
    ),
    _value("upload-limit", "numbers", "upload size limit in megabytes", _integer(120, 990)),
    _value("api-rate", "numbers", "public API rate limit per minute", _thousands(300, 9000, 10)),
    _value("gpu-budget", "numbers", "monthly GPU budget in dollars", _thousands(1500, 40000, 100)),
    _value("batch-size", "numbers", "embedding job batch size", _integer(128, 2048)),
    _value(
        "cookie-lifetime",
        "numbers",
        "session cookie lifetime in seconds",
        _integer(600, 86400, 60),
    ),
    _value(
        "orm-version",
        "numbers",
        "pinned version of the ORM library",
        lambda rng: f"{rng.randint(1, 4)}.{rng.randint(10, 60)}",
    ),
    _value(
        "checkout-ticket",
        "ids",
        "ticket for the flaky checkout bug",
        lambda rng: (
            f"{rng.choice(('OPS', 'PAY', 'WEB', 'CORE', 'INFRA'))}-{rng.randint(1000, 9999)}"
        ),
    ),
    _value(
        "eviction-commit",
        "ids",
        "commit that fixed the cache eviction",
        lambda rng: _hex(rng, 10),
    ),
    _value("import-request", "ids", "request id of the failed invoice import", _uuid),
    _value(
        "good-build",
        "ids",
        "build number of the last good release",
        lambda rng: f"#{rng.randint(1000, 9999)}",
    ),
    _value(
        "search-flag",
        "ids",
        "feature flag for the new search page",
        lambda rng: f"search_v{rng.randint(2, 9)}_{rng.choice(('beta', 'canary', 'rollout'))}",
    ),
    _value(
        "worker-entry",
        "paths",
        "entry point of the billing worker",
        lambda rng: (
            f"{rng.choice(('src', 'app', 'services'))}/billing/"
            f"{rng.choice(('worker_main', 'run_worker', 'entry'))}_{rng.randint(2, 99)}.py"
        ),
    ),
    _value(
        "exporter-config",
        "paths",
        "config file of the nightly exporter",
        lambda rng: (
            f"deploy/{rng.choice(('exporter', 'exports', 'etl'))}/"
            f"nightly-{rng.randint(10, 99)}.toml"
        ),
    ),
    _value(
        "refunds-migration",
        "paths",
        "migration that adds the refunds table",
        lambda rng: f"db/migrations/{rng.randint(100, 999):04d}_add_refunds.sql",
    ),
    _value(
        "scheduler-log",
        "paths",
        "scheduler log file",
        lambda rng: (
            f"/var/log/{rng.choice(('sched', 'cron', 'jobs'))}/scheduler-{rng.randint(10, 99)}.log"
        ),
    ),
    _value(
        "tls-bundle",
        "paths",
        "TLS certificate bundle",
        lambda rng: (
            f"/etc/ssl/{rng.choice(('acme', 'corp', 'edge'))}/bundle-{rng.randint(10, 99)}.pem"
        ),
    ),
    _value(
        "payments-dashboard",
        "urls",
        "dashboard of the payments service",
        lambda rng: f"https://grafana.example.com/d/{_hex(rng, 6)}/payments",
    ),
    _value(
        "oncall-runbook",
        "urls",
        "runbook for the on-call rotation",
        lambda rng: f"https://wiki.example.org/runbooks/oncall-{rng.randint(10, 99)}",
    ),
    _value(
        "mobile-endpoint",
        "urls",
        "endpoint of the mobile API",
        lambda rng: f"https://m{rng.randint(2, 99)}.api.example.net/v{rng.randint(1, 4)}",
    ),
    _value(
        "ledger-design",
        "urls",
        "design document for the ledger rewrite",
        lambda rng: f"https://docs.example.com/d/{_hex(rng, 10)}",
    ),
    _Fact(
        "package-installer",
        "instructions",
        "Always use {value} for installing Python packages.",
        "What should always be used for installing Python packages?",
        _one_of("poetry", "pipenv", "pdm", "conda"),
    ),
    _Fact(
        "protected-branch",
        "instructions",
        "Never push directly to the {value} branch.",
        "Which branch should we never push directly to?",
        lambda rng: f"{rng.choice(('hotfix', 'prod', 'stable', 'deploy'))}-{rng.randint(10, 99)}",
    ),
    _Fact(
        "release-notes-language",
        "instructions",
        "Please write all release notes in {value}.",
        "In which language should we write all release notes?",
        _one_of("French", "German", "Spanish", "Italian", "Dutch", "Portuguese"),
    ),
    _Fact(
        "http-client",
        "instructions",
        "Use {value} for every HTTP call in the client library.",
        "What should be used for every HTTP call in the client library?",
        _one_of("httpx", "aiohttp", "urllib3", "pycurl"),
    ),
    _Fact(
        "secret-field",
        "instructions",
        "Never log the {value} field of a payment.",
        "Which field of a payment should we never log?",
        _one_of("card_number", "cvv_code", "iban_number", "billing_email", "tax_id"),
    ),
    _Fact(
        "test-workers",
        "instructions",
        "Always run the test suite with {value} workers before merging.",
        "With how many workers should the test suite always run before merging?",
        lambda rng: str(rng.randint(12, 64)),
    ),
    _Fact(
        "log-timezone",
        "instructions",
        "Keep every log timestamp in the {value} time zone.",
        "In which time zone should every log timestamp be kept?",
        _one_of("Europe/Berlin", "America/Chicago", "Asia/Tokyo", "Australia/Perth"),
    ),
)

# How a fact sentence starts, by who says it; and how a change is announced.
_USER_LEADS = ("For the record, {s}.", "FYI, {s}.", "Just so you know, {s}.", "{S}.")
_ASSISTANT_LEADS = ("I checked, and {s}.", "According to the settings, {s}.", "{S}.")
_CHANGE_LEADS = ("Change of plan: {s}.", "Update: {s}.", "Correction, {s}.")

# Filler, one sentence each: `{name}` stands for a distractor `_DISTRACTORS` draws.
_USER_FILLER = (
    "Can you take a look at {path} next?",
    "{person} says the refactor of {func} is almost done.",
    "The nightly run took {small} minutes yesterday, which feels slow.",
    "I merged {ticket} this morning.",
    "Could you explain why {func} returns {small} for empty input?",
    "Let's leave the lint warnings for later.",
    "{person} will review the pull request around {clock}.",
    "Our coverage dropped to {percent} after the last merge.",
    "Please double-check the error handling in {path}.",
    "Hmm, that commit {hex} looks unrelated to me.",
    "What happened to the docs build on {weekday}?",
    "The metrics sidecar port is {port}.",
    "There are {count} open issues in the tracker right now.",
    "{person} pinged me about {ticket} again.",
    "I think the flaky test in {path} is timing related.",
    "The staging banner still shows build {build}.",
    "Our old wiki page at {url} is out of date.",
)
_ASSISTANT_FILLER = (
    "I read through {path} and the logic looks sound.",
    "The helper {func} is called from {small} places.",
    "Commit {hex} touched {small} files, mostly tests.",
    "That change would add roughly {count} lines, so I would split it.",
    "I ran the linter and it reported {small} warnings, none of them serious.",
    "{ticket} looks like a duplicate of an older report.",
    "The median response time is {count} ms on my machine.",
    "I renamed {func} to keep the naming consistent.",
    "The old retry loop in {path} can go once the new client lands.",
    "There is a dashboard at {url} with the latency graphs.",
    "The benchmark went from {count} ms to {count} ms.",
    "Sure, I will keep that in mind.",
    "Version {version} of the parser fixed the unicode bug.",
    "The container image is {count} MB after the cleanup.",
    "I could not reproduce the failure with seed {port}.",
    "Request {uuid} in the logs timed out too.",
)
# The tools an exchange calls: the request, the distractor it is about, the argument's name,
# and what the tool prints.
_TOOLS: dict[str, tuple[str, str, str, str]] = {
    "run_tests": (
        "Can you run the tests in {arg}?",
        "test",
        "path",
        "collected {count} items\n{count} passed, {small} failed in {seconds}s\n"
        "FAILED {arg}::test_{func}",
    ),
    "read_file": (
        "Show me {arg}, please.",
        "path",
        "path",
        "def {func}(value):\n    limit = {count}\n    return value[:limit]",
    ),
    "grep": (
        "Search the code for {arg}.",
        "func",
        "pattern",
        "{path}:{count}:    {arg}(data)\n{path}:{count}:    return {arg}(row)",
    ),
    "git_log": (
        "What were the last {arg} commits?",
        "small",
        "limit",
        "{hex} Tidy the {func} helper\n{hex} Bump the parser to {version}\n{hex} Merge {ticket}",
    ),
}
_AFTER_TOOLS = (
    "Done: {small} of them failed, the rest passed.",
    "That is what the code holds; {func} is the part to change.",
    "The results point at {path} first.",
    "Nothing there explains the slowdown yet.",
)
_OPENING = (
    "We are picking up work on the {project} service today.",
    "Good, I have the repository open.",
)

_PEOPLE = ("Priya", "Tomasz", "Amara", "Kenji", "Lucia", "Omar", "Freya", "Mateo", "Ingrid", "Ravi")
_PROJECTS = ("Tern", "Halyard", "Marlin", "Quill", "Juniper", "Basalt")
_FUNCTIONS = (
    "parse_row",
    "normalize_amount",
    "load_settings",
    "render_receipt",
    "merge_batches",
    "split_name",
    "format_money",
    "read_chunks",
)
_DIRS = ("src/core", "src/api", "lib/utils", "app/views", "tools/scripts", "src/parsers")
_MODULES = ("helpers", "formatting", "session_store", "importer", "cli_main", "pagination")
_WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday")
_DISTRACTORS: dict[str, Draw] = {
    "path": lambda rng: f"{rng.choice(_DIRS)}/{rng.choice(_MODULES)}.py",
    "test": lambda rng: (
        f"tests/{rng.choice(('unit', 'integration'))}/test_{rng.choice(_MODULES)}.py"
    ),
    "func": lambda rng: rng.choice(_FUNCTIONS),
    "person": lambda rng: rng.choice(_PEOPLE),
    "project": lambda rng: rng.choice(_PROJECTS),
    "weekday": lambda rng: rng.choice(_WEEKDAYS),
    "ticket": lambda rng: f"{rng.choice(('OPS', 'PAY', 'WEB', 'CORE'))}-{rng.randint(100, 9999)}",
    "hex": lambda rng: _hex(rng, rng.choice((7, 10, 12))),
    "uuid": _uuid,
    "url": lambda rng: (
        f"https://{rng.choice(('status', 'ci', 'wiki'))}.example.com/p/{rng.randint(10, 999)}"
    ),
    "port": lambda rng: str(rng.randint(1100, 65000)),
    "build": lambda rng: f"#{rng.randint(100, 9999)}",
    "version": lambda rng: f"{rng.randint(1, 9)}.{rng.randint(0, 30)}",
    "small": lambda rng: str(rng.randint(2, 9)),
    "count": lambda rng: str(rng.randint(11, 999)),
    "percent": lambda rng: f"{rng.randint(40, 95)}%",
    "seconds": lambda rng: f"{rng.randint(1, 90)}.{rng.randint(10, 99)}",
    "clock": lambda rng: f"{rng.randint(9, 17)}:{rng.choice(('00', '15', '30', '45'))}",
}
_PLACEHOLDER = re.compile(r"\{(\w+)\}")
# The fixed words of every template: no fact's value may occur in them.
_FIXED_TEXT = " ".join(
    [
        *(fact.sentence + " " + fact.question for fact in FACTS),
        *_USER_LEADS,
        *_ASSISTANT_LEADS,
        *_CHANGE_LEADS,
        *_USER_FILLER,
        *_ASSISTANT_FILLER,
        *(text for tool in _TOOLS.values() for text in (tool[0], tool[3])),
        *_AFTER_TOOLS,
        *_OPENING,
        *_PEOPLE,
        *_PROJECTS,
        *_FUNCTIONS,
        *_DIRS,
        *_MODULES,
        *_WEEKDAYS,
    ]
).casefold()
# Exchanges: a user message and a reply (2), or with one tool call and its result between
# (4), or two calls and their results (5); weights of each.
_EXCHANGE_SIZES = {2: 15, 4: 4, 5: 1}


class _Values:
    """Draws facts' values unlike each other and unlike any fixed text, then distractors that
    hold no fact's value: so a probe's value occurs only where its fact is stated."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.facts: list[str] = []

    def fact(self, draw: Draw) -> str:
        def fresh(value: str) -> bool:
            return value not in _FIXED_TEXT and not any(
                value in other or other in value for other in self.facts
            )

        value = self._draw(draw, fresh)
        self.facts.append(value.casefold())
        return value

    def distractor(self, name: str) -> str:
        return self._draw(
            _DISTRACTORS[name], lambda value: not any(fact in value for fact in self.facts)
        )

    def _draw(self, draw: Draw, fits: Callable[[str], bool]) -> str:
        """A value `draw` gives that `fits` (given it case-folded); a template whose draws
        never fit is a bug, said after a bounded number of tries."""
        for _ in range(1000):
            value = draw(self.rng)
            if fits(value.casefold()):
                return value
        raise AssertionError(f"no value fits in 1000 draws (last: {value!r})")

    def fill(self, template: str) -> str:
        return _PLACEHOLDER.sub(lambda match: self.distractor(match.group(1)), template)


class _Event(NamedTuple):
    """A fact stated (step 0) or changed (step 1, 2) at a point of the conversation (0..1)."""

    at: float
    fact: int
    step: int


class _Planted(NamedTuple):
    """A fact of the conversation: its values, oldest first, and whether it is pinned."""

    fact: _Fact
    values: list[str]
    pinned: bool = False


def generate(seed: int, *, messages: int = 240, facts: int = 16, drift: int = 3) -> ProbeSet:
    """A conversation of `messages` messages with `facts` facts planted across it, `drift`
    of them stated early and changed later (once or twice), and a probe for each fact; the
    user's instructions are pinned, and as many facts that do not change as a quarter of
    all the facts (what a user pins: the rules, and some facts known to matter)."""
    _check_sizes(messages, facts, drift)
    rng = random.Random(seed)
    values = _Values(rng)
    drifting = rng.sample([fact for fact in FACTS if fact.drifts], drift)
    steady = rng.sample([fact for fact in FACTS if fact not in drifting], facts - drift)
    changes = [rng.choice((1, 2)) for _ in drifting] + [0] * len(steady)
    planted = [
        _Planted(fact, [values.fact(fact.draw) for _ in range(1 + count)])
        for fact, count in zip(drifting + steady, changes, strict=True)
    ]
    planted = _pin(rng, planted, math.ceil(facts / 4))
    events = sorted(_schedule(rng, planted, drift))
    sizes = [len(_OPENING), *_exchange_sizes(rng, messages - len(_OPENING))]
    at_exchange = dict(zip(_spread([e.at for e in events], len(sizes)), events, strict=True))
    built = [_say("user", values.fill(_OPENING[0])), _say("assistant", _OPENING[1])]
    for number, size in enumerate(sizes[1:], start=1):
        event = at_exchange.get(number)
        stated = None if event is None else (planted[event.fact], event.step)
        built += _exchange(values, size, stated)
    conversation = [
        Message.model_validate({**item, "created_at": EPOCH + timedelta(minutes=index)})
        for index, item in enumerate(built)
    ]
    probes = [
        Probe(
            question=item.fact.question,
            expect=item.values[-1],
            stale=item.values[:-1],
            kind=item.fact.kind,
            id=item.fact.id,
        )
        for item in (planted[event.fact] for event in events if event.step == 0)
    ]
    return ProbeSet(conversation, probes)


def _check_sizes(messages: int, facts: int, drift: int) -> None:
    """Refuse sizes the generator cannot honour, saying which it can."""
    changing = min(facts, sum(fact.drifts for fact in FACTS))
    if not 1 <= facts <= len(FACTS):
        raise UsageError(f"facts must be from 1 to {len(FACTS)}, not {facts}")
    if not 0 <= drift <= changing:
        raise UsageError(f"drift must be from 0 to {changing} with {facts} facts, not {drift}")
    # Each fact and each change (two at most) takes an exchange of its own, of up to 5
    # messages, after the opening one.
    least = 5 * (facts + 2 * drift + 1)
    if messages < least:
        raise UsageError(
            f"{messages} messages are too few for {facts} facts, {drift} of them changing: "
            f"give at least {least}"
        )


def _pin(rng: random.Random, planted: list[_Planted], share: int) -> list[_Planted]:
    """Every instruction pinned, and `share` of the facts that never change."""
    steady = [i for i, item in enumerate(planted) if item.fact.drifts and len(item.values) == 1]
    more = set(rng.sample(steady, min(len(steady), share)))
    return [
        item._replace(pinned=not item.fact.drifts or index in more)
        for index, item in enumerate(planted)
    ]


def _schedule(rng: random.Random, planted: list[_Planted], drift: int) -> list[_Event]:
    """When each fact is stated and changed. The conversation is cut into as many stretches
    as there are facts, each stating one; a changing fact (the first `drift`) is stated in
    the first half, and its changes spread over what follows, so that compressions fall
    between them."""
    count = len(planted)
    early = rng.sample(range(max(drift, math.ceil(count / 2))), drift)
    rest = [stretch for stretch in range(count) if stretch not in early]
    rng.shuffle(rest)
    events = []
    for index, (item, stretch) in enumerate(zip(planted, early + rest, strict=True)):
        start = (stretch + rng.uniform(0.1, 0.9)) / count
        events.append(_Event(start, index, 0))
        changes = len(item.values) - 1
        for step in range(1, changes + 1):
            share = (step - 1 + rng.uniform(0.5, 0.9)) / changes
            events.append(_Event(start + (1 - start) * share, index, step))
    return events


def _exchange_sizes(rng: random.Random, messages: int) -> list[int]:
    """Sizes of exchanges that add up to `messages` (never leaving 1 or 3 over)."""
    sizes: list[int] = []
    left = messages
    while left:
        fits = [size for size in _EXCHANGE_SIZES if size <= left and left - size not in (1, 3)]
        size = rng.choices(fits, weights=[_EXCHANGE_SIZES[size] for size in fits])[0]
        sizes.append(size)
        left -= size
    return sizes


def _spread(times: Sequence[float], exchanges: int) -> list[int]:
    """Distinct, increasing exchanges (after the opening one) for events at `times` (sorted,
    0..1), each as near to its time as the others leave room for."""
    count = len(times)
    wanted = [1 + int(at * (exchanges - 1)) for at in times]
    for i in range(1, count):
        wanted[i] = max(wanted[i], wanted[i - 1] + 1)
    for i in reversed(range(count)):
        wanted[i] = min(wanted[i], exchanges - count + i)
    return wanted


def _say(role: str, content: str, *, pinned: bool = False, **more: Any) -> dict[str, Any]:
    return {"role": role, "content": content, **more, **({"pinned": True} if pinned else {})}


def _filler(values: _Values, templates: Sequence[str]) -> str:
    """One or two sentences of filler, with fresh distractors."""
    chosen = values.rng.sample(templates, values.rng.randint(1, 2))
    return " ".join(values.fill(template) for template in chosen)


def _statement(rng: random.Random, item: _Planted, step: int, *, by_user: bool) -> str:
    """The sentence stating a fact's value (or changing it), after a lead-in."""
    value = item.values[step]
    if not item.fact.drifts:
        return item.fact.sentence.format(value=value)
    leads = _CHANGE_LEADS if step else _USER_LEADS if by_user else _ASSISTANT_LEADS
    said = item.fact.sentence.replace(" is {value}", " is now {value}" if step else " is {value}")
    said = said.format(value=value)
    return rng.choice(leads).format(s=said, S=said[0].upper() + said[1:])


def _exchange(
    values: _Values, size: int, stated: tuple[_Planted, int] | None
) -> list[dict[str, Any]]:
    """One exchange of `size` messages; with `stated`, a fact's value (its step) said in it:
    a change or an instruction by the user, another fact by either."""
    rng = values.rng
    tools = rng.sample(list(_TOOLS), size - 3) if size > 2 else []
    uses = [(tool, values.distractor(_TOOLS[tool][1])) for tool in tools]
    if uses:
        user = " ".join(values.fill(_TOOLS[tool][0].replace("{arg}", arg)) for tool, arg in uses)
    else:
        user = _filler(values, _USER_FILLER)
    reply = _filler(values, _AFTER_TOOLS if uses else _ASSISTANT_FILLER)
    pin_user = pin_reply = False
    if stated is not None:
        item, step = stated
        by_user = step > 0 or not item.fact.drifts or rng.random() < 0.5
        sentence = _statement(rng, item, step, by_user=by_user)
        if by_user:
            user, pin_user = f"{sentence} {user}", item.pinned and step == 0
        else:
            reply, pin_reply = f"{reply} {sentence}", item.pinned
    built = [_say("user", user, pinned=pin_user)]
    if uses:
        ids = [f"call_{values.distractor('hex')}" for _ in uses]
        calls = [
            ToolCall(
                id=call_id,
                function=ToolCallFunction(
                    name=tool, arguments=orjson.dumps({_TOOLS[tool][2]: arg}).decode()
                ),
            )
            for call_id, (tool, arg) in zip(ids, uses, strict=True)
        ]
        built.append(_say("assistant", "Let me check.", tool_calls=calls))
        built += [
            _say("tool", values.fill(_TOOLS[tool][3].replace("{arg}", arg)), tool_call_id=call_id)
            for call_id, (tool, arg) in zip(ids, uses, strict=True)
        ]
    built.append(_say("assistant", reply, pinned=pin_reply))
    return built
