"""Identifier rules shared by sessions, slots and (later) checkpoints."""

from __future__ import annotations

import re
import secrets
import time

from agctl.base.errors import AmbiguousId, InvalidId, NotFound

MAX_ID_LENGTH = 128
_ID_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")
# Crockford's base32, lower case: no i, l, o or u to misread (session and checkpoint ids).
BASE32_ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz"


def validate_id(value: str, kind: str = "id") -> str:
    """Return `value` if it is safe as a file name on every platform, else raise InvalidId."""
    if not isinstance(value, str) or not value:
        raise InvalidId(f"{kind} id must not be empty")
    if len(value) > MAX_ID_LENGTH:
        raise InvalidId(f"{kind} id is {len(value)} characters long; at most {MAX_ID_LENGTH}")
    if ".." in value:
        raise InvalidId(f"{kind} id {value!r} must not contain '..'")
    if not _ID_RE.fullmatch(value):
        raise InvalidId(
            f"{kind} id {value!r} is not valid: use letters, digits, '-', '_' and '.', "
            "not starting with '.' or '-'"
        )
    return value


def new_session_id(now: float | None = None) -> str:
    """A 10-character id: 7 characters of Unix seconds (sorts by time) and 3 random ones."""
    seconds = int(time.time() if now is None else now)
    stamp = ""
    for _ in range(7):
        seconds, digit = divmod(seconds, 32)
        stamp = BASE32_ALPHABET[digit] + stamp
    return stamp + "".join(secrets.choice(BASE32_ALPHABET) for _ in range(3))


def resolve_prefix(kind: str, prefix: str, candidates: list[str]) -> str:
    """Resolve a unique prefix among `candidates`; an exact match always wins."""
    validate_id(prefix, kind)
    if prefix in candidates:
        return prefix
    matches = sorted(c for c in candidates if c.startswith(prefix))
    if not matches:
        raise NotFound(f"no {kind} matches {prefix!r}")
    if len(matches) > 1:
        raise AmbiguousId(kind, prefix, matches)
    return matches[0]
