"""The facts a compression must not lose, found in text: URLs, file paths, ids, numbers, and
the user's instructions.

Summaries lose artifacts first (a path, an id, a number), and a user's instruction lost in
a compaction is the loudest complaint there is. This module finds them, so that a
compression can say what it dropped (the loss report) and an extractive summary can keep
the sentences that carry them. Heuristics, meant to err towards finding too much: the
report is read by a person, and a false alarm costs less than a silent loss.

Every pattern starts only where a token starts and never backtracks into what it took
(possessive quantifiers), so hostile text takes time in proportion to its length.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from agctl.context.models import Message

# The kinds, in the order a report lists them.
KINDS = ("instructions", "urls", "paths", "ids", "numbers")


def kinds_of(spec: str) -> tuple[str, ...]:
    """The kinds a list like 'instructions,paths' names, in KINDS' order ('any': all of
    them, 'none' or '': none); ValueError naming the known ones for any other word."""
    words = {word.strip().lower() for word in spec.split(",")} - {""}
    if "any" in words:
        words = (words - {"any"}) | set(KINDS)
    words.discard("none")
    unknown = sorted(words - set(KINDS))
    if unknown:
        raise ValueError(
            f"unknown kind(s) of fact: {', '.join(unknown)} (known: {', '.join(KINDS)}, any, none)"
        )
    return tuple(kind for kind in KINDS if kind in words)


_URL = re.compile(r"\b(?:https?|ftp|file)://[^\s<>\"'`)\]}]+", re.IGNORECASE)
# A path: two or more segments joined by '/', optionally rooted (/, ~/, ./, ../), or a
# Windows drive path; or a file name with a known kind of extension.
_PATH = re.compile(
    r"(?<![\w/.~-])(?:~|\.{1,2})?/?[\w.-]++(?:/[\w.-]++)++/?"
    r"|(?<![\w\\])[A-Za-z]:\\[\w.\\-]++"
    r"|(?<![\w.-])[\w-]++\.(?:py|js|ts|tsx|jsx|json|jsonl|md|txt|toml|ya?ml|ini|cfg|conf|rs|go|"
    r"c|h|cc|cpp|hpp|java|kt|rb|php|sh|bash|zsh|sql|csv|tsv|html|css|xml|lock|log|env|pdf|png|"
    r"jpg)\b"
)
# An id: a UUID; a hex string of 7+ (a commit, a digest); a ticket (ABC-123, #123); a word
# of letters and digits together, 5+ long, or with _ - or . between them (toolu_01Ab,
# v2-beta, v2.0.31).
_ID = re.compile(
    r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b"
    r"|(?<![\w-])[0-9a-f]{7,64}\b"
    r"|(?<![\w-])[A-Z][A-Z0-9]{1,9}-\d++\b"
    r"|(?<![\w#])#\d++\b"
    r"|(?<![\w-])(?=[A-Za-z_-]*+\d)(?=[\d_-]*+[A-Za-z])[A-Za-z0-9]++(?:[._-][A-Za-z0-9]++)*+\b",
    re.IGNORECASE,
)
# A number worth keeping: two digits or more, or with decimal parts (2.5, 2.0.31,
# 10.0.0.1), a sign or a unit of %.
_NUMBER = re.compile(r"(?<![\w.,])[-+]?\d[\d,_]*+(?:\.\d++)*+%?(?![\w])")
# A sentence ends at . ! ? followed by a space or the end (not inside a path, a URL or a
# version: src/app.py, v2.1), or at a line end.
_SENTENCE = re.compile(r"(?:[^.!?\n]++|[.!?]++(?![ \t\r\f\v]|\n|$))*+(?:[.!?]++|\n|$)")
# Words that make a user's sentence an instruction to keep verbatim.
_DIRECTIVE = re.compile(
    r"\b(?:always|never|must|mustn't|don't|do not|make sure|ensure|remember|please|"
    r"should|shouldn't|avoid|only|instead|prefer|keep|use|stop|from now on)\b",
    re.IGNORECASE,
)
_SPACE = re.compile(r"\s+")


class Artifacts(NamedTuple):
    """What a text holds, by kind, each in the order first seen, without repeats."""

    instructions: tuple[str, ...] = ()
    urls: tuple[str, ...] = ()
    paths: tuple[str, ...] = ()
    ids: tuple[str, ...] = ()
    numbers: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return any(getattr(self, kind) for kind in KINDS)

    def counts(self) -> dict[str, int]:
        return {kind: len(getattr(self, kind)) for kind in KINDS}

    def to_dict(self) -> dict[str, list[str]]:
        return {kind: list(getattr(self, kind)) for kind in KINDS}

    def missing_from(self, text: str) -> Artifacts:
        """Those of these that `text` does not hold: an instruction unless it holds the
        whole sentence (spacing aside), any other artifact unless it holds it as written."""
        flat = " ".join(text.split())
        return Artifacts(
            instructions=tuple(i for i in self.instructions if i not in flat),
            **{kind: tuple(a for a in getattr(self, kind) if a not in text) for kind in KINDS[1:]},
        )


def sentences(text: str) -> list[str]:
    """`text` cut into sentences (at . ! ? before a space, and line ends), each with its
    spacing made one."""
    found = (_SPACE.sub(" ", match.group()).strip() for match in _SENTENCE.finditer(text))
    return [sentence for sentence in found if sentence]


def is_instruction(sentence: str) -> bool:
    """Whether a user's sentence tells the assistant what to do or how (heuristic)."""
    return bool(_DIRECTIVE.search(sentence)) or sentence.rstrip().endswith("!")


def find(text: str, *, role: str = "user") -> Artifacts:
    """The artifacts of one message's text; instructions only in a user's."""
    urls = _unique(match.group().rstrip(".,;:!?") for match in _URL.finditer(text))
    rest = _URL.sub(" ", text)
    paths = _unique(match.group().rstrip(".") for match in _PATH.finditer(rest))
    rest = _PATH.sub(" ", rest)
    ids = _unique(match.group() for match in _ID.finditer(rest) if not match.group().isdigit())
    rest = _ID.sub(lambda match: match.group() if match.group().isdigit() else " ", rest)
    numbers = _unique(
        match.group().lstrip("+")
        for match in _NUMBER.finditer(rest)
        if len(match.group().strip("+-%")) >= 2 or "." in match.group()
    )
    instructions: tuple[str, ...] = ()
    if role == "user":
        instructions = _unique(s for s in sentences(text) if is_instruction(s))
    return Artifacts(instructions, urls, paths, ids, numbers)


def gather(messages: Sequence[Message]) -> Artifacts:
    """The artifacts of many messages together (tool calls' arguments included)."""
    parts = []
    for message in messages:
        text = message.text()
        for call in message.tool_calls or ():
            text += f"\n{call.function.name} {call.function.arguments}"
        parts.append(find(text, role=message.role))
    return merge(parts)


def merge(many: Iterable[Artifacts]) -> Artifacts:
    collected = list(many)
    return Artifacts(
        **{
            kind: _unique(item for found in collected for item in getattr(found, kind))
            for kind in KINDS
        }
    )


def _unique(items: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(item for item in items if item))
