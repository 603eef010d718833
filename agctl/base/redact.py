"""Secrets out of everything agctl shows or stores: masked URLs and redacted text.

One place knows what a secret looks like — the API key, the password of a URL's userinfo,
and the encodings a server may echo them in (URL-encoded, base64 as in Basic auth) — so
that errors, logs, replies, drafts and cassettes are all cleaned the same way.
Standard library only: the CLI's start-up path imports this module.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Mapping
from typing import NamedTuple
from urllib.parse import quote, quote_plus, unquote

MARK = "***"
# Shorter secrets are not secret, and removing them would mangle ordinary words in replies.
MIN_SECRET = 6
# Shortest run of base64 characters that stands for a secret at any alignment.
MIN_BASE64_CORE = 8


class Userinfo(NamedTuple):
    """The `user:password@` part of a URL, decoded; `start`/`end` delimit it (without '@')."""

    user: str
    password: str | None
    raw_password: str | None
    start: int
    end: int


def userinfo(url: str) -> Userinfo | None:
    """The userinfo of `url`, found without parsing it (so a broken URL is masked too)."""
    scheme_end = url.find("://")
    start = scheme_end + 3 if scheme_end >= 0 else 0
    authority_end = len(url)
    for stop in "/?#":
        found = url.find(stop, start)
        if found >= 0:
            authority_end = min(authority_end, found)
    at = url.rfind("@", start, authority_end)
    if at < 0:
        return None
    raw_user, sep, raw_password = url[start:at].partition(":")
    return Userinfo(
        user=unquote(raw_user),
        password=unquote(raw_password) if sep else None,
        raw_password=raw_password if sep else None,
        start=start,
        end=at,
    )


def mask_url(url: str | None) -> str | None:
    """`url` with its password masked (`http://user:****@host`), or a bare token masked."""
    if not url:
        return url
    info = userinfo(url)
    if info is None:
        return url
    user = url[info.start : info.end].partition(":")[0]
    shown = f"{user}:****" if info.password is not None else "****"
    return url[: info.start] + shown + url[info.end :]


def strip_userinfo(url: str) -> str:
    """`url` without its userinfo: what may be handed to a library that logs URLs."""
    info = userinfo(url)
    return url if info is None else url[: info.start] + url[info.end + 1 :]


def _base64_forms(data: bytes) -> set[str]:
    """Whole encodings, padded and not, in both alphabets."""
    forms = set()
    for encode in (base64.b64encode, base64.urlsafe_b64encode):
        text = encode(data).decode()
        forms |= {text, text.rstrip("=")}
    return forms


def _base64_cores(data: bytes) -> set[str]:
    """The base64 characters that depend on `data` alone, at each of the three alignments.

    Whatever comes before and after a secret (`user:` in Basic auth, say), its base64
    encoding contains one of these three runs.
    """
    cores = set()
    bits = 8 * len(data)
    for offset in range(3):
        first = -(-8 * offset // 6)
        last = (8 * offset + bits) // 6
        for encode in (base64.b64encode, base64.urlsafe_b64encode):
            text = encode(b"\0" * offset + data + b"\0\0").decode()
            core = text[first:last]
            if len(core) >= MIN_BASE64_CORE:
                cores.add(core)
    return cores


def _percent_forms(secret: str) -> set[str]:
    forms = {quote(secret, safe=""), quote(secret), quote_plus(secret)}
    lower = {re.sub(r"%[0-9A-F]{2}", lambda m: m.group(0).lower(), form) for form in forms}
    return forms | lower


def secret_forms(secret: str, *, user: str | None = None) -> set[str]:
    """`secret` and the encodings a server may echo it in."""
    if len(secret) < MIN_SECRET:
        return set()
    forms = {secret} | _percent_forms(secret)
    escaped = secret.replace("\\", "\\\\").replace('"', '\\"')
    forms.add(escaped)
    data = secret.encode()
    forms |= _base64_forms(data) | _base64_forms(b":" + data) | _base64_cores(data)
    if user is not None:
        pair = f"{user}:{secret}"
        forms |= {pair} | _percent_forms(pair) | _base64_forms(pair.encode())
    return forms


class Redactor:
    """Replaces every form of a set of secrets with `***`."""

    def __init__(self, forms: set[str]) -> None:
        self.forms = sorted(forms, key=lambda form: (-len(form), form))
        self._pattern = re.compile("|".join(map(re.escape, self.forms))) if forms else None
        self._by_first: dict[str, list[str]] = {}
        for form in self.forms:
            self._by_first.setdefault(form[0], []).append(form)
        self.longest = len(self.forms[0]) if self.forms else 0

    @classmethod
    def for_credentials(
        cls,
        api_key: str | None,
        base_url: str | None,
        headers: Mapping[str, str] | None = None,
    ) -> Redactor:
        """For an API key, the password (if any) in a base URL, and the values of extra
        headers (an `api-key: …` or `Authorization: Bearer …` of a profile), which the
        config masks as secrets too."""
        forms = secret_forms(api_key) if api_key else set()
        for value in (headers or {}).values():
            scheme, _, token = value.strip().partition(" ")
            for secret in {value.strip(), token.strip() if scheme else ""} - {""}:
                forms |= secret_forms(secret)
        info = userinfo(base_url) if base_url else None
        if info is not None:
            for password in {info.password, info.raw_password} - {None, ""}:
                assert password is not None
                forms |= secret_forms(password, user=info.user)
            if info.password is None:
                # A bare `token@host`: the token is the secret, sent as `token:`.
                forms |= secret_forms(info.user)
                if len(info.user) >= MIN_SECRET:
                    forms |= _base64_forms(f"{info.user}:".encode())
        return cls(forms)

    def __bool__(self) -> bool:
        return self._pattern is not None

    def text(self, text: str) -> str:
        return self._pattern.sub(MARK, text) if self._pattern is not None else text

    def bytes(self, data: bytes) -> bytes:
        if self._pattern is None:
            return data
        return self.text(data.decode("utf-8", "surrogateescape")).encode("utf-8", "surrogateescape")

    def split_safe(self, text: str) -> tuple[str, str]:
        """`text` redacted, cut in what may be shown now and a tail that may begin a secret.

        The tail is the longest end of the text that is the start of some secret form; it
        must wait for the text that follows it.
        """
        text = self.text(text)
        for start in range(max(0, len(text) - self.longest + 1), len(text)):
            candidates = self._by_first.get(text[start])
            if candidates and any(form.startswith(text[start:]) for form in candidates):
                return text[:start], text[start:]
        return text, ""
