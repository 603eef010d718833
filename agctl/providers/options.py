"""Model options beyond temperature and max tokens (`turn send -o KEY VALUE`): which keys
each wire accepts and of which JSON type, and how the values typed become a request's.

Each wire declares its keys (`OpenAIWire.options`, `AnthropicWire.options`,
`GeminiWire.options`, from the tables here); the offline and replay providers send
nothing anywhere and take any key a wire takes, so a turn recorded on any wire replays.
A VALUE is JSON when it parses (numbers, true, lists, objects, quoted strings), else the
text typed. A request carries its options sorted by key (ChatRequest.options), so the
same options send the same bytes whatever order they were typed in, and a request
without any sends exactly what it sent before options existed.

Standard library and orjson only.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from agctl.base.errors import UsageError

# A key's JSON type, as the wire's reference names it.
STRING, INTEGER, NUMBER, BOOLEAN, OBJECT = "string", "integer", "number", "boolean", "object"
STRINGS = "array of strings"
STRING_OR_STRINGS = "string or array of strings"

# Chat completions (OpenAI's reference), and the sampling keys most OpenAI-compatible
# servers add (vLLM, llama.cpp, Ollama, OpenRouter: top_k, min_p, repetition_penalty).
# Left out: n (agctl reads one choice) and response_format (a schema is its own option).
OPENAI_OPTIONS: dict[str, str] = {
    "frequency_penalty": NUMBER,
    "logit_bias": OBJECT,
    "logprobs": BOOLEAN,
    "metadata": OBJECT,
    "min_p": NUMBER,
    "presence_penalty": NUMBER,
    "reasoning_effort": STRING,
    "repetition_penalty": NUMBER,
    "safety_identifier": STRING,
    "seed": INTEGER,
    "service_tier": STRING,
    "stop": STRING_OR_STRINGS,
    "store": BOOLEAN,
    "top_k": INTEGER,
    "top_logprobs": INTEGER,
    "top_p": NUMBER,
    "user": STRING,
    "verbosity": STRING,
}

# The Messages API's request fields agctl does not set itself.
ANTHROPIC_OPTIONS: dict[str, str] = {
    "metadata": OBJECT,
    "service_tier": STRING,
    "stop_sequences": STRINGS,
    "top_k": INTEGER,
    "top_p": NUMBER,
}

# Gemini's generationConfig fields agctl does not set itself (sent inside it). Left out:
# candidateCount (agctl reads one candidate) and responseMimeType/responseSchema (a
# schema is its own option).
GEMINI_OPTIONS: dict[str, str] = {
    "frequencyPenalty": NUMBER,
    "logprobs": INTEGER,
    "presencePenalty": NUMBER,
    "responseLogprobs": BOOLEAN,
    "seed": INTEGER,
    "stopSequences": STRINGS,
    "topK": INTEGER,
    "topP": NUMBER,
}

WIRE_OPTIONS: dict[str, dict[str, str]] = {
    "openai": OPENAI_OPTIONS,
    "anthropic": ANTHROPIC_OPTIONS,
    "gemini": GEMINI_OPTIONS,
}

# Keys agctl sets itself on some wire, and the option (or setting) that sets them.
SET_BY_AGCTL: dict[str, str] = {
    "model": "--model",
    "messages": "the session and PROMPT",
    "contents": "the session and PROMPT",
    "system": "--system (or the session's system prompt)",
    "systemInstruction": "--system (or the session's system prompt)",
    "temperature": "--temperature",
    "max_tokens": "--max-tokens",
    "max_completion_tokens": "--max-tokens",
    "maxOutputTokens": "--max-tokens",
    "tools": "-T/--tool",
    "tool_choice": "--tool-choice",
    "toolConfig": "--tool-choice",
    "parallel_tool_calls": "the tools offered (-T/--tool)",
    "stream": "--stream",
    "stream_options": "--stream",
    "prompt_cache_key": "the profile's prompt_cache_key",
    "thinking": "the profile's thinking_budget",
    "thinkingConfig": "the profile's thinking_budget",
    "generationConfig": "-o with its fields, one at a time",
}


def option_value(text: str) -> Any:
    """A VALUE typed on a command line: JSON when it parses, else the text itself."""
    import orjson

    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return text


def typed_options(pairs: Iterable[tuple[str, str]]) -> dict[str, Any]:
    """The KEY VALUE pairs of a command line as options (see option_value), each checked
    against every wire's (the wire of the turn is known only once it is planned, and
    checks again then): a key no wire takes, a value no wire takes for it, a key agctl
    sets or a key given twice (which value was meant cannot be known) is a UsageError
    before the command does anything."""
    options: dict[str, Any] = {}
    for key, text in pairs:
        if key in options:
            raise UsageError(f"model option {key!r} is given twice: give it once")
        options[key] = option_value(text)
    checked_options(options, None)
    return options


def accepted_options(provider: str | None) -> dict[str, tuple[str, ...]]:
    """The keys a provider's requests may carry, each with the JSON types it may take: its
    wire's; for the offline and replay providers (no wire) and for None (any wire), every
    wire's."""
    tables = [WIRE_OPTIONS[provider]] if provider in WIRE_OPTIONS else WIRE_OPTIONS.values()
    accepted: dict[str, tuple[str, ...]] = {}
    for table in tables:
        for key, kind in table.items():
            if kind not in accepted.get(key, ()):
                accepted[key] = (*accepted.get(key, ()), kind)
    return accepted


def json_type(value: Any) -> str:
    """The JSON type of a parsed value, as the tables above name types."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return BOOLEAN
    if isinstance(value, int):
        return INTEGER
    if isinstance(value, float):
        return NUMBER
    if isinstance(value, str):
        return STRING
    if isinstance(value, list):
        return STRINGS if all(isinstance(item, str) for item in value) else "array"
    return OBJECT


def plain_json(value: Any, depth: int = 0) -> bool:
    """Whether `value` is plain JSON the body can carry as it is: null, booleans, strings,
    whole numbers of 64 bits, finite numbers, and lists and string-keyed objects of them,
    not nested deeper than 64 (a template's YAML may hold dates, sets, 2**70 or .inf)."""
    import math

    if value is None or isinstance(value, (bool, str)):
        return True
    if isinstance(value, int):
        return -(2**63) <= value < 2**64
    if isinstance(value, float):
        return math.isfinite(value)
    if depth >= 64:
        return False
    if isinstance(value, list):
        return all(plain_json(item, depth + 1) for item in value)
    if isinstance(value, dict):
        return all(
            isinstance(key, str) and plain_json(item, depth + 1) for key, item in value.items()
        )
    return False


def _fits(value: Any, kind: str) -> bool:
    found = json_type(value)
    if kind == NUMBER:
        return found in (NUMBER, INTEGER)
    if kind == STRING_OR_STRINGS:
        return found in (STRING, STRINGS)
    return found == kind


def checked_options(
    options: Mapping[str, Any], provider: str | None
) -> tuple[tuple[str, Any], ...]:
    """`options` as a request carries them, sorted by key, each checked against what the
    provider's wire accepts (None: any wire): a key agctl sets, an unknown key or a value
    of the wrong type is a UsageError naming the key and what the wire accepts."""
    accepted = accepted_options(provider)
    if provider is None:
        who = "no wire"
    else:
        who = f"the {provider} wire" if provider in WIRE_OPTIONS else f"the {provider} provider"
    for key, value in options.items():
        if key in SET_BY_AGCTL:
            raise UsageError(f"model option {key!r} is set by agctl: use {SET_BY_AGCTL[key]}")
        if key not in accepted:
            raise UsageError(
                f"{who} accepts {'a' if provider is None else 'no'} model option {key!r}",
                hint=("the wires accept: " if provider is None else "it accepts: ")
                + ", ".join(sorted(accepted)),
            )
        if not plain_json(value):
            raise UsageError(
                f"model option {key!r} is not plain JSON (a number out of range, not finite, "
                "nested too deep, or a value JSON has no type for)"
            )
        kinds = accepted[key]
        if not any(_fits(value, kind) for kind in kinds):
            wanted = " or ".join(_article(kind) for kind in kinds)
            raise UsageError(
                f"model option {key!r} takes {wanted}, not "
                + ("null" if value is None else f"{_article(json_type(value))} ({_shown(value)})"),
                hint="a VALUE is JSON when it parses, else text: quote a string that looks "
                "like JSON ('\"42\"')",
            )
    return tuple(sorted(options.items()))


def _article(kind: str) -> str:
    return ("an " if kind[0] in "aeiou" else "a ") + kind


def _shown(value: Any, limit: int = 60) -> str:
    """A value as JSON, cut short, for an error message."""
    import orjson

    text = orjson.dumps(value).decode()
    return text if len(text) <= limit else text[: limit - 1] + "…"
