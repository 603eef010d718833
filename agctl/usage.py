"""Tokens and money, per model, per session and across sessions, where unknown stays unknown.

A cost is None when some request had no price: a total that silently counted it as $0
would be wrong. Sessions account each turn as it commits (`Session.cost`), without a time;
only the replies themselves carry one (`created_at`, `model`, `usage`), so usage since a
date is counted from the replies still held in the slots.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal

from agctl.errors import AgctlError, UsageError
from agctl.hashing import message_hash
from agctl.models import Message, ModelCost, Session
from agctl.pricing import cost_of, price_for
from agctl.walk import ProblemHandler, skip_with_warning, slot_messages, walk

if TYPE_CHECKING:
    from agctl.store import Store

Prices = Mapping[str, tuple[float, float]]


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


def add_costs(costs: Iterable[float | None]) -> float | None:
    """The sum, or None when any part is unknown."""
    total = 0.0
    for cost in costs:
        if cost is None:
            return None
        total += cost
    return total


@dataclass
class ModelUsage:
    """Requests, tokens and cost of one model."""

    model: str
    requests: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost: float | None = 0.0
    # Of the requests, those no one billed (offline, a cassette).
    free_requests: int = 0

    def add(
        self, requests: int, prompt: int, completion: int, cost: float | None, free: int = 0
    ) -> None:
        self.requests += requests
        self.prompt_tokens += prompt
        self.completion_tokens += completion
        self.cost = add_costs([self.cost, cost])
        self.free_requests += free

    @property
    def free(self) -> bool:
        """Every request answered where no one bills: its 0 is 'free', not '$0.00'."""
        return self.requests > 0 and self.free_requests == self.requests

    def cost_text(self) -> str:
        return cost_text(self.cost, free=self.free)

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "requests": self.requests,
            "free_requests": self.free_requests,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "cost": self.cost,
        }


def session_usage(session: Session, prices: Prices) -> list[ModelUsage]:
    """A session's accounted usage per model, by model name."""
    rows = []
    for model, entry in sorted(session.cost.by_model.items()):
        row = ModelUsage(model)
        row.add(
            entry.requests,
            entry.prompt_tokens,
            entry.completion_tokens,
            known_cost(model, entry, prices),
            entry.free_requests,
        )
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
            total.add(
                row.requests, row.prompt_tokens, row.completion_tokens, row.cost, row.free_requests
            )
        return total

    def to_dict(self) -> dict[str, Any]:
        from agctl.models import isoformat

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
    is skipped, as agctl.walk skips it.
    """
    report_problem = on_problem or skip_with_warning
    if since is None:
        report = UsageReport(counted="session totals")
        problems: list[AgctlError] = []
        for info in store.list_sessions(problems=problems):
            report.sessions += 1
            for usage in session_usage(info.session, prices):
                report.row(usage.model).add(
                    usage.requests,
                    usage.prompt_tokens,
                    usage.completion_tokens,
                    usage.cost,
                    usage.free_requests,
                )
        for problem in problems:
            report_problem(problem)
        return report
    from agctl.store import Store

    report = UsageReport(counted="replies", since=since)
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
            model, prompt, completion, free = reply
            cost = 0.0 if free else cost_of(model, prompt, completion, prices)
            report.row(model).add(1, prompt, completion, cost, int(free))
    report.sessions = len(counted)
    return report


def _accounted_reply(message: Message, since: datetime) -> tuple[str, int, int, bool] | None:
    """(model, prompt tokens, completion tokens, whether no one billed it) of a model's
    reply made at or after `since`, as a turn accounts it; None for anything else."""
    usage = message.usage or {}
    prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
    if (
        message.role != "assistant"
        or message.model is None
        or message.created_at is None
        or not isinstance(prompt, int)
        or not isinstance(completion, int)
    ):
        return None
    created = message.created_at
    if created.tzinfo is None:
        created = created.replace(tzinfo=UTC)
    if created < since:
        return None
    return message.model, prompt, completion, usage.get("free") is True
