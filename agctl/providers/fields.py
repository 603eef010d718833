"""Checking the fields of a provider's reply: every wire's parser reads JSON a server sent
through these, so a missing or mistyped field is a `Malformed` naming where it is, never a
KeyError or a TypeError."""

from __future__ import annotations

from typing import Any

MAX_TOKEN_COUNT = 2**63 - 1


class Malformed(Exception):
    """A field of a reply is missing or of the wrong type; the message says which."""


def kind_of(value: Any) -> str:
    """What a JSON value is, for a message: 'null', 'a string', 'an object', ..."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def an_object(value: Any, where: str, *, optional: bool = False) -> dict[str, Any]:
    """`value` when it is an object (None too, as {}, when `optional`)."""
    if value is None and optional:
        return {}
    if not isinstance(value, dict):
        raise Malformed(f"{where} is {kind_of(value)}, not an object")
    return value


def a_list(value: Any, where: str) -> list[Any]:
    """`value` when it is a list; None is an empty one."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise Malformed(f"{where} is {kind_of(value)}, not a list")
    return value


def a_string(obj: dict[str, Any], key: str, where: str) -> str | None:
    """`obj[key]` when it is a string, None when it is missing or null."""
    value = obj.get(key)
    if value is None or isinstance(value, str):
        return value
    raise Malformed(f"{where}.{key} is {kind_of(value)}, not a string")


def a_flag(obj: dict[str, Any], key: str, where: str) -> bool:
    """`obj[key]` when it is a boolean, False when it is missing or null."""
    value = obj.get(key)
    if value is None or isinstance(value, bool):
        return bool(value)
    raise Malformed(f"{where}.{key} is {kind_of(value)}, not a boolean")


def a_whole_number(value: Any, where: str, ceiling: int = MAX_TOKEN_COUNT) -> int:
    """`value` when it is a whole number from 0 to `ceiling`."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise Malformed(f"{where} is {kind_of(value)}, not a whole number")
    if not 0 <= value <= ceiling:
        raise Malformed(f"{where} is {value}, out of range (0 to {ceiling})")
    return value


def a_count(obj: dict[str, Any], key: str, where: str) -> int | None:
    """A token count `obj[key]`, None when not reported."""
    value = obj.get(key)
    return None if value is None else a_whole_number(value, f"{where}.{key}")
