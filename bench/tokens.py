"""Token estimation throughput on 10 MB of mixed-script text.

Usage: python bench/tokens.py [--mb 10] [--runs 7] [--json]
Never part of the test suite's pass/fail.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from agctl.context.models import Message
from agctl.context.tokens import estimate_text

SAMPLES = [
    "The quick brown fox jumps over the lazy dog while the committee reviews the budget. ",
    "def estimate(text: str) -> int:\n    return len(text.encode()) // 4\n",
    "上下文管理是大模型应用的核心问题，需要在预算内保留最重要的信息。",
    "コンテキストウィンドウを超えないように、古いメッセージを要約します。",
    "Контекстное окно модели ограничено, поэтому старые сообщения сжимаются. ",
    "Mixed: 用户 asked about the 合同 (contract) — 答复 pending. ",
]


def corpus(megabytes: float) -> str:
    unit = "".join(SAMPLES)
    repeats = int(megabytes * 1_000_000 / len(unit.encode())) + 1
    return unit * repeats


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--mb", type=float, default=10.0)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    text = corpus(args.mb)
    size = len(text.encode())
    samples = []
    for _ in range(args.runs):
        start = time.perf_counter()
        tokens = estimate_text(text)
        samples.append(time.perf_counter() - start)
    whole = statistics.median(samples)
    messages = [Message(role="user", content=text[i : i + 2000]) for i in range(0, len(text), 2000)]
    start = time.perf_counter()
    per_message = sum(m.token_count() for m in messages)
    split = time.perf_counter() - start
    result = {
        "megabytes": size / 1e6,
        "tokens": tokens,
        "seconds_one_string": whole,
        "mb_per_second_one_string": size / 1e6 / whole,
        "messages": len(messages),
        "tokens_in_messages": per_message,
        "seconds_in_messages": split,
        "mb_per_second_in_messages": size / 1e6 / split,
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"{size / 1e6:.1f} MB mixed text, {tokens} tokens estimated")
    rate = result["mb_per_second_one_string"]
    print(f"  one string:              {whole * 1000:8.1f} ms  {rate:8.0f} MB/s")
    print(
        f"  {len(messages)} messages of 2 KB: {split * 1000:8.1f} ms  "
        f"{result['mb_per_second_in_messages']:8.0f} MB/s"
    )


if __name__ == "__main__":
    main()
