"""genai-prices' prices of one model as a small sheet, cached in the data dir.

Importing genai-prices and finding a model in it takes 50-65 ms (measured), a sixth of a
billed turn; reading the model's sheet from the cache file takes a fraction of a
millisecond, and the cost computed from it is genai-prices' own to the last digit (both in
Decimal). A sheet holds what a request of text tokens is priced by: the provider and model
genai-prices took the name for, and each of the model's prices with when it applies (from
a date, at hours of the day: genai-prices' conditional prices), each by million input,
output, cache-read, cache-write and 1-hour cache-write tokens (a tiered one with the prompt
sizes above which another price applies to all its tokens) and by thousand requests; a
Claude model's 1-hour write price genai-prices lacks is Anthropic's rule (CLAUDE_1H_WRITE),
the one cost that is not genai-prices'. A name genai-prices does not know is kept as
unknown, so that an unknown model pays no import either.

The cache file belongs to the installed genai-prices (its data module's path, size and
time, found without importing it): when it is upgraded, every sheet is made again. A
sheet is checked against genai-prices' own costs when it is made; one whose costs differ
(a model priced by rules the sheet does not know) says so, and the model's requests are
then priced by genai-prices each time. The cache never fails a turn: a file that cannot
be read or parsed is ignored and rewritten, one that cannot be written is left as it is.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Mapping
from datetime import UTC, date, datetime, time
from decimal import Decimal
from pathlib import Path
from typing import Any, NamedTuple

from agctl.base.errors import AgctlError

log = logging.getLogger("agctl.pricing")

# The price keys of genai-prices that a request of text tokens is billed by, and what
# each price is per: its other prices (images, audio, searches) count units such a
# request has none of.
PER = {
    "input_mtok": 1_000_000,
    "output_mtok": 1_000_000,
    "cache_read_mtok": 1_000_000,
    "cache_write_mtok": 1_000_000,
    # Of the cache writes, those kept an hour (Anthropic's; the rest are kept 5 minutes).
    "cache_write_1h_mtok": 1_000_000,
    "requests_kcount": 1_000,
}
UNKNOWN = "unknown"
# What reading a sheet that is not one raises (Decimal's parse error is an ArithmeticError).
MALFORMED = (LookupError, TypeError, ValueError, AttributeError, ArithmeticError)
# 2: sheets hold the 1-hour cache-write price (a format-1 sheet lacks it: made again).
CACHE_FORMAT = 2
# What Anthropic bills a cache write kept an hour, as a multiple of the input price (its
# prompt-caching pricing; a 5-minute write is 1.25x): the price of a Claude model that
# genai-prices gives a cache-write price but no 1-hour one (a router's, some Bedrock and
# Vertex ones), where genai-prices itself would bill an hour's write as a 5-minute one.
CLAUDE_1H_WRITE = 2


class Tiered(NamedTuple):
    """A price that depends on the prompt's size: above a tier's start, every token of
    the request is at the tier's price (genai-prices' TieredPrices)."""

    base: Decimal
    tiers: tuple[tuple[int, Decimal], ...]  # (start, price), ascending

    def at(self, prompt: int) -> Decimal:
        for start, price in reversed(self.tiers):
            if prompt > start:
                return price
        return self.base


Rate = Decimal | Tiered


class Period(NamedTuple):
    """One of a model's prices and when it applies (genai-prices' ConditionalPrice)."""

    # The prices by key (PER); None when the model is not priced by input and output
    # tokens then (an image or audio model): unpriced, not free.
    rates: dict[str, Rate] | None
    since: date | None = None  # from this UTC date on
    hours: tuple[time, time] | None = None  # between these UTC times of day (end excluded)

    def applies(self, when: datetime) -> bool:
        utc = when.astimezone(UTC) if when.tzinfo is not None else when
        if self.since is not None and utc.date() < self.since:
            return False
        if self.hours is not None:
            start, end = self.hours
            now = utc.time()
            if end < start:
                return now >= start or now < end
            return start <= now < end
        return True


def cost_at(
    rates: Mapping[str, Rate],
    prompt: int,
    completion: int,
    read: int,
    write: int,
    write_1h: int = 0,
) -> Decimal:
    """Dollars for a request at `rates`, as genai-prices counts it: its cache reads and
    writes at their prices where it has them (else at the input price), of the writes
    those kept an hour (`write_1h`) at the 1-hour price where it has one (else as the
    other writes), the rest of the prompt at the input price; a tiered price by the
    whole prompt's size."""
    hour = write_1h if "cache_write_1h_mtok" in rates else 0
    written = write - hour if "cache_write_mtok" in rates else 0
    counts = {
        "input_mtok": prompt - (read if "cache_read_mtok" in rates else 0) - written - hour,
        "output_mtok": completion,
        "cache_read_mtok": read,
        "cache_write_mtok": written,
        "cache_write_1h_mtok": hour,
        "requests_kcount": 1,
    }
    total = Decimal(0)
    for key, rate in rates.items():
        price = rate.at(prompt) if isinstance(rate, Tiered) else rate
        total += price * counts[key] / PER[key]
    return total


class Sheet(NamedTuple):
    """What genai-prices prices a model's text requests by (a NamedTuple: a dataclass
    took 0.5 ms of every turn's start-up to define)."""

    provider: str
    model: str
    periods: tuple[Period, ...]
    # Whether its costs are genai-prices' (checked when it was made, before a Claude
    # model's missing 1-hour write price was added); when not, the model's requests are
    # priced by genai-prices itself.
    exact: bool = True

    def rates_at(self, when: datetime) -> dict[str, Rate] | None:
        """The prices that apply at `when`: the last period that applies, else the first
        (genai-prices' ModelInfo.get_prices)."""
        for period in reversed(self.periods):
            if period.applies(when):
                return period.rates
        return self.periods[0].rates

    def cost(
        self,
        prompt: int,
        completion: int,
        read: int,
        write: int,
        when: datetime,
        *,
        write_1h: int = 0,
    ) -> Decimal | None:
        """Dollars for a request at `when` (see cost_at), None when not priced by tokens."""
        rates = self.rates_at(when)
        if rates is None:
            return None
        return cost_at(rates, prompt, completion, read, write, write_1h)


def find_model(name: str) -> tuple[Any, Any] | None:
    """genai-prices' (provider, model) for `name`, or None: a router's "provider/model"
    (OpenRouter's, LiteLLM's) is that provider's model."""
    from genai_prices import data_snapshot

    snapshot = data_snapshot.get_snapshot()
    try:
        found: tuple[Any, Any] = snapshot.find_provider_model(name, None, None, None)
    except LookupError:
        provider, _, model = name.partition("/")
        if not model:
            return None
        try:
            found = snapshot.find_provider_model(model, None, provider, None)
        except LookupError:
            return None
    return found


def resolve(name: str) -> Sheet | None:
    """The sheet of the model genai-prices takes `name` for, or None when it knows none."""
    found = find_model(name)
    return None if found is None else sheet_of(*found)


def sheet_of(provider: Any, model: Any) -> Sheet:
    """The sheet of genai-prices' `model` of `provider`, checked against its own costs."""
    from genai_prices.types import ModelPrice

    conditions = (
        [(None, model.prices)]
        if isinstance(model.prices, ModelPrice)
        else [(c.constraint, c.prices) for c in model.prices]
    )
    periods = tuple(_period(constraint, prices) for constraint, prices in conditions)
    matches = all(
        _matches(period, prices) for period, (_, prices) in zip(periods, conditions, strict=True)
    )
    if "claude" in model.id:  # Anthropic's, whoever sells it: "anthropic/claude-…" too
        periods = tuple(_with_1h_writes(period) for period in periods)
    return Sheet(provider.id, model.id, periods, exact=matches)


def _with_1h_writes(period: Period) -> Period:
    """A Claude model's period with a 1-hour cache-write price (CLAUDE_1H_WRITE times the
    input price) when genai-prices gives it a cache-write price but no 1-hour one."""
    rates = period.rates
    if rates is None or "cache_write_1h_mtok" in rates or "cache_write_mtok" not in rates:
        return period
    price = rates["input_mtok"]
    hour: Rate = (
        Tiered(
            price.base * CLAUDE_1H_WRITE, tuple((s, p * CLAUDE_1H_WRITE) for s, p in price.tiers)
        )
        if isinstance(price, Tiered)
        else price * CLAUDE_1H_WRITE
    )
    return period._replace(rates={**rates, "cache_write_1h_mtok": hour})


def _period(constraint: Any, prices: Any) -> Period:
    """A period from genai-prices' constraint and ModelPrice."""
    since = getattr(constraint, "start_date", None)
    start, end = getattr(constraint, "start_time", None), getattr(constraint, "end_time", None)
    hours = None if start is None or end is None else (_utc_time(start), _utc_time(end))
    values = {key: getattr(prices, key, None) for key in PER}
    if values["input_mtok"] is None or values["output_mtok"] is None:
        return Period(None, since, hours)
    rates: dict[str, Rate] = {}
    for key, value in values.items():
        if isinstance(value, Decimal):
            rates[key] = value
        elif value is not None:  # TieredPrices
            tiers = tuple((tier.start, tier.price) for tier in value.tiers)
            rates[key] = Tiered(value.base, tiers)
    return Period(rates, since, hours)


def _utc_time(value: time) -> time:
    """A time of day as a naive UTC time (a naive one is UTC, as genai-prices reads it)."""
    if value.tzinfo is None:
        return value
    return datetime.combine(date(1970, 1, 1), value).astimezone(UTC).time()


def _probes(rates: Mapping[str, Rate]) -> Iterator[tuple[int, int, int, int, int]]:
    """Requests (prompt, completion, cache read, cache write, of it kept an hour) that try
    every part of a price: each count alone and together, on both sides of each tier's
    start."""
    yield from (
        (1_000, 100, 0, 0, 0),
        (1_000, 100, 600, 300, 0),
        (7, 3, 7, 0, 0),
        (5, 0, 0, 5, 0),
        (5, 0, 0, 5, 5),
        (1_000, 100, 200, 700, 300),
    )
    for rate in rates.values():
        if isinstance(rate, Tiered):
            for start, _ in rate.tiers:
                for prompt in (start, start + 1):
                    yield prompt, 99, prompt // 2, prompt // 4, prompt // 8


def _matches(period: Period, prices: Any) -> bool:
    """Whether `period` costs what genai-prices computes from `prices` for each probe."""
    if period.rates is None:
        return True
    for prompt, completion, read, write, write_1h in _probes(period.rates):
        counts = database_usage(prompt, completion, read, write, write_1h)
        try:
            expected = prices.calc_price(counts)["total_price"]
        except (ValueError, ArithmeticError):
            return False
        if cost_at(period.rates, prompt, completion, read, write, write_1h) != expected:
            return False
    return True


def database_usage(prompt: int, completion: int, read: int, write: int, write_1h: int) -> Any:
    """A request's counts as genai-prices takes them (a cache count 0 left unset)."""
    from genai_prices import Usage as Counts

    counts = Counts(input_tokens=prompt, output_tokens=completion)
    if read:
        counts.cache_read_tokens = read
    if write:
        counts.cache_write_tokens = write
    if write_1h:
        counts.cache_write_1h_tokens = write_1h
    return counts


def installed_key() -> str | None:
    """What identifies the installed genai-prices without importing it (~0.1 ms, where
    its version from the package metadata takes 2-3 ms): its data module's path, size
    and modification time; None when it is not installed."""
    import importlib.util
    import os

    try:
        spec = importlib.util.find_spec("genai_prices")
        if spec is None or not spec.submodule_search_locations:
            return None
        data = os.path.join(next(iter(spec.submodule_search_locations)), "data.py")
        info = os.stat(data)
    except (ImportError, ValueError, OSError):
        return None
    return f"{data}:{info.st_size}:{info.st_mtime_ns}"


class PriceSheets:
    """The sheets of the models priced on this machine, kept in the cache file `path`
    (None: made when asked for, kept in memory only)."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path
        self._sheets: dict[str, Sheet | None] = {}
        self._key: str | None = None
        self._stored: dict[str, Any] | None = None  # the file's entries, by name

    @classmethod
    def in_data_dir(cls, root: Path | None) -> PriceSheets:
        """The sheets cached in the data dir `root` (None: an in-memory store's, none)."""
        if root is None:
            return cls()
        from agctl.storage.file import layout

        return cls(layout.price_sheets(root))

    def sheet(self, name: str) -> Sheet | None:
        """The sheet of the model `name`, None when genai-prices knows no such model."""
        if name in self._sheets:
            return self._sheets[name]
        stored = self._load().get(name)
        found: Sheet | None = None
        if stored is not None and stored != UNKNOWN:
            try:
                found = from_json(stored)
            except MALFORMED:
                log.debug("price sheets: the entry of %r is not a sheet; made again", name)
                stored = None
        if stored is None:
            found = resolve(name)
            self._keep(name, found)
        self._sheets[name] = found
        return found

    def _load(self) -> dict[str, Any]:
        """The entries of the cache file, if it is this genai-prices' (else none)."""
        if self._stored is not None:
            return self._stored
        self._stored = {}
        self._key = installed_key()
        if self.path is None or self._key is None:
            return self._stored
        from agctl.base.fsio import read_bytes

        try:
            document = json.loads(read_bytes(self.path, "price sheets"))
        except AgctlError:  # none yet, or not a regular file
            return self._stored
        except ValueError:
            log.debug("price sheets: %s is not JSON; it is rewritten", self.path)
            return self._stored
        if (
            isinstance(document, dict)
            and document.get("format") == CACHE_FORMAT
            and document.get("genai_prices") == self._key
            and isinstance(document.get("models"), dict)
        ):
            self._stored = document["models"]
        return self._stored

    def _keep(self, name: str, sheet: Sheet | None) -> None:
        """Add the sheet of `name` to the cache file (not at all if it cannot be written)."""
        stored = self._load()
        stored[name] = UNKNOWN if sheet is None else to_json(sheet)
        if self.path is None or self._key is None:
            return
        from agctl.base.fsio import make_dirs, write_atomic

        document = {"format": CACHE_FORMAT, "genai_prices": self._key, "models": stored}
        data = json.dumps(document, indent=1, sort_keys=True).encode()
        try:
            make_dirs(self.path.parent)
            write_atomic(self.path, data, durable=False)
        except (AgctlError, OSError) as exc:
            log.debug("price sheets: not kept (%s)", exc)


def to_json(sheet: Sheet) -> dict[str, Any]:
    """The sheet as the cache file holds it (prices as decimal strings, exactly)."""

    def rate(value: Rate) -> Any:
        if isinstance(value, Tiered):
            return {"base": str(value.base), "tiers": [[s, str(p)] for s, p in value.tiers]}
        return str(value)

    def period(p: Period) -> dict[str, Any]:
        rates = None if p.rates is None else {k: rate(v) for k, v in p.rates.items()}
        out: dict[str, Any] = {"rates": rates}
        if p.since is not None:
            out["since"] = p.since.isoformat()
        if p.hours is not None:
            out["hours"] = [p.hours[0].isoformat(), p.hours[1].isoformat()]
        return out

    return {
        "provider": sheet.provider,
        "model": sheet.model,
        "periods": [period(p) for p in sheet.periods],
        "exact": sheet.exact,
    }


def from_json(data: Any) -> Sheet:
    """A sheet from the cache file; raises one of MALFORMED if it is not one (an entry
    edited, or written by a later agctl)."""

    def price(value: Any) -> Decimal:
        if not isinstance(value, str):
            raise TypeError(value)
        number = Decimal(value)
        if not number.is_finite() or number < 0:
            raise ValueError(value)
        return number

    def rate(value: Any) -> Rate:
        if isinstance(value, dict):
            tiers = tuple((_count(s), price(p)) for s, p in value["tiers"])
            if list(tiers) != sorted(tiers):
                raise ValueError(value)
            return Tiered(price(value["base"]), tiers)
        return price(value)

    def period(value: dict[str, Any]) -> Period:
        rates = value["rates"]
        since = value.get("since")
        hours = value.get("hours")
        if rates is not None:
            rates = {key: rate(v) for key, v in rates.items()}
            if not set(rates) <= PER.keys() or not {"input_mtok", "output_mtok"} <= set(rates):
                raise ValueError(rates)
        return Period(
            rates,
            None if since is None else date.fromisoformat(since),
            None if hours is None else (time.fromisoformat(hours[0]), time.fromisoformat(hours[1])),
        )

    periods = tuple(period(p) for p in data["periods"])
    if not periods or not isinstance(data["exact"], bool):
        raise ValueError(data)
    return Sheet(_text(data["provider"]), _text(data["model"]), periods, data["exact"])


def _count(value: Any) -> int:
    if type(value) is not int or value < 0:
        raise ValueError(value)
    return value


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(value)
    return value
