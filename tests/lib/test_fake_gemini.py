"""The fake Gemini server, driven with httpx over real sockets before agctl relies on it."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from fake_gemini import FakeGemini, gemini_usage, prompt_chars

KEY = "AIza-fake-key"
MODEL = "gemini-2.5-flash"


@pytest.fixture
def gemini() -> Iterator[FakeGemini]:
    """A fake Gemini server on loopback; a test fails if it saw a bad request."""
    with FakeGemini(api_key=KEY) as fake:
        yield fake
    assert fake.errors == []


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "parts": [{"text": text}]}


def body(*contents: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"contents": list(contents) or [user("hello")], **extra}


def post(
    server: FakeGemini,
    payload: Any,
    *,
    stream: bool = False,
    key: str | None = KEY,
    model: str = MODEL,
    timeout: float = 5,
) -> httpx.Response:
    headers = {"x-goog-api-key": key} if key is not None else {}
    content = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    headers["Content-Type"] = "application/json"
    return httpx.post(
        server.url(model, stream=stream), content=content, headers=headers, timeout=timeout
    )


def events(response: httpx.Response) -> list[dict[str, Any]]:
    """The JSON of each SSE `data:` event, each ended by a blank line (CRLF CRLF)."""
    raw = response.content
    assert raw.endswith(b"\r\n\r\n")
    chunks = []
    for event in raw.split(b"\r\n\r\n")[:-1]:
        assert event.startswith(b"data: "), event
        chunks.append(json.loads(event.removeprefix(b"data: ")))
    return chunks


def assemble(chunks: list[dict[str, Any]]) -> dict[str, Any]:
    """Rebuild a reply from stream chunks the way a client does: parts appended, the last
    finishReason and the last usageMetadata kept (the counts are not deltas)."""
    result: dict[str, Any] = {"thought": "", "text": "", "calls": [], "signatures": []}
    for chunk in chunks:
        assert set(chunk) >= {"candidates", "usageMetadata", "modelVersion", "responseId"}
        [candidate] = chunk["candidates"]
        for part in candidate.get("content", {}).get("parts", []):
            if "thoughtSignature" in part:
                result["signatures"].append(part["thoughtSignature"])
            if part.get("thought"):
                result["thought"] += part["text"]
            elif "text" in part:
                result["text"] += part["text"]
            elif "functionCall" in part:
                result["calls"].append(part["functionCall"])
        if "finishReason" in candidate:
            result["finish"] = candidate["finishReason"]
        result["usage"] = chunk["usageMetadata"]
    return result


# Whole replies


def test_unscripted_reply_echoes_the_last_user_text(gemini: FakeGemini) -> None:
    request = body(
        user("first"),
        {"role": "model", "parts": [{"text": "ok"}]},
        {"role": "user", "parts": [{"text": "second "}, {"text": "question"}]},
        systemInstruction={"parts": [{"text": "be brief"}]},
    )
    response = post(gemini, request)
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json; charset=UTF-8"
    reply = response.json()
    assert reply["candidates"] == [
        {
            "content": {"parts": [{"text": "echo: second question"}], "role": "model"},
            "finishReason": "STOP",
            "index": 0,
        }
    ]
    prompt = len("be brief" + "first" + "ok" + "second question") // 4 + 1
    candidates = len("echo: second question") // 4 + 1
    assert reply["usageMetadata"] == {
        "promptTokenCount": prompt,
        "candidatesTokenCount": candidates,
        "totalTokenCount": prompt + candidates,
        "promptTokensDetails": [{"modality": "TEXT", "tokenCount": prompt}],
    }
    assert reply["modelVersion"] == MODEL
    assert reply["responseId"] == "fake-response-1"


def test_function_calls_thoughts_and_signature_in_a_whole_reply(gemini: FakeGemini) -> None:
    gemini.reply(
        "Let me look.",
        thought="The user wants the weather; call the tool.",
        function_calls=[
            {"name": "weather", "args": {"city": "Paris"}},
            {"name": "time", "args": {}, "id": "call-2"},
        ],
    )
    thinking = {"thinkingConfig": {"includeThoughts": True, "thinkingBudget": 1024}}
    reply = post(gemini, body(generationConfig=thinking)).json()
    [candidate] = reply["candidates"]
    assert candidate["finishReason"] == "STOP"
    thought, text, first, second = candidate["content"]["parts"]
    assert thought == {"text": "The user wants the weather; call the tool.", "thought": True}
    assert text == {"text": "Let me look."}
    signature = first.pop("thoughtSignature")
    assert signature and json.dumps(signature).isascii()
    assert first == {"functionCall": {"name": "weather", "args": {"city": "Paris"}}}
    assert second == {"functionCall": {"id": "call-2", "name": "time", "args": {}}}
    usage = reply["usageMetadata"]
    assert usage["thoughtsTokenCount"] == len(thought["text"]) // 4 + 1
    assert usage["totalTokenCount"] == (
        usage["promptTokenCount"] + usage["candidatesTokenCount"] + usage["thoughtsTokenCount"]
    )


def test_thoughts_are_only_sent_when_asked_for_but_always_counted(gemini: FakeGemini) -> None:
    gemini.reply("answer", thought="hidden reasoning", signature="c2lnLTE=")
    reply = post(gemini, body(generationConfig={"thinkingConfig": {"thinkingBudget": 512}})).json()
    parts = reply["candidates"][0]["content"]["parts"]
    assert parts == [{"text": "answer", "thoughtSignature": "c2lnLTE="}]
    assert reply["usageMetadata"]["thoughtsTokenCount"] == len("hidden reasoning") // 4 + 1


def test_each_reply_with_calls_gets_its_own_signature(gemini: FakeGemini) -> None:
    gemini.reply(function_calls=[{"name": "a"}])
    gemini.reply(function_calls=[{"name": "a"}])
    signatures = [
        post(gemini, body()).json()["candidates"][0]["content"]["parts"][0]["thoughtSignature"]
        for _ in range(2)
    ]
    assert len(set(signatures)) == 2


@pytest.mark.parametrize(
    "finish", ["MAX_TOKENS", "SAFETY", "RECITATION", "MALFORMED_FUNCTION_CALL"]
)
def test_other_finish_reasons_and_a_candidate_without_content(
    gemini: FakeGemini, finish: str
) -> None:
    gemini.reply("cut sho", finish_reason=finish)
    gemini.reply(finish_reason=finish)
    first = post(gemini, body()).json()["candidates"][0]
    assert (first["content"]["parts"], first["finishReason"]) == ([{"text": "cut sho"}], finish)
    assert post(gemini, body()).json()["candidates"] == [{"finishReason": finish, "index": 0}]


def test_a_blocked_prompt_has_prompt_feedback_and_no_candidates(gemini: FakeGemini) -> None:
    gemini.reply(block_reason="SAFETY")
    gemini.reply(block_reason="PROHIBITED_CONTENT")
    whole = post(gemini, body()).json()
    assert whole["promptFeedback"] == {"blockReason": "SAFETY"}
    assert "candidates" not in whole
    [chunk] = events(post(gemini, body(), stream=True))
    assert chunk["promptFeedback"] == {"blockReason": "PROHIBITED_CONTENT"}
    assert "candidates" not in chunk


def test_non_ascii_text_is_sent_as_utf8(gemini: FakeGemini) -> None:
    gemini.reply("naïve✓")
    gemini.reply("naïve✓")
    assert "naïve✓".encode() in post(gemini, body()).content
    assert "naïve✓".encode() in post(gemini, body(), stream=True).content


def test_scripted_usage_is_sent_verbatim(gemini: FakeGemini) -> None:
    usage = gemini_usage(5000, 20, cached=4096, thoughts=300)
    gemini.reply("ok", usage=usage)
    assert post(gemini, body()).json()["usageMetadata"] == {
        "promptTokenCount": 5000,
        "candidatesTokenCount": 20,
        "totalTokenCount": 5320,
        "cachedContentTokenCount": 4096,
        "promptTokensDetails": [{"modality": "TEXT", "tokenCount": 5000}],
        "cacheTokensDetails": [{"modality": "TEXT", "tokenCount": 4096}],
        "thoughtsTokenCount": 300,
    }


def test_a_tool_loop_sends_the_signature_back_and_gets_the_answer(gemini: FakeGemini) -> None:
    gemini.reply(function_calls=[{"name": "weather", "args": {"city": "Oslo"}}])
    gemini.reply("It is cold in Oslo.")
    history = [user("weather in Oslo?")]
    call_turn = post(gemini, body(*history)).json()["candidates"][0]["content"]
    history += [
        call_turn,
        {
            "role": "user",
            "parts": [{"functionResponse": {"name": "weather", "response": {"temp": -3}}}],
        },
    ]
    final = post(gemini, body(*history)).json()
    assert final["candidates"][0]["content"]["parts"] == [{"text": "It is cold in Oslo."}]
    sent = gemini.requests[-1].body["contents"][1]["parts"][0]
    assert sent["thoughtSignature"] == call_turn["parts"][0]["thoughtSignature"]
    unscripted = post(gemini, body(*history)).json()["candidates"][0]["content"]["parts"]
    assert unscripted == [{"text": "echo: functionResponse weather"}]


# Streams


def test_stream_splits_text_and_sends_calls_whole_in_one_chunk(gemini: FakeGemini) -> None:
    gemini.reply(
        "Here are the notes you asked for.",
        thought="The user wants notes, so read the file.",
        function_calls=[
            {"name": "read_file", "args": {"path": "/tmp/notes.txt", "limit": 20}},
            {"name": "now", "args": {}},
        ],
    )
    request = body(generationConfig={"thinkingConfig": {"includeThoughts": True}})
    response = post(gemini, request, stream=True)
    assert response.status_code == 200
    assert response.headers["content-type"] == "text/event-stream"
    chunks = events(response)
    result = assemble(chunks)
    assert result["thought"] == "The user wants notes, so read the file."
    assert result["text"] == "Here are the notes you asked for."
    assert result["calls"] == [
        {"name": "read_file", "args": {"path": "/tmp/notes.txt", "limit": 20}},
        {"name": "now", "args": {}},
    ]
    assert len(result["signatures"]) == 1
    assert result["finish"] == "STOP"

    parts = [chunk["candidates"][0]["content"]["parts"] for chunk in chunks]
    thought_at = [i for i, p in enumerate(parts) if p[0].get("thought")]
    text_at = [i for i, p in enumerate(parts) if "text" in p[0] and not p[0].get("thought")]
    assert len(thought_at) > 1 and len(text_at) > 1
    assert max(thought_at) < min(text_at)
    *_, last = parts
    assert [list(part) for part in last] == [["functionCall", "thoughtSignature"], ["functionCall"]]
    assert all("finishReason" not in chunk["candidates"][0] for chunk in chunks[:-1])
    assert len({chunk["responseId"] for chunk in chunks}) == 1


def test_stream_usage_is_running_totals_the_last_one_the_replys(gemini: FakeGemini) -> None:
    words = "count these words please, " * 8
    gemini.reply(words, thought="a long deliberation " * 10)
    thinking = {"thinkingConfig": {"includeThoughts": True}}
    chunks = events(post(gemini, body(user(words), generationConfig=thinking), stream=True))
    assert len(chunks) > 10
    usages = [chunk["usageMetadata"] for chunk in chunks]
    prompt = len(words) // 4 + 1
    assert {u["promptTokenCount"] for u in usages} == {prompt}
    for name in ("thoughtsTokenCount", "candidatesTokenCount", "totalTokenCount"):
        counts = [u[name] for u in usages]
        assert counts == sorted(counts), name
        assert counts[0] < counts[-1], name
    assert all(
        u["totalTokenCount"] == prompt + u["thoughtsTokenCount"] + u["candidatesTokenCount"]
        for u in usages
    )
    gemini.reply(words, thought="a long deliberation " * 10)
    whole = post(gemini, body(user(words), generationConfig=thinking)).json()
    assert usages[-1] == whole["usageMetadata"]


def test_stream_usage_can_come_apart_after_the_content(gemini: FakeGemini) -> None:
    gemini.reply("two words", usage=gemini_usage(10, 2), usage_apart=True)
    *content, tail = events(post(gemini, body(), stream=True))
    assert assemble(content)["text"] == "two words"
    assert all("finishReason" not in chunk["candidates"][0] for chunk in content)
    assert tail["candidates"] == [{"finishReason": "STOP", "index": 0}]
    assert tail["usageMetadata"] == gemini_usage(10, 2)
    assert content[0]["usageMetadata"]["candidatesTokenCount"] < 2


def test_stream_text_signature_rides_on_the_last_text_chunk(gemini: FakeGemini) -> None:
    gemini.reply("abcdefgh", signature="c2ln", chunk_size=3)
    chunks = events(post(gemini, body(), stream=True))
    parts = [chunk["candidates"][0]["content"]["parts"] for chunk in chunks]
    assert parts == [
        [{"text": "abc"}],
        [{"text": "def"}],
        [{"text": "gh", "thoughtSignature": "c2ln"}],
    ]


def test_stream_without_alt_sse_is_one_json_array(gemini: FakeGemini) -> None:
    url = gemini.url(MODEL, stream=True).removesuffix("?alt=sse")
    response = httpx.post(url, json=body(user("array")), headers={"x-goog-api-key": KEY})
    assert response.status_code == 200
    chunks = response.json()
    assert isinstance(chunks, list) and len(chunks) > 1
    assert assemble(chunks)["text"] == "echo: array"


# Authentication and validation


def test_a_missing_key_is_refused_as_google_does(gemini: FakeGemini) -> None:
    response = post(gemini, body(), key=None)
    assert response.status_code == 403
    error = response.json()["error"]
    assert (error["code"], error["status"]) == (403, "PERMISSION_DENIED")
    assert "unregistered callers" in error["message"]


def test_a_wrong_key_is_refused_with_api_key_invalid(gemini: FakeGemini) -> None:
    gemini.reply("kept")
    response = post(gemini, body(), key="AIza-wrong")
    assert response.status_code == 400
    error = response.json()["error"]
    assert (error["code"], error["status"]) == (400, "INVALID_ARGUMENT")
    assert error["message"] == "API key not valid. Please pass a valid API key."
    assert error["details"][0]["reason"] == "API_KEY_INVALID"
    assert gemini.pending() == (1, 0)


def test_the_key_may_come_as_a_query_parameter(gemini: FakeGemini) -> None:
    url = gemini.url(MODEL) + f"?key={KEY}"
    assert httpx.post(url, json=body()).status_code == 200
    assert httpx.post(gemini.url(MODEL) + "?key=nope", json=body()).status_code == 400
    models = httpx.get(f"{gemini.base_url}/v1beta/models?key={KEY}")
    assert models.json() == {"models": [{"name": "models/fake-gemini"}]}


def test_without_a_configured_key_any_key_is_taken_but_not_none() -> None:
    with FakeGemini() as fake:
        assert post(fake, body(), key="anything").status_code == 200
        assert post(fake, body(), key=None).status_code == 403
    assert fake.errors == []


@pytest.mark.parametrize(
    ("payload", "fragment"),
    [
        (b"{broken", "Invalid JSON payload"),
        ({"contents": []}, "contents is not specified"),
        ({"messages": [{"role": "user", "content": "x"}]}, 'Unknown name "messages"'),
        (body(user("x"), generationConfig={"max_tokens": 5}), 'Unknown name "max_tokens"'),
        (
            body(generationConfig={"thinkingConfig": {"budget": 5}}),
            'Unknown name "budget"',
        ),
        ({"contents": [{"role": "assistant", "parts": [{"text": "x"}]}]}, "valid role"),
        ({"contents": [{"role": "user", "parts": [{}]}]}, "oneof field 'data'"),
        (
            {"contents": [{"role": "user", "parts": [{"text": ""}]}]},
            "contents[0].parts[0].data: required oneof field 'data'",
        ),
        (
            body(user("a"), {"role": "model", "parts": [{"text": "", "thoughtSignature": "c2ln"}]}),
            "contents[1].parts[0].data: required oneof field 'data'",
        ),
        (body(user("a"), {"role": "user", "parts": []}), "contents.parts must not be empty"),
        (
            body(user("a"), systemInstruction={"parts": [{"text": "x"}, {"text": ""}]}),
            "system_instruction.parts[1].data: required oneof field 'data'",
        ),
        (
            {
                "contents": [
                    {"role": "user", "parts": [{"text": "a", "functionCall": {"name": "f"}}]}
                ]
            },
            "oneof field 'data'",
        ),
        ({"contents": [{"role": "user", "parts": [{"txt": "a"}]}]}, 'Unknown name "txt"'),
        (
            body(
                user("go"),
                {
                    "role": "model",
                    "parts": [{"functionCall": {"name": "a"}}, {"functionCall": {"name": "b"}}],
                },
                {
                    "role": "user",
                    "parts": [{"functionResponse": {"name": "a", "response": {}}}],
                },
            ),
            "number of function response parts",
        ),
    ],
)
def test_invalid_requests_get_google_errors(
    gemini: FakeGemini, payload: Any, fragment: str
) -> None:
    response = post(gemini, payload)
    assert response.status_code == 400
    error = response.json()["error"]
    assert (error["code"], error["status"]) == (400, "INVALID_ARGUMENT")
    assert fragment in error["message"]
    assert len(gemini.requests) == 1


def test_snake_case_field_names_are_accepted_as_google_json_does(gemini: FakeGemini) -> None:
    request = {
        "contents": [user("snake")],
        "system_instruction": {"parts": [{"text": "sys"}]},
        "generation_config": {
            "max_output_tokens": 10,
            "thinking_config": {"include_thoughts": True},
        },
    }
    gemini.reply("ok", thought="t")
    parts = post(gemini, request).json()["candidates"][0]["content"]["parts"]
    assert parts == [{"text": "t", "thought": True}, {"text": "ok"}]


def test_require_signatures_refuses_an_unsigned_function_call() -> None:
    call: dict[str, Any] = {"functionCall": {"name": "f", "args": {}}}
    call_turn = {"role": "model", "parts": [call]}
    answer = {"role": "user", "parts": [{"functionResponse": {"name": "f", "response": {}}}]}
    with FakeGemini(require_signatures=True) as fake:
        refused = post(fake, body(user("go"), call_turn, answer))
        call["thoughtSignature"] = "c2ln"
        taken = post(fake, body(user("go"), call_turn, answer))
    assert refused.status_code == 400
    assert "thought_signature" in refused.json()["error"]["message"]
    assert taken.status_code == 200


def test_unknown_paths_get_not_found(gemini: FakeGemini) -> None:
    response = httpx.post(f"{gemini.base_url}/v1/chat/completions", json=body())
    assert response.status_code == 404
    assert response.json()["error"]["status"] == "NOT_FOUND"


# Faults


@pytest.mark.parametrize(
    ("status", "name"), [(429, "RESOURCE_EXHAUSTED"), (500, "INTERNAL"), (503, "UNAVAILABLE")]
)
def test_status_fault_with_retry_info_then_a_normal_reply(
    gemini: FakeGemini, status: int, name: str
) -> None:
    gemini.fail("status", status=status, retry_delay=2, message="injected")
    gemini.reply("after the wait")
    with httpx.Client(headers={"x-goog-api-key": KEY}) as client:
        refused = client.post(gemini.url(MODEL), json=body())
        answered = client.post(gemini.url(MODEL), json=body())
    assert refused.status_code == status
    assert "retry-after" not in refused.headers
    assert refused.json() == {
        "error": {
            "code": status,
            "message": "injected",
            "status": name,
            "details": [{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "2s"}],
        }
    }
    assert answered.json()["candidates"][0]["content"]["parts"] == [{"text": "after the wait"}]


def test_status_fault_can_carry_a_retry_after_header(gemini: FakeGemini) -> None:
    gemini.fail("status", status=503, retry_after=1.5)
    response = post(gemini, body(), stream=True)
    assert (response.status_code, response.headers["retry-after"]) == (503, "1.5")
    assert "details" not in response.json()["error"]


def test_malformed_sse_sends_one_good_chunk_then_broken_json(gemini: FakeGemini) -> None:
    gemini.fail("malformed_sse")
    raw = post(gemini, body(), stream=True).content
    good, bad, tail = raw.split(b"\r\n\r\n")
    assert json.loads(good.removeprefix(b"data: "))["candidates"][0]["content"]["parts"]
    assert (bad, tail) == (b"data: {not json", b"")


def test_drop_mid_stream_closes_after_two_unfinished_chunks(gemini: FakeGemini) -> None:
    gemini.fail("drop_mid_stream")
    received = b""
    with (
        pytest.raises(httpx.RemoteProtocolError),
        httpx.stream(
            "POST", gemini.url(MODEL, stream=True), json=body(), headers={"x-goog-api-key": KEY}
        ) as response,
    ):
        assert response.status_code == 200
        for data in response.iter_bytes():
            received += data
    chunks = [json.loads(e.removeprefix(b"data: ")) for e in received.split(b"\r\n\r\n") if e]
    assert len(chunks) == 2
    assert all("finishReason" not in chunk["candidates"][0] for chunk in chunks)


def test_drop_of_a_whole_reply_leaves_the_body_short(gemini: FakeGemini) -> None:
    gemini.fail("drop_mid_stream")
    with pytest.raises(httpx.RemoteProtocolError):
        post(gemini, body())


def test_garbage_is_a_200_that_is_not_json(gemini: FakeGemini) -> None:
    gemini.fail("garbage")
    gemini.fail("garbage", body=b'{"candidates": "not a list"}')
    response = post(gemini, body())
    assert response.status_code == 200
    with pytest.raises(json.JSONDecodeError):
        response.json()
    assert post(gemini, body()).json() == {"candidates": "not a list"}


def test_sse_fault_sends_the_events_given(gemini: FakeGemini) -> None:
    gemini.fail("sse", events=[{"candidates": []}, b": comment"])
    raw = post(gemini, body(), stream=True).content
    assert raw == b'data: {"candidates":[]}\r\n\r\n: comment\r\n\r\n'


def test_slow_fault_times_out_the_client_and_does_not_hold_up_shutdown() -> None:
    fake = FakeGemini().start()
    fake.fail("slow", seconds=600)
    with pytest.raises(httpx.ReadTimeout):
        post(fake, body(), key="k", timeout=0.2)
    stopper = threading.Thread(target=fake.stop)
    stopper.start()
    stopper.join(timeout=60)  # far below the 600 s the fault sleeps
    assert not stopper.is_alive()
    assert fake.errors == []


def test_slow_fault_answers_with_echo_and_keeps_the_scripted_reply(gemini: FakeGemini) -> None:
    gemini.fail("slow", seconds=0.2)
    gemini.reply("kept for the retry")
    slow = post(gemini, body(user("wait")))
    assert slow.json()["candidates"][0]["content"]["parts"] == [{"text": "echo: wait"}]
    retry = post(gemini, body(user("wait")))
    assert retry.json()["candidates"][0]["content"]["parts"] == [{"text": "kept for the retry"}]


def test_unknown_fault_kind_is_refused(gemini: FakeGemini) -> None:
    with pytest.raises(ValueError, match="unknown fault kind"):
        gemini.fail("teapot")  # type: ignore[arg-type]


# The implicit cache and the request log


def long_history(turns: int) -> list[dict[str, Any]]:
    """A conversation of `turns` user/model pairs, each message 400 characters (100 tokens)."""
    history = []
    for n in range(turns):
        history.append(user(f"question {n:03d} " + "q" * 387))
        history.append({"role": "model", "parts": [{"text": f"answer {n:03d} " + "a" * 389}]})
    return history


SYSTEM = {"parts": [{"text": "s" * 400}]}


def test_a_repeated_prefix_is_reported_as_cached(gemini: FakeGemini) -> None:
    history = long_history(6)  # 1,200 tokens after the 100-token system instruction
    first = post(gemini, body(*history, user("next"), systemInstruction=SYSTEM)).json()
    assert "cachedContentTokenCount" not in first["usageMetadata"]
    second = post(gemini, body(*history, user("other"), systemInstruction=SYSTEM)).json()
    usage = second["usageMetadata"]
    assert usage["cachedContentTokenCount"] == (400 + 12 * 400) // 4
    assert usage["cacheTokensDetails"] == [{"modality": "TEXT", "tokenCount": 1300}]
    assert usage["promptTokenCount"] == (400 + 12 * 400 + len("other")) // 4 + 1
    streamed = assemble(
        events(post(gemini, body(*history, user("next"), systemInstruction=SYSTEM), stream=True))
    )
    assert streamed["usage"]["cachedContentTokenCount"] == (400 + 12 * 400 + len("next")) // 4


def test_the_cache_needs_the_same_head_and_the_minimum(gemini: FakeGemini) -> None:
    history = long_history(6)
    post(gemini, body(*history, user("one"), systemInstruction=SYSTEM))
    other_system = {"parts": [{"text": "t" * 400}]}
    changed = post(gemini, body(*history, user("two"), systemInstruction=other_system)).json()
    assert "cachedContentTokenCount" not in changed["usageMetadata"]
    other_model = post(gemini, body(*history, user("two"), systemInstruction=SYSTEM), model="m2")
    assert "cachedContentTokenCount" not in other_model.json()["usageMetadata"]
    short = long_history(4)  # 100 + 800 tokens: below 1,024
    post(gemini, body(*short, user("a")))
    again = post(gemini, body(*short, user("b"))).json()
    assert "cachedContentTokenCount" not in again["usageMetadata"]


def test_the_cache_is_byte_exact() -> None:
    history = long_history(6)
    reordered = [{"parts": c["parts"], "role": c["role"]} for c in history]
    with FakeGemini(cache_min_tokens=1) as fake:
        post(fake, body(*history, user("x"), systemInstruction=SYSTEM), key="k")
        again = post(fake, body(*reordered, user("y"), systemInstruction=SYSTEM), key="k")
    # The same messages with their keys in another order: only the head is a hit.
    assert again.json()["usageMetadata"]["cachedContentTokenCount"] == 400 // 4


def test_a_lower_minimum_caches_short_prefixes() -> None:
    with FakeGemini(cache_min_tokens=1) as fake:
        post(fake, body(user("x" * 40), user("y")), key="k")
        usage = post(fake, body(user("x" * 40), user("z")), key="k").json()["usageMetadata"]
    assert usage["cachedContentTokenCount"] == 10
    assert prompt_chars(body(user("x" * 40), user("z"))) == 41


def test_requests_are_recorded_as_received(gemini: FakeGemini) -> None:
    raw = b'{"contents":[{"role":"user","parts":[{"text":"logged"}]}],  "tools":[]}'
    response = post(gemini, raw, stream=True)
    assert response.status_code == 200
    [recorded] = gemini.requests
    assert recorded.raw == raw
    assert recorded.method == "POST"
    assert recorded.path == f"/v1beta/models/{MODEL}:streamGenerateContent"
    assert recorded.headers["X-Goog-Api-Key"] == KEY
    assert recorded.body == json.loads(raw)
