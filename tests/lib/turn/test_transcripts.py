"""`agctl turn replay`: transcripts parsed and validated, replayed in one process, checked.

The offline provider and its `--script` replies are deterministic, so recording a
cassette and replaying it against a fresh session needs no network.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import Result
from helpers import file_only

from agctl.base.errors import (
    AgctlError,
    InvalidInput,
    ProviderError,
    StoreError,
    TurnInterrupted,
    UsageError,
)
from agctl.context.models import Message, utcnow
from agctl.interchange.formats import export_messages
from agctl.providers.base import ChatRequest, Event, TextDelta
from agctl.providers.offline import OfflineProvider, ScriptedReply
from agctl.store import Store
from agctl.store.checkpointer import Checkpointer
from agctl.turn.send import TurnOptions, prepare_turn
from agctl.turn.transcripts import (
    CheckMode,
    TranscriptTurn,
    TurnOutcome,
    matches,
    mismatch_diff,
    parse_transcript,
    replay,
)

Run = Callable[..., Result]

EXIT_DATA, EXIT_PROVIDER, EXIT_CHECK_FAILED = 5, 6, 8
OPTIONS = TurnOptions(model="offline", checkpoint=False)


# ---- helpers ---------------------------------------------------------------------------


def ok(result: Result) -> Result:
    assert result.exit_code == 0, (result.exit_code, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    return result


def jsonl(lines: list[dict[str, Any]]) -> str:
    return "".join(json.dumps(line) + "\n" for line in lines)


def write_jsonl(path: Path, lines: list[dict[str, Any]]) -> Path:
    path.write_text(jsonl(lines))
    return path


def json_lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines()]


def chat(store: Store, session: str, slot: str = "default") -> list[tuple[str, str]]:
    return [(m.role, m.text()) for m in store.load_slot(session, slot).messages]


def cassette_entries(path: Path) -> list[dict[str, Any]]:
    return json_lines(path.read_text())


def script(path: Path, replies: list[str]) -> Path:
    path.write_text(json.dumps(replies))
    return path


# ---- parsing ---------------------------------------------------------------------------


def test_a_line_with_every_optional_field() -> None:
    line = {
        "input": "Summarise.",
        "expect": "A summary.",
        "slot": "plan-b",
        "model": "gpt-test",
        "system": "Be terse.",
        "scratch": ["note 1", "note 2"],
        "temperature": 0.5,
        "max_tokens": 64,
    }
    assert parse_transcript(jsonl([line]).encode()) == [TranscriptTurn(**line)]


def test_only_input_is_required_and_blank_lines_are_skipped() -> None:
    data = b'\n{"input": "one"}\n   \n\n{"input": "two", "expect": "2"}\n\n'
    turns = parse_transcript(data)
    assert [(t.input, t.expect, t.slot, t.scratch) for t in turns] == [
        ("one", None, None, []),
        ("two", "2", None, []),
    ]


def test_prompt_is_an_alias_for_input() -> None:
    turns = parse_transcript(b'{"prompt": "hello", "expect": "hi"}\n')
    assert [(t.input, t.expect) for t in turns] == [("hello", "hi")]


def test_an_exported_openai_array_gives_user_turns_and_expected_replies() -> None:
    exported = [
        {"role": "system", "content": "Be terse."},
        {"role": "user", "content": "q1"},
        {"role": "assistant", "content": "a1"},
        {"role": "assistant", "content": "a1, continued"},
        {"role": "user", "content": "q2"},
        {"role": "assistant", "content": "a2"},
        {"role": "user", "content": "q3"},
    ]
    turns = parse_transcript(json.dumps(exported, indent=2).encode())
    assert [(t.input, t.expect) for t in turns] == [("q1", "a1"), ("q2", "a2"), ("q3", None)]


def test_exported_json_lines_with_metadata_give_the_same_turns() -> None:
    now = utcnow()
    messages = [
        Message(role="system", content="rules", created_at=now),
        Message(role="user", content="q1", created_at=now, tokens=3),
        Message(role="assistant", content="a1", created_at=now, model="m", tokens=4),
        Message(role="user", content="q2\nsecond line", created_at=now),
        Message(role="assistant", content="a2", created_at=now, model="m"),
    ]
    data = export_messages(messages, "jsonl").replace(b"\n", b"\n\n", 1)  # and a blank line
    turns = parse_transcript(data)
    assert [(t.input, t.expect) for t in turns] == [("q1", "a1"), ("q2\nsecond line", "a2")]


@pytest.mark.parametrize(
    ("data", "needles"),
    [
        (b'{"input": "a"}\n\n{"input": "b"\n', ["line 3", "not valid JSON"]),
        (b'{"input": "a"}\n{"input": "b", "expected": "c"}\n', ["line 2", "expected"]),
        (b'{"input": "a"}\n{"expect": "c"}\n', ["line 2", "input", "required"]),
        (b'{"input": 3}\n', ["line 1", "input", "string"]),
        (b'{"input": ""}\n', ["line 1", "input"]),
        (b'{"input": "a"}\n{"input": "b", "scratch": "x"}\n', ["line 2", "scratch", "list"]),
        (b'{"input": "a", "expect": 5}\n', ["line 1", "expect", "string"]),
        (b'{"input": "a", "temperature": 3}\n', ["line 1", "temperature"]),
        (b'{"input": "a", "max_tokens": 0}\n', ["line 1", "max_tokens"]),
        (b'{"input": "a"}\n"just a string"\n', ["line 2", "dictionary"]),
        (b"", ["no turns"]),
        (b"\n  \n\n", ["no turns"]),
    ],
    ids=[
        "bad-json",
        "unknown-field",
        "missing-input",
        "input-not-string",
        "empty-input",
        "scratch-not-list",
        "expect-not-string",
        "temperature-out-of-range",
        "max-tokens-zero",
        "not-an-object",
        "empty-file",
        "blank-file",
    ],
)
def test_every_error_names_the_line(data: bytes, needles: list[str]) -> None:
    with pytest.raises(InvalidInput) as caught:
        parse_transcript(data, "chat.jsonl")
    message = str(caught.value)
    assert message.startswith("chat.jsonl: ")
    for needle in needles:
        assert needle in message


@pytest.mark.parametrize("data", [b"[]", b'[{"role": "assistant", "content": "hi"}]'])
def test_an_export_without_user_messages_is_refused(data: bytes) -> None:
    with pytest.raises(InvalidInput, match="no turns"):
        parse_transcript(data, "chat.json")


def test_an_invalid_message_in_an_exported_json_lines_slot_names_its_line() -> None:
    data = b'{"role": "user", "content": "a"}\n\n{"role": "bot", "content": "b"}\n'
    with pytest.raises(InvalidInput, match="line 3"):
        parse_transcript(data, "chat.jsonl")


# ---- checks ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reply", "expected", "mode", "matched"),
    [
        ("Hello there", "Hello there", "exact", True),
        ("Hello there", "Hello there ", "exact", False),
        ("Hello there", "hello there", "exact", False),
        ("Hello there", "lo th", "contains", True),
        ("Hello there", "", "contains", True),
        ("Hello there", "bye", "contains", False),
        ("Hello there", r"^H\w+ t", "regex", True),
        ("line one\nline two", r"one.line", "regex", True),  # DOTALL: '.' crosses lines
        ("Hello there", r"^there", "regex", False),
    ],
)
def test_matches(reply: str, expected: str, mode: CheckMode, matched: bool) -> None:
    assert matches(reply, expected, mode) is matched


def test_mismatch_diff_is_a_unified_diff_of_expected_against_received() -> None:
    diff = mismatch_diff("one\ntwo\nthree", "one\n2\nthree")
    assert diff == "--- expected\n+++ received\n@@ -1,3 +1,3 @@\n one\n-two\n+2\n three"
    assert mismatch_diff("same", "same") == ""


# ---- the library -----------------------------------------------------------------------


def test_replay_reports_each_turn_and_counts_mismatches(store: Store) -> None:
    store.create_session("s")
    turns = [
        TranscriptTurn(input="a", expect="alpha"),
        TranscriptTurn(input="b", expect="BETA"),
        TranscriptTurn(input="c"),
    ]
    seen: list[dict[str, Any]] = []
    provider = OfflineProvider([ScriptedReply("alpha"), ScriptedReply("beta"), ScriptedReply("c")])
    summary = replay(
        store,
        "s",
        turns,
        provider,
        OPTIONS,
        check="exact",
        on_turn=lambda o: seen.append(o.to_dict()),
    )
    assert [(t["turn"], t["reply"], t.get("matched")) for t in seen] == [
        (1, "alpha", True),
        (2, "beta", False),
        (3, "c", None),
    ]
    assert seen[1]["expected"] == "BETA" and seen[1]["slot"] == "default"
    result = summary.to_dict()
    assert {k: result[k] for k in ("turns", "sent", "checked", "matched", "mismatched")} == {
        "turns": 3,
        "sent": 3,
        "checked": 2,
        "matched": 1,
        "mismatched": [2],
    }
    assert [(m.number, m.expected, m.received) for m in summary.mismatches] == [(2, "BETA", "beta")]
    assert chat(store, "s") == [
        ("user", "a"),
        ("assistant", "alpha"),
        ("user", "b"),
        ("assistant", "beta"),
        ("user", "c"),
        ("assistant", "c"),
    ]


def test_a_replay_stays_on_the_slot_it_began_on_when_another_is_selected_meanwhile(
    store: Store,
) -> None:
    store.create_session("s")
    store.create_slot("s", "other")

    class Switching(OfflineProvider):
        """Another command's `slot use other` lands while the first turn is answered."""

        def stream(self, request: ChatRequest) -> Iterator[Event]:
            if request.context.turn == 1:
                store.use_slot("s", "other")
            return super().stream(request)

    turns = [TranscriptTurn(input="a"), TranscriptTurn(input="b")]
    seen: list[str] = []
    replay(
        store, "s", turns, Switching(), OPTIONS, on_turn=lambda o: seen.append(o.to_dict()["slot"])
    )

    assert seen == ["default", "default"]
    assert [text for _, text in chat(store, "s")][::2] == ["a", "b"]
    assert store.load_slot("s", "other").messages == []
    assert store.load_session("s").current_slot == "other"


def test_replay_without_check_counts_nothing_as_checked(store: Store) -> None:
    store.create_session("s")
    turns = [TranscriptTurn(input="a", expect="not this")]
    summary = replay(store, "s", turns, OfflineProvider(), OPTIONS)
    assert (summary.sent, summary.checked, summary.mismatched) == (1, 0, [])


def test_a_failed_turn_is_reported_then_stops_the_replay(store: Store) -> None:
    store.create_session("s")

    class FailsOnSecondTurn:
        name = "flaky"

        def stream(self, request: ChatRequest) -> Iterator[Event]:
            if request.context.turn == 2:
                raise ProviderError("the server went away")
            yield TextDelta("fine")

    outcomes: list[TurnOutcome] = []
    turns = [TranscriptTurn(input=text) for text in ("one", "two", "three")]
    with pytest.raises(ProviderError, match="went away") as raised:
        replay(store, "s", turns, FailsOnSecondTurn(), OPTIONS, on_turn=outcomes.append)
    assert [(o.number, o.error) for o in outcomes] == [(1, None), (2, "the server went away")]
    assert chat(store, "s") == [("user", "one"), ("assistant", "fine")]
    # the transcript holds the prompt: no draft, and the error names the turn instead
    assert store.draft_slots("s") == []
    assert raised.value.__notes__ == [
        'the replay stopped at turn 2 of 3 in the transcript ("two"): turn 1 was '
        "committed, nothing of this turn was written"
    ]


@pytest.mark.parametrize("sync", ["per-turn", "end"])
def test_an_interrupt_during_a_commit_stops_the_replay_after_that_turn(
    store: Store, monkeypatch: pytest.MonkeyPatch, sync: str
) -> None:
    """Ctrl-C (or SIGTERM, SIGHUP) that comes while a turn is committed waits for the
    commit and is then held: the replay stops before its next turn, where it used to drop
    the interrupt and replay on to the end."""
    import signal

    import agctl.turn.send

    store.create_session("s")
    counted = agctl.turn.send.account

    def interrupted_while_committing(*args: Any, **kwargs: Any) -> None:
        counted(*args, **kwargs)
        if args[0].turn_count == 1:
            signal.raise_signal(signal.SIGINT)  # inside the commit's deferred interrupts

    monkeypatch.setattr(agctl.turn.send, "account", interrupted_while_committing)
    turns = [TranscriptTurn(input=text) for text in ("one", "two", "three")]
    with pytest.raises(TurnInterrupted) as raised:
        replay(store, "s", turns, OfflineProvider(), OPTIONS, sync=sync)
    assert raised.value.exit_code == 130
    assert raised.value.__notes__ == [
        'the replay stopped at turn 2 of 3 in the transcript ("two"): turn 1 was '
        "committed, nothing of this turn was written"
    ]
    assert store.load_session("s").turn_count == 1
    assert [m.text() for m in store.load_slot("s").messages if m.role == "user"] == ["one"]


# ---- the command -----------------------------------------------------------------------


@file_only
def test_record_then_replay_thirty_turns_with_check(run: Run, store: Store, tmp_path: Path) -> None:
    inputs = [f"question {n}: what about case {n * 7}?" for n in range(1, 31)]
    inputs[9] = "a question\nover two lines"
    plain = write_jsonl(tmp_path / "plain.jsonl", [{"input": text} for text in inputs])
    # Canned replies the default offline provider would never give: the replay below can
    # only reproduce them from the cassette.
    answers = script(tmp_path / "answers.json", [f"answer {n} of 30" for n in range(1, 31)])
    cassette = tmp_path / "chat.cassette"
    ok(run("session", "new", "recorded"))
    recording = ["turn", "replay", str(plain), "--script", str(answers), "--record", str(cassette)]
    recorded = json_lines(ok(run(*recording, "--json")).stdout)
    turn_lines, summary = recorded[:-1], recorded[-1]
    assert [line["type"] for line in turn_lines] == ["turn"] * 30
    assert [line["input"] for line in turn_lines] == inputs
    assert turn_lines[29]["reply"] == "answer 30 of 30"
    assert summary["type"] == "summary" and summary["sent"] == 30
    assert len(cassette_entries(cassette)) == 30

    expected = [{"input": line["input"], "expect": line["reply"]} for line in turn_lines]
    transcript = write_jsonl(tmp_path / "checked.jsonl", expected)
    ok(run("session", "new", "fresh"))
    result = ok(run("turn", "replay", str(transcript), "--cassette", str(cassette), "--check"))
    assert "30 turns replayed" in result.stdout
    assert "30 checked, 30 matched" in result.stdout and "differ" not in result.stdout
    assert result.stderr == ""
    assert chat(store, "fresh") == chat(store, "recorded")
    assert len(chat(store, "fresh")) == 60
    assert store.load_session("fresh").turn_count == 30


@file_only
def test_per_turn_options_reach_the_request(run: Run, store: Store, tmp_path: Path) -> None:
    ok(run("session", "new", "s"))
    ok(run("slot", "new", "other"))
    transcript = write_jsonl(
        tmp_path / "t.jsonl",
        [
            {"input": "to default"},
            {"input": "to other", "slot": "other"},
            {"input": "with model", "model": "gpt-test"},
            {"input": "with system", "system": "Answer in French."},
            {"input": "with scratch", "scratch": ["note one", "note two"]},
            {"input": "with params", "temperature": 0.5, "max_tokens": 64},
        ],
    )
    cassette = tmp_path / "c.cassette"
    ok(run("turn", "replay", str(transcript), "--record", str(cassette)))
    requests = [entry["request"] for entry in cassette_entries(cassette)]
    assert len(requests) == 6

    assert chat(store, "s", "other")[0] == ("user", "to other")
    assert len(chat(store, "s", "other")) == 2
    assert requests[1]["messages"] == [{"role": "user", "content": "to other"}]
    assert [user for role, user in chat(store, "s") if role == "user"] == [
        "to default",
        "with model",
        "with system",
        "with scratch",
        "with params",
    ]

    assert [r["model"] for r in requests] == ["offline", "offline", "gpt-test", *["offline"] * 3]
    assert store.load_slot("s").messages[3].model == "gpt-test"

    assert requests[3]["messages"][0] == {"role": "system", "content": "Answer in French."}
    assert all(m["role"] != "system" for r in requests[:3] + requests[5:] for m in r["messages"])

    assert requests[4]["messages"][-3:] == [
        {"role": "system", "content": "note one"},
        {"role": "system", "content": "note two"},
        {"role": "user", "content": "with scratch"},
    ]
    assert requests[5]["params"] == {"temperature": 0.5, "max_tokens": 64}
    assert all(r["params"] == {} for r in requests[:5])

    stored = [text for _, text in chat(store, "s")]
    assert not any(t in stored for t in ("Answer in French.", "note one", "note two"))


@file_only
def test_the_slot_option_is_the_default_and_a_turns_slot_wins(
    run: Run, store: Store, tmp_path: Path
) -> None:
    ok(run("session", "new", "s"))
    ok(run("slot", "new", "b"))
    transcript = write_jsonl(
        tmp_path / "t.jsonl", [{"input": "one"}, {"input": "two", "slot": "default"}]
    )
    ok(run("turn", "replay", str(transcript), "--slot", "b"))
    assert [text for role, text in chat(store, "s", "b") if role == "user"] == ["one"]
    assert [text for role, text in chat(store, "s") if role == "user"] == ["two"]


REPLIES = ["alpha", "beta\nsecond line", "gamma", "delta", "epsilon"]
EXPECTS: dict[str, list[str | None]] = {
    "exact": ["alpha", "beta\nother line", "gamma", "DELTA", None],
    "contains": ["lph", "zzz", "amm", "x", None],
    "regex": [r"^al.*a$", r"^gamma", r"g.m+a", r"\d", None],
}


def mismatch_transcript(path: Path, mode: str) -> Path:
    lines = []
    for text, expect in zip("abcde", EXPECTS[mode], strict=True):
        line: dict[str, Any] = {"input": text}
        if expect is not None:
            line["expect"] = expect
        lines.append(line)
    return write_jsonl(path, lines)


@file_only
@pytest.mark.parametrize("mode", ["exact", "contains", "regex"])
def test_a_mismatch_fails_after_every_turn_with_a_diff_and_a_summary(
    mode: str, run: Run, store: Store, tmp_path: Path
) -> None:
    ok(run("session", "new", "s"))
    transcript = mismatch_transcript(tmp_path / "t.jsonl", mode)
    replies = script(tmp_path / "replies.json", REPLIES)
    result = run(
        "turn", "replay", str(transcript), "--script", str(replies), "--check", "--check-mode", mode
    )
    assert result.exit_code == EXIT_CHECK_FAILED, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    # every turn was sent, the mismatches did not stop the replay
    assert store.load_session("s").turn_count == 5
    assert [text for role, text in chat(store, "s") if role == "assistant"] == REPLIES
    assert "5 turns replayed" in result.stdout
    assert "4 checked, 2 matched, 2 differ" in result.stdout
    # every mismatch, as a unified diff, on stderr
    expected = EXPECTS[mode][1]
    assert expected is not None
    diff = mismatch_diff(expected, REPLIES[1])
    assert diff.startswith("--- expected\n+++ received\n@@ ")
    assert 'turn 2: "b"' in result.stderr
    assert diff in result.stderr
    assert "+second line\n" in result.stderr
    assert f'turn 4: "d"\n--- expected\n+++ received\n@@ -1 +1 @@\n-{EXPECTS[mode][3]}\n' in (
        result.stderr
    )
    assert f"2 of 4 replies differ ({mode}); turns: 2, 4" in result.stderr
    assert diff not in result.stdout


def test_an_exact_mismatch_diff_shows_the_changed_line(run: Run, tmp_path: Path) -> None:
    ok(run("session", "new", "s"))
    transcript = mismatch_transcript(tmp_path / "t.jsonl", "exact")
    replies = script(tmp_path / "replies.json", REPLIES)
    result = run("turn", "replay", str(transcript), "--script", str(replies), "--check")
    assert result.exit_code == EXIT_CHECK_FAILED
    expected_diff = (
        "--- expected\n+++ received\n@@ -1,2 +1,2 @@\n beta\n-other line\n+second line\n"
    )
    assert expected_diff in result.stderr


def test_json_prints_a_line_per_turn_and_a_summary(run: Run, tmp_path: Path) -> None:
    ok(run("session", "new", "s"))
    transcript = mismatch_transcript(tmp_path / "t.jsonl", "exact")
    replies = script(tmp_path / "replies.json", REPLIES)
    result = run("turn", "replay", str(transcript), "--script", str(replies), "--check", "--json")
    assert result.exit_code == EXIT_CHECK_FAILED
    lines = json_lines(result.stdout)
    turns, summary = lines[:-1], lines[-1]
    assert [t["type"] for t in turns] == ["turn"] * 5
    assert [(t["turn"], t["input"], t["reply"]) for t in turns] == list(
        zip(range(1, 6), "abcde", REPLIES, strict=True)
    )
    assert [t.get("matched") for t in turns] == [True, False, True, False, None]
    assert "expected" not in turns[4]
    assert all(t["slot"] == "default" and isinstance(t["usage"], dict) for t in turns)
    assert summary["type"] == "summary"
    assert {k: summary[k] for k in ("turns", "sent", "checked", "matched", "mismatched")} == {
        "turns": 5,
        "sent": 5,
        "checked": 4,
        "matched": 2,
        "mismatched": [2, 4],
    }
    assert "2 of 4 replies differ (exact); turns: 2, 4" in result.stderr


@file_only
def test_a_cassette_miss_stops_the_replay_naming_the_request(
    run: Run, store: Store, tmp_path: Path
) -> None:
    cassette = tmp_path / "c.cassette"
    ok(run("session", "new", "recorded"))
    recorded = write_jsonl(tmp_path / "rec.jsonl", [{"input": "one"}, {"input": "two"}])
    ok(run("turn", "replay", str(recorded), "--record", str(cassette)))

    ok(run("session", "new", "fresh"))
    changed = write_jsonl(
        tmp_path / "changed.jsonl", [{"input": "one"}, {"input": "changed"}, {"input": "three"}]
    )
    result = run("turn", "replay", str(changed), "--cassette", str(cassette), "--json")
    assert result.exit_code == EXIT_PROVIDER, (result.stdout, result.stderr)
    missed = prepare_turn(store, "fresh", "changed", TurnOptions(model="offline")).request
    assert f"no recorded response for request {missed.fingerprint()[:12]}" in result.stderr
    lines = json_lines(result.stdout)
    assert [line["turn"] for line in lines] == [1, 2]
    assert "error" not in lines[0] and "no recorded response" in lines[1]["error"]
    assert chat(store, "fresh") == chat(store, "recorded")[:2]
    assert store.load_session("fresh").turn_count == 1
    assert store.draft_slots("fresh") == []
    assert len(cassette_entries(cassette)) == 2


@file_only
def test_a_transcript_on_stdin(run: Run, store: Store) -> None:
    ok(run("session", "new", "s"))
    result = ok(run("turn", "replay", "-", input=jsonl([{"input": "one"}, {"input": "two"}])))
    assert "2 turns replayed" in result.stdout
    assert [text for role, text in chat(store, "s") if role == "user"] == ["one", "two"]


@file_only
@pytest.mark.parametrize("fmt", ["openai", "jsonl"])
def test_an_exported_slot_replays_on_stdin_with_check(
    fmt: str, run: Run, store: Store, tmp_path: Path
) -> None:
    cassette = tmp_path / "c.cassette"
    ok(run("session", "new", "good"))
    for text in ("first", "second", "third"):
        ok(run("turn", "send", text, "--record", str(cassette)))
    exported = ok(run("msg", "export", "--format", fmt)).stdout
    ok(run("session", "new", "again"))
    result = ok(run("turn", "replay", "-", "--cassette", str(cassette), "--check", input=exported))
    assert "3 checked, 3 matched" in result.stdout
    assert chat(store, "again") == chat(store, "good")


@file_only
def test_an_invalid_line_sends_nothing(run: Run, store: Store, tmp_path: Path) -> None:
    ok(run("session", "new", "s"))
    transcript = write_jsonl(
        tmp_path / "t.jsonl",
        [{"input": "one"}, {"input": "two"}, {"input": "three", "expected": "x"}],
    )
    cassette = tmp_path / "c.cassette"
    result = run("turn", "replay", str(transcript), "--record", str(cassette))
    assert result.exit_code == EXIT_DATA
    assert result.stdout == ""
    assert f"{transcript}: line 3: expected" in result.stderr
    assert store.load_slot("s").messages == []
    assert store.load_session("s").turn_count == 0
    assert not cassette.exists()
    assert Checkpointer(store).summaries("s") == []


@file_only
def test_an_invalid_regex_is_refused_before_anything_is_sent(
    run: Run, store: Store, tmp_path: Path
) -> None:
    ok(run("session", "new", "s"))
    transcript = write_jsonl(
        tmp_path / "t.jsonl", [{"input": "one", "expect": "one"}, {"input": "two", "expect": "("}]
    )
    result = run("turn", "replay", str(transcript), "--check", "--check-mode", "regex")
    assert result.exit_code == EXIT_DATA
    assert "line 2" in result.stderr
    assert store.load_slot("s").messages == []


@file_only
def test_a_checkpoint_per_turn(run: Run, store: Store, tmp_path: Path) -> None:
    ok(run("session", "new", "s"))
    transcript = write_jsonl(tmp_path / "t.jsonl", [{"input": f"t{n}"} for n in range(3)])
    lines = json_lines(ok(run("turn", "replay", str(transcript), "--json")).stdout)[:-1]
    per_turn = [line["checkpoint"] for line in lines]
    assert all(per_turn) and len(set(per_turn)) == 3
    listed = json.loads(ok(run("ckpt", "list", "--json")).stdout)
    assert [c["id"] for c in listed][:3] == per_turn[::-1]
    assert [(c["turn"], c["label"]) for c in listed] == [
        (3, "after turn 3"),
        (2, "after turn 2"),
        (1, "after turn 1"),
        (0, "before turn 1"),
    ]


@file_only
@pytest.mark.parametrize(
    ("configured", "flag", "expect_checkpoints"),
    [
        (None, "--no-checkpoint", False),
        ("false", None, False),
        ("false", "--checkpoint", True),
    ],
)
def test_checkpoints_as_configured_or_asked(
    configured: str | None,
    flag: str | None,
    expect_checkpoints: bool,
    run: Run,
    store: Store,
    tmp_path: Path,
) -> None:
    if configured is not None:
        ok(run("config", "set", "auto_checkpoint", configured))
    ok(run("session", "new", "s"))
    transcript = write_jsonl(tmp_path / "t.jsonl", [{"input": "a"}, {"input": "b"}])
    args = ["turn", "replay", str(transcript), "--json", *([flag] if flag else [])]
    lines = json_lines(ok(run(*args)).stdout)[:-1]
    made = Checkpointer(store).summaries("s")
    if expect_checkpoints:
        assert all(line["checkpoint"] for line in lines) and len(made) == 3
    else:
        assert [line["checkpoint"] for line in lines] == [None, None] and made == []
    assert store.load_session("s").turn_count == 2


# `turn replay --sync end`: the turns of a replay made durable together, at its end.


TURNS = [TranscriptTurn(input=f"question {n}") for n in range(40)]


def replayed(store: Store, sync: str, monkeypatch: pytest.MonkeyPatch) -> int:
    """Replay TURNS into a new session; the number of fsyncs it made."""
    store.create_session("s")
    synced: list[int] = []
    real = os.fsync

    def counting(fd: int) -> None:
        synced.append(fd)
        real(fd)

    monkeypatch.setattr(os, "fsync", counting)
    summary = replay(store, "s", TURNS, OfflineProvider(), TurnOptions(model="offline"), sync=sync)
    monkeypatch.undo()
    assert summary.sent == len(TURNS)
    return len(synced)


def test_the_end_sync_replays_the_same_turns_with_far_fewer_fsyncs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    each = Store(tmp_path / "each")
    grouped = Store(tmp_path / "grouped")
    per_turn = replayed(each, "per-turn", monkeypatch)
    at_end = replayed(grouped, "end", monkeypatch)
    assert per_turn >= len(TURNS), "every turn is made durable as it commits"
    assert at_end < per_turn / 3, (at_end, per_turn)
    texts = [[m.text() for m in s.load_slot("s").messages] for s in (each, grouped)]
    assert texts[0] == texts[1] and len(texts[0]) == 2 * len(TURNS)
    assert each.load_session("s").turn_count == grouped.load_session("s").turn_count == 40
    assert len(Checkpointer(grouped).ids("s")) == len(Checkpointer(each).ids("s"))
    # Nothing is left waiting for a sync: the journal was emptied at the end.
    assert grouped.files is not None and not grouped.files.journal("s").pending()
    assert grouped.files.durable, "the store syncs each commit again after the replay"


def test_an_unknown_sync_mode_is_refused_before_any_turn(tmp_path: Path) -> None:
    store = Store(tmp_path)
    store.create_session("s")
    with pytest.raises(UsageError, match="unknown sync mode 'x'"):
        replay(store, "s", TURNS, OfflineProvider(), TurnOptions(model="offline"), sync="x")
    assert store.load_slot("s").messages == []


@file_only
def test_the_command_line_replays_with_sync_end(
    run: Callable[..., Result], store: Store, tmp_path: Path
) -> None:
    transcript = tmp_path / "t.jsonl"
    transcript.write_text("".join(f'{{"input": "q{n}"}}\n' for n in range(5)))
    result = run("--json", "turn", "replay", str(transcript), "--new-session", "r", "--sync", "end")
    assert result.exit_code == 0, result.stderr
    assert store.load_session("r").turn_count == 5
    assert [m.text() for m in store.load_slot("r").messages][::2] == [f"q{n}" for n in range(5)]
    refused = run("turn", "replay", str(transcript), "--sync", "sometimes")
    assert refused.exit_code == 2 and "sometimes" in refused.stderr


# ---- groups: the turns of a fast provider committed together -------------------------


def commits_of(store: Store, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Record each outermost transaction the store opens (a commit when it writes)."""
    opened: list[str] = []
    real = store.backend.transaction

    def counting(session_id: str) -> Any:
        if store.backend.in_transaction(session_id) is None:
            opened.append(session_id)
        return real(session_id)

    monkeypatch.setattr(store.backend, "transaction", counting)
    return opened


def test_the_turns_of_a_fast_provider_share_commits_and_each_checkpoint_holds_its_turn(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    store.create_session("s")
    opened = commits_of(store, monkeypatch)
    options = TurnOptions(model="offline", checkpoint=True)
    summary = replay(store, "s", TURNS, OfflineProvider(), options, sync="end")
    assert summary.sent == len(TURNS)
    assert len(opened) < len(TURNS) / 4, f"{len(opened)} commits for {len(TURNS)} turns"
    checkpointer = Checkpointer(store)
    assert not checkpointer.verify("s").problems
    # Every turn's checkpoint, made inside a group, holds that turn's state: the slot's
    # revision moved on for each turn, so none was taken as unchanged.
    for turn in (1, 7, 20, len(TURNS)):
        state = checkpointer.state("s", checkpointer.checkpoint_at_turn("s", turn))
        texts = [m.text() for m in state.slots["default"].messages]
        assert texts[::2] == [t.input for t in TURNS[:turn]]
    checkpointer.undo("s", 3)
    assert store.load_session("s").turn_count == len(TURNS) - 3
    assert len(store.load_slot("s").messages) == 2 * (len(TURNS) - 3)


def test_a_turn_is_reported_once_its_group_is_committed(store: Store, isolated_env: Path) -> None:
    store.create_session("s")
    seen: list[tuple[int, int]] = []

    def reported(outcome: TurnOutcome) -> None:
        # What another reader of the data dir finds when the turn is reported.
        other = Store(isolated_env) if store.files is not None else store
        seen.append((outcome.number, other.load_session("s").turn_count))

    replay(
        store,
        "s",
        TURNS,
        OfflineProvider(),
        TurnOptions(model="offline"),
        on_turn=reported,
        sync="end",
    )
    assert [number for number, _ in seen] == list(range(1, len(TURNS) + 1))
    assert all(committed >= number for number, committed in seen), seen


class FailingAt:
    """The offline provider, failing its `at`-th request."""

    name = "offline"

    def __init__(self, at: int) -> None:
        self.at = at
        self.calls = 0
        self.inner = OfflineProvider()

    def stream(self, request: ChatRequest) -> Iterator[Event]:
        self.calls += 1
        if self.calls == self.at:
            raise ProviderError("the model is down")
        return self.inner.stream(request)


def test_a_turn_failing_in_a_group_keeps_the_turns_before_it(store: Store) -> None:
    store.create_session("s")
    reported: list[TurnOutcome] = []
    with pytest.raises(ProviderError) as raised:
        replay(
            store,
            "s",
            TURNS,
            FailingAt(25),
            TurnOptions(model="offline", checkpoint=True),
            on_turn=reported.append,
            sync="end",
        )
    assert "turns 1 to 24 were committed" in "\n".join(raised.value.__notes__)
    assert store.load_session("s").turn_count == 24
    assert [m.text() for m in store.load_slot("s").messages][::2] == [t.input for t in TURNS[:24]]
    assert [o.number for o in reported] == list(range(1, 26)) and reported[-1].error


def test_a_turn_failing_after_it_wrote_in_a_group_is_undone_alone(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The failure comes after the turn's messages were appended in the group's
    transaction: its savepoint undoes them, and the group commits the turns before."""
    import agctl.turn.send

    store.create_session("s")
    real = agctl.turn.send.account
    counted: list[int] = []

    def failing(session: Any, *args: Any, **kwargs: Any) -> None:
        counted.append(session.turn_count)
        if len(counted) == 30:
            raise StoreError("the disk went away")
        real(session, *args, **kwargs)

    monkeypatch.setattr(agctl.turn.send, "account", failing)
    options = TurnOptions(model="offline", checkpoint=True)
    with pytest.raises(StoreError):
        replay(store, "s", TURNS, OfflineProvider(), options, sync="end")
    assert store.load_session("s").turn_count == 29
    assert len(store.load_slot("s").messages) == 2 * 29
    checkpointer = Checkpointer(store)
    assert not checkpointer.verify("s").problems
    assert max(c.turn_index for c in checkpointer.summaries("s")) == 29  # none of turn 30


class Slow:
    """The offline provider answering late, checking meanwhile that the session's lock
    is free (another writer could take it)."""

    name = "offline"

    def __init__(self, store: Store) -> None:
        self.store = store
        self.locked_while_answering = 0
        self.inner = OfflineProvider()

    def stream(self, request: ChatRequest) -> Iterator[Event]:
        import threading
        import time

        free: list[bool] = []

        def try_lock() -> None:
            try:
                with self.store.transaction("s"):
                    free.append(True)
            except AgctlError:
                free.append(False)

        os.environ["AGCTL_LOCK_TIMEOUT"] = "0.2"
        try:
            thread = threading.Thread(target=try_lock)
            thread.start()
            thread.join()
        finally:
            del os.environ["AGCTL_LOCK_TIMEOUT"]
        self.locked_while_answering += not free[0]
        time.sleep(0.02)
        return self.inner.stream(request)


def test_a_slow_provider_answers_with_the_session_unlocked_and_turns_commit_one_by_one(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    store.create_session("s")
    opened = commits_of(store, monkeypatch)
    provider = Slow(store)
    turns = TURNS[:6]
    replay(store, "s", turns, provider, TurnOptions(model="offline"), sync="end")
    assert provider.locked_while_answering == 0
    assert store.load_session("s").turn_count == len(turns)
    assert len(opened) >= len(turns)
