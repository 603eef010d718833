"""The fake OpenAI server, checked with the standard library client before agctl relies on it."""

from __future__ import annotations

import http.client
import json
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import pytest
from fake_openai import FakeOpenAI

CHAT = "/v1/chat/completions"


def chat_body(text: str = "hello", **extra: Any) -> dict[str, Any]:
    return {"model": "test-model", "messages": [{"role": "user", "content": text}], **extra}


def send(
    server: FakeOpenAI,
    body: Any,
    *,
    path: str = CHAT,
    method: str = "POST",
    headers: dict[str, str] | None = None,
    timeout: float = 2,
    conn: http.client.HTTPConnection | None = None,
) -> http.client.HTTPResponse:
    """Send one request; the caller reads the response (streams line by line)."""
    conn = conn or http.client.HTTPConnection("127.0.0.1", server.port, timeout=timeout)
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    all_headers = {"Content-Type": "application/json", **(headers or {})}
    conn.request(method, path, body=data if method == "POST" else None, headers=all_headers)
    return conn.getresponse()


def send_json(server: FakeOpenAI, body: Any, **kwargs: Any) -> tuple[int, Any]:
    response = send(server, body, **kwargs)
    return response.status, json.loads(response.read())


def read_events(response: http.client.HTTPResponse) -> list[str]:
    """The `data:` payloads of an SSE response, in order, read line by line."""
    events = []
    while line := response.readline():
        text = line.decode().rstrip("\n")
        if text.startswith("data: "):
            events.append(text.removeprefix("data: "))
        else:
            assert text == "", f"unexpected SSE line {text!r}"
    return events


@dataclass
class Assembled:
    text: str = ""
    reasoning: str = ""
    tools: dict[int, dict[str, str]] = field(default_factory=dict)
    finish_reason: str | None = None
    usage: Any = None
    chunks: list[dict[str, Any]] = field(default_factory=list)
    done: bool = False


def assemble(events: list[str]) -> Assembled:
    """Rebuild a reply from stream events the way a client does."""
    result = Assembled()
    for event in events:
        assert not result.done, "nothing may follow [DONE]"
        if event == "[DONE]":
            result.done = True
            continue
        chunk = json.loads(event)
        assert chunk["object"] == "chat.completion.chunk"
        result.chunks.append(chunk)
        if chunk.get("usage"):
            result.usage = chunk["usage"]
        for choice in chunk["choices"]:
            delta = choice["delta"]
            result.text += delta.get("content") or ""
            result.reasoning += delta.get("reasoning_content") or ""
            for call in delta.get("tool_calls", []):
                tool = result.tools.setdefault(call["index"], {"arguments": ""})
                if "id" in call:
                    tool["id"] = call["id"]
                    tool["name"] = call["function"]["name"]
                tool["arguments"] += call["function"].get("arguments", "")
            if choice["finish_reason"] is not None:
                result.finish_reason = choice["finish_reason"]
    return result


def stream(server: FakeOpenAI, body: dict[str, Any]) -> Assembled:
    response = send(server, body)
    assert response.status == 200
    assert response.getheader("Content-Type") == "text/event-stream"
    return assemble(read_events(response))


# Replies


def test_unscripted_reply_echoes_the_last_user_message(server: FakeOpenAI) -> None:
    body = {
        "model": "test-model",
        "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "first"},
            {"role": "assistant", "content": "ok"},
            {"role": "user", "content": [{"type": "text", "text": "second question"}]},
        ],
    }
    status, reply = send_json(server, body)
    assert status == 200
    assert reply["object"] == "chat.completion"
    assert reply["model"] == "test-model"
    [choice] = reply["choices"]
    assert choice["message"] == {
        "role": "assistant",
        "content": "echo: second question",
        "refusal": None,
    }
    assert choice["finish_reason"] == "stop"
    prompt_chars = len("be brief" + "first" + "ok" + "second question")
    completion_chars = len("echo: second question")
    assert reply["usage"] == {
        "prompt_tokens": prompt_chars // 4 + 1,
        "completion_tokens": completion_chars // 4 + 1,
        "total_tokens": prompt_chars // 4 + 1 + completion_chars // 4 + 1,
    }


def test_scripted_reply_carries_reasoning_tool_calls_and_usage(server: FakeOpenAI) -> None:
    usage = {"prompt_tokens": 7, "completion_tokens": 5, "total_tokens": 12}
    server.reply(
        reasoning="thinking",
        tool_calls=[{"id": "call_1", "name": "lookup", "arguments": {"q": "x"}}],
        usage=usage,
    )
    status, reply = send_json(server, chat_body())
    assert status == 200
    [choice] = reply["choices"]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"] == {
        "role": "assistant",
        "content": None,
        "refusal": None,
        "reasoning_content": "thinking",
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "lookup", "arguments": '{"q": "x"}'},
            }
        ],
    }
    assert reply["usage"] == usage


def test_scripted_replies_are_used_in_order_then_echo(server: FakeOpenAI) -> None:
    server.reply("one", finish_reason="length")
    server.reply("two")
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=2)
    contents = []
    for _ in range(3):
        response = send(server, chat_body("again"), conn=conn)
        choice = json.loads(response.read())["choices"][0]
        contents.append((choice["message"]["content"], choice["finish_reason"]))
    assert contents == [("one", "length"), ("two", "stop"), ("echo: again", "stop")]
    assert server.pending() == (0, 0)


# Streaming


def test_stream_reassembles_reasoning_text_and_tool_calls(server: FakeOpenAI) -> None:
    arguments = '{"path": "/tmp/notes.txt", "limit": 20}'
    server.reply(
        "Here are the notes you asked for.",
        reasoning="The user wants notes, so read the file.",
        tool_calls=[
            {"id": "call_a", "name": "read_file", "arguments": arguments},
            {"id": "call_b", "name": "now", "arguments": "{}"},
        ],
    )
    result = stream(server, chat_body(stream=True))
    assert result.done
    assert result.text == "Here are the notes you asked for."
    assert result.reasoning == "The user wants notes, so read the file."
    assert result.tools == {
        0: {"id": "call_a", "name": "read_file", "arguments": arguments},
        1: {"id": "call_b", "name": "now", "arguments": "{}"},
    }
    assert result.finish_reason == "tool_calls"
    assert result.usage is None
    assert all("usage" not in chunk for chunk in result.chunks)
    assert len({chunk["id"] for chunk in result.chunks}) == 1

    deltas = [chunk["choices"][0]["delta"] for chunk in result.chunks]
    assert deltas[0]["role"] == "assistant"
    reasoning_at = [i for i, d in enumerate(deltas) if d.get("reasoning_content")]
    text_at = [i for i, d in enumerate(deltas) if d.get("content")]
    assert len(reasoning_at) > 1
    assert len(text_at) > 1
    assert max(reasoning_at) < min(text_at)
    first_call_fragments = [
        d["tool_calls"][0] for d in deltas if d.get("tool_calls", [{}])[0].get("index") == 0
    ]
    assert first_call_fragments[0]["function"] == {"name": "read_file", "arguments": ""}
    assert all("id" not in f for f in first_call_fragments[1:])
    assert len(first_call_fragments[1:]) == 3


def test_stream_of_an_unscripted_reply_echoes(server: FakeOpenAI) -> None:
    result = stream(server, chat_body("are you there", stream=True))
    assert result.done
    assert result.text == "echo: are you there"
    assert result.reasoning == ""
    assert result.finish_reason == "stop"


@pytest.mark.parametrize(
    ("options", "expect_usage"),
    [({"include_usage": True}, True), ({"include_usage": False}, False), (None, False)],
)
def test_usage_chunk_only_with_include_usage(
    server: FakeOpenAI, options: dict[str, bool] | None, expect_usage: bool
) -> None:
    body = chat_body("count me", stream=True)
    if options is not None:
        body["stream_options"] = options
    result = stream(server, body)
    assert result.done
    *content_chunks, last = result.chunks
    if expect_usage:
        assert last["choices"] == []
        assert last["usage"] == {
            "prompt_tokens": len("count me") // 4 + 1,
            "completion_tokens": len("echo: count me") // 4 + 1,
            "total_tokens": len("count me") // 4 + 1 + len("echo: count me") // 4 + 1,
        }
        assert all(chunk["usage"] is None for chunk in content_chunks)
    else:
        assert last["choices"][0]["finish_reason"] == "stop"
        assert all("usage" not in chunk for chunk in result.chunks)


# Faults


@pytest.mark.parametrize(
    ("status", "error_type", "code"),
    [
        (400, "invalid_request_error", None),
        (401, "invalid_request_error", "invalid_api_key"),
        (404, "invalid_request_error", None),
        (422, "invalid_request_error", None),
        (429, "requests", "rate_limit_exceeded"),
        (500, "server_error", None),
        (502, "server_error", None),
        (503, "server_error", None),
    ],
)
def test_status_fault_sends_an_openai_error_body(
    server: FakeOpenAI, status: int, error_type: str, code: str | None
) -> None:
    server.fail("status", status=status, message="injected")
    response = send(server, chat_body(stream=True))
    assert response.status == status
    assert response.getheader("Content-Type") == "application/json"
    assert response.getheader("Retry-After") is None
    assert json.loads(response.read()) == {
        "error": {"message": "injected", "type": error_type, "param": None, "code": code}
    }


def test_status_fault_with_retry_after_then_normal_reply(server: FakeOpenAI) -> None:
    server.fail("status", status=429, retry_after=2)
    server.reply("after the wait")
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=2)
    response = send(server, chat_body(), conn=conn)
    assert response.status == 429
    assert response.getheader("Retry-After") == "2"
    assert json.loads(response.read())["error"]["message"]
    status, reply = send_json(server, chat_body(), conn=conn)
    assert status == 200
    assert reply["choices"][0]["message"]["content"] == "after the wait"


def test_malformed_sse_sends_one_good_chunk_then_broken_json(server: FakeOpenAI) -> None:
    server.fail("malformed_sse")
    response = send(server, chat_body(stream=True))
    assert response.status == 200
    good, bad = read_events(response)
    assert json.loads(good)["object"] == "chat.completion.chunk"
    assert bad == "{not json"
    with pytest.raises(json.JSONDecodeError):
        json.loads(bad)


def test_slow_fault_times_out_the_client_and_does_not_hold_up_shutdown() -> None:
    fake = FakeOpenAI().start()
    fake.fail("slow", seconds=30)
    with pytest.raises(TimeoutError):
        send(fake, chat_body(), timeout=0.2).read()
    started = time.monotonic()
    fake.stop()
    assert time.monotonic() - started < 10  # not the 30 s the fault sleeps
    assert fake.errors == []


def test_slow_fault_answers_with_echo_and_keeps_the_scripted_reply(server: FakeOpenAI) -> None:
    server.fail("slow", seconds=0.2)
    server.reply("kept for the retry")
    started = time.monotonic()
    status, reply = send_json(server, chat_body("wait"))
    assert time.monotonic() - started >= 0.2
    assert status == 200
    assert reply["choices"][0]["message"]["content"] == "echo: wait"
    _, retry = send_json(server, chat_body("wait"))
    assert retry["choices"][0]["message"]["content"] == "kept for the retry"


def test_drop_mid_stream_closes_without_done(server: FakeOpenAI) -> None:
    server.fail("drop_mid_stream")
    response = send(server, chat_body(stream=True))
    assert response.status == 200
    with pytest.raises(http.client.IncompleteRead) as cut:
        response.read()
    events = [
        line.removeprefix("data: ") for line in cut.value.partial.decode().split("\n") if line
    ]
    assert len(events) == 2
    assert "[DONE]" not in events
    assert all(json.loads(event)["choices"][0]["finish_reason"] is None for event in events)


def test_drop_of_a_non_streaming_reply_leaves_the_body_short(server: FakeOpenAI) -> None:
    server.fail("drop_mid_stream")
    response = send(server, chat_body())
    assert response.status == 200
    assert response.getheader("Content-Length") == "4096"
    with pytest.raises(http.client.IncompleteRead):
        response.read()


def test_garbage_is_a_200_that_is_not_json(server: FakeOpenAI) -> None:
    server.fail("garbage")
    response = send(server, chat_body())
    assert response.status == 200
    assert response.getheader("Content-Type") == "application/json"
    with pytest.raises(json.JSONDecodeError):
        json.loads(response.read())


def test_faults_come_before_replies_one_per_request(server: FakeOpenAI) -> None:
    server.reply("scripted")
    server.fail("status", status=503)
    server.fail("garbage")
    assert server.pending() == (1, 2)
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=2)
    first = send(server, chat_body(), conn=conn)
    first.read()
    second = send(server, chat_body(), conn=conn)
    second.read()
    status, third = send_json(server, chat_body(), conn=conn)
    assert (first.status, second.status, status) == (503, 200, 200)
    assert third["choices"][0]["message"]["content"] == "scripted"
    assert server.pending() == (0, 0)


def test_unknown_fault_kind_is_refused(server: FakeOpenAI) -> None:
    with pytest.raises(ValueError, match="unknown fault kind"):
        server.fail("teapot")  # type: ignore[arg-type]


# Requests and validation


def test_request_log_records_path_headers_and_body(server: FakeOpenAI) -> None:
    body = chat_body("logged", stream=True, stream_options={"include_usage": True})
    response = send(server, body, headers={"Authorization": "Bearer sk-test"})
    read_events(response)
    models = send(server, None, method="GET", path="/v1/models")
    assert json.loads(models.read())["data"] == [
        {"id": "fake-model", "object": "model", "created": 0, "owned_by": "fake"}
    ]
    first, second = server.requests
    assert (first.method, first.path, first.body) == ("POST", CHAT, body)
    assert first.headers["authorization"] == "Bearer sk-test"
    assert first.headers["Authorization"] == "Bearer sk-test"
    assert first.headers.get("CONTENT-TYPE") == "application/json"
    assert "content-length" in first.headers
    assert (second.method, second.path, second.body) == ("GET", "/v1/models", None)


def test_api_key_is_checked_when_set() -> None:
    with FakeOpenAI(api_key="sk-right") as fake:
        status, error = send_json(fake, chat_body(), headers={"Authorization": "Bearer sk-no"})
        assert status == 401
        assert error["error"]["code"] == "invalid_api_key"
        status, _ = send_json(fake, chat_body(), headers={"Authorization": "Bearer sk-right"})
        assert status == 200
    assert len(fake.requests) == 2


@pytest.mark.parametrize(
    ("body", "path", "status", "fragment"),
    [
        (b"{broken", CHAT, 400, "could not parse the JSON"),
        ({"messages": [{"role": "user", "content": "x"}]}, CHAT, 400, "model"),
        ({"model": "m"}, CHAT, 400, "messages"),
        (chat_body(), "/v1/completions", 404, "Invalid URL"),
    ],
)
def test_invalid_requests_get_openai_errors(
    server: FakeOpenAI, body: Any, path: str, status: int, fragment: str
) -> None:
    got_status, error = send_json(server, body, path=path)
    assert got_status == status
    assert fragment in error["error"]["message"]
    assert len(server.requests) == 1


def test_concurrent_requests_are_all_answered_and_logged(server: FakeOpenAI) -> None:
    replies: dict[int, str] = {}

    def ask(n: int) -> None:
        _, reply = send_json(server, chat_body(f"question {n}"))
        replies[n] = reply["choices"][0]["message"]["content"]

    threads = [threading.Thread(target=ask, args=(n,)) for n in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert replies == {n: f"echo: question {n}" for n in range(16)}
    assert len(server.requests) == 16


def test_a_hook_runs_once_before_the_next_completion_is_answered(server: FakeOpenAI) -> None:
    seen: list[int] = []
    server.before_reply(lambda: seen.append(len(server.requests)))

    status, first = send_json(server, chat_body("one"))
    assert (status, seen) == (200, [1])  # after the request arrived, before its answer
    assert first["choices"][0]["message"]["content"] == "echo: one"
    send_json(server, chat_body("two"))
    assert seen == [1]


def test_a_failing_hook_is_kept_in_errors_and_the_request_answered() -> None:
    with FakeOpenAI() as server:
        server.before_reply(lambda: 1 / 0)
        status, _ = send_json(server, chat_body())
    assert status == 200
    assert [type(e) for e in server.errors] == [ZeroDivisionError]
