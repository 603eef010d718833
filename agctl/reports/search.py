"""Finding messages by their text: across every session and slot (`agctl search`), or in
one slot (`msg find --text`), with one matcher for both.

Sessions and slots are walked as agctl.reports.walk walks them (lock-free; a damaged document
is reported and skipped). A slot in the current format is scanned straight from its JSON,
checking only the fields the search reads; anything else (an older format, a shape the
fast path cannot vouch for) goes through the Store's validated read, so its errors are
the ones every command reports.
"""

from __future__ import annotations

import re
import time
import warnings
from collections.abc import Collection, Iterator, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from agctl.base import schema
from agctl.base.errors import UsageError
from agctl.base.vocab import ROLES, ZONES
from agctl.context.models import Message
from agctl.reports.walk import ProblemHandler, walk
from agctl.store import Store

if TYPE_CHECKING:
    import regex

# Characters of context shown on each side of a match, and the most of a match shown.
SNIPPET_CONTEXT = 40
SNIPPET_MATCH = 120

# The most time a regular expression may spend matching over one whole search, in seconds.
REGEX_TIMEOUT = 2.0

# (role, text) of each message of a zone, in order.
Entries = Sequence[tuple[str, str]]


class RegexTimeout(UsageError):
    """A regular expression used up its time: one that backtracks without end, such as
    `(a|aa)+$` over a long run of a's, stops the search instead of hanging it."""


class Matcher:
    """Case-insensitive substring matching by default (Unicode case folding: "STRASSE"
    finds "Straße"); with `regex`, a regular expression of the `regex` module matched as
    written (case-sensitive unless it says `(?i)`), which may spend at most `timeout`
    seconds matching over all the texts it is given."""

    def __init__(
        self, pattern: str, *, regex: bool = False, timeout: float = REGEX_TIMEOUT
    ) -> None:
        if not pattern:
            raise UsageError("the text to search for is empty")
        if not timeout > 0:
            raise UsageError(f"the regular expression's time limit must be above 0, not {timeout}")
        self.pattern = pattern
        self.regex = regex
        self.timeout = timeout
        self._left = timeout
        self._folded = pattern.casefold()
        self._compiled = re.compile(re.escape(pattern), re.IGNORECASE)
        if regex:
            self._pattern = _compiled_regex(pattern)

    def search(self, text: str) -> tuple[int, int] | None:
        """The span of the first match in `text`, or None."""
        if self.regex:
            return self._regex_span(text)
        # `in` on folded text is ten times faster than an IGNORECASE scan; the span of
        # the few texts that match is then found in the original.
        if self._folded not in text.casefold():
            return None
        found = self._compiled.search(text)
        return found.span() if found else _folded_span(text, self._folded)

    def _regex_span(self, text: str) -> tuple[int, int] | None:
        """The regular expression's first match, its time taken from what is left."""
        started = time.perf_counter()
        try:
            found = self._pattern.search(text, timeout=self._left)
        except TimeoutError:
            raise RegexTimeout(
                f"the regular expression {self.pattern!r} was stopped after matching for "
                f"{self.timeout:g} s: it may backtrack without end (nested repeats such as "
                "(a|aa)+ or (a+)+)",
                hint="simplify it, or give it more time with --regex-timeout SECONDS",
            ) from None
        self._left = max(self._left - (time.perf_counter() - started), 1e-6)
        return found.span() if found else None


def _compiled_regex(pattern: str) -> regex.Pattern[str]:
    """`pattern` compiled by the `regex` module (imported here: `--help` must not), which
    can stop a match after a time, where `re` cannot; an invalid pattern is a UsageError."""
    import regex

    with warnings.catch_warnings():
        # regex warns of what a future version may read as a nested set (`[[`, `--`).
        warnings.simplefilter("ignore", FutureWarning)
        try:
            return regex.compile(pattern)
        except regex.error as exc:
            raise UsageError(f"invalid regular expression {pattern!r}: {exc}") from None


def _folded_span(text: str, folded: str) -> tuple[int, int]:
    """Where `folded` starts and ends in `text`, found by folding it character by
    character (for matches that only full case folding sees, such as ß and ss)."""
    origin: list[int] = []
    for position, char in enumerate(text):
        origin.extend([position] * len(char.casefold()))
    start = text.casefold().index(folded)
    return origin[start], origin[start + len(folded) - 1] + 1


@dataclass(frozen=True)
class Hit:
    """One message that matches: where it is, and the text around the first match."""

    session: str
    slot: str
    zone: str  # immutable | compressed | messages (what `msg get INDEX` addresses)
    index: int
    role: str
    start: int  # the first match, as character offsets in the message's text
    end: int
    snippet: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def where(self) -> str:
        """`session/slot:INDEX`, with the zone named when it is not `messages`."""
        zone = "" if self.zone == "messages" else f"{self.zone}:"
        return f"{self.session}/{self.slot}:{zone}{self.index}"


def snippet(text: str, start: int, end: int) -> str:
    """The match with some context on each side, on one line (whitespace runs become a
    space), with … where the text was cut."""
    shown_end = min(end, start + SNIPPET_MATCH)
    left = max(0, start - SNIPPET_CONTEXT)
    right = min(len(text), shown_end + SNIPPET_CONTEXT)
    body = " ".join(text[left:right].split())
    return ("…" if left > 0 else "") + body + ("…" if right < len(text) else "")


def matching(
    entries: Entries, matcher: Matcher, roles: Collection[str] | None = None
) -> Iterator[tuple[int, tuple[int, int]]]:
    """(index, span of the first match) of each entry that matches, in order."""
    for index, (role, text) in enumerate(entries):
        if roles and role not in roles:
            continue
        span = matcher.search(text)
        if span is not None:
            yield index, span


def find_messages(
    messages: Sequence[Message], matcher: Matcher, roles: Collection[str] | None = None
) -> list[int]:
    """Indexes of the messages whose text matches (and whose role is in `roles`)."""
    entries = [(m.role, m.text()) for m in messages]
    return [index for index, _ in matching(entries, matcher, roles)]


def raw_text(message: Any) -> str | None:
    """What Message.text() would give for this stored message, or None when it is not a
    message the model would accept (then the validated read decides)."""
    if not isinstance(message, dict):
        return None
    role = message.get("role")
    content = message.get("content")
    if role not in ROLES or (role == "tool" and not message.get("tool_call_id")):
        return None
    if isinstance(content, str):
        return content
    if content is None:
        return "" if role == "assistant" and message.get("tool_calls") else None
    if isinstance(content, list) and all(isinstance(part, dict) for part in content):
        return "".join(str(part.get("text", "")) for part in content)
    return None


def _fast_zones(document: dict[str, Any]) -> dict[str, list[tuple[str, str]]] | None:
    """The zones of a slot document in the current format, or None when only the
    validated read can tell what the document holds."""
    current = schema.CURRENT["slot"]
    try:
        version = schema.parse_version(
            document.get("schema_version", schema.format_version(current))
        )
    except ValueError:
        return None
    if version[0] != current[0] or version < current:
        return None
    zones: dict[str, list[tuple[str, str]]] = {}
    for zone in ZONES:
        messages = document.get(zone, [])
        if not isinstance(messages, list):
            return None
        entries = []
        for message in messages:
            text = raw_text(message)
            if text is None:
                return None
            entries.append((message["role"], text))
        zones[zone] = entries
    return zones


def slot_entries(store: Store, session_id: str, slot_id: str) -> dict[str, list[tuple[str, str]]]:
    """(role, text) of every message of a slot, per zone."""
    document = store.slot_document(session_id, slot_id)
    zones = _fast_zones(document) if document is not None else None
    if zones is not None:
        return zones
    slot = store.load_slot(session_id, slot_id)
    return {zone: [(m.role, m.text()) for m in getattr(slot, zone)] for zone in ZONES}


def search(
    store: Store,
    matcher: Matcher,
    *,
    session_id: str | None = None,
    slot_id: str | None = None,
    roles: Collection[str] | None = None,
    limit: int | None = None,
    on_problem: ProblemHandler | None = None,
) -> Iterator[Hit]:
    """Every message that matches, session by session (by id), slot by slot, zone by zone,
    as it is found; at most `limit` of them.

    `session_id` limits the search to that session, `slot_id` to the slot of that name
    (in one given session, a slot it does not have is NotFound). A session or slot that
    cannot be read goes to `on_problem` (default: a warning in the log) and is skipped.
    """
    if limit is not None and limit <= 0:
        return
    found = 0
    slots = walk(store, slot_entries, session_id=session_id, slot_id=slot_id, on_problem=on_problem)
    for sid, sl, zones in slots:
        for zone in ZONES:
            entries = zones[zone]
            for index, (start, end) in matching(entries, matcher, roles):
                text = entries[index][1]
                yield Hit(
                    session=sid,
                    slot=sl,
                    zone=zone,
                    index=index,
                    role=entries[index][0],
                    start=start,
                    end=end,
                    snippet=snippet(text, start, end),
                )
                found += 1
                if limit is not None and found >= limit:
                    return
