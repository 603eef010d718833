"""Keeping a provider's prefix cache warm: the routing key a request carries, and what
the last request sent on a slot left in the cache.

Providers cache the longest unchanged prefix of a request (see docs/cache.md). OpenAI
also routes by `prompt_cache_key`: requests with the same key reach the same cache. A
slot's key names the line it descends from, not the slot itself, so a fork (`ckpt fork`)
and a derived slot (`slot derive`) send their first request where their parent's prefix
is cached. The key is a hash: stable across turns, and no session or slot name leaves
the machine in it.
"""

from __future__ import annotations

import hashlib
import zlib
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

import orjson

from agctl.context.models import Message, Session, Slot
from agctl.providers.base import mark_positions

if TYPE_CHECKING:
    from agctl.context.pricing import Prices
    from agctl.providers.base import ChatRequest

KEY_PREFIX = "agctl-"


def slot_root(slot: Slot) -> str:
    """The slot its line of derives began with (its own id for a slot not derived)."""
    source = slot.config.source
    if source.kind != "derived":
        return slot.id
    return source.root_id or source.parent_id or slot.id


def session_root(session: Session) -> str:
    """The session its line of forks began with (its own id for a session not forked)."""
    origin = session.forked_from
    if not origin or not session.parent_id:
        return session.id
    root = origin.get("root")
    return root if isinstance(root, str) and root else session.parent_id


def cache_key(session: Session, slot: Slot) -> str:
    """The `prompt_cache_key` of a request on `slot`: the same for its forks and derives."""
    line = f"{session_root(session)}\0{slot_root(slot)}".encode()
    return KEY_PREFIX + hashlib.sha256(line).hexdigest()[:32]


# ---- what the last request sent left in the cache ------------------------------------


def prefix_hashes(request: ChatRequest, positions: Iterable[int]) -> dict[int, str]:
    """The checksum of the request up to each of `positions`: 0 covers the model, the
    tools and a reply's schema, if any (what precedes the messages in a prompt: Anthropic
    sends the schema as a tool, OpenAI puts it before the system message), i those and the
    body's bytes through
    its i-th message. One pass over the bytes the wire sends (agctl.providers.body.encode:
    the body a turn just sent is not serialised again). A CRC-32, resumed from one mark to
    the next: a turn's request is read once at a few instructions a byte, and a changed
    prefix passes for the one sent once in 2^32 (a wrong estimate, nothing worse)."""
    wanted = sorted({at for at in positions if 0 <= at <= len(request.messages)})
    head: dict[str, Any] = {"model": request.model, "tools": request.tools}
    if request.response_schema is not None:  # else as before schemas existed
        head["response_schema"] = request.response_schema
    value = zlib.crc32(orjson.dumps(head))
    if not wanted or wanted[-1] == 0:
        return {0: f"{value:08x}"} if wanted else {}
    from agctl.providers.body import encoded

    body = encoded(request, wanted)
    data = memoryview(body.data)
    hashes = {}
    done = body.offsets[0]
    for at in wanted:
        if at:
            end = body.offsets[at]
            value = zlib.crc32(data[done:end], value)
            done = end
        hashes[at] = f"{value:08x}"
    return hashes


def sent_marks(request: ChatRequest) -> dict[str, Any]:
    """What a slot keeps of the last request sent on it (SlotMeta.sent): its message count
    and the hashes of some of its prefixes, compact whatever the slot's length."""
    count = len(request.messages)
    hashes = prefix_hashes(request, mark_positions(count))
    return {"messages": count, "marks": [[at, hashes[at]] for at in sorted(hashes)]}


def cached_prefix(sent: dict[str, Any] | None, request: ChatRequest) -> int | None:
    """How many leading messages of `request` the last request sent (`sent`, from
    sent_marks) began with too: None when nothing was sent or the model, the tools or
    the reply's schema differ (nothing cached), else the longest remembered prefix that
    matches."""
    if not sent:
        return None
    marks = {at: mark for at, mark in sent.get("marks", ())}
    hashes = prefix_hashes(request, marks)
    matching = [at for at, mark in marks.items() if hashes.get(at) == mark]
    return max(matching, default=None)


class CacheOutlook(NamedTuple):
    """The next request against the last one sent on its slot: what a provider's prefix
    cache is expected to serve, and the input's expected cost."""

    last_sent: int | None  # messages in the last request sent on the slot (None: none yet)
    cached_messages: int
    cached_tokens: int
    input_tokens: int
    cost: float | None  # dollars for the input, cache reads at the model's cache price
    cost_uncached: float | None

    @property
    def share(self) -> float:
        return self.cached_tokens / self.input_tokens if self.input_tokens else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "last_sent_messages": self.last_sent,
            "cached_messages": self.cached_messages,
            "cached_tokens": self.cached_tokens,
            "input_tokens": self.input_tokens,
            "cached_share": round(self.share, 4),
            "expected_input_cost": self.cost,
            "input_cost_uncached": self.cost_uncached,
        }


def cache_outlook(
    session: Session,
    slot: Slot,
    *,
    model: str,
    scratch: Sequence[Message] = (),
    user_input: Message | None = None,
    system_prompt: str | None = None,
    tools: list[dict[str, Any]] | None = None,
    tool_tokens: int = 0,
    prices: Prices | None = None,
    window: int | None = None,
) -> CacheOutlook:
    """The part of the next request on `slot` expected from the provider's cache: the
    prefix it shares with the last request sent on the slot, in tokens."""
    from agctl.context.pricing import cost_of
    from agctl.context.view import request_messages
    from agctl.providers.base import ChatRequest

    view = request_messages(
        session,
        slot,
        scratch=scratch,
        user_input=user_input,
        system_prompt=system_prompt,
        window=window,
    )
    request = ChatRequest(model=model, messages=view.requests, tools=tools or None)
    sent = slot.meta.sent
    shared = cached_prefix(sent, request)
    cached = 0
    if shared is not None:
        cached = tool_tokens + sum(m.token_count() for m in view.messages[:shared])
    total = tool_tokens + view.tokens
    cost_uncached = cost_of(model, total, 0, prices)
    cost = cost_of(model, total, 0, prices, cached_tokens=cached)
    return CacheOutlook(
        last_sent=sent.get("messages") if sent else None,
        cached_messages=shared or 0,
        cached_tokens=cached,
        input_tokens=total,
        cost=cost,
        cost_uncached=cost_uncached,
    )
