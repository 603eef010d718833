"""Which focused-mode stride keeps a provider's prefix cache warm for the least money.

Usage: python bench/stride.py [--turns 200] [--recent 20] [--strides 1,2,4,8,16,32] [--json]
Replays a conversation of ~300-token messages under a 2,000-token system prompt in
focused mode, building each turn's request with agctl's own view and serialisation, and
counts what a provider caching the longest serialised prefix it has seen (OpenAI's rule:
at least 1,024 tokens, in 128-token steps) would serve from cache. Prices: input 1, cached
input 0.1 (a tenth, as OpenAI, DeepSeek and Anthropic bill reads). For each stride: the
share of input tokens cached, the input tokens sent per turn, and the cost per turn,
beside stride 1 (the window sliding every turn). Never part of the test suite's pass/fail.
"""

from __future__ import annotations

import argparse
import hashlib
import json

import orjson

from agctl.context.models import FocusedConfig, Message, Session, Slot, SlotConfig
from agctl.context.view import request_messages

MESSAGE_WORDS = 172  # about 300 tokens by agctl's estimate
SYSTEM_WORDS = 900  # about 2,000 tokens
CACHED_PRICE = 0.1
MIN_CACHED, CACHE_STEP = 1_024, 128


def text(label: str, words: int) -> str:
    return " ".join(f"{label}{i % 97}" for i in range(words))


def cached_tokens(requests: list[dict[str, object]], tokens: list[int], seen: set[bytes]) -> int:
    """Tokens of the longest prefix of `requests` that an earlier request began with."""
    digest = hashlib.sha256()
    cached = total = 0
    for request, count in zip(requests, tokens, strict=True):
        digest.update(orjson.dumps(request))
        total += count
        key = digest.digest()
        if key in seen:
            cached = total
        seen.add(key)
    if cached < MIN_CACHED:
        return 0
    return cached - cached % CACHE_STEP


def replay(turns: int, recent: int, stride: int) -> dict[str, float]:
    session = Session(id="bench", system_prompt=text("system", SYSTEM_WORDS))
    slot = Slot(
        id="main",
        config=SlotConfig(
            mode="focused", focused=FocusedConfig(recent_messages=recent, stride=stride)
        ),
    )
    seen: set[bytes] = set()
    sent = cached = 0
    for turn in range(turns):
        prompt = Message(role="user", content=text(f"q{turn}-", MESSAGE_WORDS))
        view = request_messages(session, slot, user_input=prompt)
        counts = [m.token_count() for m in view.messages]
        sent += sum(counts)
        cached += cached_tokens(view.requests, counts, seen)
        slot.messages += [
            prompt,
            Message(role="assistant", content=text(f"a{turn}-", MESSAGE_WORDS)),
        ]
    cost = (sent - cached) + cached * CACHED_PRICE
    return {
        "stride": stride,
        "cached_share": cached / sent,
        "input_per_turn": sent / turns,
        "cost_per_turn": cost / turns,
        "cost_uncached_per_turn": sent / turns,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--recent", type=int, default=20)
    parser.add_argument("--strides", default="1,2,4,8,16,32")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rows = [replay(args.turns, args.recent, int(k)) for k in args.strides.split(",")]
    base = rows[0]["cost_per_turn"]
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    print(f"{args.turns} turns, focused --recent {args.recent}, cached input at {CACHED_PRICE}x")
    print(f"{'STRIDE':>6} {'CACHED':>7} {'INPUT/TURN':>11} {'COST/TURN':>10} {'VS FIRST':>9}")
    for row in rows:
        print(
            f"{row['stride']:>6} {row['cached_share']:>7.1%} {row['input_per_turn']:>11.0f} "
            f"{row['cost_per_turn']:>10.0f} {row['cost_per_turn'] / base:>9.2f}"
        )


if __name__ == "__main__":
    main()
