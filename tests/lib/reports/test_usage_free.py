"""What a turn costs follows who answered it, and every cost prints with its digits.

Before: 500 turns of the offline provider under a profile whose model had a price showed
`cost of fake-chat $7.97`, added into `agctl usage`; and a real cost under a hundredth of
a cent printed as `$0.0000`.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest
from click.testing import Result
from fake_openai import FakeOpenAI
from helpers import file_only
from terminal import on_terminal

import agctl.cli
from agctl.providers.offline import OfflineProvider
from agctl.reports.usage import cost_text, money, usage_report
from agctl.store import Store
from agctl.store.checkpointer import Checkpointer
from agctl.turn.send import TurnOptions, send_turn

Run = Callable[..., Result]
PRICED = "fake-chat"
PRICES = {PRICED: (1_000_000.0, 1_000_000.0)}  # $1 a token: no free turn can hide in it


def ok(result: Result) -> Result:
    assert result.exit_code == 0, (result.stdout, result.stderr)
    return result


# ---- the library -----------------------------------------------------------------------


def test_an_offline_turn_of_a_priced_model_costs_nothing_and_says_so(store: Store) -> None:
    store.create_session("s")
    result = send_turn(store, "s", "hi", OfflineProvider(), TurnOptions(PRICED, prices=PRICES))
    assert result.usage is not None and result.usage.prompt_tokens > 0
    assert (result.cost, result.free) == (0.0, True)
    assert (result.to_dict()["cost"], result.to_dict()["free"]) == (0.0, True)
    entry = store.load_session("s").cost.by_model[PRICED]
    assert (entry.requests, entry.free_requests, entry.cost) == (1, 1, 0.0)
    reply = store.load_slot("s", None).messages[-1]
    assert reply.usage is not None and reply.usage["free"] is True
    for since in (None, datetime(2000, 1, 1, tzinfo=UTC)):
        row = usage_report(store, PRICES, since).models[PRICED]
        assert (row.cost, row.free_requests, row.free, row.cost_text()) == (0.0, 1, True, "free")


def test_an_unpriced_model_answered_offline_is_free_not_unknown(store: Store) -> None:
    """Unknown (None) stays apart from free (0): only a billed request can be unknown."""
    store.create_session("s")
    result = send_turn(store, "s", "hi", OfflineProvider(), TurnOptions("mystery-1"))
    assert (result.cost, result.free) == (0.0, True)
    row = usage_report(store, {}).models["mystery-1"]
    assert (row.cost, row.cost_text()) == (0.0, "free")


@pytest.mark.parametrize(
    ("dollars", "shown"),
    [
        (0.00012, "$0.00012"),
        (0.000123456, "$0.00012"),
        (0.0000001, "$0.00000010"),
        (0.0123, "$0.012"),
        (0.0999, "$0.10"),
        (0.5, "$0.50"),
        (7.9749, "$7.97"),
        (1234.5, "$1234.50"),
        (0.0, "$0.00"),
    ],
)
def test_money_keeps_two_significant_digits_below_a_dollar(dollars: float, shown: str) -> None:
    assert money(dollars) == shown


def test_cost_text_tells_unknown_free_and_zero_apart() -> None:
    assert (cost_text(None), cost_text(0.0), cost_text(0.0, free=True)) == (
        "unpriced",
        "$0.00",
        "free",
    )
    assert cost_text(0.00012, free=True) == "$0.00012"  # some of it was billed


# ---- the command line ------------------------------------------------------------------


@pytest.fixture
def priced(run: Run, monkeypatch: pytest.MonkeyPatch) -> None:
    """A price for fake-chat, the model every turn asks for; offline by default."""
    ok(run("config", "set", f"prices.{PRICED}", '{"prompt": 1000000, "completion": 1000000}'))
    monkeypatch.setenv("AGCTL_MODEL", PRICED)
    ok(run("session", "new", "s"))


COST = 5  # the column of `agctl usage`: MODEL REQUESTS INPUT CACHED OUTPUT COST SAVED


@file_only
def test_offline_turns_are_free_in_every_command(run: Run, priced: None, store: Store) -> None:
    sent = json.loads(ok(run("--json", "turn", "send", "hi")).stdout)
    assert (sent["model"], sent["cost"], sent["free"]) == (PRICED, 0.0, True)
    ok(run("turn", "send", "again", "--script", _script(store, "scripted")))
    shown = ok(run("session", "show")).stdout
    assert re.search(rf"cost of {PRICED} +free \(2 requests,", shown), shown
    assert re.search(r"^cost +free$", shown, re.M), shown
    listed = ok(run("session", "list")).stdout.splitlines()[1].split()
    assert "free" in listed
    checkpoint = Checkpointer(store).ids("s")[0]
    assert re.search(r"^cost +free$", ok(run("ckpt", "show", checkpoint)).stdout, re.M)
    for args in (("usage",), ("usage", "--since", "2000-01-01")):
        lines = ok(run(*args)).stdout.splitlines()[1:3]
        rows = {cells[0]: cells for cells in (re.split(r" {2,}", line) for line in lines)}
        assert rows[PRICED][1] == "2" and rows[PRICED][COST] == "free", args
        data = json.loads(ok(run("--json", *args)).stdout)
        assert data["total"]["cost"] == 0.0 and data["total"]["free_requests"] == 2, args


def test_cassette_turns_are_free_and_billed_ones_are_not(
    run: Run, priced: None, server: FakeOpenAI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cassette = tmp_path / "chat.cassette"
    server.reply("recorded", usage={"prompt_tokens": 3, "completion_tokens": 1})
    wire = ("--provider", "openai")
    monkeypatch.setenv("AGCTL_BASE_URL", server.base_url)
    monkeypatch.setenv("AGCTL_API_KEY", "sk-test")
    recorded = json.loads(
        ok(run("--json", "turn", "send", "hi", *wire, "--record", str(cassette))).stdout
    )
    assert (recorded["cost"], recorded["free"]) == (4.0, False)
    ok(run("session", "new", "replayed"))
    replayed = json.loads(
        ok(run("--json", "turn", "send", "hi", "--cassette", str(cassette))).stdout
    )
    assert (replayed["reply"], replayed["cost"], replayed["free"]) == ("recorded", 0.0, True)
    data = json.loads(ok(run("--json", "usage")).stdout)
    assert data["total"]["cost"] == 4.0
    assert (data["total"]["requests"], data["total"]["free_requests"]) == (2, 1)
    shown = ok(run("-s", "s", "session", "show")).stdout
    assert re.search(rf"cost of {PRICED} +\$4.00 \(1 request,", shown), shown


def _script(store: Store, *replies: str) -> str:
    path = store.root / "script.json"
    path.write_text(json.dumps(list(replies)))
    return str(path)


# Every command that prints a cost, and the arguments that make it print the session's.
COST_COMMANDS = {
    "session": [("session", "show"), ("session", "list")],
    "ckpt": [("ckpt", "show", "{checkpoint}")],
    "usage": [("usage",), ("usage", "--since", "2000-01-01")],
    "turn": [],  # its status line: on a terminal only, below
}


@file_only
def test_every_command_that_prints_a_cost_shows_its_digits(
    run: Run,
    server: FakeOpenAI,
    store: Store,
    isolated_env: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """$0.00012 is printed as such by each command that prints money (found by reading
    agctl/cli for cost_text: a new one fails here until it is walked)."""
    printing = {
        path.stem
        for path in Path(agctl.cli.__file__).parent.glob("*.py")
        if "cost_text" in path.read_text()
    }
    assert printing == set(COST_COMMANDS)
    ok(run("config", "set", "prices.tiny", '{"prompt": 10, "completion": 0}'))
    for name, value in {
        "AGCTL_PROVIDER": "openai",
        "AGCTL_BASE_URL": server.base_url,
        "AGCTL_API_KEY": "sk-test",
        "AGCTL_MODEL": "tiny",
    }.items():
        monkeypatch.setenv(name, value)
    ok(run("session", "new", "s"))
    usage = {"prompt_tokens": 12, "completion_tokens": 5}  # 12 x $10 / 1M = $0.00012
    server.reply("one", usage=usage)
    env = {**os.environ, "AGCTL_DATA_DIR": str(isolated_env), "PYTHONIOENCODING": "utf-8"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    status, received = on_terminal(env, "turn", "send", "hi")
    assert status == 0, received
    assert received.decode().strip().splitlines()[-1].endswith("12+5 tokens · $0.00012]")
    checkpoint = Checkpointer(store).ids("s")[0]
    for args in [args for walked in COST_COMMANDS.values() for args in walked]:
        text = ok(run(*(a.format(checkpoint=checkpoint) for a in args))).stdout
        assert "$0.00012" in text and "$0.0000" not in text, (args, text)
