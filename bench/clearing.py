"""Prompt tokens saved by clearing old tool results in the view (a slot's clear_tool_results).

Usage: python bench/clearing.py [--turns 100] [--json]
A tool-heavy replay (agctl.turn.transcripts.replay, offline provider): each turn the model
reads two files (two tool calls answered in process with ~8 KB each, ~2,000 tokens) and
then answers, so each turn is two requests. It runs twice on fresh stores: with the
slot's clear_tool_results set (keep the last 3 results, trigger at 32,000 tokens, a
quarter of a 128k window, clear at least 8,192 tokens at once) and without it, the
reference. Prompt tokens are the offline provider's counts summed over every request (the
session's cost). The stored messages of both runs are compared: the same but their time
stamps and each reply's usage (its prompt count is the smaller one clearing sent).
Deterministic: the same tree gives the same table. Never part of the test suite's pass/fail.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from timing import row

from agctl.context.models import ToolCall
from agctl.providers.offline import OfflineProvider, ScriptedReply
from agctl.storage.memory import MemoryBackend
from agctl.store import Store
from agctl.turn.send import TurnOptions
from agctl.turn.steps import CallRecord
from agctl.turn.transcripts import TranscriptTurn
from agctl.turn.transcripts import replay as run_replay

SETTING = {"keep_last": 3, "trigger": 32_000, "min_tokens": 8192}
RESULT_BYTES = 8000
TARGET = 0.70  # the issue's: at least 70 % fewer prompt tokens


class Files:
    """`read`, answered in process: a file's text of RESULT_BYTES, different for each call."""

    def definitions(self) -> list[dict[str, Any]]:
        schema = {"type": "object", "properties": {"path": {"type": "string"}}}
        return [{"type": "function", "function": {"name": "read", "parameters": schema}}]

    def begin_turn(self) -> None:
        pass

    def run(self, call: ToolCall) -> tuple[str, CallRecord]:
        path = json.loads(call.function.arguments)["path"]
        line = f"{path}: def handler(request): return respond(request.id, status=200)\n"
        text = (line * (RESULT_BYTES // len(line) + 1))[:RESULT_BYTES]
        return text, CallRecord(call.id, call.function.name, call.function.arguments)


def script(turns: int) -> list[Any]:
    """Each turn: one step reading two files, then the answer."""
    return [
        [
            ScriptedReply(
                tool_calls=[
                    {
                        "id": f"t{n}-{i}",
                        "name": "read",
                        "arguments": f'{{"path": "src/m{n}_{i}.py"}}',
                    }
                    for i in range(2)
                ]
            ),
            ScriptedReply(content=f"Module {n} answers every request with status 200."),
        ]
        for n in range(turns)
    ]


def run(turns: int, setting: dict[str, Any] | None) -> tuple[int, int, list[dict[str, Any]]]:
    """One replay: its prompt tokens, its requests, and the stored messages (time stamps
    and usage left out)."""
    store = Store(backend=MemoryBackend())
    store.create_session("s", system_prompt="You review code; read files with the tool.")
    if setting is not None:
        store.configure_slot("s", None, {"clear_tool_results": setting})
    options = TurnOptions(
        model="offline", checkpoint=False, window=100_000_000, auto_compress=False, tools=Files()
    )
    prompts = [TranscriptTurn(input=f"What does module {n} do?") for n in range(turns)]
    summary = run_replay(store, "s", prompts, OfflineProvider(script(turns)), options)
    assert summary.sent == turns, summary
    cost = store.load_session("s").cost
    requests = sum(model.requests for model in cost.by_model.values())
    slot = store.load_slot("s", None)
    stored = [m.model_dump(mode="json", exclude={"created_at", "usage"}) for m in slot.messages]
    return cost.prompt_tokens, requests, stored


def measure(turns: int = 100) -> dict[str, Any]:
    cleared, requests, stored_on = run(turns, SETTING)
    whole, _, stored_off = run(turns, None)

    def digest(stored: list[dict[str, Any]]) -> str:
        return hashlib.sha256(json.dumps(stored, sort_keys=True).encode()).hexdigest()

    return {
        "turns": turns,
        "requests": requests,
        "setting": SETTING,
        "prompt_tokens_cleared": cleared,
        "prompt_tokens_whole": whole,
        "saved_share": 1 - cleared / whole,
        "stored_identical": stored_on == stored_off,
        "stored_sha256": [digest(stored_on), digest(stored_off)],
    }


def rows(result: dict[str, Any]) -> list[dict[str, Any]]:
    turns, share = result["turns"], result["saved_share"]
    return [
        row(
            f"tool-result clearing, {turns} tool turns: prompt tokens",
            result["prompt_tokens_cleared"] / 1e6,
            "M tokens",
            f"not cleared {result['prompt_tokens_whole'] / 1e6:.2f}M",
            result["prompt_tokens_cleared"] / result["prompt_tokens_whole"],
            f">= {TARGET:.0%} fewer",
            share >= TARGET,
        ),
        row(
            "  stored messages the same as not cleared",
            len(set(result["stored_sha256"])),
            "digests",
            f"sha256 {result['stored_sha256'][0][:12]}",
            None,
            "identical",
            result["stored_identical"],
        ),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--turns", type=int, default=100)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = measure(args.turns)
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(
        f"{args.turns} turns, {result['requests']} requests: prompt tokens "
        f"{result['prompt_tokens_cleared']:,} cleared, {result['prompt_tokens_whole']:,} "
        f"not ({result['saved_share']:.1%} fewer); stored messages identical: "
        f"{result['stored_identical']}"
    )


if __name__ == "__main__":
    main()
