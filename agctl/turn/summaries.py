"""What replaces the messages a compression folds: a summary, a rolling summary, an extract.

- `summarize`: the provider summarises one transcript (the previous summary, if any, as
  its first line) with one short paragraph prompt, `SUMMARY_INSTRUCTIONS`; kept as it was.
- `rolling`: the provider updates the previous summary, given as a document of its own,
  with the new messages, in the sections of the slot's `summary_template` (default
  `DEFAULT_TEMPLATE`: goal, decisions, user instructions, artifacts, open tasks; `plain`:
  one paragraph). The request lists the instructions and artifacts found in both
  (agctl.context.artifacts) that the new summary must keep verbatim, so a summary of a
  summary never loses them by chance.
- `extractive`: no provider; the sentences that carry instructions and artifacts, verbatim,
  up to a token budget (agctl.context.extractive).

A token budget bounds an extract exactly; a model's summary is asked for it in words
(`budget_words`), which the offline provider's extract keeps to as a model would.

The bytes of each request are fixed by its input: a compression rewrites the request from
the compressed zone on anyway, and tests pin them.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from agctl.base.errors import UsageError
from agctl.base.vocab import CompressStrategy
from agctl.context import artifacts
from agctl.context.extractive import (
    KEEP_TAG,
    NEW_TAG,
    NO_PREVIOUS,
    PREVIOUS_TAG,
    Entry,
    extract,
    transcript_entries,
    without_header,
    without_headers,
)
from agctl.context.models import Message, utcnow
from agctl.providers.base import ChatRequest, Provider, TurnContext

SUMMARY_INSTRUCTIONS = (
    "Summarise the conversation transcript below for your own later use. Keep facts, "
    "names, numbers, decisions and open questions; drop pleasantries. Be brief."
)
ROLLING_INSTRUCTIONS = (
    "You keep a running summary of a conversation for your own later use. Update the "
    "previous summary (between <previous-summary> tags) with the new messages (between "
    "<new-messages> tags): keep what still holds, change what the new messages changed, add "
    "what is new; never drop an item only because it is old. Copy every item between "
    "<must-keep> tags into the summary verbatim. Answer with the updated summary only."
)
# The sections of a rolling summary, unless a slot's summary_template says otherwise.
DEFAULT_TEMPLATE = (
    "## Goal\n"
    "## Decisions\n"
    "## User instructions (verbatim)\n"
    "## Artifacts (file paths, ids, numbers, URLs)\n"
    "## Open tasks"
)
# A summary_template asking for one paragraph instead of sections.
PLAIN_TEMPLATE = "plain"
# A list item's mark at a line's start: "- ", "* ", "1. ".
_LIST_MARK = re.compile(r"^[ \t]*(?:[-*\u2022]|\d+[.)])[ \t]+", re.MULTILINE)
# How the must-keep list names each kind of artifact.
_KIND_LABELS = {
    "instructions": "instruction",
    "urls": "url",
    "paths": "path",
    "ids": "id",
    "numbers": "number",
}


def render_line(message: Message) -> str:
    """One message's text on one line, its tool calls written out."""
    text = message.text()
    for call in message.tool_calls or ():
        text += f" [calls {call.function.name}({call.function.arguments})]"
    return " ".join(text.split())


def render_transcript(messages: Sequence[Message]) -> str:
    """Messages as `[role] text` lines, the input of a summary request."""
    return "\n".join(f"[{message.role}] {render_line(message)}" for message in messages)


def rolling_instructions(template: str | None = None) -> str:
    """The system prompt of a rolling summary in `template`'s sections (or one paragraph)."""
    if template == PLAIN_TEMPLATE:
        return f"{ROLLING_INSTRUCTIONS}\n\n{SUMMARY_INSTRUCTIONS}"
    sections = template or DEFAULT_TEMPLATE
    return (
        f"{ROLLING_INSTRUCTIONS}\n\nWrite it in these sections, each a heading followed by "
        f"short items (none: say so):\n{sections}"
    )


def must_keep(previous: str, messages: Sequence[Message]) -> artifacts.Artifacts:
    """What the next summary must hold verbatim: the instructions and artifacts of the
    previous summary (its instruction-like sentences, list marks aside, count as a user's)
    and the new messages."""
    items = _LIST_MARK.sub("", previous)
    return artifacts.merge([artifacts.find(items, role="user"), artifacts.gather(messages)])


def rolling_document(previous: str, messages: Sequence[Message]) -> str:
    """The user message of a rolling summary request: the previous summary, the new
    messages and the must-keep list, each between its own tags."""
    parts = [
        f"<{PREVIOUS_TAG}>\n{previous.strip() or NO_PREVIOUS}\n</{PREVIOUS_TAG}>",
        f"<{NEW_TAG}>\n{render_transcript(messages)}\n</{NEW_TAG}>",
    ]
    kept = must_keep(previous, messages)
    if kept:
        items = [
            f"{_KIND_LABELS[kind]}: {item}"
            for kind in artifacts.KINDS
            for item in getattr(kept, kind)
        ]
        parts.append(f"<{KEEP_TAG}>\n" + "\n".join(items) + f"\n</{KEEP_TAG}>")
    return "\n\n".join(parts)


def budget_words(budget: int) -> str:
    """What a summary's prompt says of its token budget."""
    return f"Keep the summary under {budget} tokens: drop the least important items first."


def ask(
    provider: Provider,
    model: str,
    messages: list[dict[str, Any]],
    context: TurnContext | None,
    budget: int | None = None,
) -> Message:
    """Send one summary request (asked to stay within `budget` tokens, if given; the
    system prompt, first, says so); its reply as a system message."""
    from agctl.turn.reply import ReplyBuilder

    if budget is not None:
        system, *rest = messages
        said = f"{system['content']}\n\n{budget_words(budget)}"
        messages = [{**system, "content": said}, *rest]
    request = ChatRequest(
        model=model,
        messages=messages,
        context=(context or TurnContext())._replace(purpose="summary", budget=budget),
    )
    builder = ReplyBuilder()
    for event in provider.stream(request):
        builder.feed(event)
    reply = builder.message(model)
    return Message(
        role="system",
        content=reply.text(),
        created_at=utcnow(),
        model=model,
        usage=reply.usage,
    )


def summarize(
    provider: Provider,
    model: str,
    messages: Sequence[Message],
    *,
    instructions: str | None = None,
    context: TurnContext | None = None,
    budget: int | None = None,
) -> Message:
    """Ask the provider for a summary of `messages` (in `budget` tokens, if given);
    return it as a system message."""
    return ask(
        provider,
        model,
        [
            {"role": "system", "content": instructions or SUMMARY_INSTRUCTIONS},
            {"role": "user", "content": render_transcript(messages)},
        ],
        context,
        budget,
    )


def summarize_rolling(
    provider: Provider,
    model: str,
    previous: Sequence[Message],
    messages: Sequence[Message],
    *,
    template: str | None = None,
    instructions: str | None = None,
    context: TurnContext | None = None,
    budget: int | None = None,
) -> Message:
    """Ask the provider to update the `previous` summary with `messages` (instructions,
    if given, replace the template's sections; in `budget` tokens, if given)."""
    system = rolling_instructions(template)
    if instructions:
        system = f"{ROLLING_INSTRUCTIONS}\n\n{instructions}"
    document = rolling_document(previous_text(previous), messages)
    return ask(
        provider,
        model,
        [{"role": "system", "content": system}, {"role": "user", "content": document}],
        context,
        budget,
    )


def previous_text(previous: Sequence[Message]) -> str:
    """The text of a compressed zone: the summary a compression replaces (an extract's
    header left out)."""
    texts = (without_header(message.text()) for message in previous)
    return "\n\n".join(text for text in texts if text.strip())


def extractive(
    previous: Sequence[Message], messages: Sequence[Message], *, budget: int | None = None
) -> Message:
    """The extract of a previous summary and the new messages, as a system message (the
    previous summary's `[role]` lines keep their role, its prose is a `summary`'s)."""
    entries = transcript_entries(previous_text(previous))
    entries += [Entry(message.role, render_line(message)) for message in messages]
    return Message(role="system", content=extract(entries, budget), created_at=utcnow())


def check_options(strategy: str, *, instructions: str | None, budget_tokens: int | None) -> None:
    """Refuse what `strategy` would silently ignore: a token budget for a truncation,
    instructions where no model is asked."""
    if budget_tokens is not None and strategy == "truncate":
        raise UsageError(
            "--budget-tokens bounds a summary; a truncation writes none "
            "(use --strategy extractive, summarize or rolling)"
        )
    if instructions is not None and strategy in ("extractive", "truncate"):
        raise UsageError(
            f"--instructions tell a model how to summarise; {strategy} asks none "
            "(use --strategy summarize or rolling)"
        )


def replacement(
    strategy: CompressStrategy,
    previous: Sequence[Message],
    messages: Sequence[Message],
    *,
    provider: Provider | None,
    model: str,
    instructions: str | None = None,
    template: str | None = None,
    budget: int | None = None,
    context: TurnContext | None = None,
) -> Message | None:
    """What replaces the compressed zone and the folded messages under `strategy` (None
    for a truncation: the compressed zone stays)."""
    check_options(strategy, instructions=instructions, budget_tokens=budget)
    if strategy == "truncate":
        return None
    if strategy == "extractive":
        return extractive(previous, messages, budget=budget)
    if provider is None:
        raise ValueError(f"{strategy} needs a provider")
    if strategy == "rolling":
        return summarize_rolling(
            provider,
            model,
            previous,
            messages,
            template=template,
            instructions=instructions,
            context=context,
            budget=budget,
        )
    return summarize(
        provider,
        model,
        [*without_headers(previous), *messages],
        instructions=instructions,
        context=context,
        budget=budget,
    )
