"""The self-contained pages (agctl/pages/): the data round-trips whatever it holds, user
text stays text, the policy allows only the page's own script, --redact leaves no text."""

from __future__ import annotations

import base64
import hashlib
from typing import Any

from helpers import HOSTILE_TEXT, SID, TEXT, conversation_with_tools
from hypothesis import given
from hypothesis import strategies as st
from pagesparse import parse_page

from agctl.pages import embed_json, page, text
from agctl.pages.conversation import conversation_page
from agctl.store import Store

JSON: st.SearchStrategy[Any] = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(min_value=-(2**63), max_value=2**63 - 1),
        st.floats(allow_nan=False, allow_infinity=False),
        TEXT,
    ),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(TEXT, inner, max_size=4)),
    max_leaves=12,
)


@given(data=JSON, title=TEXT, words=TEXT)
def test_embedded_data_and_text_round_trip(data: Any, title: str, words: str) -> None:
    source = page(
        title=title,
        body=f'<p class="said">{text(words)}</p>',
        data=data,
        scripts=["let a = 1;"],
        style="p {}",
    )
    parsed = parse_page(source)
    assert parsed.data() == data
    assert parsed.code() == ["let a = 1;"]
    assert parsed.texts["said"] == [words.replace("\0", "\ufffd")]
    assert parsed.tags.count("script") == 2
    assert parsed.tags.count("p") == 1


def test_embedded_json_has_no_markup_or_line_separators() -> None:
    embedded = embed_json({"<k>": "</script><!--&\u2028\u2029"})
    assert not set("<>&\u2028\u2029") & set(embedded)


def _hash(source: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(source.encode()).digest()).decode() + "'"


def test_the_policy_forbids_the_network_and_allows_only_the_page_script(store: Store) -> None:
    parsed = parse_page(
        conversation_page(store, conversation_with_tools(store), None, redact=False)
    )
    policy = dict(
        part.strip().split(" ", 1) for part in parsed.meta["Content-Security-Policy"].split(";")
    )
    assert policy["default-src"] == "'none'"
    (code,) = parsed.code()
    assert policy["script-src"] == _hash(code)
    assert "connect-src" not in policy  # so default-src 'none' covers every fetch


def test_a_conversation_page_shows_every_message_and_keeps_hostile_text_as_text(
    store: Store,
) -> None:
    parsed = parse_page(
        conversation_page(store, conversation_with_tools(store), None, redact=False)
    )
    assert parsed.tags.count("article") == 5  # the system prompt and the four messages
    assert parsed.tags.count("script") == 2
    assert "img" not in parsed.tags
    assert HOSTILE_TEXT.replace("\0", "\ufffd") in parsed.texts["user-text"]
    messages = parsed.data()["messages"]
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool", "assistant"]
    assert messages[1]["text"] == HOSTILE_TEXT
    assert messages[2]["tool_calls"] == [
        {"id": "call_1", "name": "lookup", "arguments": '{"q": "x"}'}
    ]


def test_tool_calls_and_results_are_folded(store: Store) -> None:
    parsed = parse_page(
        conversation_page(store, conversation_with_tools(store), None, redact=False)
    )
    assert parsed.tags.count("details") == 2
    folded = parsed.texts["role-tool"][0] + parsed.texts["role-assistant"][0]
    assert "lookup said: forty-two" in folded
    assert '{"q": "x"}' in folded


def test_redact_leaves_no_message_text(store: Store) -> None:
    source = conversation_page(store, conversation_with_tools(store), None, redact=True)
    for said in ("terse", "pwned", "forty-two", '"q"'):
        assert said not in source
    parsed = parse_page(source)
    assert parsed.tags.count("article") == 5
    assert parsed.data()["redacted"] is True
    assert all(m["text"] is None for m in parsed.data()["messages"])


def test_a_named_slot_is_shown(store: Store) -> None:
    conversation_with_tools(store)
    store.create_slot(SID, "side")
    parsed = parse_page(conversation_page(store, SID, "side", redact=False))
    assert parsed.data()["slot"] == "side"
    assert [m["role"] for m in parsed.data()["messages"]] == ["system"]
