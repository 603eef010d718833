"""One conversation as a page: a slot's request view, tool calls and their results folded."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agctl.pages import REDACTED, asset, message_entry, page, text

if TYPE_CHECKING:
    from agctl.store import Store


def _user_text(value: str | None, tag: str = "div") -> str:
    if value is None:
        return f'<{tag} class="redacted">{REDACTED}</{tag}>'
    return f'<{tag} class="user-text" dir="auto">{text(value)}</{tag}>'


def message_html(entry: dict[str, Any]) -> str:
    """One message entry (`message_entry`) as an <article>; a tool call, a tool result and
    reasoning are <details>, folded."""
    role = entry["role"]
    who = f" <bdi>{text(entry['name'])}</bdi>" if "name" in entry else ""
    facts = [f"{entry['tokens']} tokens"]
    if "model" in entry:
        facts.append(f"<bdi>{text(entry['model'])}</bdi>")
    if "created_at" in entry:
        facts.append(text(entry["created_at"]))
    header = f'<header><span class="role">{text(role)}</span>{who} · {" · ".join(facts)}</header>'
    parts = [header]
    if "reasoning" in entry:
        parts.append(
            f"<details><summary>reasoning</summary>{_user_text(entry['reasoning'])}</details>"
        )
    body = entry["text"]
    if role == "tool":
        call = text(entry.get("tool_call_id", ""))
        parts.append(
            f"<details><summary>tool result for <bdi>{call}</bdi></summary>"
            f"{_user_text(body, 'pre')}</details>"
        )
    elif body != "":
        parts.append(_user_text(body))
    for call in entry.get("tool_calls", ()):
        parts.append(
            f"<details><summary>→ tool call <bdi>{text(call['name'])}</bdi> "
            f"(<bdi>{text(call['id'])}</bdi>)</summary>"
            f"{_user_text(call['arguments'], 'pre')}</details>"
        )
    return f'<article class="message role-{text(role)}">{"".join(parts)}</article>'


def conversation_page(store: Store, session_id: str, slot_id: str | None, *, redact: bool) -> str:
    """The request view of a slot (the current one by default) as a self-contained page,
    its tool results whole (a slot's clearing is of requests, never of history); with
    `redact`, no message text."""
    from agctl.context.view import request_view

    session = store.load_session(session_id)
    slot = store.load_slot(session_id, slot_id)
    entries = [message_entry(m, redact=redact) for m in request_view(session, slot, clear=False)]
    tokens = sum(e["tokens"] for e in entries)
    title = f"agctl · {session.id} · {slot.id}"
    body = "\n".join(
        [
            f"<h1>Session <bdi>{text(session.id)}</bdi>, slot <bdi>{text(slot.id)}</bdi></h1>",
            f'<p class="meta">{len(entries)} messages · {tokens} tokens · mode '
            f"{text(slot.config.mode)}{' · message text redacted' * redact}</p>",
            '<div class="bar"><input type="search" id="search" placeholder="Search messages"'
            ' aria-label="Search messages"><span id="match-count" class="muted"></span>'
            '<button type="button" id="unfold">Unfold all</button>'
            '<button type="button" id="fold">Fold all</button></div>',
            '<main id="messages">',
            *(message_html(e) for e in entries),
            "</main>",
        ]
    )
    data = {
        "kind": "agctl.conversation",
        "version": 1,
        "session": session.id,
        "slot": slot.id,
        "redacted": redact,
        "messages": entries,
    }
    return page(
        title=title,
        body=body,
        data=data,
        scripts=[asset("conversation.js")],
        style=asset("page.css"),
    )
