"""An extractive summary: the sentences of a conversation that carry its facts, verbatim.

No model is asked, so nothing is paraphrased and nothing invented: the sentences kept are
the user's instructions first, then what the conversation said that carries artifacts
(URLs, paths, ids, numbers; agctl.context.artifacts), then tool output that carries some
(a tool can be asked again; what was said cannot), then the others; within each, the
latest first (a later statement supersedes an earlier one); as many as the token budget
holds (one that does not fit is passed over for a shorter one). `agctl eval compaction`
measured the order: on the generated probe sets (seeds 0-4, a 2,000-token budget),
recall went from 40% (most artifacts first, then the earliest) to 78%. They are written
back in their original order, one line per message, labelled by role. The
same input always gives the same output: the offline provider summarises with it, so
offline runs and CI exercise real choices.

It reads entries of (role, text): the messages being folded, or the `[role] text` lines of
a rendered transcript (what a summary request carries), so that the offline provider and
`ctx compress --strategy extractive` make the same choices.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import NamedTuple

from agctl.context import artifacts
from agctl.context.models import Message
from agctl.context.tokens import estimate_text

# The role of text that is a summary already (a previous compression's), not a message.
SUMMARY_ROLE = "summary"
# What any budget keeps at least, and the share of the input a default budget is.
MIN_BUDGET = 128
DEFAULT_SHARE = 0.25

# The parts of a rolling summary request (agctl.turn.summaries), each between its tags:
# the previous summary, the new messages, and what must be kept (derived from the two,
# so not read again here).
PREVIOUS_TAG = "previous-summary"
NEW_TAG = "new-messages"
KEEP_TAG = "must-keep"
NO_PREVIOUS = "(none: this is the first summary)"

_LINE = re.compile(r"\[(\w+)\] (.*)")
_TAG = re.compile(r"<(/?)([\w-]+)>")
_HEADER = re.compile(r"Extract of \d+ earlier messages \(\d+ of \d+ sentences, verbatim\):")


class Entry(NamedTuple):
    """One message's text (or a previous summary's), by whom."""

    role: str
    text: str


class _Candidate(NamedTuple):
    rank: tuple[int, int]  # the tier (instructions first), then the latest first
    entry: int
    sentence: str
    position: int  # the sentence's place in all of them


def without_header(text: str) -> str:
    """An extract's text without its header line: its counts are not facts of the
    conversation (a loss report or a must-keep list would find them)."""
    return "\n".join(line for line in text.split("\n") if not _HEADER.fullmatch(line.strip()))


def without_headers(messages: Sequence[Message]) -> list[Message]:
    """`messages` (a compressed zone) with any extract's header line left out."""
    return [m.model_copy(update={"content": without_header(m.text())}) for m in messages]


def default_budget(tokens: int) -> int:
    """The budget when none is given: a quarter of the tokens folded, at least 128."""
    return max(MIN_BUDGET, int(tokens * DEFAULT_SHARE))


def transcript_entries(text: str) -> list[Entry]:
    """The entries of a rendered transcript or a rolling summary request: a `[role] text`
    line is one; any other line (a previous summary written as prose) belongs to a
    `summary` entry. The must-keep list and an extract's own header line are skipped."""
    entries: list[Entry] = []
    skipping = False
    for line in text.splitlines():
        line = line.strip()
        tag = _TAG.fullmatch(line)
        if tag and tag.group(2) in (PREVIOUS_TAG, NEW_TAG, KEEP_TAG):
            skipping = tag.group(2) == KEEP_TAG and not tag.group(1)
            continue
        if skipping or line in ("", NO_PREVIOUS) or _HEADER.fullmatch(line):
            continue
        match = _LINE.fullmatch(line)
        if match:
            entries.append(Entry(match.group(1), match.group(2)))
        else:
            if entries and entries[-1].role == SUMMARY_ROLE:
                entries[-1] = Entry(SUMMARY_ROLE, f"{entries[-1].text}\n{line}")
            else:
                entries.append(Entry(SUMMARY_ROLE, line))
    return entries


def extract(entries: Sequence[Entry], budget: int | None = None) -> str:
    """The sentences of `entries` worth keeping, verbatim, in at most `budget` tokens
    (default: `default_budget` of the entries' size), as `[role] sentences` lines under a
    line that says how many were kept."""
    if budget is None:
        budget = default_budget(sum(estimate_text(entry.text) for entry in entries))
    candidates = _candidates(entries)
    total = sum(1 for entry in entries for _ in artifacts.sentences(entry.text))
    chosen: dict[int, list[tuple[int, str]]] = {}
    # The header's line, with as many digits as it can take.
    spent = estimate_text(_header(len(entries), total, total)) + 1
    for candidate in candidates:
        role = entries[candidate.entry].role
        label = 0 if candidate.entry in chosen else estimate_text(f"[{role}] ")
        cost = label + estimate_text(candidate.sentence) + 1
        if spent + cost > budget:
            continue
        spent += cost
        chosen.setdefault(candidate.entry, []).append((candidate.position, candidate.sentence))
    kept = sum(len(found) for found in chosen.values())
    lines = [_header(len(entries), kept, total)]
    for index in sorted(chosen):
        said = " ".join(sentence for _, sentence in sorted(chosen[index]))
        lines.append(f"[{entries[index].role}] {said}")
    return "\n".join(lines)


def _candidates(entries: Sequence[Entry]) -> list[_Candidate]:
    """Every sentence, once (where it ranks highest: a user's instruction said again by
    the assistant is still a user's), ranked: a user's instructions, then the sentences
    with artifacts said in the conversation, then those of tool output, then the rest;
    within each, the latest first."""
    best: dict[str, _Candidate] = {}
    position = 0
    for index, entry in enumerate(entries):
        for sentence in artifacts.sentences(entry.text):
            position += 1
            instruction = entry.role in ("user", SUMMARY_ROLE) and artifacts.is_instruction(
                sentence
            )
            if instruction:
                tier = 0
            elif artifacts.find(sentence, role="assistant"):
                tier = 2 if entry.role == "tool" else 1
            else:
                tier = 3
            candidate = _Candidate((tier, -position), index, sentence, position)
            if sentence not in best or candidate.rank < best[sentence].rank:
                best[sentence] = candidate
    return sorted(best.values())


def _header(messages: int, kept: int, total: int) -> str:
    return f"Extract of {messages} earlier messages ({kept} of {total} sentences, verbatim):"


# Words a question shares with any sentence, not worth matching on.
_STOPWORD_TEXT = (
    "the a an and or of to in on at for by with from as is are was were be been it its this "
    "that these those what which who whom whose when where why how does do did we our us you "
    "your i my me he she they them their there here has have had not no yes can could would "
    "will shall may might into than then so if about"
)
_STOPWORDS = frozenset(_STOPWORD_TEXT.split())
_WORD = re.compile(r"[a-z0-9]+")
# A rendered transcript's role label at a line's start, not a word of what was said.
_LABEL = re.compile(r"^\[\w+\] ", re.MULTILINE)
# What the reader answers when no sentence shares a word with the question.
NOT_FOUND = "Nothing in the conversation says."


def content_words(text: str) -> set[str]:
    """The words of `text` a question is matched on: lower case, no stopwords, a plural's
    or a verb's final s dropped ("listens" matches "listen")."""
    words = set()
    for word in _WORD.findall(text.lower()):
        if word in _STOPWORDS or (len(word) < 3 and not word.isdigit()):
            continue
        words.add(word[:-1] if len(word) > 3 and word.endswith("s") else word)
    return words


def answer(question: str, texts: Sequence[str]) -> str:
    """The sentence of `texts` that shares the most words with `question` (the latest of
    those that tie), verbatim: what a reader of only this context can answer, no model
    asked; NOT_FOUND when no sentence shares a word."""
    wanted = content_words(question)
    best, said = 0, NOT_FOUND
    for text in texts:
        for sentence in artifacts.sentences(_LABEL.sub("", text)):
            score = len(wanted & content_words(sentence))
            if score and score >= best:
                best, said = score, sentence.strip()
    return said
