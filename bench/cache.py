"""How much of what agctl sends a provider's prefix cache would serve, and what that saves.

Usage: python bench/cache.py [--turns 200] [--rule openai|deepseek] [--strides 1,4,8,16]
                             [--input-price 2.00] [--output-price 8.00] [--json]
A realistic conversation (a ~1,000-token system prompt and a ~1,000-token immutable zone,
then ~300-token user messages each answered by a ~300-token reply) is replayed through
agctl's own command line, in process, against the fake OpenAI server on 127.0.0.1 in its
prefix-cache mode (tests/cachesim.py: OpenAI's or DeepSeek's documented rule, o200k
tokens), one fresh cache per scenario: full mode; a fork (ckpt fork) at the middle turn,
continued as long, and a slot derived at the last turn; focused (--recent 20; once per
--strides value when `slot mode` takes --stride, else as it slides today); full mode with
`ctx compress` every 50 turns (its summary requests counted too); full mode with memory in
context and a `memory set` every 50 turns (shown, no target).
Each scenario's share of input tokens served from cache and its cache-aware cost (cached
input at 0.1x the input price; assumed prices, $ per million tokens: input 2.00, output
8.00) are printed beside the same run with caching ignored, and next to the issue's
targets. A branch's first request is measured against its parent's prefix: that request
without its new user message. Deterministic: the same tree gives the same table.
Never part of the test suite's pass/fail.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from cachesim import Hit, PrefixCache, Rule, segments
from click.testing import CliRunner
from fake_openai import FakeOpenAI
from timing import row

from agctl.cli import cli

CACHED_PRICE = 0.1  # cached input, as a share of the input price
PRICES = (2.00, 8.00)  # assumed $ per million tokens, input and output
RECENT = 20  # focused mode's window
EVERY = 50  # turns between two compressions (and two memory changes)
STRIDES = (1, 4, 8, 16)
VOCABULARY = (
    "the a of to and in is that for it on with as this be by are from at or an was which "
    "function value request cache token prefix model reply session slot message context "
    "budget window summary compress checkpoint fork branch memory config store write read "
    "file path error test build deploy server client latency cost price input output "
    "because however therefore although while since unless until whether either neither "
    "report table figure measure count share rate average median change review plan "
    "customer contract invoice payment schedule meeting decision question answer reason "
    "python json schema field list dict string number integer float boolean null object "
    "first second third next last early late before after during between among within"
)
WORDS = VOCABULARY.split()


@dataclass
class Scenario:
    """One replay's requests, as the simulated cache served them."""

    name: str
    hits: list[Hit]
    target: float | None  # the share of input tokens to reach, None: shown only
    note: str = ""
    of: int | None = None  # what the share is of (default: every input token)

    @property
    def prompt(self) -> int:
        return sum(hit.prompt_tokens for hit in self.hits)

    @property
    def cached(self) -> int:
        return sum(hit.cached for hit in self.hits)

    @property
    def completion(self) -> int:
        return sum(hit.completion for hit in self.hits)

    def share(self) -> float:
        """Cached over input tokens; over `of` (at most all of it) when given."""
        if self.of is None:
            return self.cached / self.prompt if self.prompt else 0.0
        return min(self.cached, self.of) / self.of if self.of else 0.0

    def cost(self, prices: tuple[float, float], *, cache: bool) -> float:
        """Dollars for the whole run; prices are per million tokens (input, output)."""
        inputs, outputs = prices
        billed = self.prompt - self.cached * (1 - CACHED_PRICE) if cache else self.prompt
        return (billed * inputs + self.completion * outputs) / 1e6


def text(rng: random.Random, words: int = 275) -> str:
    """About 300 o200k tokens of plausible prose (numbers make each message differ)."""
    out = []
    for i in range(words):
        out.append(str(rng.randrange(10_000)) if i % 23 == 7 else rng.choice(WORDS))
    return " ".join(out).capitalize() + "."


class Agctl:
    """agctl's command line, run in this process against one simulated provider."""

    def __init__(self, data_dir: Path, server: FakeOpenAI) -> None:
        config = data_dir / "config.json"
        # A window no replay here fills, so only the scenario's own compressions happen.
        config.write_text(json.dumps({"context_windows": {"bench-model": 100_000_000}}))
        self.env = {
            "AGCTL_DATA_DIR": str(data_dir),
            "AGCTL_CONFIG": str(config),
            "AGCTL_PROVIDER": "openai",
            "AGCTL_BASE_URL": server.base_url,
            "AGCTL_MODEL": "bench-model",
            "AGCTL_API_KEY": "bench-key",
            "AGCTL_SESSION": "",
            "AGCTL_JSON": "",
            "NO_COLOR": "1",
        }
        self.runner = CliRunner()

    def __call__(self, *args: str) -> str:
        done = self.runner.invoke(cli, list(args), env=self.env, catch_exceptions=False)
        if done.exit_code:
            raise RuntimeError(f"agctl {' '.join(args)} exited {done.exit_code}: {done.output}")
        return done.output

    def json(self, *args: str) -> Any:
        return json.loads(self(*args, "--json"))


def stride_supported(agctl: Agctl) -> bool:
    """Whether this agctl's focused mode moves in strides (`slot mode --stride K`)."""
    return "--stride" in agctl("slot", "mode", "--help")


@contextlib.contextmanager
def provider(rule: Rule) -> Iterator[tuple[Agctl, FakeOpenAI, PrefixCache]]:
    """A fresh simulated cache behind a fake server, and agctl pointed at it."""
    with tempfile.TemporaryDirectory() as tmp, FakeOpenAI(cache=rule) as server:
        assert server.cache is not None
        yield Agctl(Path(tmp), server), server, server.cache


def start(agctl: Agctl, session: str, seed: int) -> random.Random:
    """A session with its system prompt and a static slot holding the immutable zone."""
    rng = random.Random(seed)
    system = "You are the assistant of a small engineering team. " + text(rng, 910)
    agctl("session", "new", session, "--system", system)
    agctl("session", "use", session)
    preset = [
        {"role": "user", "content": "Project brief, keep it in mind: " + text(rng, 455)},
        {"role": "assistant", "content": "Understood. " + text(rng, 455)},
    ]
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as handle:
        json.dump(preset, handle)
    try:
        agctl("slot", "new", "work", "--static", handle.name, "--use")
    finally:
        Path(handle.name).unlink()
    return rng


def talk(
    agctl: Agctl,
    rng: random.Random,
    turns: int,
    every: int = 0,
    between: Callable[[int], object] | None = None,
) -> None:
    """`turns` turns of fresh text; `between(turn)` after every `every`-th but the last."""
    for turn in range(1, turns + 1):
        agctl("turn", "send", text(rng), "--no-stream")
        if every and between is not None and turn % every == 0 and turn < turns:
            between(turn)


def full_and_fork(rule: Rule, turns: int) -> list[Scenario]:
    """Full mode for `turns` turns, then a fork from the middle turn continued as long."""
    middle = turns // 2
    with provider(rule) as (agctl, server, cache):
        rng = start(agctl, "full", 1)
        talk(agctl, rng, middle)
        point = agctl.json("ckpt", "create", "--label", "fork point")["id"]
        talk(agctl, rng, turns - middle)
        full = Scenario(f"full mode, {turns} turns", list(cache.served), 0.95)
        agctl("ckpt", "fork", point, "--id", "fork")
        before = len(cache.served)
        rng = random.Random(2)
        fork_first = first_request(agctl, server, cache, rng, f"fork at turn {middle}")
        talk(agctl, rng, turns - middle - 1)
        forked = cache.served[before:]
        fork = Scenario(f"fork at turn {middle}, {len(forked)} turns on", forked, None)
        agctl("session", "use", "full")
        agctl("slot", "derive", "side", "--from", "work", "--use")
        derived = first_request(agctl, server, cache, rng, f"derived slot at turn {turns}")
    return [full, fork_first, fork, derived]


def first_request(
    agctl: Agctl, server: FakeOpenAI, cache: PrefixCache, rng: random.Random, name: str
) -> Scenario:
    """One turn on a new branch, as a share of the prefix it shares with its parent: its
    request without the new user message."""
    talk(agctl, rng, 1)
    first = cache.served[-1]
    prefix = first.prompt_tokens - len(cache.tokens(segments(server.requests[-1].body)[-1]))
    note = f"{first.cached:,} cached of the parent's {prefix:,}-token prefix"
    return Scenario(f"{name}: its first request", [first], 0.95, note=note, of=prefix)


def focused(rule: Rule, turns: int, stride: int | None, supported: bool) -> Scenario:
    with provider(rule) as (agctl, _, cache):
        rng = start(agctl, "focused", 1)
        mode = ["slot", "mode", "focused", "--recent", str(RECENT)]
        if stride is not None:
            mode += ["--stride", str(stride)]
        agctl(*mode)
        talk(agctl, rng, turns)
        how = f"stride {stride}" if stride is not None else "default stride"
        if not supported:
            how = "slides every turn"
        return Scenario(f"focused (N={RECENT}, {how}), {turns} turns", list(cache.served), 0.80)


def compressed(rule: Rule, turns: int) -> Scenario:
    with provider(rule) as (agctl, server, cache):
        rng = start(agctl, "compress", 1)

        def compress(turn: int) -> None:
            # The summary a model would write: short, not the echo of the whole transcript.
            server.reply(f"Summary of the first {turn} turns: " + text(rng, 370))
            agctl("ctx", "compress")

        talk(agctl, rng, turns, EVERY, compress)
        summaries = len(cache.served) - turns
        return Scenario(
            f"full, ctx compress every {EVERY} turns",
            list(cache.served),
            0.85,
            note=f"summary requests counted: {summaries}",
        )


def memory(rule: Rule, turns: int) -> Scenario:
    with provider(rule) as (agctl, _, cache):
        rng = start(agctl, "memory", 1)
        agctl("session", "set", "memory_in_context", "true")
        agctl("memory", "set", "owner", "the platform team")

        def remember(turn: int) -> None:
            agctl("memory", "set", f"fact-{turn}", f"decided at turn {turn}")

        talk(agctl, rng, turns, EVERY, remember)
        return Scenario(f"full, memory set every {EVERY} turns", list(cache.served), None)


def measure(
    rule: Rule = "openai", turns: int = 200, strides: Sequence[int] | None = None
) -> dict[str, Any]:
    """Every scenario; `strides` None: the focused default only (no --stride)."""
    with provider(rule) as (agctl, _, _):
        supported = stride_supported(agctl)
    scenarios = full_and_fork(rule, turns)
    if supported and strides:
        scenarios += [focused(rule, turns, stride, supported) for stride in strides]
    else:
        scenarios.append(focused(rule, turns, None, supported))
    scenarios += [compressed(rule, turns), memory(rule, turns)]
    return {"rule": rule, "turns": turns, "stride_supported": supported, "scenarios": scenarios}


def rows(result: dict[str, Any], prices: tuple[float, float] = PRICES) -> list[dict[str, Any]]:
    """The scenarios as lines of bench/run.py's table (the openai rule, the prices above)."""
    out = []
    for scenario in result["scenarios"]:
        share = scenario.share()
        with_cache = scenario.cost(prices, cache=True)
        without = scenario.cost(prices, cache=False)
        target, note = scenario.target, scenario.note
        out.append(
            row(
                f"cache: {scenario.name}",
                share * 100,
                "% cached",
                "; ".join(
                    filter(None, [f"${with_cache:.2f} vs ${without:.2f} ignoring the cache", note])
                ),
                with_cache / without if without else None,
                f">= {target:.0%}" if target is not None else "(shown)",
                share >= target if target is not None else None,
            )
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--rule", choices=["openai", "deepseek"], default="openai")
    parser.add_argument(
        "--strides",
        default=",".join(map(str, STRIDES)),
        help="focused mode's strides to compare, when `slot mode` takes --stride",
    )
    parser.add_argument("--input-price", type=float, default=PRICES[0], help="$ per M tokens")
    parser.add_argument("--output-price", type=float, default=PRICES[1], help="$ per M tokens")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    strides = [int(s) for s in args.strides.split(",") if s]
    prices = (args.input_price, args.output_price)
    result = measure(args.rule, args.turns, strides)
    table = []
    for scenario in result["scenarios"]:
        table.append(
            {
                "scenario": scenario.name,
                "requests": len(scenario.hits),
                "input_tokens": scenario.prompt,
                "cached_tokens": scenario.cached,
                "output_tokens": scenario.completion,
                "cached_share": scenario.share(),
                "cost": scenario.cost(prices, cache=True),
                "cost_caching_ignored": scenario.cost(prices, cache=False),
                "target": scenario.target,
                "met": None if scenario.target is None else scenario.share() >= scenario.target,
                "note": scenario.note,
            }
        )
    if args.json:
        print(json.dumps({**result, "prices": prices, "scenarios": table}, indent=2))
        return
    inputs, outputs = prices
    print(
        f"rule: {args.rule}; prices per million tokens: input ${inputs:.2f}, cached input "
        f"${inputs * CACHED_PRICE:.2f} ({CACHED_PRICE}x), output ${outputs:.2f}"
    )
    if not result["stride_supported"]:
        print("slot mode has no --stride here: focused mode is measured as it slides today")
    print(
        f"{'scenario':52} {'input tok':>10} {'cached':>7} {'ignored':>7} {'target':>7} met  "
        f"{'cost':>8} {'ignored':>8}  note"
    )
    for line in table:
        target = f">={line['target']:.0%}" if line["target"] is not None else "-"
        met = {True: "yes", False: "NO", None: "-"}[line["met"]]
        print(
            f"{line['scenario']:52} {line['input_tokens']:>10,} {line['cached_share']:>7.1%} "
            f"{0:>7.1%} {target:>7} {met:4} ${line['cost']:>7.2f} "
            f"${line['cost_caching_ignored']:>7.2f}  {line['note']}"
        )


if __name__ == "__main__":
    main()
