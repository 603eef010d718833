"""Price sheets: genai-prices' prices of a model, kept in the data dir so that a billed turn
need not import the database (agctl.context.price_sheets).

A sheet must cost exactly what genai-prices computes, for every model it prices by text
tokens, any counts (cache reads and writes, of those some kept an hour, prompts past a
tier's start) and any time (prices from a date on, at hours of the day), except that a
Claude model genai-prices has no 1-hour write price for bills an hour's writes at
Anthropic's price, twice the input price; the cache file must remember unknown models
too, belong to the installed genai-prices and this agctl's sheets, and never fail a turn.
"""

from __future__ import annotations

import json
import stat
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from genai_prices import Usage as Counts
from genai_prices import data_snapshot
from genai_prices.types import ModelPrice, Tier, TieredPrices
from hypothesis import given, settings
from hypothesis import strategies as st

from agctl.context import price_sheets
from agctl.context.price_sheets import PriceSheets, Sheet, installed_key, resolve, sheet_of
from agctl.context.pricing import Price, charge, cost_of, price_for
from agctl.providers.base import Usage
from agctl.storage.file import layout


def _priced_by_text(prices: Any) -> bool:
    return getattr(prices, "input_mtok", None) is not None and (
        getattr(prices, "output_mtok", None) is not None
    )


def _conditions(model: Any) -> list[Any]:
    if isinstance(model.prices, ModelPrice):
        return [model.prices]
    return [condition.prices for condition in model.prices]


def _tier_starts(model: Any) -> list[int]:
    return sorted(
        {
            tier.start
            for prices in _conditions(model)
            for value in prices.__dict__.values()
            if isinstance(value, TieredPrices)
            for tier in value.tiers
        }
    )


# Every model of the database priced by text tokens at some time, with its provider.
TEXT_MODELS = [
    (provider, model)
    for provider in data_snapshot.get_snapshot().providers
    for model in provider.models
    if any(_priced_by_text(prices) for prices in _conditions(model))
]
TIERED = [(p, m) for p, m in TEXT_MODELS if _tier_starts(m)]
CONDITIONAL = [(p, m) for p, m in TEXT_MODELS if not isinstance(m.prices, ModelPrice)]
TIMED = [
    (p, m)
    for p, m in CONDITIONAL
    if any(getattr(c.constraint, "start_time", None) is not None for c in m.prices)
]


def test_the_database_has_what_the_sheets_must_follow() -> None:
    """The pools below are not empty: tiers, prices from a date, prices by hour."""
    assert len(TEXT_MODELS) > 1000
    assert TIERED and CONDITIONAL and TIMED


def test_every_text_model_gets_an_exact_sheet() -> None:
    """No model of the database needs genai-prices at each turn: each sheet's costs
    matched genai-prices' own on the probes (both sides of each tier) when it was made."""
    inexact = [f"{p.id}/{m.id}" for p, m in TEXT_MODELS if not sheet_of(p, m).exact]
    assert inexact == []


def _claude_without_1h_price(model: Any, prices: Any) -> bool:
    return (
        "claude" in model.id
        and getattr(prices, "cache_write_mtok", None) is not None
        and getattr(prices, "cache_write_1h_mtok", None) is None
    )


def _with_anthropic_1h_price(prices: Any) -> Any:
    """`prices` with a 1-hour cache write at twice the input price, tier by tier."""
    rate = prices.input_mtok
    hour = (
        TieredPrices(
            base=rate.base * 2, tiers=[Tier(start=t.start, price=t.price * 2) for t in rate.tiers]
        )
        if isinstance(rate, TieredPrices)
        else rate * 2
    )
    return ModelPrice(**{**prices.__dict__, "cache_write_1h_mtok": hour})


# Claude models genai-prices gives a cache-write price but no 1-hour one, at some time.
CLAUDE_WITHOUT_1H = [
    (p, m) for p, m in TEXT_MODELS if any(_claude_without_1h_price(m, c) for c in _conditions(m))
]


@st.composite
def requests(
    draw: st.DrawFn, pool: list[tuple[Any, Any]]
) -> tuple[Any, Any, int, int, int, int, int, datetime]:
    """A model of `pool`, a request's counts (its prompt often at or past a tier's start;
    of its cache writes, some kept an hour), and a time between 2023 and 2028 (any hour)."""
    provider, model = draw(st.sampled_from(pool))
    starts = _tier_starts(model)
    near_tier = (
        st.sampled_from(starts).flatmap(lambda s: st.integers(max(s - 2, 0), s + 2))
        if starts
        else st.nothing()
    )
    prompt = draw(st.integers(0, 3_000_000) | near_tier | st.integers(0, 2_000))
    read = draw(st.integers(0, prompt) | st.just(0))
    write = draw(st.integers(0, prompt - read) | st.just(0))
    write_1h = draw(st.integers(0, write) | st.just(0) | st.just(write))
    completion = draw(st.integers(0, 200_000))
    start = datetime(2023, 1, 1, tzinfo=UTC)
    when = start + draw(st.timedeltas(timedelta(0), timedelta(days=5 * 365)))
    return provider, model, prompt, completion, read, write, write_1h, when


def _check(request: tuple[Any, Any, int, int, int, int, int, datetime]) -> None:
    provider, model, prompt, completion, read, write, write_1h, when = request
    sheet = sheet_of(provider, model)
    assert sheet.exact
    # Through the cache file's form too: what a later turn reads back.
    kept = price_sheets.from_json(json.loads(json.dumps(price_sheets.to_json(sheet))))
    assert kept == sheet
    prices = model.get_prices(when)
    if not _priced_by_text(prices):
        assert kept.cost(prompt, completion, read, write, when, write_1h=write_1h) is None
        return
    counts = price_sheets.database_usage(prompt, completion, read, write, write_1h)
    if _claude_without_1h_price(model, prices):
        # genai-prices would bill an hour's writes as 5 minutes' (as it does when it has
        # no 1-hour price): its own computation with Anthropic's 1-hour price added.
        expected = _with_anthropic_1h_price(prices).calc_price(counts)["total_price"]
    else:
        expected = model.calc_price(counts, provider, genai_request_timestamp=when).total_price
    got = kept.cost(prompt, completion, read, write, when, write_1h=write_1h)
    assert got == expected, (provider.id, model.id, prices)
    assert isinstance(got, Decimal)


@settings(max_examples=400, deadline=None)
@given(requests(TEXT_MODELS))
def test_a_sheet_costs_what_genai_prices_computes(
    request: tuple[Any, Any, int, int, int, int, int, datetime],
) -> None:
    _check(request)


@settings(max_examples=300, deadline=None)
@given(requests(TIERED))
def test_a_tiered_sheet_costs_what_genai_prices_computes(
    request: tuple[Any, Any, int, int, int, int, int, datetime],
) -> None:
    _check(request)


@settings(max_examples=300, deadline=None)
@given(requests(CONDITIONAL))
def test_a_sheet_whose_prices_change_costs_what_genai_prices_computes(
    request: tuple[Any, Any, int, int, int, int, int, datetime],
) -> None:
    _check(request)


@settings(max_examples=200, deadline=None)
@given(requests(CLAUDE_WITHOUT_1H))
def test_a_claude_model_without_a_1h_price_bills_an_hours_writes_at_twice_the_input(
    request: tuple[Any, Any, int, int, int, int, int, datetime],
) -> None:
    _check(request)


def test_the_database_has_claude_models_with_and_without_a_1h_price() -> None:
    with_1h = [
        m.id
        for _, m in TEXT_MODELS
        if "claude" in m.id
        and any(getattr(c, "cache_write_1h_mtok", None) is not None for c in _conditions(m))
    ]
    assert with_1h and CLAUDE_WITHOUT_1H


@pytest.mark.parametrize(
    "name",
    [
        "claude-sonnet-4-6",  # genai-prices' own 1-hour price
        "openrouter/anthropic/claude-sonnet-4.6",  # none there: Anthropic's rule
    ],
)
def test_an_hours_cache_write_costs_2x_the_input_price_5_minutes_1_25x(name: str) -> None:
    """Anthropic's prompt-caching prices: a cache write kept 5 minutes costs 1.25 times
    the input price, one kept an hour twice; a request that does not say how long its
    writes are kept is priced as 5 minutes' writes."""
    price = price_for(name, {})
    assert price is not None and price.cache_write == 1.25 * price.prompt
    assert price.cache_write_1h == 2 * price.prompt

    def cost(hour: int | None) -> float | None:
        return cost_of(
            name,
            10_000,
            100,
            cached_tokens=1_000,
            cache_write_tokens=8_000,
            cache_write_1h_tokens=hour,
        )

    five, hour, some = cost(None), cost(8_000), cost(3_000)
    assert five is not None and hour is not None and some is not None
    assert hour - five == pytest.approx(8_000 * (2 - 1.25) * price.prompt / 1e6)
    assert some - five == pytest.approx(3_000 * (2 - 1.25) * price.prompt / 1e6)
    assert cost(0) == five
    # More kept an hour than written (a provider's mistake): no more than the writes.
    assert cost(9_000) == hour
    # What the cache saved: less by what the hour's writes cost more.
    usage = Usage(10_000, 100, cached_tokens=1_000, cache_write_tokens=8_000)
    saved_five = charge(name, usage).saved
    saved_hour = charge(name, usage._replace(cache_write_1h_tokens=8_000)).saved
    assert saved_five is not None and saved_hour is not None
    assert saved_five - saved_hour == pytest.approx(hour - five)


def test_the_configs_1h_write_price_wins(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A config price's 1-hour write price is used, no sheet made; left unset, an hour's
    writes are at its write price (an override names the whole price)."""
    monkeypatch.setattr(price_sheets, "resolve", _never)

    def cost(price: Price) -> float | None:
        return cost_of(
            "claude-sonnet-4-6",
            10_000,
            100,
            {"claude-sonnet-4-6": price},
            cached_tokens=1_000,
            cache_write_tokens=8_000,
            cache_write_1h_tokens=3_000,
            sheets=PriceSheets(path),
        )

    fresh, read, written = 1_000 * 1.0, 1_000 * 0.1, 5_000 * 1.5 + 3_000 * 3.0
    own = cost(Price(1.0, 2.0, 0.1, 1.5, cache_write_1h=3.0))
    assert own == pytest.approx((fresh + read + written + 100 * 2.0) / 1e6)
    unset = cost(Price(1.0, 2.0, 0.1, 1.5))
    assert unset == pytest.approx((fresh + read + 8_000 * 1.5 + 100 * 2.0) / 1e6)
    assert not path.exists()


def test_a_model_genai_prices_prices_itself_has_its_hours_writes_priced_by_it(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sheet whose costs are not genai-prices' (a model priced by rules it does not
    follow) leaves the cost to genai-prices, the writes kept an hour included."""
    from genai_prices import calc_price

    sheet = resolve("claude-sonnet-4-6")
    assert sheet is not None
    monkeypatch.setattr(price_sheets, "resolve", lambda name: sheet._replace(exact=False))
    cost = cost_of(
        "claude-sonnet-4-6",
        10_000,
        100,
        cached_tokens=1_000,
        cache_write_tokens=8_000,
        cache_write_1h_tokens=3_000,
        sheets=PriceSheets(path),
    )
    counts = Counts(
        input_tokens=10_000,
        output_tokens=100,
        cache_read_tokens=1_000,
        cache_write_tokens=8_000,
        cache_write_1h_tokens=3_000,
    )
    assert cost == float(calc_price(counts, "claude-sonnet-4-6").total_price)
    assert cost != cost_of(
        "claude-sonnet-4-6",
        10_000,
        100,
        cached_tokens=1_000,
        cache_write_tokens=8_000,
        sheets=PriceSheets(path),
    )


def test_a_sheet_kept_before_1h_prices_is_made_again(path: Path) -> None:
    """A cache file of the format before sheets held 1-hour prices, from this very
    genai-prices, is not read: its Claude sheet would bill an hour's writes as 5 minutes'."""
    sheet = resolve("claude-sonnet-4-6")
    assert sheet is not None
    stale = price_sheets.to_json(sheet)
    for period in stale["periods"]:
        del period["rates"]["cache_write_1h_mtok"]
    document = {
        "format": 1,
        "genai_prices": installed_key(),
        "models": {"claude-sonnet-4-6": stale},
    }
    path.parent.mkdir(mode=0o700)
    path.write_text(json.dumps(document))
    assert PriceSheets(path).sheet("claude-sonnet-4-6") == sheet
    assert json.loads(path.read_text())["format"] == price_sheets.CACHE_FORMAT


def test_a_tier_applies_above_its_start_to_every_token() -> None:
    """The figures themselves, for one tiered model: at its start the base price, one
    token past it the tier's price for the whole prompt."""
    provider, model = TIERED[0]
    sheet = sheet_of(provider, model)
    now = datetime.now(UTC)
    rates = sheet.rates_at(now)
    assert rates is not None
    tiered = next(r for r in rates.values() if isinstance(r, price_sheets.Tiered))
    start, price = tiered.tiers[0]
    assert (tiered.at(start), tiered.at(start + 1)) == (tiered.base, price) != (price, price)


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return layout.price_sheets(tmp_path)


def _never(name: str) -> Sheet | None:
    raise AssertionError(f"{name} was looked up in genai-prices, not read from the cache")


def test_a_model_is_priced_from_its_sheet_by_a_later_process(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = cost_of("gpt-4o", 2000, 100, cached_tokens=1536, sheets=PriceSheets(path))
    assert first is not None and first > 0
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    monkeypatch.setattr(price_sheets, "resolve", _never)
    again = cost_of("gpt-4o", 2000, 100, cached_tokens=1536, sheets=PriceSheets(path))
    assert again == first


def test_an_unknown_model_is_remembered_as_unknown(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert PriceSheets(path).sheet("fake-model") is None
    assert json.loads(path.read_text())["models"] == {"fake-model": "unknown"}
    monkeypatch.setattr(price_sheets, "resolve", _never)
    assert PriceSheets(path).sheet("fake-model") is None
    assert cost_of("fake-model", 10, 10, sheets=PriceSheets(path)) is None


@pytest.mark.parametrize(
    "content",
    [
        b"{not json",
        b"",
        b"\xff\xfe",
        b"[]",
        b'{"format": 1, "models": {}}',
        "KEYED",  # this genai-prices' file, its entry for gpt-4o broken
    ],
)
def test_a_corrupt_cache_file_is_ignored_and_rewritten(path: Path, content: bytes | str) -> None:
    path.parent.mkdir(mode=0o700)
    if content == "KEYED":
        broken = {"periods": [{"rates": {"input_mtok": "x"}}], "provider": "openai"}
        document = {"format": 1, "genai_prices": installed_key(), "models": {"gpt-4o": broken}}
        content = json.dumps(document).encode()
    assert isinstance(content, bytes)
    path.write_bytes(content)
    assert PriceSheets(path).sheet("gpt-4o") == resolve("gpt-4o") is not None
    rewritten = json.loads(path.read_text())
    assert rewritten["genai_prices"] == installed_key()
    assert price_sheets.from_json(rewritten["models"]["gpt-4o"]) == resolve("gpt-4o")


def test_another_genai_prices_sheets_are_dropped(path: Path) -> None:
    """A sheet of another version (here: gpt-4o at $999) is not used, and is replaced."""
    sheet = resolve("gpt-4o")
    assert sheet is not None
    stale = price_sheets.to_json(sheet)
    stale["periods"] = [{"rates": {"input_mtok": "999", "output_mtok": "999"}}]
    document = {"format": 1, "genai_prices": "/elsewhere/data.py:1:2", "models": {"gpt-4o": stale}}
    path.parent.mkdir(mode=0o700)
    path.write_text(json.dumps(document))
    cost = cost_of("gpt-4o", 1_000_000, 0, sheets=PriceSheets(path))
    assert cost is not None and cost < 100
    assert json.loads(path.read_text())["genai_prices"] == installed_key()


def test_a_cache_that_cannot_be_read_or_written_fails_nothing(tmp_path: Path) -> None:
    """The cache's dir is a file (it cannot be made), or its file a dir: priced all the same."""
    expected = cost_of("gpt-4o", 2000, 100, cached_tokens=1536)
    assert expected is not None
    layout.price_sheets(tmp_path).parent.write_text("not a dir")
    sheets = PriceSheets(layout.price_sheets(tmp_path))
    assert cost_of("gpt-4o", 2000, 100, cached_tokens=1536, sheets=sheets) == expected
    other = tmp_path / "other"
    layout.price_sheets(other).mkdir(parents=True)
    sheets = PriceSheets(layout.price_sheets(other))
    assert cost_of("gpt-4o", 2000, 100, cached_tokens=1536, sheets=sheets) == expected
    assert layout.price_sheets(other).is_dir()


def test_the_configs_price_needs_no_sheet(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A model the config prices is priced by it: no sheet is made, none is kept."""
    monkeypatch.setattr(price_sheets, "resolve", _never)
    overrides = {"gpt-4o": Price(1.0, 2.0, cache_read=0.5)}
    cost = cost_of("gpt-4o", 2000, 100, overrides, cached_tokens=1000, sheets=PriceSheets(path))
    assert cost == pytest.approx((1000 * 1.0 + 1000 * 0.5 + 100 * 2.0) / 1e6)
    assert not path.exists()
