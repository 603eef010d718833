"""`turn send -o KEY VALUE` on each wire against its fake on loopback: the options reach
the body where the wire keeps them, in one order whatever order they were typed in, with
every other byte as without them; a cassette replays them and misses a changed one; a
key the wire does not take, a value of the wrong type or a key agctl sets itself is
exit 2 before anything is sent."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from click.testing import Result
from fake_anthropic import FakeAnthropic
from fake_gemini import FakeGemini
from fake_openai import FakeOpenAI
from helpers import as_json, fails, ok

from agctl.store import Store

Run = Callable[..., Result]
Fake = FakeAnthropic | FakeGemini | FakeOpenAI


class Wire(NamedTuple):
    """A wire's profile, two of its options as typed, and the bytes they add to its body."""

    profile: str
    typed: tuple[str, ...]
    added: bytes


WIRES = {
    "openai": Wire(
        "oai", ("-o", "top_p", "0.5", "-o", "stop", '["END"]'), b',"stop":["END"],"top_p":0.5'
    ),
    "anthropic": Wire(
        "claude",
        ("-o", "top_k", "5", "-o", "stop_sequences", '["END"]'),
        b',"stop_sequences":["END"],"top_k":5',
    ),
    # No generationConfig without them: the options bring it.
    "gemini": Wire(
        "gem", ("-o", "topK", "5", "-o", "seed", "7"), b',"generationConfig":{"seed":7,"topK":5}'
    ),
}


@pytest.fixture
def fakes(run: Run, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Fake]]:
    """Each wire's fake with a profile for it; a test fails if a fake saw a request its real
    service would refuse (the Gemini fake refuses a generationConfig field it lacks)."""
    monkeypatch.setenv("FAKE_KEY", "sk-options-0123456789")
    with FakeAnthropic(api_key="sk-options-0123456789") as claude, FakeGemini(
        api_key="sk-options-0123456789"
    ) as gem, FakeOpenAI() as oai:  # fmt: skip
        fakes: dict[str, Fake] = {"anthropic": claude, "gemini": gem, "openai": oai}
        for kind, fake in fakes.items():
            ok(run("profile", "add", WIRES[kind].profile, "--kind", kind, "--base-url",
                   fake.base_url, "--model", "m-1", "--api-key-env", "FAKE_KEY"))  # fmt: skip
        yield fakes
    assert [error for fake in fakes.values() for error in fake.errors] == []


def raw_sent(run: Run, fake: Fake, profile: str, session: str, *options: str) -> bytes:
    """The body of a first turn in a new `session` with `options`."""
    ok(run("session", "new", session, "--system", "Be brief."))
    ok(run("turn", "send", "hello", "--profile", profile, "--no-stream", *options))
    return fake.requests[-1].raw


@pytest.mark.parametrize("kind", list(WIRES))
def test_options_reach_the_body_in_one_order_and_change_nothing_else(
    run: Run, fakes: dict[str, Fake], kind: str
) -> None:
    wire, fake = WIRES[kind], fakes[kind]
    plain = raw_sent(run, fake, wire.profile, "plain")
    typed = raw_sent(run, fake, wire.profile, "typed", *wire.typed)
    pairs = [wire.typed[at : at + 3] for at in range(0, len(wire.typed), 3)]
    reversed_ = raw_sent(run, fake, wire.profile, "reversed", *[a for p in pairs[::-1] for a in p])
    assert typed == reversed_
    assert wire.added in typed and wire.added not in plain
    # The options' bytes taken out, the body is byte for byte the one sent without them.
    assert typed.replace(wire.added, b"", 1) == plain


@pytest.mark.parametrize("kind", list(WIRES))
def test_a_recorded_turn_with_options_replays_and_a_changed_option_misses(
    run: Run, fakes: dict[str, Fake], kind: str, tmp_path: Path
) -> None:
    wire, cassette = WIRES[kind], str(tmp_path / "turn.cassette")
    ok(run("session", "new", "rec", "--system", "Be brief."))
    recorded = as_json(run("--json", "turn", "send", "hello", "--profile", wire.profile,
                           "--no-stream", "--record", cassette, *wire.typed))  # fmt: skip
    sent = len(fakes[kind].requests)
    ok(run("session", "new", "again", "--system", "Be brief."))
    replayed = as_json(run("--json", "turn", "send", "hello", "--profile", wire.profile,
                           "--cassette", cassette, *wire.typed))  # fmt: skip
    assert replayed["reply"] == recorded["reply"]
    changed = list(wire.typed)
    changed[-1] = '["STOP"]' if changed[-1].startswith("[") else "8"
    ok(run("session", "new", "changed", "--system", "Be brief."))
    fails(run("turn", "send", "hello", "--profile", wire.profile, "--cassette", cassette,
              *changed), 6, "cassette")  # fmt: skip
    assert len(fakes[kind].requests) == sent  # nothing went to the server


@pytest.mark.parametrize(
    ("kind", "option", "says"),
    [
        ("openai", ("top_q", "1"), ["no wire accepts a model option 'top_q'", "top_p", "topK"]),
        ("openai", ("stop_sequences", '["x"]'), ["the openai wire accepts no", "top_p", "stop"]),
        ("gemini", ("top_k", "5"), ["the gemini wire accepts no model option 'top_k'", "topK"]),
        ("anthropic", ("seed", "1"), ["accepts no model option 'seed'", "stop_sequences"]),
        ("openai", ("seed", "x"), ["'seed' takes an integer, not a string", '"x"']),
        ("anthropic", ("stop_sequences", "END"), ["takes an array of strings, not a string"]),
        ("gemini", ("topP", "true"), ["'topP' takes a number, not a boolean"]),
        ("openai", ("temperature", "1"), ["set by agctl: use --temperature"]),
        ("anthropic", ("max_tokens", "9"), ["set by agctl: use --max-tokens"]),
        ("gemini", ("maxOutputTokens", "9"), ["set by agctl: use --max-tokens"]),
        ("openai", ("messages", "[]"), ["set by agctl"]),
        ("gemini", ("generationConfig", "{}"), ["set by agctl"]),
    ],
)
def test_an_option_the_wire_refuses_is_exit_2_before_anything_is_sent(
    run: Run, fakes: dict[str, Fake], kind: str, option: tuple[str, str], says: list[str]
) -> None:
    ok(run("session", "new", "s"))
    fails(run("turn", "send", "hello", "--profile", WIRES[kind].profile, "-o", *option), 2, *says)
    assert fakes[kind].requests == []


def test_a_key_given_twice_is_exit_2(run: Run) -> None:
    ok(run("session", "new", "s"))
    fails(run("turn", "send", "hi", "-o", "seed", "1", "--option", "seed", "2"), 2, "twice")


def test_the_offline_provider_takes_any_wires_options(run: Run) -> None:
    ok(run("session", "new", "s"))
    ok(run("turn", "send", "hi", "-o", "topK", "3", "-o", "top_k", "3", "-o", "logprobs", "2"))
    fails(run("turn", "send", "hi", "-o", "nope", "1"), 2, "no wire accepts", "top_p")


def test_a_dry_run_shows_the_options_in_the_wires_body(run: Run, fakes: dict[str, Fake]) -> None:
    ok(run("session", "new", "s"))
    shown: dict[str, Any] = as_json(run("--json", "turn", "send", "hi", "--dry-run", "--profile",
                                        "gem", "-o", "seed", "7"))  # fmt: skip
    assert shown["request"]["generationConfig"] == {"seed": 7}


def test_a_key_no_wire_takes_is_refused_before_a_first_turn_starts_a_session(
    run: Run, store: Store
) -> None:
    """Checked against every wire as the command line is read; before, the first turn of a
    fresh machine started (and selected) a session and then refused the option."""
    fails(run("turn", "send", "hello", "-o", "top_q", "1"), 2, "no wire accepts a model option")
    fails(run("turn", "send", "hello", "-o", "temperature", "1"), 2, "use --temperature")
    fails(run("turn", "send", "hello", "-o", "seed", "x"), 2, "takes an integer")
    assert store.list_sessions() == []
