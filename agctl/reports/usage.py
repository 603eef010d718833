"""Tokens and money, per model, per session and across sessions, where unknown stays unknown.

A cost is None when some request had no price: a total that silently counted it as $0
would be wrong. Sessions account each turn as it commits (`Session.cost`), without a time;
only the replies themselves carry one (`created_at`, `model`, `usage`), so usage since a
date is counted from the replies still held in the slots.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal

from agctl.base.errors import AgctlError, UsageError
from agctl.base.hashing import message_hash
from agctl.context.models import Message, ModelCost, Session
from agctl.context.price_sheets import PriceSheets
from agctl.context.pricing import Charge, Prices, add_costs, charge, price_for
from agctl.providers.base import Usage
from agctl.reports.walk import ProblemHandler, skip_with_warning, slot_messages, walk

if TYPE_CHECKING:
    from agctl.store import Store


def cost_text(cost: float | None, *, free: bool = False) -> str:
    """A cost for people, as every command prints one: 'unpriced' when it is not known,
    'free' when no one billed it (offline, a cassette), else dollars (see money)."""
    if cost is None:
        return "unpriced"
    return "free" if free and cost == 0 else money(cost)


def money(dollars: float) -> str:
    """Dollars with cents, and below a dollar with two significant digits, so that a
    small real cost never reads as nothing: $7.97, $0.50, $0.012, $0.00012."""
    import math

    if dollars == 0 or not math.isfinite(dollars):
        return f"${dollars:.2f}"
    places = 2 if abs(dollars) >= 1 else max(2, 1 - math.floor(math.log10(abs(dollars))))
    text = f"{dollars:.{places}f}"
    if abs(float(text)) >= 10 ** (1 - places) * 10 and places > 2:
        text = f"{dollars:.{places - 1}f}"  # rounded up a digit: 0.0999 -> 0.10, not 0.100
    return f"${text}"


def known_cost(model: str, entry: ModelCost, prices: Prices) -> float | None:
    """What `entry`'s requests of `model` cost, or None when that is not known.

    Sessions written before unknown costs were recorded as None hold 0 for an unpriced
    model; a model that no price table knows and that cost nothing is read as unknown,
    unless no one billed any of its requests (answered offline or from a cassette).
    """
    if entry.cost is None:
        return None
    billed = entry.requests - entry.free_requests
    if entry.cost == 0 and billed > 0 and price_for(model, prices) is None:
        return None
    return entry.cost


@dataclass
class ModelUsage:
    """Requests, tokens, cost and cache use of one model (its counts: see ModelCost)."""

    model: str
    counts: ModelCost = field(default_factory=ModelCost)

    def add(self, counts: ModelCost) -> None:
        self.counts.merge(counts)

    @property
    def requests(self) -> int:
        return self.counts.requests

    @property
    def free_requests(self) -> int:
        return self.counts.free_requests

    @property
    def prompt_tokens(self) -> int:
        return self.counts.prompt_tokens

    @property
    def completion_tokens(self) -> int:
        return self.counts.completion_tokens

    @property
    def cost(self) -> float | None:
        return self.counts.cost

    @property
    def free(self) -> bool:
        """Every request answered where no one bills: its 0 is 'free', not '$0.00'."""
        return self.requests > 0 and self.counts.free_requests == self.requests

    @property
    def cache_share(self) -> float | None:
        """The share of the input served from cache, of the requests that reported it;
        None when none did."""
        reported = self.counts.cache_prompt_tokens
        if reported is None or self.counts.cached_tokens is None:
            return None
        return self.counts.cached_tokens / reported if reported else 0.0

    def cost_text(self) -> str:
        return cost_text(self.cost, free=self.free)

    def cache_text(self) -> str:
        """The share from cache for people: '85%', '85% of 12000' when only some of the
        input was reported on, 'not reported' when none was."""
        share = self.cache_share
        if share is None:
            return NOT_REPORTED
        reported = self.counts.cache_prompt_tokens
        whole = f"{share:.0%}"
        return whole if reported == self.counts.prompt_tokens else f"{whole} of {reported}"

    def saved_text(self) -> str:
        """What the cache saved for people: 'not reported' when no request said how much
        came from cache, 'unpriced' when a request that did has no price."""
        if self.counts.cache_prompt_tokens is None:
            return NOT_REPORTED
        return cost_text(self.counts.cache_saved, free=self.free)

    def to_dict(self) -> dict[str, Any]:
        counts = self.counts
        return {
            "model": self.model,
            "requests": counts.requests,
            "free_requests": counts.free_requests,
            "prompt_tokens": counts.prompt_tokens,
            "completion_tokens": counts.completion_tokens,
            "cost": counts.cost,
            # null: not reported by any request.
            "cached_tokens": counts.cached_tokens,
            "cache_write_tokens": counts.cache_write_tokens,
            "cache_write_1h_tokens": counts.cache_write_1h_tokens,
            "reasoning_tokens": counts.reasoning_tokens,
            "cache_prompt_tokens": counts.cache_prompt_tokens,
            "cache_share": self.cache_share,
            "cache_saved": counts.cache_saved,
        }


# How a count no provider reported reads: never 0, which would claim a cache missed.
NOT_REPORTED = "not reported"


def session_usage(session: Session, prices: Prices) -> list[ModelUsage]:
    """A session's accounted usage per model, by model name."""
    rows = []
    for model, entry in sorted(session.cost.by_model.items()):
        row = ModelUsage(model)
        row.add(entry.model_copy(update={"cost": known_cost(model, entry, prices)}))
        rows.append(row)
    return rows


def all_free(session: Session) -> bool:
    """Whether a session's every request was answered where no one bills (offline, a
    cassette): its cost is then shown as 'free'."""
    entries = session.cost.by_model.values()
    return any(e.requests for e in entries) and all(e.free_requests == e.requests for e in entries)


def session_cost(session: Session, prices: Prices) -> float | None:
    """A session's accounted cost, None when a model it used has no price."""
    return add_costs(row.cost for row in session_usage(session, prices))


def with_known_costs(session: Session, prices: Prices) -> Session:
    """A copy of `session` whose costs are what is known at `prices` (an old 0 of an
    unpriced model, and every total it is part of, read as None): what commands show,
    so none prints a stale $0; the stored session is left as it is."""
    rows = session_usage(session, prices)
    by_model = {
        row.model: session.cost.by_model[row.model].model_copy(update={"cost": row.cost})
        for row in rows
    }
    cost = session.cost.model_copy(
        update={"cost": add_costs(row.cost for row in rows), "by_model": by_model}
    )
    return session.model_copy(update={"cost": cost})


def parse_since(text: str) -> datetime:
    """An ISO date (YYYY-MM-DD, midnight UTC) or timestamp (UTC unless it names a zone)."""
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise UsageError(
            f"--since takes an ISO date (2026-01-31) or timestamp (2026-01-31T09:30:00Z), "
            f"not {text!r}"
        ) from None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


@dataclass
class UsageReport:
    """Usage across sessions by model, and what was counted."""

    counted: Literal["session totals", "replies"]
    since: datetime | None = None
    sessions: int = 0
    models: dict[str, ModelUsage] = field(default_factory=dict)

    def row(self, model: str) -> ModelUsage:
        return self.models.setdefault(model, ModelUsage(model))

    @property
    def total(self) -> ModelUsage:
        total = ModelUsage("total")
        for row in self.models.values():
            total.add(row.counts)
        return total

    def to_dict(self) -> dict[str, Any]:
        from agctl.context.models import isoformat

        total = self.total.to_dict()
        del total["model"]
        return {
            "counted": self.counted,
            "since": isoformat(self.since) if self.since else None,
            "sessions": self.sessions,
            "models": [self.models[name].to_dict() for name in sorted(self.models)],
            "total": total,
        }


def usage_report(
    store: Store,
    prices: Prices,
    since: datetime | None = None,
    on_problem: ProblemHandler | None = None,
) -> UsageReport:
    """Tokens and cost by model across every session.

    Without `since`, the sessions' own accounting is summed (what `session show` prints).
    With it, the replies at or after `since` still held in the slots are counted once each
    however many slots or forked sessions hold a copy, and priced at today's prices; a
    reply no slot holds any more (removed, compressed, rolled back) is not counted.
    A session or slot that cannot be read goes to `on_problem` (default: a warning) and
    is skipped, as agctl.reports.walk skips it.
    """
    report_problem = on_problem or skip_with_warning
    if since is None:
        report = UsageReport(counted="session totals")
        problems: list[AgctlError] = []
        for info in store.list_sessions(problems=problems):
            report.sessions += 1
            for row in session_usage(info.session, prices):
                report.row(row.model).add(row.counts)
        for problem in problems:
            report_problem(problem)
        return report
    from agctl.store import Store

    report = UsageReport(counted="replies", since=since)
    sheets = PriceSheets.in_data_dir(store.local_dir)
    seen: set[str] = set()
    counted: set[str] = set()
    for session_id, _, slot in walk(store, Store.load_slot, on_problem=report_problem):
        for _, _, message in slot_messages(slot):
            reply = _accounted_reply(message, since)
            if reply is None:
                continue
            identity = message_hash(message)
            if identity in seen:
                continue
            seen.add(identity)
            counted.add(session_id)
            model, usage, free = reply
            priced = Charge(0.0, 0.0) if free else charge(model, usage, prices, sheets)
            report.row(model).add(ModelCost.of(usage, priced.cost, priced.saved, free=free))
    report.sessions = len(counted)
    return report


def _accounted_reply(message: Message, since: datetime) -> tuple[str, Usage, bool] | None:
    """(model, usage, whether no one billed it) of a model's reply made at or after
    `since`, as a turn accounts it; None for anything else."""
    usage = Usage.from_counts(message.usage or {})
    if (
        message.role != "assistant"
        or message.model is None
        or message.created_at is None
        or usage is None
    ):
        return None
    created = message.created_at
    if created.tzinfo is None:
        created = created.replace(tzinfo=UTC)
    if created < since:
        return None
    return message.model, usage, (message.usage or {}).get("free") is True
