"""The rules that keep "not reported" apart from 0 when counts are added up: a turn's
requests (add_usage), an account's turns (ModelCost.merge), a stored reply's counts read
back (Usage.from_counts), and a session written before cache counts existed."""

from __future__ import annotations

from agctl.context.models import ModelCost, Session
from agctl.providers.base import Usage, add_usage
from agctl.reports.usage import ModelUsage


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


def test_an_account_sums_what_was_reported_and_keeps_its_share_honest() -> None:
    account = ModelCost()
    account.merge(ModelCost.of(Usage(1000, 10), 0.5))  # an older turn: nothing reported
    assert account.cached_tokens is None and account.cache_saved is None
    account.merge(ModelCost.of(Usage(2000, 10, cached_tokens=1024), 0.25, 0.125))
    account.merge(ModelCost.of(Usage(2000, 10, cached_tokens=0), 0.5, 0.0))
    assert (account.prompt_tokens, account.cached_tokens) == (5000, 1024)
    assert account.cache_prompt_tokens == 4000  # the share is of these, not of all 5000
    assert (account.cost, account.cache_saved) == (1.25, 0.125)
    row = ModelUsage("m", account)
    assert (row.cache_share, row.cache_text()) == (0.256, "26% of 4000")
    # A request that reported its cache but had no price: what the cache saved is unknown
    # from then on, and so is the cost.
    account.merge(ModelCost.of(Usage(100, 1, cached_tokens=0), None, None))
    assert (account.cost, account.cache_saved, account.cached_tokens) == (None, None, 1024)
    assert ModelUsage("m", account).saved_text() == "unpriced"


def test_a_session_written_before_cache_counts_reads_as_not_reported() -> None:
    old = {"id": "s", "cost": {"prompt_tokens": 5, "completion_tokens": 1, "cost": 0.1,
           "by_model": {"m": {"requests": 1, "prompt_tokens": 5, "completion_tokens": 1,
                              "cost": 0.1}}}}  # fmt: skip
    session = Session.model_validate(old)
    entry = session.cost.by_model["m"]
    assert (entry.cached_tokens, entry.cache_prompt_tokens, entry.cache_saved) == (None,) * 3
    # Written back, it gains no field: nothing claims a count no provider gave.
    assert session.model_dump(mode="json")["cost"]["by_model"]["m"] == {
        "requests": 1,
        "prompt_tokens": 5,
        "completion_tokens": 1,
        "cost": 0.1,
    }
    assert ModelUsage("m", entry).cache_text() == "not reported"
