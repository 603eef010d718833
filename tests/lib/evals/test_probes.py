"""The probes of `agctl eval compaction`: their check, their file, and the generated transcript
and probe set (deterministic, answerable by word overlap on the whole conversation, drift
after the first statement, pins on fact messages, every probed artifact found)."""

from __future__ import annotations

import itertools
import json
import os
import re
import stat
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import get_args

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agctl.base import vocab
from agctl.base.errors import InvalidInput, UsageError
from agctl.context import artifacts
from agctl.context.models import Message
from agctl.evals.probes import (
    EPOCH,
    FACTS,
    Probe,
    ProbeSet,
    Verdict,
    generate,
    read_probes,
    write_probe_set,
)
from agctl.interchange.formats import parse_messages

GENERATOR_SETTINGS = settings(
    max_examples=30,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)

# The offline answerer's rule, as a reader of words only: the sentence sharing the most
# words with the question, the latest on a tie. Checked with stop words dropped and kept,
# so that the rule holds for either way of counting.
_WORD = re.compile(r"[a-z0-9]+")
STOP_WORDS = frozenset(
    re.findall(
        r"\w+",
        "a an the is are was be of for to in on at by with what which who how do does should "
        "we it and or that this all every",
    )
)


def words(text: str, stop: frozenset[str]) -> set[str]:
    return {word for word in _WORD.findall(text.casefold()) if word not in stop}


def conversation_sentences(messages: list[Message]) -> list[tuple[int, str]]:
    """(message index, sentence) of every sentence the conversation shows, tool calls'
    arguments included."""
    found = []
    for index, message in enumerate(messages):
        text = message.text()
        for call in message.tool_calls or ():
            text += f"\n{call.function.name} {call.function.arguments}"
        found += [(index, sentence) for sentence in artifacts.sentences(text)]
    return found


def best_sentence(question: str, sentences: list[str], stop: frozenset[str]) -> str:
    asked = words(question, stop)
    best, best_score = "", -1
    for sentence in sentences:
        score = len(asked & words(sentence, stop))
        if score >= best_score:
            best, best_score = sentence, score
    return best


def holding(value: str, sentences: list[tuple[int, str]]) -> list[int]:
    """The message indexes of the sentences holding `value` (case aside)."""
    return [index for index, sentence in sentences if value.casefold() in sentence.casefold()]


def check_probe_set(probe_set: ProbeSet, messages: int, facts: int, drift: int) -> None:
    """Everything a generated set promises, for any seed and sizes."""
    conversation, probes = probe_set
    assert len(conversation) == messages
    assert len(probes) == facts
    assert len({probe.id for probe in probes}) == facts
    sentences = conversation_sentences(conversation)
    texts = [sentence for _, sentence in sentences]
    for probe in probes:
        assert probe.match == "contains"
        assert probe.expect not in probe.question
        for stop in (frozenset(), STOP_WORDS):
            best = best_sentence(probe.question, texts, stop)
            assert probe.expect.casefold() in best.casefold(), (probe, best)
        # Each value the fact took is said in one sentence, each in a later message than the
        # one before: only its own sentence answers, and a stale one is never the latest.
        places = [holding(value, sentences) for value in [*probe.stale, probe.expect]]
        assert all(len(place) == 1 for place in places), (probe, places)
        assert [place[0] for place in places] == sorted({place[0] for place in places})
    assert sum(bool(probe.stale) for probe in probes) == drift
    assert all(len(probe.stale) <= 2 for probe in probes)
    # A probe's value is an artifact of its own kind; an instruction, the sentence itself.
    found = artifacts.gather(conversation)
    for probe in probes:
        assert probe.kind in artifacts.KINDS
        if probe.kind == "instructions":
            (index,) = holding(probe.expect, sentences)
            (sentence,) = [s for i, s in sentences if i == index and probe.expect in s]
            assert sentence in found.instructions
            assert conversation[index].role == "user"
        else:
            values = [*probe.stale, probe.expect]
            assert [v for v in values if v not in getattr(found, probe.kind)] == [], probe
    check_shape(conversation)
    check_pins(conversation, probes)


def check_shape(conversation: list[Message]) -> None:
    """User, then assistant (its tool calls each answered before its reply), a minute apart."""
    moments = [message.created_at for message in conversation]
    assert moments == [EPOCH + timedelta(minutes=i) for i in range(len(conversation))]
    position = 0
    while position < len(conversation):
        assert conversation[position].role == "user"
        reply = conversation[position + 1]
        assert reply.role == "assistant"
        position += 2
        if reply.tool_calls:
            results = conversation[position : position + len(reply.tool_calls)]
            assert [m.role for m in results] == ["tool"] * len(reply.tool_calls)
            assert [m.tool_call_id for m in results] == [call.id for call in reply.tool_calls]
            position += len(results)
            assert conversation[position].role == "assistant"
            assert not conversation[position].tool_calls
            position += 1


def check_pins(conversation: list[Message], probes: list[Probe]) -> None:
    """Every instruction is pinned, and as many facts that never change as a quarter of
    all the facts (or all there are), and only the messages that first state a fact are."""
    pinned = [message.text() for message in conversation if message.pinned]
    instructions = [probe.expect for probe in probes if probe.kind == "instructions"]
    steady = [p for p in probes if p.kind != "instructions" and not p.stale]
    quarter = -(-len(probes) // 4)
    kept = [p for p in steady if any(p.expect in text for text in pinned)]
    assert len(kept) == min(quarter, len(steady))
    assert len(pinned) <= len(instructions) + len(kept)
    assert all(any(value in text for text in pinned) for value in instructions)
    first_values = [(probe.stale or [probe.expect])[0] for probe in probes]
    assert all(any(value in text for value in first_values) for text in pinned)


@pytest.mark.parametrize("seed", [0, 1, 28])
def test_a_default_set_keeps_every_promise(seed: int) -> None:
    check_probe_set(generate(seed), 240, 16, 3)


@GENERATOR_SETTINGS
@given(
    seed=st.integers(-(2**63), 2**63),
    facts=st.integers(1, len(FACTS)),
    data=st.data(),
)
def test_any_seed_and_sizes_keep_every_promise(seed: int, facts: int, data: st.DataObject) -> None:
    drift = data.draw(st.integers(0, min(facts, sum(fact.drifts for fact in FACTS))), "drift")
    messages = data.draw(st.integers(5 * (facts + 2 * drift + 1), 400), "messages")
    check_probe_set(
        generate(seed, messages=messages, facts=facts, drift=drift), messages, facts, drift
    )


def test_no_two_questions_share_more_than_one_word() -> None:
    """What keeps one fact's sentence from answering another's question, whatever else the
    conversation holds."""
    asked = {fact.id: words(fact.question, STOP_WORDS) for fact in FACTS}
    shared = {
        (one, other): sorted(asked[one] & asked[other])
        for one, other in itertools.combinations(asked, 2)
    }
    assert {pair: common for pair, common in shared.items() if len(common) > 1} == {}


def test_a_change_comes_well_after_the_value_it_replaces() -> None:
    """Changes spread over the conversation, so compressions fall between them: at the
    default sizes, each value is said at least a tenth of the conversation after the last."""
    gaps = []
    for seed in range(20):
        conversation, probes = generate(seed)
        sentences = conversation_sentences(conversation)
        for probe in probes:
            places = [holding(value, sentences)[0] for value in [*probe.stale, probe.expect]]
            gaps += [later - earlier for earlier, later in itertools.pairwise(places)]
    assert len(gaps) >= 20 * 3
    assert min(gaps) >= 24


def test_the_same_seed_writes_the_same_bytes_and_another_seed_other_ones(tmp_path: Path) -> None:
    first = write_probe_set(generate(7), tmp_path / "a")
    again = write_probe_set(generate(7), tmp_path / "b")
    other = write_probe_set(generate(8), tmp_path / "c")
    assert [path.read_bytes() for path in first] == [path.read_bytes() for path in again]
    assert all(a.read_bytes() != c.read_bytes() for a, c in zip(first, other, strict=True))
    # Other facts, in another order, with other values, stated elsewhere.
    (seven, said_seven), (eight, said_eight) = (
        ({str(p.id): p for p in probes}, conversation_sentences(conversation))
        for conversation, probes in (generate(7), generate(8))
    )
    shared = sorted(seven.keys() & eight.keys())
    assert len(shared) >= 4
    assert list(seven) != list(eight)
    assert sum(seven[id].expect == eight[id].expect for id in shared) <= len(shared) // 4
    places = [
        (holding(seven[id].expect, said_seven), holding(eight[id].expect, said_eight))
        for id in shared
    ]
    assert sum(here == there for here, there in places) <= len(shared) // 4


def test_the_bytes_do_not_depend_on_the_process(tmp_path: Path) -> None:
    """String hashing differs from process to process: nothing may follow a set's order."""
    script = (
        "import sys; from pathlib import Path; "
        "from agctl.evals.probes import generate, write_probe_set; "
        "write_probe_set(generate(3), Path(sys.argv[1]))"
    )
    written = []
    for hash_seed in ("1", "2"):
        directory = tmp_path / hash_seed
        environment = {**os.environ, "PYTHONHASHSEED": hash_seed}
        subprocess.run([sys.executable, "-c", script, directory], check=True, env=environment)
        written.append(
            [(directory / name).read_bytes() for name in ("transcript.jsonl", "probes.jsonl")]
        )
    assert written[0] == written[1]
    assert written[0] == [
        path.read_bytes() for path in write_probe_set(generate(3), tmp_path / "here")
    ]


def test_the_written_files_are_private_and_read_back_equal(tmp_path: Path) -> None:
    probe_set = generate(11)
    transcript, probes = write_probe_set(probe_set, tmp_path / "new" / "set")
    assert (transcript.name, probes.name) == ("transcript.jsonl", "probes.jsonl")
    for path in (transcript, probes, transcript.parent):
        mode = stat.S_IMODE(path.stat().st_mode)
        assert mode == (0o700 if path.is_dir() else 0o600), (path, oct(mode))
    read_back = parse_messages(transcript.read_bytes(), "jsonl", str(transcript))
    assert read_back == probe_set.messages
    assert any(message.pinned for message in read_back)
    assert read_probes(probes.read_bytes(), str(probes)) == probe_set.probes


def test_rewriting_a_set_replaces_its_files(tmp_path: Path) -> None:
    write_probe_set(generate(1, messages=60, facts=4, drift=1), tmp_path)
    transcript, probes = write_probe_set(generate(2), tmp_path)
    assert len(parse_messages(transcript.read_bytes(), "jsonl")) == 240
    assert len(read_probes(probes.read_bytes(), "probes")) == 16
    assert sorted(path.name for path in tmp_path.iterdir()) == ["probes.jsonl", "transcript.jsonl"]


@pytest.mark.parametrize(
    ("sizes", "message"),
    [
        ({"facts": 0}, "facts must be from 1 to 29, not 0"),
        ({"facts": len(FACTS) + 1}, "facts must be from 1 to 29, not 30"),
        ({"facts": 4, "drift": 5}, "drift must be from 0 to 4 with 4 facts, not 5"),
        ({"drift": -1}, "drift must be from 0 to 16 with 16 facts, not -1"),
        (
            {"messages": 114},
            "114 messages are too few for 16 facts, 3 of them changing: give at least 115",
        ),
    ],
)
def test_sizes_it_cannot_honour_are_refused(sizes: dict[str, int], message: str) -> None:
    with pytest.raises(UsageError) as caught:
        generate(1, **sizes)
    assert str(caught.value) == message


def test_the_least_messages_it_asks_for_are_enough() -> None:
    check_probe_set(generate(4, messages=115), 115, 16, 3)
    check_probe_set(
        generate(4, messages=5 * (len(FACTS) + 2 * 22 + 1), facts=len(FACTS), drift=22), 370, 29, 22
    )


# ---- the check of an answer ----


# What the probes of the check's truth table expect, and held before, by match mode.
CHECKED = {
    "contains": ("6543", ["5433", "4433"]),
    "exact": ("staging port 6543", ["staging port 5433", "staging port 4433"]),
}


@pytest.mark.parametrize(
    ("match", "answer", "correct", "stale"),
    [
        ("contains", "The port is 6543.", True, False),
        ("contains", "the  STAGING\n port is 6543", True, False),
        ("contains", "It was 5433 before, now 6543.", True, False),
        ("contains", "The port is 5433.", False, True),
        ("contains", "It used to be 4433.", False, True),
        ("contains", "The port is 8080.", False, False),
        ("contains", "", False, False),
        ("exact", "staging port 6543", True, False),
        ("exact", "  Staging\tPORT   6543\n", True, False),
        ("exact", "The staging port 6543", False, False),
        ("exact", "staging port 5433", False, True),
        ("exact", "staging port 5433 or 6543", False, False),
    ],
)
def test_check_says_correct_or_stale(match: str, answer: str, correct: bool, stale: bool) -> None:
    expect, old = CHECKED[match]
    probe = Probe.model_validate({"question": "q?", "expect": expect, "stale": old, "match": match})
    assert probe.check(answer) == Verdict(correct, stale)


def test_a_judge_probe_is_not_checked_by_text() -> None:
    probe = Probe(question="Is it kept?", expect="yes", match="judge", id="kept")
    with pytest.raises(UsageError, match="probe 'kept' is checked by a judge model"):
        probe.check("yes")


def test_the_match_modes_are_the_vocabulary_s() -> None:
    assert get_args(Probe.model_fields["match"].annotation) == vocab.PROBE_MATCHES


# ---- the probe file ----


def test_a_probe_file_reads_with_blank_lines_and_defaults() -> None:
    data = (
        b'{"question": "Which port?", "expect": "6543", "stale": ["5433"], "kind": "numbers"}\n'
        b"\n   \n"
        b'{"question": "Say it", "expect": "Done.", "match": "exact", "id": "done"}\r\n'
    )
    assert read_probes(data, "p.jsonl") == [
        Probe(question="Which port?", expect="6543", stale=["5433"], kind="numbers"),
        Probe(question="Say it", expect="Done.", match="exact", id="done"),
    ]


GOOD = b'{"question": "q?", "expect": "x"}\n'


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "p.jsonl: no probes (one JSON object a line: question, expect)"),
        (b"\n  \n", "p.jsonl: no probes (one JSON object a line: question, expect)"),
        (GOOD + b'{"question": "q?",\n', "p.jsonl: line 2 is not valid JSON: "),
        (GOOD + b"\xff\n", "p.jsonl: line 2 is not valid JSON: "),
        (GOOD + b'\n{"question": "q?"}\n', "p.jsonl: line 3: expect: Field required"),
        (b'{"expect": "x"}', "p.jsonl: line 1: question: Field required"),
        (
            b'{"question": "q?", "expect": "x", "match": "regex"}',
            "p.jsonl: line 1: match: Input should be 'exact', 'contains' or 'judge'",
        ),
        (
            b'{"question": "q?", "expect": "  "}',
            "p.jsonl: line 1: expect: must hold more than white space",
        ),
        (
            b'{"question": "", "expect": "x"}',
            "p.jsonl: line 1: question: must hold more than white space",
        ),
        (
            b'{"question": "q?", "expect": 5433}',
            "p.jsonl: line 1: expect: Input should be a valid string",
        ),
        (
            b'{"question": "q?", "expect": "x", "stale": ["y", " "]}',
            "p.jsonl: line 1: stale.1: must hold more than white space",
        ),
        (
            b'{"question": "q?", "expect": "x", "kind": "dates"}',
            "p.jsonl: line 1: kind: unknown kind 'dates' "
            "(known: instructions, urls, paths, ids, numbers)",
        ),
        (
            b'{"question": "q?", "expect": "x", "answer": "y"}',
            "p.jsonl: line 1: answer: Extra inputs are not permitted",
        ),
        (
            b'["q?", "x"]',
            "p.jsonl: line 1: probe: Input should be a valid dictionary or instance of Probe",
        ),
        (
            b'{"question": "q?", "expect": "x", "id": "a"}\n'
            b'{"question": "r?", "expect": "y", "id": "a"}',
            "p.jsonl: line 2: id: 'a' is line 1's id too",
        ),
    ],
)
def test_a_bad_probe_file_is_refused_naming_the_line_and_the_field(
    data: bytes, message: str
) -> None:
    with pytest.raises(InvalidInput) as caught:
        read_probes(data, "p.jsonl")
    assert str(caught.value).startswith(message)
    assert "\n" not in str(caught.value)


def test_importing_the_probes_loads_the_models_and_no_more_of_agctl() -> None:
    """The command that runs an evaluation imports it before it knows what it needs: the
    store, the interchange formats and the artifact finder come when they are used."""
    script = (
        "import sys, json; import agctl.evals.probes; "
        "print(json.dumps(sorted(name for name in sys.modules if name.startswith('agctl.'))))"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, check=True, text=True
    )
    loaded = set(json.loads(result.stdout))
    assert {"agctl.evals.probes", "agctl.context.models"} <= loaded
    assert sorted(
        name for name in loaded if not name.startswith(("agctl.base", "agctl.context"))
    ) == [
        "agctl.evals",
        "agctl.evals.probes",
    ]
    assert loaded.isdisjoint(
        {"agctl.context.artifacts", "agctl.store", "agctl.interchange.formats"}
    )
