"""Cache and reasoning counts, from a real loopback server's replies to what agctl shows.

The server answers in OpenAI's format (prompt_tokens_details.cached_tokens,
completion_tokens_details.reasoning_tokens, OpenRouter's cache_write_tokens) or
DeepSeek's (prompt_cache_hit_tokens / prompt_cache_miss_tokens); each count must be
parsed, committed with the reply and into the session's account and checkpoints, shown
by `turn send --json`, `-v`, `session show` and `usage`, priced cache-aware, recorded in
a cassette and replayed from it. A count the provider did not report is "not reported"
(null in JSON), never 0.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import Result
from fake_openai import FakeOpenAI, deepseek_usage, openai_usage
from terminal import on_terminal

from agctl.context.pricing import Price, price_for
from agctl.reports.usage import money
from agctl.store import Store
from agctl.store.checkpointer import Checkpointer

Run = Callable[..., Result]

KEY = "sk-agctl-test-Cache7Xw3Kp9Lm2Vb"
# 1,536 of 2,000 input tokens read from cache (three 128-token steps past 1,024), 40 of
# the 100 output tokens reasoning.
CACHED_REPLY = openai_usage(2000, 100, cached=1536, reasoning=40)


@pytest.fixture
def wired(server: FakeOpenAI, store: Store, monkeypatch: pytest.MonkeyPatch) -> FakeOpenAI:
    """The server, agctl pointed at it, and a selected session."""
    monkeypatch.setenv("AGCTL_PROVIDER", "openai")
    monkeypatch.setenv("AGCTL_BASE_URL", server.base_url)
    monkeypatch.setenv("AGCTL_MODEL", "gpt-4o")
    monkeypatch.setenv("AGCTL_API_KEY", KEY)
    store.create_session("s")
    store.set_current_session("s")
    return server


def ok(result: Result) -> Result:
    assert result.exit_code == 0, result.output
    return result


def as_json(result: Result) -> Any:
    return json.loads(ok(result).stdout)


def usage_rows(text: str) -> dict[str, dict[str, str]]:
    """`agctl usage`'s table, each row by model and column (cells may hold a space)."""
    table = text.split("\n\n")[0]  # the "counted: ..." note follows it
    lines = [re.split(r" {2,}", line) for line in table.splitlines()]
    header = lines[0]
    return {cells[0]: dict(zip(header, cells, strict=True)) for cells in lines[1:] if cells[0]}


def cache_aware(price: Price, prompt: int, completion: int, cached: int, written: int = 0) -> float:
    """The cost this test expects: cached input at the cache-read price, writes at the
    write price, the rest of the input at the input price."""
    read = price.prompt if price.cache_read is None else price.cache_read
    write = price.prompt if price.cache_write is None else price.cache_write
    fresh = prompt - cached - written
    return (
        fresh * price.prompt + cached * read + written * write + completion * price.completion
    ) / 1e6


def test_genai_prices_gives_a_known_model_its_cache_price() -> None:
    from genai_prices import Usage, calc_price

    price = price_for("gpt-4o", {})
    assert price is not None and price.cache_read is not None
    assert 0 < price.cache_read < price.prompt < price.completion
    # The same numbers as the database's own calculation, cache reads included.
    database = calc_price(
        Usage(input_tokens=2000, cache_read_tokens=1536, output_tokens=100), "gpt-4o"
    )
    assert cache_aware(price, 2000, 100, 1536) == pytest.approx(float(database.total_price))
    deepseek = price_for("deepseek-chat", {})
    assert deepseek is not None and deepseek.cache_read is not None
    assert deepseek.cache_read < deepseek.prompt
    assert price_for("no-such-model-anywhere", {}) is None
    # A router's "provider/model" name (the openrouter preset's default) is the provider's.
    assert price_for("openai/gpt-4o-mini", {}) == price_for("gpt-4o-mini", {}) is not None
    assert price_for("openai/no-such-model", {}) is None


def test_a_model_the_database_prices_by_no_token_is_unpriced_not_free() -> None:
    from datetime import UTC, datetime

    from genai_prices import data_snapshot

    now, snapshot = datetime.now(UTC), data_snapshot.get_snapshot()

    def found_by_name(model: Any) -> bool:
        try:
            return snapshot.find_provider_model(model.id, None, None, None)[1] is model
        except LookupError:
            return False

    untokened = [
        model.id
        for provider in snapshot.providers
        for model in provider.models
        if getattr(model.get_prices(now), "input_mtok", None) is None and found_by_name(model)
    ]
    assert untokened, "the database lists models priced by other units (images, audio)"
    for model in untokened[:5]:
        assert price_for(model, {}) is None, model


@pytest.mark.parametrize("stream", ["--stream", "--no-stream"])
def test_openai_cache_and_reasoning_counts_are_committed_shown_and_priced(
    run: Run, store: Store, wired: FakeOpenAI, stream: str
) -> None:
    wired.reply("cached", usage=CACHED_REPLY)
    data = as_json(run("turn", "send", "hi", stream, "--json"))
    assert data["usage"] == {
        "prompt_tokens": 2000,
        "completion_tokens": 100,
        "cached_tokens": 1536,
        "cache_write_tokens": None,  # OpenAI reports no cache writes: not reported, not 0
        "reasoning_tokens": 40,
        "cache_write_1h_tokens": None,
    }
    price = price_for("gpt-4o", {})
    assert price is not None and price.cache_read is not None
    cost = cache_aware(price, 2000, 100, 1536)
    saved = 1536 * (price.prompt - price.cache_read) / 1e6
    assert data["cost"] == pytest.approx(cost)
    assert data["cache_saved"] == pytest.approx(saved) and saved > 0

    # The reply keeps the counts the server reported, and only those.
    reply = store.load_slot("s", None).messages[-1]
    assert reply.usage == {
        "prompt_tokens": 2000,
        "completion_tokens": 100,
        "cached_tokens": 1536,
        "reasoning_tokens": 40,
    }
    account = as_json(run("--json", "session", "show"))["cost"]["by_model"]["gpt-4o"]
    assert "cache_write_tokens" not in account
    assert (account["cached_tokens"], account["cache_prompt_tokens"]) == (1536, 2000)
    assert account["reasoning_tokens"] == 40
    assert account["cache_saved"] == pytest.approx(saved)
    shown = ok(run("session", "show")).stdout
    said = re.escape(f"1536 tokens read (77% of the input), saved {money(saved)}")
    line = rf"^cache of gpt-4o +{said}$"
    assert re.search(line, shown, re.M), shown
    assert re.search(r"^reasoning of gpt-4o +40 tokens$", shown, re.M), shown

    # The checkpoint after the turn holds the same account.
    newest = Checkpointer(store).ids("s")[0]
    held = as_json(run("--json", "ckpt", "show", newest))["session"]["cost"]["by_model"]
    assert held["gpt-4o"]["cached_tokens"] == 1536

    for since in ((), ("--since", "2000-01-01")):
        rows = usage_rows(ok(run("usage", *since)).stdout)
        assert (rows["gpt-4o"]["INPUT"], rows["gpt-4o"]["CACHED"]) == ("2000", "77%"), since
        assert rows["gpt-4o"]["SAVED"] == money(saved), since
        total = as_json(run("--json", "usage", *since))["total"]
        assert total["cached_tokens"] == 1536 and total["cache_share"] == pytest.approx(0.768)
        assert total["cache_saved"] == pytest.approx(saved)
        assert total["cost"] == pytest.approx(cost)


def test_deepseek_cache_hits_are_counted_and_priced(
    run: Run, wired: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGCTL_MODEL", "deepseek-chat")
    wired.reply("hit", usage=deepseek_usage(3000, 50, hit=2048))
    data = as_json(run("turn", "send", "hi", "--json"))
    assert data["usage"] == {
        "prompt_tokens": 3000,
        "completion_tokens": 50,
        "cached_tokens": 2048,
        "cache_write_tokens": None,
        "reasoning_tokens": None,
        "cache_write_1h_tokens": None,
    }
    price = price_for("deepseek-chat", {})
    assert price is not None
    assert data["cost"] == pytest.approx(cache_aware(price, 3000, 50, 2048))
    rows = usage_rows(ok(run("usage")).stdout)
    assert rows["deepseek-chat"]["CACHED"] == "68%"


def test_not_reported_is_never_shown_as_zero(
    run: Run, wired: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    wired.reply("plain", usage={"prompt_tokens": 100, "completion_tokens": 5})
    ok(run("turn", "send", "one", "--model", "gpt-4o"))
    wired.reply("none cached", usage=openai_usage(100, 5, cached=0))
    ok(run("turn", "send", "two", "--model", "gpt-4o-mini"))

    rows = usage_rows(ok(run("usage")).stdout)
    assert (rows["gpt-4o"]["CACHED"], rows["gpt-4o"]["SAVED"]) == ("not reported",) * 2
    assert (rows["gpt-4o-mini"]["CACHED"], rows["gpt-4o-mini"]["SAVED"]) == ("0%", "$0.00")
    assert rows["total"]["CACHED"] == "0% of 100"  # only gpt-4o-mini's input was reported on
    models = {row["model"]: row for row in as_json(run("--json", "usage"))["models"]}
    for key in ("cached_tokens", "cache_prompt_tokens", "cache_share", "cache_saved"):
        assert models["gpt-4o"][key] is None, key
    assert models["gpt-4o-mini"]["cached_tokens"] == 0
    assert (models["gpt-4o-mini"]["cache_share"], models["gpt-4o-mini"]["cache_saved"]) == (0, 0)
    shown = ok(run("session", "show")).stdout
    assert re.search(r"^cache of gpt-4o +not reported$", shown, re.M), shown

    # A later turn that reports its cache: the share is of the input reported on.
    wired.reply("cached", usage=openai_usage(2000, 5, cached=1024))
    ok(run("turn", "send", "three", "--model", "gpt-4o"))
    assert usage_rows(ok(run("usage")).stdout)["gpt-4o"]["CACHED"] == "51% of 2000"


def test_config_prices_win_with_their_cache_prices(run: Run, wired: FakeOpenAI) -> None:
    ok(run("config", "set", "prices.gpt-4o", '{"prompt": 4, "completion": 8, "cache_read": 1}'))
    wired.reply("cached", usage=CACHED_REPLY)
    data = as_json(run("turn", "send", "hi", "--json"))
    assert data["cost"] == pytest.approx((464 * 4 + 1536 * 1 + 100 * 8) / 1e6)
    assert data["cache_saved"] == pytest.approx(1536 * 3 / 1e6)

    # An override that names no cache price is the whole price: cached input at its
    # prompt price, so the cache saved nothing at it.
    ok(run("config", "set", "prices.gpt-4o", '{"prompt": 4, "completion": 8}'))
    wired.reply("cached", usage=CACHED_REPLY)
    data = as_json(run("turn", "send", "again", "--json"))
    assert data["cost"] == pytest.approx((2000 * 4 + 100 * 8) / 1e6)
    assert data["cache_saved"] == 0


def test_cache_writes_are_priced_at_the_write_price(run: Run, wired: FakeOpenAI) -> None:
    price = '{"prompt": 3, "completion": 15, "cache_read": 0.3, "cache_write": 3.75}'
    ok(run("config", "set", "prices.my-model", price))
    wired.reply("written", usage=openai_usage(5000, 10, cached=1000, cache_write=3000))
    data = as_json(run("turn", "send", "hi", "--model", "my-model", "--json"))
    assert (data["usage"]["cached_tokens"], data["usage"]["cache_write_tokens"]) == (1000, 3000)
    cost = cache_aware(Price(3, 15, 0.3, 3.75), 5000, 10, 1000, 3000)
    assert data["cost"] == pytest.approx(cost)
    assert data["cache_saved"] == pytest.approx((5000 * 3 + 10 * 15) / 1e6 - cost)
    shown = ok(run("session", "show")).stdout
    assert "1000 tokens read (20% of the input), 3000 written, saved" in shown, shown


def test_verbose_log_and_status_give_the_cached_counts(run: Run, wired: FakeOpenAI) -> None:
    wired.reply("cached", usage=CACHED_REPLY)
    lines = [
        json.loads(line) for line in ok(run("turn", "send", "hi", "--jsonl")).stdout.splitlines()
    ]
    assert [line for line in lines if line["type"] == "usage"] == [
        {"type": "usage", "prompt_tokens": 2000, "completion_tokens": 100,
         "cached_tokens": 1536, "reasoning_tokens": 40}
    ]  # fmt: skip
    assert lines[-1]["type"] == "result" and lines[-1]["usage"]["cached_tokens"] == 1536
    wired.reply("cached", usage=CACHED_REPLY)
    result = ok(run("-v", "turn", "send", "hi"))
    assert re.search(
        r"reply committed: .* tokens=2000\+100 \(1536 cached, 40 reasoning\)", result.stderr
    ), result.stderr


def test_the_status_line_on_a_terminal_gives_the_cached_counts(
    wired: FakeOpenAI, isolated_env: Path
) -> None:
    wired.reply("cached", usage=CACHED_REPLY)
    env = {**os.environ, "AGCTL_DATA_DIR": str(isolated_env), "PYTHONIOENCODING": "utf-8"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    status, received = on_terminal(env, "turn", "send", "hi")
    assert status == 0, received
    line = received.decode().strip().splitlines()[-1]
    assert line.startswith(
        "[turn 1 · default · gpt-4o · 2000+100 tokens (1536 cached, 40 reasoning) · $"
    )


def test_a_count_larger_than_its_whole_is_not_counted(run: Run, wired: FakeOpenAI) -> None:
    wired.reply("odd", usage=openai_usage(100, 5, cached=5000, reasoning=2))
    result = ok(run("turn", "send", "hi", "--json"))
    usage = json.loads(result.stdout)["usage"]
    assert (usage["cached_tokens"], usage["reasoning_tokens"]) == (None, 2)
    assert "reported 5000 cached tokens, more than the 100" in result.stderr


def test_a_cassette_records_and_replays_the_cached_counts(
    run: Run, store: Store, wired: FakeOpenAI, tmp_path: Path
) -> None:
    cassette = tmp_path / "cache.cassette"
    wired.reply("cached", usage=CACHED_REPLY)
    ok(run("turn", "send", "hi", "--record", str(cassette)))
    wired.stop()
    (entry,) = [json.loads(line) for line in cassette.read_bytes().splitlines()]
    (recorded,) = [event for event in entry["events"] if event["type"] == "usage"]
    assert recorded == {
        "type": "usage",
        "prompt_tokens": 2000,
        "completion_tokens": 100,
        "cached_tokens": 1536,
        "reasoning_tokens": 40,
    }

    store.create_session("replayed")
    store.set_current_session("replayed")
    data = as_json(run("turn", "send", "hi", "--cassette", str(cassette), "--json"))
    assert (data["usage"]["cached_tokens"], data["usage"]["reasoning_tokens"]) == (1536, 40)
    assert (data["cost"], data["free"], data["cache_saved"]) == (0.0, True, 0.0)

    # An older cassette, without the counts, still replays (they read as not reported),
    # and so does one from a newer agctl whose usage carries a count this one does not know.
    for usage in (
        {"type": "usage", "prompt_tokens": 2000, "completion_tokens": 100},
        {**recorded, "audio_tokens": 7},
    ):
        entry["events"] = [usage if e["type"] == "usage" else e for e in entry["events"]]
        cassette.write_text(json.dumps(entry) + "\n")
        store.create_session(f"old{len(usage)}")
        store.set_current_session(f"old{len(usage)}")
        data = as_json(run("turn", "send", "hi", "--cassette", str(cassette), "--json"))
        expected = usage.get("cached_tokens")
        assert (data["usage"]["prompt_tokens"], data["usage"]["cached_tokens"]) == (2000, expected)


@pytest.mark.parametrize("second_reports", [True, False], ids=["both", "first-only"])
def test_a_tool_loops_requests_are_counted_and_priced_each(
    run: Run, store: Store, wired: FakeOpenAI, second_reports: bool
) -> None:
    tool = [sys.executable, "-c", "import sys; sys.stdin.read(); print('4')"]
    ok(run("tool", "add", "count", "--description", "Count", "--approve", "auto", "--", *tool))
    first = openai_usage(2000, 10, cached=1024)
    second = (
        openai_usage(2100, 5, cached=2048)
        if second_reports
        else {"prompt_tokens": 2100, "completion_tokens": 5}
    )
    wired.reply(tool_calls=[{"id": "c1", "name": "count", "arguments": {}}], usage=first)
    wired.reply("Four.", usage=second)
    data = as_json(run("turn", "send", "count", "-T", "count", "--json"))
    assert (data["reply"], len(data["steps"])) == ("Four.", 2)
    price = price_for("gpt-4o", {})
    assert price is not None and price.cache_read is not None
    usage = data["usage"]
    assert (usage["prompt_tokens"], usage["completion_tokens"]) == (4100, 15)
    if second_reports:
        assert usage["cached_tokens"] == 3072
        cost = cache_aware(price, 2000, 10, 1024) + cache_aware(price, 2100, 5, 2048)
        assert data["cache_saved"] == pytest.approx(3072 * (price.prompt - price.cache_read) / 1e6)
    else:
        # One request said nothing of its cache: the turn's cached count is not known,
        # but the request that said keeps its discount in the cost.
        assert (usage["cached_tokens"], data["cache_saved"]) == (None, None)
        cost = cache_aware(price, 2000, 10, 1024) + cache_aware(price, 2100, 5, 0)
    assert data["cost"] == pytest.approx(cost)
    account = as_json(run("--json", "session", "show"))["cost"]["by_model"]["gpt-4o"]
    assert account["requests"] == 2
    assert account.get("cached_tokens") == usage["cached_tokens"]
