"""The JSON body of a chat-completions request, as the OpenAI wire sends it: the bytes a
provider's prefix cache compares, which agctl.context.cache also fingerprints. orjson and the
request model only, so an offline turn (which fingerprints what it would have sent) loads
no HTTP client."""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

import orjson

from agctl.providers.base import ChatRequest, mark_positions


class Body(NamedTuple):
    """A request's JSON body, and the offset in it just past its first k messages for
    each k it was cut at (0: where the messages start)."""

    data: bytes
    offsets: dict[int, int]


# The body built last, with its request: agctl.context.cache fingerprints the bytes the wire sent
# instead of serialising the request again.
_last: tuple[ChatRequest, bool, Body] | None = None


def encode(
    request: ChatRequest, *, cache_key: bool = False, cuts: Iterable[int] | None = None
) -> Body:
    """The JSON body a request is sent as (orjson's bytes for ChatRequest.payload): the
    bytes a provider's prefix cache compares, with the request's `prompt_cache_key` last
    when `cache_key` (the profile allows it). The messages are serialised a run at a time
    between `cuts` (by default where agctl.context.cache marks a sent request), so where each run
    ends is known without serialising or parsing anything again."""
    global _last
    count = len(request.messages)
    if cuts is None:
        cuts = mark_positions(count)
    wanted = sorted({cut for cut in cuts if 0 < cut <= count} | {count})
    last = _last  # read once: another thread may build a body meanwhile
    if (
        last is not None
        and last[0] is request
        and last[1] == cache_key
        and all(cut in last[2].offsets for cut in wanted)
    ):
        return last[2]
    payload = request.payload(cache_key=cache_key)
    messages = payload.pop("messages")
    head = b'{"model":' + orjson.dumps(payload.pop("model")) + b',"messages":['
    parts: list[bytes | memoryview] = [head]
    offsets = {0: len(head)}
    position, done = len(head), 0
    for cut in wanted:
        if cut == done:
            continue
        run = memoryview(orjson.dumps(messages[done:cut]))[1:-1]  # without its brackets
        if done:
            parts.append(b",")
            position += 1
        parts.append(run)
        position += len(run)
        offsets[cut] = position
        done = cut
    parts.append(b"]," + orjson.dumps(payload)[1:] if payload else b"]}")
    body = Body(b"".join(parts), offsets)
    _last = (request, cache_key, body)
    return body


def encoded(request: ChatRequest, cuts: Iterable[int]) -> Body:
    """`request`'s body cut at `cuts`: the one it was last sent as when that was cut there
    (where its messages end does not depend on `cache_key`), else built now."""
    wanted = [cut for cut in cuts if 0 < cut <= len(request.messages)]
    last = _last
    if last is not None and last[0] is request and all(cut in last[2].offsets for cut in wanted):
        return last[2]
    return encode(request, cuts=wanted)


def request_body(request: ChatRequest, *, cache_key: bool = False) -> bytes:
    """The JSON body a request is sent as (see encode)."""
    return encode(request, cache_key=cache_key).data
