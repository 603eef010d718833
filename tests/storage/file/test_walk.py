"""One walk over every session and slot (agctl.reports.walk), used by `search` and `usage --since`:
a damaged session or slot is reported once and skipped, never a failure of the walk."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest
from click.testing import Result

from agctl.base.errors import AgctlError, CorruptDocument, NotFound
from agctl.context.models import Message
from agctl.providers.offline import OfflineProvider
from agctl.reports.usage import usage_report
from agctl.reports.walk import slot_messages, walk
from agctl.store import Store
from agctl.turn.send import TurnOptions, send_turn

Run = Callable[..., Result]
PRICES = {"priced-1": (1_000_000.0, 2_000_000.0)}
LONG_AGO = datetime(2000, 1, 1, tzinfo=UTC)


def slot_file(store: Store, session_id: str, slot_id: str = "default") -> Path:
    return store.sessions_dir / session_id / "slots" / f"{slot_id}.json"


@pytest.fixture
def damaged(store: Store) -> Store:
    """Sessions a, b, c with one priced turn each, and slot `plan` in b; then a's default
    slot is not JSON and session e has no slots dir."""
    for sid in ("a", "b", "c"):
        store.create_session(sid)
        send_turn(store, sid, f"hello {sid}", OfflineProvider(), TurnOptions(model="priced-1"))
    store.create_slot("b", "plan")
    store.update_slot("b", "plan", lambda s: s.append(Message(role="user", content="hello plan")))
    slot_file(store, "a").write_text("{broken")
    (store.sessions_dir / "e").mkdir()
    (store.sessions_dir / "e" / "session.json").write_text("{}")
    return store


def test_walk_yields_every_readable_slot_and_reports_the_rest(damaged: Store) -> None:
    problems: list[AgctlError] = []
    slots = walk(damaged, Store.load_slot, on_problem=problems.append)
    walked = [(sid, sl) for sid, sl, _ in slots]
    assert walked == [("b", "default"), ("b", "plan"), ("c", "default")]
    assert len(problems) == 2
    assert isinstance(problems[0], CorruptDocument) and "default.json" in str(problems[0])
    assert isinstance(problems[1], NotFound) and "'e'" in str(problems[1])


def test_walk_reads_lazily_and_warns_by_default(
    damaged: Store, caplog: pytest.LogCaptureFixture
) -> None:
    """Nothing is read before it is asked for; without a handler, a problem is a warning."""
    read: list[tuple[str, str]] = []

    def record(store: Store, sid: str, sl: str) -> None:
        read.append((sid, sl))
        store.load_slot(sid, sl)

    slots = walk(damaged, record)
    assert read == []
    with caplog.at_level("WARNING", logger="agctl"):
        assert next(slots)[:2] == ("b", "default")
        assert "skipped" in caplog.text and "default.json" in caplog.text
        assert len(list(slots)) == 2
    assert "'e' not found" in caplog.text


def test_walk_narrowed_to_a_session_or_slot(damaged: Store) -> None:
    assert [sl for _, sl, _ in walk(damaged, Store.load_slot, session_id="b")] == [
        "default",
        "plan",
    ]
    assert [sid for sid, _, _ in walk(damaged, Store.load_slot, slot_id="plan")] == ["b"]
    with pytest.raises(NotFound, match="slot 'plan' not found in session 'c'"):
        list(walk(damaged, Store.load_slot, session_id="c", slot_id="plan"))
    with pytest.raises(NotFound, match="'e'"):
        list(walk(damaged, Store.load_slot, session_id="e"))


def test_slot_messages_walks_every_zone_in_order(store: Store) -> None:
    store.create_session("s", system_prompt="rules")
    store.create_slot("s", "static", immutable=[Message(role="system", content="fixed")])
    store.update_slot("s", "static", lambda s: s.append(Message(role="user", content="q")))
    slot = store.load_slot("s", "static")
    assert [(zone, index, m.text()) for zone, index, m in slot_messages(slot)] == [
        ("immutable", 0, "fixed"),
        ("messages", 0, "q"),
    ]


def test_usage_since_skips_a_damaged_slot_and_counts_the_rest(damaged: Store) -> None:
    """Before: usage --since raised on the first damaged slot (exit 5, no output)."""
    problems: list[AgctlError] = []
    report = usage_report(damaged, PRICES, since=LONG_AGO, on_problem=problems.append)
    assert (report.sessions, report.total.requests) == (2, 2)
    assert [type(p) for p in problems] == [CorruptDocument, NotFound]


# ---- the command line -----------------------------------------------------------------


def warnings(result: Result) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.startswith("agctl: warning:")]


def test_usage_since_with_a_damaged_slot_warns_and_exits_0(run: Run, damaged: Store) -> None:
    result = run("usage", "--since", "2000-01-01")
    assert result.exit_code == 0, result.stderr
    assert "counted: replies made since 2000-01-01, in 2 session(s)" in result.stdout
    assert any("skipped" in w and "default.json" in w for w in warnings(result))
    data = json.loads(run("--json", "usage", "--since", "2000-01-01").stdout)
    assert (data["sessions"], data["total"]["requests"]) == (2, 2)


def test_search_and_usage_walk_the_same_damaged_data_dir_alike(run: Run, damaged: Store) -> None:
    """Both commands skip the same documents with the same warnings, and exit 0."""
    search = run("search", "hello", "--role", "user")
    usage_since = run("usage", "--since", "2000-01-01")
    usage = run("usage")
    for result in (search, usage_since, usage):
        assert result.exit_code == 0, result.stderr
        assert "Traceback" not in result.output
    assert [line.split()[0] for line in search.stdout.splitlines()] == [
        "b/default:0",
        "b/plan:0",
        "c/default:0",
    ]
    assert warnings(search) == warnings(usage_since)
    assert len(warnings(search)) == 2
    # Without --since only the sessions' own documents are read: a's is intact.
    assert "counted: the accounts of 3 session(s)" in usage.stdout
    assert [w for w in warnings(usage) if "default.json" in w] == []
