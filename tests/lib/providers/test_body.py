"""agctl.providers.body: the body the OpenAI wire sends, serialised once,
knowing where its messages end."""

from __future__ import annotations

from typing import Any

import orjson
from helpers import WARM_SETTINGS
from helpers import utf8_texts as texts
from hypothesis import given
from hypothesis import strategies as st

from agctl.providers.base import ChatRequest

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | texts,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3),
    max_leaves=6,
)


@WARM_SETTINGS
@given(
    messages=st.lists(st.dictionaries(texts, json_values, max_size=3), max_size=9),
    tools=st.none() | st.lists(st.dictionaries(texts, json_values, max_size=2), max_size=2),
    stream=st.booleans(),
    cache_key=st.booleans(),
    cuts=st.lists(st.integers(-1, 11), max_size=5),
)
def test_the_wire_body_is_serialised_once_with_its_messages_ends(
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None,
    stream: bool,
    cache_key: bool,
    cuts: list[int],
) -> None:
    """The body the OpenAI wire sends is orjson's bytes for the request's payload, built a
    run of messages at a time; where it says its first k messages end is where they do,
    so the fingerprint of a sent request reads the wire's bytes, never serialising again."""
    from agctl.providers.body import encode, encoded

    request = ChatRequest(
        model="m", messages=messages, tools=tools, stream=stream, cache_key="agctl-k"
    )
    body = encode(request, cache_key=cache_key, cuts=cuts)
    assert body.data == orjson.dumps(request.payload(cache_key=cache_key))
    items = [orjson.dumps(m) for m in messages]
    start = body.offsets[0]
    assert body.data[:start] == b'{"model":"m","messages":['
    for k in [*cuts, len(messages)]:
        if 0 < k <= len(messages):
            assert body.data[start : body.offsets[k]] == b",".join(items[:k])
    assert encoded(request, cuts) is body  # what a turn just sent is not serialised again
