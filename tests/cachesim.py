"""A provider's prefix cache, simulated: how much of each request's prompt a real provider
would serve from its cache, and the usage fields it would send back.

Shared by the fake server (`FakeOpenAI(cache="openai")`) and bench/cache.py, which puts
tests/ on sys.path as the other benchmarks do: it is a double of the provider, not product.

The prompt is the request's tools (when any) then each message, each serialised as compact
JSON in the key order it came in and tokenised on its own (o200k_base, bpe-openai), so a
prefix of messages is a prefix of tokens, and any byte that moves changes tokens from the
message where it moved on.

Rules, as documented (stored copies read 2026-12):
- openai: a hit needs an exact prefix match with an earlier request of the same
  `prompt_cache_key` and model; prompts from 1,024 tokens are cached, hits come in
  128-token increments (OpenAI cookbook "Prompt Caching 201", §1.1). So: the longest common
  token prefix with any earlier prompt, 0 under 1,024, else rounded down to a multiple of
  128. Sent as `prompt_tokens_details.cached_tokens`.
- deepseek: the cache is made of prefix units; a request hits a unit only if it starts
  with the whole unit. Each request persists a unit ending at its user input (its whole
  prompt) and one at the end of the model's output (prompt + reply); a common prefix seen
  across requests is persisted as a unit too (DeepSeek API guide "Context Caching",
  rules 1 and 2). Units carved at fixed token intervals in long inputs (rule 3, interval
  unpublished) are not simulated. Sent as `prompt_cache_hit_tokens` +
  `prompt_cache_miss_tokens` = `prompt_tokens`, and `prompt_tokens_details.cached_tokens`.
Evictions and routing misses are not simulated: the figures are what a warm cache gives.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

Rule = Literal["openai", "deepseek"]
RULES: tuple[Rule, ...] = get_args(Rule)
MINIMUM = 1024  # openai: shorter prompts are never served from cache
STEP = 128  # openai: hits are counted in steps of this many tokens
ENCODING = "o200k_base"
_ROOT = b""


def segments(body: Mapping[str, Any]) -> list[str]:
    """The prompt's parts in the order the model reads them: tools, then each message."""
    parts = []
    if body.get("tools"):
        parts.append(_compact(body["tools"]))
    parts.extend(_compact(message) for message in body.get("messages") or ())
    return parts


def reply_message(text: str | None, tool_calls: Sequence[Mapping[str, Any]] = ()) -> dict[str, Any]:
    """The model's output as the next request carries it back (the assistant message)."""
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if tool_calls:
        message["tool_calls"] = list(tool_calls)
    return message


class Tokens:
    """A deterministic tokenizer that remembers each segment it has cut (the same system
    prompt and history come back on every turn)."""

    def __init__(self, encode: Callable[[str], list[int]] | None = None) -> None:
        self._encode = encode or _o200k()
        self._known: dict[str, tuple[int, ...]] = {}

    def __call__(self, text: str) -> tuple[int, ...]:
        known = self._known.get(text)
        if known is None:
            # bpe-openai refuses one input of a million characters or more.
            pieces = (text[i : i + 500_000] for i in range(0, len(text), 500_000))
            known = tuple(token for piece in pieces for token in self._encode(piece))
            self._known[text] = known
        return known


@dataclass
class Hit:
    """What one request was served from cache, before any rounding."""

    prompt_tokens: int
    matched: int  # tokens of the longest reusable prefix
    cached: int  # of those, what the rule counts as served from cache
    completion: int = 0  # tokens of the reply, once served


@dataclass
class _Partition:
    """What one cache (one key and model) has seen."""

    prefixes: set[bytes] = field(default_factory=set)  # chain digests of segment prefixes
    following: dict[bytes, set[tuple[int, ...]]] = field(default_factory=dict)
    units: set[bytes] = field(default_factory=set)  # deepseek: whole-segment units
    partial_units: dict[bytes, set[tuple[int, ...]]] = field(default_factory=dict)


class PrefixCache:
    """One provider's prefix cache; `serve` answers a request and then remembers it."""

    def __init__(self, rule: Rule, tokens: Tokens | None = None) -> None:
        if rule not in RULES:
            raise ValueError(f"unknown cache rule {rule!r}; expected one of {RULES}")
        self.rule = rule
        self.tokens = tokens or Tokens()
        self._partitions: dict[tuple[str, str | None], _Partition] = {}
        self._lock = threading.Lock()
        self.served: list[Hit] = []  # every request served, in order, with its reply's size

    def serve(
        self, body: Mapping[str, Any], reply: Mapping[str, Any], reasoning: str | None = None
    ) -> dict[str, Any]:
        """The usage a provider of this rule sends for `body` answered by `reply` (the
        assistant message) after `reasoning`; the cache then holds what this request left."""
        thought = len(self.tokens(reasoning)) if reasoning else 0
        completion = len(self.tokens(str(reply.get("content") or ""))) + thought
        if reply.get("tool_calls"):
            completion += len(self.tokens(_compact(reply["tool_calls"])))
        with self._lock:
            hit = self._look_up(body)
            self._remember(body, reply, hit)
            hit.completion = completion
            self.served.append(hit)
        return self.usage(hit, completion, thought)

    def look_up(self, body: Mapping[str, Any]) -> Hit:
        """What `body` would be served from cache now (nothing is remembered)."""
        with self._lock:
            return self._look_up(body)

    def usage(self, hit: Hit, completion: int, reasoning: int = 0) -> dict[str, Any]:
        """The usage object in this provider's shape."""
        usage: dict[str, Any] = {
            "prompt_tokens": hit.prompt_tokens,
            "completion_tokens": completion,
            "total_tokens": hit.prompt_tokens + completion,
        }
        if self.rule == "openai":
            usage["prompt_tokens_details"] = {"cached_tokens": hit.cached, "audio_tokens": 0}
            usage["completion_tokens_details"] = {
                "reasoning_tokens": reasoning,
                "audio_tokens": 0,
                "accepted_prediction_tokens": 0,
                "rejected_prediction_tokens": 0,
            }
        else:
            usage["prompt_tokens_details"] = {"cached_tokens": hit.cached}
            usage["prompt_cache_hit_tokens"] = hit.cached
            usage["prompt_cache_miss_tokens"] = hit.prompt_tokens - hit.cached
            usage["completion_tokens_details"] = {"reasoning_tokens": reasoning}
        return usage

    # The rules

    def _partition(self, body: Mapping[str, Any]) -> _Partition:
        key = body.get("prompt_cache_key") if self.rule == "openai" else None
        name = (str(body.get("model")), key if isinstance(key, str) else None)
        return self._partitions.setdefault(name, _Partition())

    def _look_up(self, body: Mapping[str, Any]) -> Hit:
        parts = [self.tokens(text) for text in segments(body)]
        chain = _chain(segments(body))
        total = sum(len(part) for part in parts)
        seen = self._partition(body)
        if self.rule == "openai":
            matched = _common_prefix(parts, chain, seen.prefixes, seen.following)
            cached = matched // STEP * STEP if matched >= MINIMUM else 0
            return Hit(total, matched, cached)
        matched, done = 0, 0
        for index, part in enumerate(parts):
            for unit in seen.partial_units.get(chain[index], ()):
                if part[: len(unit)] == unit:
                    matched = max(matched, done + len(unit))
            done += len(part)
            if chain[index + 1] in seen.units:
                matched = done
        return Hit(total, matched, matched)

    def _remember(self, body: Mapping[str, Any], reply: Mapping[str, Any], hit: Hit) -> None:
        texts = segments(body)
        parts = [self.tokens(text) for text in texts]
        chain = _chain(texts)
        seen = self._partition(body)
        if self.rule == "deepseek":
            # A prefix shared with an earlier request, beyond what was hit, becomes a unit.
            common = _common_prefix(parts, chain, seen.prefixes, seen.following)
            if seen.prefixes and common > hit.matched:
                self._add_unit(seen, parts, chain, common)
            seen.units.add(chain[-1])
            seen.units.add(_link(chain[-1], _compact(reply)))
        for index, part in enumerate(parts):
            seen.prefixes.add(chain[index])
            seen.following.setdefault(chain[index], set()).add(part)
        seen.prefixes.add(chain[-1])

    @staticmethod
    def _add_unit(
        seen: _Partition, parts: list[tuple[int, ...]], chain: list[bytes], length: int
    ) -> None:
        done = 0
        for index, part in enumerate(parts):
            if done + len(part) >= length:
                if done + len(part) == length:
                    seen.units.add(chain[index + 1])
                else:
                    seen.partial_units.setdefault(chain[index], set()).add(part[: length - done])
                return
            done += len(part)


def _common_prefix(
    parts: list[tuple[int, ...]],
    chain: list[bytes],
    prefixes: set[bytes],
    following: dict[bytes, set[tuple[int, ...]]],
) -> int:
    """Tokens of the longest prefix of `parts` that some remembered prompt starts with."""
    if not prefixes:
        return 0
    matched = 0
    for index, part in enumerate(parts):
        if chain[index + 1] in prefixes:
            matched += len(part)
            continue
        others = following.get(chain[index], ())
        return matched + max((_shared(part, other) for other in others), default=0)
    return matched


def _shared(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


def _chain(texts: Sequence[str]) -> list[bytes]:
    """Digest of each prefix of `texts`: [root, after 1 part, after 2 parts, ...]."""
    chain = [_ROOT]
    for text in texts:
        chain.append(_link(chain[-1], text))
    return chain


def _link(previous: bytes, text: str) -> bytes:
    return hashlib.blake2b(previous + text.encode(), digest_size=16).digest()


def _compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _o200k() -> Callable[[str], list[int]]:
    import bpe_openai

    encoding = bpe_openai.get_encoding(ENCODING)
    return encoding.encode  # type: ignore[no-any-return]
