"""agctl.providers.base: a request's fingerprint, and the rules that keep "not reported" apart
from 0 when counts are added up: a turn's requests (add_usage), a stored reply's counts read
back (Usage.from_counts)."""

from __future__ import annotations

from helpers import OPTIONS

from agctl.providers.base import (
    Usage,
    add_usage,
)
from agctl.store import Store
from agctl.turn.send import TurnOptions, prepare_turn


def test_a_count_one_request_did_not_report_is_not_reported_for_the_turn() -> None:
    both = add_usage(Usage(10, 2, cached_tokens=4, reasoning_tokens=1), Usage(20, 3, 8, None, 2))
    assert both == Usage(30, 5, cached_tokens=12, cache_write_tokens=None, reasoning_tokens=3)
    partly = add_usage(Usage(10, 2, cached_tokens=4), Usage(20, 3))
    assert (partly.prompt_tokens, partly.cached_tokens) == (30, None)


def test_stored_counts_read_back_as_reported_and_bad_ones_as_not() -> None:
    usage = Usage(2000, 100, cached_tokens=0, reasoning_tokens=40)
    stored = usage.reported()
    assert stored == {
        "prompt_tokens": 2000,
        "completion_tokens": 100,
        "cached_tokens": 0,
        "reasoning_tokens": 40,
    }
    assert Usage.from_counts({**stored, "free": True}) == usage
    odd = Usage.from_counts({**stored, "cached_tokens": "many", "cache_write_tokens": -1})
    assert odd is not None and (odd.cached_tokens, odd.cache_write_tokens) == (None, None)
    assert Usage.from_counts({"prompt_tokens": 3}) is None


def test_fingerprint_ignores_delivery_but_not_input(store: Store, sid: str) -> None:
    request = prepare_turn(store, sid, "q", OPTIONS).request
    streamed = prepare_turn(store, sid, "q", TurnOptions(model="offline", stream=True)).request
    assert request.fingerprint() == streamed.fingerprint()
    other = prepare_turn(store, sid, "q2", OPTIONS).request
    hotter = prepare_turn(store, sid, "q", TurnOptions(model="offline", temperature=1)).request
    assert len({request.fingerprint(), other.fingerprint(), hotter.fingerprint()}) == 3


def test_wire_parts_are_model_input_only_when_a_request_has_some() -> None:
    from agctl.providers.base import ChatRequest

    plain = ChatRequest(model="m", messages=[{"role": "user", "content": "x"}])
    assert "wire_parts" not in plain.model_input()
    signed = plain._replace(wire_parts={0: {"gemini": [{"thoughtSignature": "s"}]}})
    assert signed.model_input()["wire_parts"] == [[0, {"gemini": [{"thoughtSignature": "s"}]}]]
    assert signed.fingerprint() != plain.fingerprint()
    # Breakpoints are delivery: the same model input, the same fingerprint.
    assert plain._replace(breakpoints=(1,)).fingerprint() == plain.fingerprint()


def test_a_secret_in_a_wire_part_is_redacted_and_a_clean_part_passes_as_it_is() -> None:
    from agctl.base.redact import Redactor
    from agctl.providers.base import WirePart, redacted_events

    redactor = Redactor.for_credentials("sk-secret-0123456789", None, {})
    clean = WirePart("anthropic", {"type": "thinking", "thinking": "hm", "signature": "s"})
    leaky = WirePart("anthropic", {"type": "thinking", "thinking": "sk-secret-0123456789"})
    out = list(redacted_events(iter([clean, leaky]), redactor))
    assert out[0] is clean
    assert "sk-secret-0123456789" not in str(out[1]) and out[1].wire == "anthropic"
