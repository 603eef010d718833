"""Costs that tell the truth: an unpriced model's cost is unknown ("unpriced", null), never
$0.00; cost per model in session show; a COST column in session list; `agctl usage`.

Turns here are answered by providers that bill (a server, or the offline model's replies
under another name): the offline provider's own turns are free
(tests/lib/reports/test_usage_free.py).
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from click.testing import Result
from fake_openai import FakeOpenAI
from helpers import file_only
from terminal import on_terminal

from agctl.base.errors import EXIT_USAGE, UsageError
from agctl.context.models import ModelCost, Session, Slot
from agctl.context.pricing import Price, Prices, price_for
from agctl.providers.base import ChatRequest, Event, Usage
from agctl.providers.offline import OfflineProvider
from agctl.reports.usage import (
    add_costs,
    cost_text,
    known_cost,
    parse_since,
    session_cost,
    session_usage,
    usage_report,
    with_known_costs,
)
from agctl.store import Store
from agctl.store.checkpointer import Checkpointer
from agctl.turn.send import TurnOptions, send_turn

Run = Callable[..., Result]
UNPRICED = "mystery-1"  # no price table knows it
PRICES = {"priced-1": (1_000_000.0, 2_000_000.0)}  # $1 a prompt token, $2 a completion token


class Billed(OfflineProvider):
    """The offline model's replies from a provider that bills them, as a server does."""

    name = "billed"


@pytest.fixture(autouse=True)
def billed(server: FakeOpenAI, monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI's turns go to a real server on loopback, as the model "offline" (priced 0)
    unless --model says otherwise."""
    monkeypatch.setenv("AGCTL_PROVIDER", "openai")
    monkeypatch.setenv("AGCTL_BASE_URL", server.base_url)
    monkeypatch.setenv("AGCTL_API_KEY", "sk-test")
    monkeypatch.setenv("AGCTL_MODEL", "offline")


def ok(result: Result) -> Result:
    assert result.exit_code == 0, (result.stdout, result.stderr)
    return result


def turn(store: Store, sid: str, model: str, prompt: str = "hi") -> float | None:
    result = send_turn(store, sid, prompt, Billed(), TurnOptions(model=model, prices=PRICES))
    assert result.usage is not None
    return result.cost


def dollars(store: Store, sid: str, model: str) -> float:
    """What the turns of `model` in `sid` cost at PRICES, from the replies' usage."""
    total = 0.0
    for message in store.load_slot(sid, None).messages:
        if message.model == model and message.usage:
            total += message.usage["prompt_tokens"] * 1.0 + message.usage["completion_tokens"] * 2
    return total


# ---- accounting -----------------------------------------------------------------------


def test_an_unpriced_turn_makes_the_models_and_the_sessions_cost_unknown(store: Store) -> None:
    """Before: an unpriced request added 0, so the session showed $0.0000."""
    store.create_session("s")
    assert turn(store, "s", "priced-1") == dollars(store, "s", "priced-1")
    assert turn(store, "s", UNPRICED) is None
    cost = store.load_session("s").cost
    assert cost.cost is None
    assert cost.by_model[UNPRICED].cost is None
    assert cost.by_model[UNPRICED].requests == 1
    assert cost.by_model["priced-1"].cost == dollars(store, "s", "priced-1")


def test_an_unknown_cost_stays_unknown_when_later_requests_are_priced(store: Store) -> None:
    store.create_session("s")
    turn(store, "s", UNPRICED)
    send_turn(
        store,
        "s",
        "again",
        Billed(),
        TurnOptions(model=UNPRICED, prices={UNPRICED: (1, 1)}),
    )
    entry = store.load_session("s").cost.by_model[UNPRICED]
    assert (entry.requests, entry.cost) == (2, None)


def test_known_cost_reads_an_old_zero_for_an_unpriced_model_as_unknown() -> None:
    """Sessions written before this change hold 0.0 where the cost was not known."""
    old = ModelCost(requests=3, prompt_tokens=30, completion_tokens=9, cost=0.0)
    assert known_cost(UNPRICED, old, {}) is None
    assert known_cost("offline", old, {}) == 0.0  # priced, and free
    assert known_cost(UNPRICED, old, {UNPRICED: (0.0, 0.0)}) == 0.0  # declared free
    assert known_cost(UNPRICED, ModelCost(), {}) == 0.0  # no request, nothing spent
    assert known_cost("gpt-4o", ModelCost(requests=1, cost=None), {}) is None


def test_add_costs_and_cost_text() -> None:
    assert add_costs([0.5, 0.25]) == 0.75
    assert add_costs([0.5, None, 0.25]) is None
    assert add_costs([]) == 0.0
    assert (cost_text(None), cost_text(0.0), cost_text(0.12345)) == (
        "unpriced",
        "$0.00",
        "$0.12",
    )


def test_session_usage_and_cost_of_an_old_session_document() -> None:
    session = Session.model_validate(
        {
            "id": "old",
            "cost": {
                "prompt_tokens": 20,
                "completion_tokens": 4,
                "cost": 0.0,
                "by_model": {
                    UNPRICED: {"requests": 1, "prompt_tokens": 10, "completion_tokens": 2},
                    "offline": {"requests": 1, "prompt_tokens": 10, "completion_tokens": 2},
                },
            },
        }
    )
    rows = {row.model: row for row in session_usage(session, {})}
    assert (rows[UNPRICED].cost, rows["offline"].cost) == (None, 0.0)
    assert session_cost(session, {}) is None
    assert session_cost(session, {UNPRICED: (1.0, 1.0)}) == 0.0


def test_with_known_costs_fills_every_cost_of_a_copy(store: Store) -> None:
    old = Session.model_validate(
        {
            "id": "old",
            "cost": {
                "cost": 0.0,
                "by_model": {UNPRICED: {"requests": 1}, "offline": {"requests": 1}},
            },
        }
    )
    known = with_known_costs(old, {})
    assert known.cost.cost is None
    assert (known.cost.by_model[UNPRICED].cost, known.cost.by_model["offline"].cost) == (None, 0.0)
    assert (old.cost.cost, old.cost.by_model[UNPRICED].cost) == (0.0, 0.0)  # left as it was
    assert with_known_costs(old, {UNPRICED: (1.0, 1.0)}).cost.cost == 0.0


# ---- usage across sessions ------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "moment"),
    [
        ("2026-01-31", datetime(2026, 1, 31, tzinfo=UTC)),
        ("2026-01-31T09:30:00Z", datetime(2026, 1, 31, 9, 30, tzinfo=UTC)),
        ("2026-01-31T09:30:00", datetime(2026, 1, 31, 9, 30, tzinfo=UTC)),
        ("2026-01-31T10:30:00+01:00", datetime(2026, 1, 31, 9, 30, tzinfo=UTC)),
    ],
)
def test_parse_since_takes_a_date_or_a_timestamp(text: str, moment: datetime) -> None:
    assert parse_since(text) == moment


@pytest.mark.parametrize("text", ["yesterday", "31/01/2026", "2026-13-01", ""])
def test_parse_since_refuses_anything_else(text: str) -> None:
    with pytest.raises(UsageError, match="--since takes an ISO date"):
        parse_since(text)


def test_usage_sums_the_sessions_accounts_by_model(store: Store) -> None:
    store.create_session("a")
    store.create_session("b")
    turn(store, "a", "priced-1")
    turn(store, "b", "priced-1")
    turn(store, "b", "offline")
    report = usage_report(store, PRICES)
    data = report.to_dict()
    assert (data["counted"], data["since"], data["sessions"]) == ("session totals", None, 2)
    by_model = {row["model"]: row for row in data["models"]}
    assert sorted(by_model) == ["offline", "priced-1"]
    assert by_model["priced-1"]["requests"] == 2
    expected = dollars(store, "a", "priced-1") + dollars(store, "b", "priced-1")
    assert by_model["priced-1"]["cost"] == pytest.approx(expected)
    assert data["total"]["cost"] == pytest.approx(expected)
    a, b = store.load_session("a").cost, store.load_session("b").cost
    assert data["total"]["prompt_tokens"] == a.prompt_tokens + b.prompt_tokens
    turn(store, "a", UNPRICED)
    assert usage_report(store, PRICES).to_dict()["total"]["cost"] is None


def test_usage_since_counts_replies_at_or_after_the_date_once_each(store: Store) -> None:
    store.create_session("a")
    turn(store, "a", "priced-1", "old")
    turn(store, "a", "priced-1", "new")

    def backdate(slot: Slot) -> None:
        slot.messages[1].created_at = datetime(2020, 1, 1, tzinfo=UTC)  # the first reply

    store.update_slot("a", None, backdate)
    store.derive_slot("a", "copy")  # a derived copy of both replies
    checkpoint = Checkpointer(store).create("a", label="backdated")
    Checkpointer(store).fork("a", checkpoint.id, "forked")  # and a forked copy
    new_reply = store.load_slot("a", None).messages[3]
    assert new_reply.usage is not None

    report = usage_report(store, PRICES, since=datetime(2024, 1, 1, tzinfo=UTC)).to_dict()
    assert (report["counted"], report["since"], report["sessions"]) == (
        "replies",
        "2024-01-01T00:00:00Z",
        1,
    )
    assert report["models"] == [
        {
            "model": "priced-1",
            "requests": 1,
            "free_requests": 0,
            "prompt_tokens": new_reply.usage["prompt_tokens"],
            "completion_tokens": new_reply.usage["completion_tokens"],
            "cost": new_reply.usage["prompt_tokens"] + 2.0 * new_reply.usage["completion_tokens"],
            # The provider said nothing of a cache or reasoning: not reported, not 0.
            "cached_tokens": None,
            "cache_write_tokens": None,
            "cache_write_1h_tokens": None,
            "reasoning_tokens": None,
            "cache_prompt_tokens": None,
            "cache_share": None,
            "cache_saved": None,
        }
    ]
    everything = usage_report(store, PRICES, since=datetime(2019, 1, 1, tzinfo=UTC)).to_dict()
    assert everything["total"]["requests"] == 2
    assert usage_report(store, PRICES, since=datetime.now(UTC)).to_dict()["models"] == []


class Caching(Billed):
    """Billed replies whose provider says it read 2,000 of 20,000 input tokens from its
    cache and wrote 16,000 to it, `hour` of them kept an hour (None: not said)."""

    name = "caching"

    def __init__(self, hour: int | None) -> None:
        super().__init__()
        self.hour = hour

    def stream(self, request: ChatRequest) -> Iterator[Event]:
        for event in super().stream(request):
            if isinstance(event, Usage):
                yield Usage(
                    20_000,
                    event.completion_tokens,
                    cached_tokens=2_000,
                    cache_write_tokens=16_000,
                    cache_write_1h_tokens=self.hour,
                )
            else:
                yield event


CLAUDE = "claude-sonnet-4-6"  # genai-prices prices its 1-hour writes


def cached_turn(store: Store, sid: str, hour: int | None, prices: Prices | None = None) -> float:
    options = TurnOptions(model=CLAUDE, prices=prices or {})
    cost = send_turn(store, sid, "hi", Caching(hour), options).cost
    assert cost is not None
    return cost


def test_an_hours_cache_writes_cost_more_and_are_summed_in_the_account(store: Store) -> None:
    """A turn whose writes are kept an hour costs 0.75 times the input price a token more
    than one whose writes are kept 5 minutes (Anthropic: 2x the input price, not 1.25x);
    the session's account and `usage` sum them, and leave them out while none was said."""
    price = price_for(CLAUDE, {})
    assert price is not None
    store.create_session("five")
    store.create_session("hour")
    five = cached_turn(store, "five", None)
    hour = cached_turn(store, "hour", 16_000)
    assert hour - five == pytest.approx(16_000 * (2 - 1.25) * price.prompt / 1e6)
    again = cached_turn(store, "hour", 4_000)
    account = store.load_session("hour").cost.by_model[CLAUDE]
    assert (account.cache_write_tokens, account.cache_write_1h_tokens) == (32_000, 20_000)
    assert account.cost == pytest.approx(hour + again)
    cached_turn(store, "five", 4_000)
    unsaid = store.load_session("five").cost.by_model[CLAUDE]
    assert unsaid.cache_write_1h_tokens == 4_000  # its first turn said nothing of it
    assert "cache_write_1h_tokens" not in ModelCost.of(Usage(1, 1), 0.0).model_dump()

    accounts = usage_report(store, {}).to_dict()
    since = usage_report(store, {}, since=datetime(2000, 1, 1, tzinfo=UTC)).to_dict()
    for report in (accounts, since):
        assert report["total"]["cache_write_1h_tokens"] == 24_000
        assert report["total"]["cache_write_tokens"] == 4 * 16_000
    assert since["total"]["cost"] == pytest.approx(accounts["total"]["cost"])

    # The config's 1-hour price wins.
    store.create_session("priced")
    own = {CLAUDE: Price(1.0, 2.0, 0.1, 1.5, cache_write_1h=5.0)}
    fresh, read, written = 2_000 * 1.0, 2_000 * 0.1, 6_000 * 1.5 + 10_000 * 5.0
    cost = cached_turn(store, "priced", 10_000, own)
    completion = store.load_session("priced").cost.completion_tokens * 2.0
    assert cost == pytest.approx((fresh + read + written + completion) / 1e6)


# ---- the command line -----------------------------------------------------------------


@pytest.fixture
def mixed(run: Run) -> None:
    """Session s: one turn of the offline model (priced: free), two of an unpriced one."""
    ok(run("session", "new", "s"))
    ok(run("turn", "send", "one"))
    ok(run("turn", "send", "two", "--model", UNPRICED))
    ok(run("turn", "send", "three", "--model", UNPRICED))


def test_turn_send_json_gives_null_for_an_unpriced_model(run: Run) -> None:
    ok(run("session", "new", "s"))
    data = json.loads(ok(run("--json", "turn", "send", "hi", "--model", UNPRICED)).stdout)
    assert data["usage"] is not None
    assert data["cost"] is None
    free = json.loads(ok(run("--json", "turn", "send", "hi")).stdout)
    assert free["cost"] == 0.0


def test_session_show_lists_cost_per_model_and_unpriced(run: Run, mixed: None) -> None:
    text = ok(run("session", "show")).stdout
    assert "$0.00 (1 request," in text
    lines = {line.split("  ")[0]: line for line in text.splitlines()}
    assert lines["cost"].split() == ["cost", "unpriced"]
    assert lines[f"cost of {UNPRICED}"].split()[3:6] == ["unpriced", "(2", "requests,"]
    assert lines["cost of offline"].split()[3] == "$0.00"
    data = json.loads(ok(run("--json", "session", "show")).stdout)
    assert data["cost"]["cost"] is None
    assert data["cost"]["by_model"][UNPRICED]["cost"] is None
    assert data["cost"]["by_model"]["offline"]["cost"] == 0.0


def test_session_list_has_a_cost_column(run: Run, mixed: None) -> None:
    ok(run("session", "new", "free", "--no-use"))
    ok(run("--session", "free", "turn", "send", "hi"))
    text = ok(run("session", "list")).stdout.splitlines()
    header = text[0].split()
    assert header[:5] == ["ID", "CREATED", "TURNS", "COST", "SLOT"]
    rows = {line.split()[1] if line.startswith("*") else line.split()[0]: line for line in text}
    assert "unpriced" in rows["s"].split()
    assert "$0.00" in rows["free"].split()
    data = {row["id"]: row for row in json.loads(ok(run("--json", "session", "list")).stdout)}
    assert (data["s"]["cost"], data["free"]["cost"]) == (None, 0.0)


@file_only
def test_ckpt_show_says_unpriced(run: Run, mixed: None, store: Store) -> None:
    newest = Checkpointer(store).ids("s")[0]
    head = ok(run("ckpt", "show", newest)).stdout.splitlines()
    assert next(line for line in head if line.startswith("cost")).split() == ["cost", "unpriced"]


def test_usage_command_text_and_json(run: Run, mixed: None) -> None:
    text = ok(run("usage")).stdout
    cells = [re.split(r" {2,}", line) for line in text.splitlines() if line.strip()]
    rows = {line[0]: line for line in cells}
    header = ["MODEL", "REQUESTS", "INPUT", "CACHED", "OUTPUT", "COST", "SAVED"]
    assert rows["MODEL"] == header
    cost = header.index("COST")
    assert rows[UNPRICED][1] == "2" and rows[UNPRICED][cost] == "unpriced"
    assert rows["offline"][1] == "1" and rows["offline"][cost] == "$0.00"
    assert rows["total"][1] == "3" and rows["total"][cost] == "unpriced"
    # No provider here reports its cache: said so, never as 0.
    assert {line[3] for line in cells[1:4]} == {"not reported"}
    assert "counted: the accounts of 1 session(s)" in text
    data = json.loads(ok(run("--json", "usage")).stdout)
    assert data["total"]["requests"] == 3
    assert data["total"]["cost"] is None
    since = json.loads(ok(run("--json", "usage", "--since", "2000-01-01")).stdout)
    assert (since["counted"], since["total"]["requests"]) == ("replies", 3)
    assert since["total"]["prompt_tokens"] == data["total"]["prompt_tokens"]
    future = json.loads(ok(run("--json", "usage", "--since", "2999-01-01")).stdout)
    assert (future["models"], future["sessions"]) == ([], 0)


@file_only
def test_usage_and_session_show_give_an_hours_writes_where_reported(run: Run, store: Store) -> None:
    """`usage` has a 1H WRITES column, and `session show` the writes kept an hour, only
    once a provider reported some; JSON has them where reported (absent from a session's
    account, null in `usage`, while not)."""

    def table() -> dict[str, dict[str, str]]:
        lines = [re.split(r" {2,}", line) for line in ok(run("usage")).stdout.splitlines()]
        header = lines[0]
        return {c[0]: dict(zip(header, c, strict=True)) for c in lines[1:] if len(c) > 1}

    def account() -> dict[str, Any]:
        data = json.loads(ok(run("--json", "session", "show")).stdout)
        entry: dict[str, Any] = data["cost"]["by_model"][CLAUDE]
        return entry

    ok(run("session", "new", "s"))
    ok(run("turn", "send", "one"))  # the offline model's, from a provider that says no cache
    cached_turn(store, "s", None)
    assert "1H WRITES" not in ok(run("usage")).stdout
    assert table()[CLAUDE]["CACHED"] == "10%"
    assert "16000 written, saved" in ok(run("session", "show")).stdout
    assert "cache_write_1h_tokens" not in account()
    assert json.loads(ok(run("--json", "usage")).stdout)["total"]["cache_write_1h_tokens"] is None

    cached_turn(store, "s", 6_000)
    rows = table()
    assert [rows[m]["1H WRITES"] for m in (CLAUDE, "offline", "total")] == [
        "6000",
        "not reported",
        "6000",
    ]
    assert "32000 written (6000 kept 1 h), saved" in ok(run("session", "show")).stdout
    assert account()["cache_write_1h_tokens"] == 6_000
    data = json.loads(ok(run("--json", "usage")).stdout)
    assert [m["cache_write_1h_tokens"] for m in data["models"]] == [6_000, None]


def test_usage_refuses_a_bad_date_with_exit_2(run: Run) -> None:
    result = run("usage", "--since", "last week")
    assert result.exit_code == EXIT_USAGE
    assert "--since takes an ISO date" in result.stderr


@file_only
def test_no_dollar_zero_for_an_unpriced_model_anywhere(run: Run, store: Store) -> None:
    """Before: session show, session list and ckpt show printed $0.0000 for turns no price
    table knows."""
    ok(run("session", "new", "only-unpriced"))
    ok(run("turn", "send", "hi", "--model", UNPRICED))
    newest = Checkpointer(store).ids("only-unpriced")[0]
    for args in (
        ("session", "show"),
        ("session", "list"),
        ("ckpt", "show", newest),
        ("usage",),
        ("usage", "--since", "2000-01-01"),
    ):
        assert "$0.00" not in ok(run(*args)).stdout, args


def test_the_turn_status_line_on_a_terminal_says_unpriced(
    run: Run, isolated_env: Path, tmp_path: Path
) -> None:
    ok(run("session", "new", "s"))
    env = {**os.environ, "AGCTL_DATA_DIR": str(isolated_env), "PYTHONIOENCODING": "utf-8"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    status, received = on_terminal(env, "turn", "send", "hi", "--model", UNPRICED)
    assert status == 0, received
    line = received.decode().strip().splitlines()[-1]
    assert line.startswith(f"[turn 1 · default · {UNPRICED} · ")
    assert line.endswith("tokens · unpriced]")


@file_only
def test_no_command_shows_an_old_zero_of_an_unpriced_model(run: Run, store: Store) -> None:
    """Before: ckpt show --json printed the stored 0.0 of a session written before unknown
    costs were recorded; session show patched its own copy, ckpt show did not."""
    ok(run("session", "new", "old"))

    def as_written_before(session: Session) -> None:
        session.cost.cost = 0.0
        session.cost.by_model[UNPRICED] = ModelCost(requests=2, prompt_tokens=9, cost=0.0)

    store.update_session("old", as_written_before)
    checkpoint = Checkpointer(store).create("old", label="old").id
    shown = json.loads(ok(run("--json", "session", "show")).stdout)["cost"]
    listed = json.loads(ok(run("--json", "session", "list")).stdout)[0]["cost"]
    held = json.loads(ok(run("--json", "ckpt", "show", checkpoint)).stdout)["session"]["cost"]
    assert (shown["cost"], listed, held["cost"]) == (None, None, None)
    assert shown["by_model"][UNPRICED]["cost"] is None
    assert held["by_model"][UNPRICED]["cost"] is None
    for args in (("session", "show"), ("session", "list"), ("ckpt", "show", checkpoint)):
        text = ok(run(*args)).stdout
        assert "unpriced" in text and "$0.00" not in text, args
