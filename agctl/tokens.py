"""Fast, script-aware token estimates (CJK about a token a character, Latin about four)."""

from __future__ import annotations

from typing import Any

MESSAGE_OVERHEAD = 4


def estimate_text(text: str) -> int:
    """Estimate tokens from UTF-8 width: ASCII counts 1/4, wider characters count 1.

    ASCII is one byte a character and CJK three, so the byte and character counts give
    the split without a per-character Python loop.
    """
    if not text:
        return 0
    chars = len(text)
    wide = (len(text.encode("utf-8", "surrogatepass")) - chars) // 2
    narrow = max(chars - wide, 0)
    return wide + (narrow + 3) // 4


def estimate_content(content: Any) -> int:
    if content is None:
        return 0
    if isinstance(content, str):
        return estimate_text(content)
    total = 0
    for part in content:
        if isinstance(part, dict):
            text = part.get("text")
            total += estimate_text(text) if isinstance(text, str) else 85
        else:
            total += estimate_text(str(part))
    return total


def estimate_tokens(text: str) -> int:
    """Public alias: tokens in a piece of text."""
    return estimate_text(text)
