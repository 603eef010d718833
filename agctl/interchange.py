"""Messages in and out of agctl: OpenAI chat arrays and JSON lines."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import orjson
from pydantic import ValidationError

from agctl.errors import InvalidInput
from agctl.models import Message, messages_to_openai

ImportFormat = Literal["auto", "openai", "jsonl"]
ExportFormat = Literal["openai", "jsonl"]


def _decode_lines(data: bytes, source: str) -> list[Any]:
    items = []
    for number, line in enumerate(data.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            items.append(orjson.loads(line))
        except orjson.JSONDecodeError as exc:
            raise InvalidInput(f"{source}: line {number} is not valid JSON: {exc}") from None
    return items


def parse_messages(data: bytes, fmt: ImportFormat = "auto", source: str = "input") -> list[Message]:
    """Validate every message in `data` before returning any; raise InvalidInput otherwise."""
    if not data.strip():
        raise InvalidInput(f"{source}: is empty (an empty JSON array, [], means no messages)")
    if fmt in ("auto", "openai"):
        try:
            decoded = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            if fmt == "openai":
                raise InvalidInput(f"{source}: not valid JSON: {exc}") from None
            decoded = None
        if isinstance(decoded, dict) and isinstance(decoded.get("messages"), list):
            decoded = decoded["messages"]
        if isinstance(decoded, list):
            items = decoded
        elif fmt == "openai":
            raise InvalidInput(f"{source}: expected a JSON array of messages")
        elif isinstance(decoded, dict):
            items = [decoded]
        else:
            items = _decode_lines(data, source)
    else:
        items = _decode_lines(data, source)
    messages = []
    for index, item in enumerate(items):
        if not isinstance(item, dict):
            raise InvalidInput(f"{source}: message {index} is not a JSON object")
        try:
            messages.append(Message.from_openai(item))
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            detail = f"{where}: {first['msg']}" if where else first["msg"]
            raise InvalidInput(f"{source}: message {index} is invalid: {detail}") from None
    return messages


def export_messages(messages: Sequence[Message], fmt: ExportFormat = "openai") -> bytes:
    """`openai`: a JSON array of chat messages; `jsonl`: one message a line, metadata kept."""
    if fmt == "openai":
        return orjson.dumps(messages_to_openai(messages), option=orjson.OPT_INDENT_2) + b"\n"
    return b"".join(m.model_dump_json().encode() + b"\n" for m in messages)
