"""Settings typed on a command line: text turned into the value a setting holds.

A command line gives every value as text; a setting holds JSON (true, 0.1, an object) or
nothing (its default). The rules live here once, for `session set` and `slot set`.
"""

from __future__ import annotations

from typing import Any

# Words that put a setting back to its default (None).
UNSET_WORDS = ("default", "auto", "none")
# Session settings that hold text: their value is taken as typed, never parsed as JSON
# (a title "42" stays text), except the words that unset them.
SESSION_TEXT_SETTINGS = ("title", "system_prompt", "profile", "model")
SESSION_TEXT_UNSET_WORDS = ("default", "none", "null")
# Slot settings that hold text, taken as typed in the same way.
SLOT_TEXT_SETTINGS = ("summary_template",)


def setting_from_text(text: str) -> Any:
    """JSON when it parses ('true', '0.1', '{"reserve": 0.1}'); 'default', 'auto' and
    'none' mean unset; anything else is the text itself."""
    if text in UNSET_WORDS:
        return None
    import orjson

    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return text


def session_setting_from_text(key: str, text: str) -> Any:
    """The value of session setting `key` typed as `text`: a text setting keeps the text
    as it is unless it is 'default', 'none' or 'null'; the others follow
    `setting_from_text`."""
    if key in SESSION_TEXT_SETTINGS and text not in SESSION_TEXT_UNSET_WORDS:
        return text
    return setting_from_text(text)


def slot_setting_from_text(key: str, text: str) -> Any:
    """The value of slot setting `key` typed as `text`, by the rules of session settings."""
    if key in SLOT_TEXT_SETTINGS and text not in SESSION_TEXT_UNSET_WORDS:
        return text
    return setting_from_text(text)
