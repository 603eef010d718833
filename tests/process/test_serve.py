"""`agctl serve` as a real process on loopback, its client the real `openai` SDK: whole and
streamed completions, the session a resent history finds, a regenerated message made a
branch, sessions by path and header, upstream a real HTTP server, and what it refuses."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import openai
import pytest
from fake_openai import FakeOpenAI
from serving import HELLO, SYSTEM, agctl, base_env, serving, sessions, upstream_env

ONWARD = {"role": "user", "content": "and then?"}


def test_a_client_resending_its_history_stays_in_one_session_and_a_regenerated_reply_branches(
    tmp_path: Path,
) -> None:
    env = base_env(tmp_path)
    with serving(env) as (url, _):
        client = openai.OpenAI(base_url=url, api_key="unused", max_retries=0)
        assert [model.id for model in client.models.list()] == ["offline"]

        first = client.chat.completions.with_raw_response.create(
            model="any", messages=[SYSTEM, HELLO]
        )
        reply = first.parse()
        session = first.headers["x-agctl-session"]
        assert first.headers["x-agctl-slot"] == "default"
        said = reply.choices[0].message.content
        assert said == (
            'Offline reply to turn 1 in slot "default": you said "hello there" '
            "(2 messages in context)."
        )
        assert reply.choices[0].finish_reason == "stop"
        assert reply.usage is not None and reply.usage.total_tokens > 0

        history = [SYSTEM, HELLO, {"role": "assistant", "content": said}]
        second = client.chat.completions.create(
            model="any", messages=[*history, {"role": "user", "content": "and then?"}]
        )
        assert 'turn 2 in slot "default"' in (second.choices[0].message.content or "")

        # The first reply regenerated (edited): a new slot from the divergence, streamed.
        edited = [SYSTEM, HELLO, {"role": "assistant", "content": "EDITED"}]
        stream = client.chat.completions.create(
            model="any", messages=[*edited, {"role": "user", "content": "third"}], stream=True
        )
        streamed = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
        assert streamed.startswith('Offline reply to turn 3 in slot "default-2": you said "third"')

        # The client goes on on its branch: found there, no new branch each turn; and its
        # old branch is found again when it goes back to it.
        branch = [
            *edited,
            {"role": "user", "content": "third"},
            {"role": "assistant", "content": streamed},
        ]
        onward = client.chat.completions.create(
            model="any", messages=[*branch, {"role": "user", "content": "fourth"}]
        )
        assert 'turn 4 in slot "default-2"' in (onward.choices[0].message.content or "")
        back = client.chat.completions.create(
            model="any",
            messages=[
                *history,
                {"role": "user", "content": "and then?"},
                {"role": "assistant", "content": second.choices[0].message.content},
                {"role": "user", "content": "fifth"},
            ],
        )
        assert 'turn 5 in slot "default"' in (back.choices[0].message.content or "")

    assert [s["id"] for s in sessions(env)] == [session]
    slots = json.loads(agctl(env, "-s", session, "slot", "list", "--json").stdout)
    assert {s["id"]: s["message_count"] for s in slots} == {"default": 6, "default-2": 6}
    kept = json.loads(
        agctl(env, "-s", session, "msg", "list", "--slot", "default-2", "--json").stdout
    )
    assert [m["content"] for m in kept][:3] == ["hello there", "EDITED", "third"]
    assert kept[3]["content"] == streamed
    listed = agctl(env, "-s", session, "msg", "list", "--slot", "default", "--json").stdout
    assert json.loads(listed)[1]["content"] == said


def test_a_session_named_by_path_or_header_gets_only_the_new_message(tmp_path: Path) -> None:
    env = base_env(tmp_path)
    assert agctl(env, "session", "new", "notes", "--system", "Keep notes.").returncode == 0
    assert agctl(env, "-s", "notes", "msg", "append", "user", "remember 42").returncode == 0
    with serving(env) as (url, _):
        root = url.removesuffix("/v1")
        by_path = openai.OpenAI(base_url=f"{root}/s/notes/v1", api_key="unused", max_retries=0)
        reply = by_path.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "recall"}]
        )
        # The slot's context was added: its system prompt, its message, the new one.
        assert "(3 messages in context)" in (reply.choices[0].message.content or "")

        by_header = openai.OpenAI(
            base_url=url,
            api_key="unused",
            max_retries=0,
            default_headers={"X-Agctl-Session": "notes"},
        )
        reply = by_header.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "again"}]
        )
        assert 'turn 2 in slot "default"' in (reply.choices[0].message.content or "")

        unknown = openai.OpenAI(base_url=f"{root}/s/nope/v1", api_key="unused", max_retries=0)
        with pytest.raises(openai.NotFoundError) as caught:
            unknown.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
        assert caught.value.body == {
            "message": "no session 'nope'",
            "type": "not_found_error",
            "code": 3,
            "param": None,
        }
    assert [s["id"] for s in sessions(env)] == ["notes"]


def test_upstream_is_any_profile_here_a_real_http_server(tmp_path: Path) -> None:
    with FakeOpenAI() as upstream:
        env = upstream_env(tmp_path, upstream.base_url)
        with serving(env) as (url, _):
            client = openai.OpenAI(base_url=url, api_key="unused", max_retries=0)
            reply = client.chat.completions.create(model="whatever", messages=[SYSTEM, HELLO])
        assert reply.choices[0].message.content == "echo: hello there"
        assert reply.model == "fake-model"
        (request,) = upstream.requests
        assert request.body["messages"] == [SYSTEM, HELLO]
        # The upstream key is the profile's; the client's never reaches it.
        assert request.headers["authorization"] == "Bearer k"


def test_what_it_refuses_is_an_openai_error_document(tmp_path: Path) -> None:
    env = base_env(tmp_path)
    with serving(env, "--max-body-bytes", "2000", "--token", "s3cret") as (url, _):
        endpoint = f"{url}/chat/completions"
        auth = {"authorization": "Bearer s3cret"}
        cases = [
            ({}, b'{"messages": [{"role": "user", "content": "hi"}]}', 401, "bearer token"),
            (auth, b"{not json", 400, "not valid JSON"),
            (auth, b"[1, 2]", 400, "not a JSON object"),
            (auth, b'{"messages": []}', 400, "messages: a non-empty array"),
            (auth, b'{"messages": [{"role": "assistant", "content": "x"}]}', 400, "last message"),
            (
                auth,
                b'{"messages": [{"role": "user", "content": "hi"}], "stream": "yes"}',
                400,
                "stream",
            ),
            (
                auth,
                b'{"messages": [{"role": "user", "content": "' + b"x" * 3000 + b'"}]}',
                413,
                "over 2000 bytes",
            ),
        ]
        for headers, body, status, needle in cases:
            response = httpx.post(endpoint, content=body, headers=headers, timeout=30)
            assert response.status_code == status, (body[:40], response.text)
            assert needle in response.json()["error"]["message"]
        client = openai.OpenAI(base_url=url, api_key="s3cret", max_retries=0)
        assert client.chat.completions.create(model="m", messages=[HELLO]).choices
    assert sessions(env) != []


def test_it_listens_beyond_this_machine_only_with_a_token(tmp_path: Path) -> None:
    env = base_env(tmp_path)
    refused = agctl(env, "serve", "--host", "0.0.0.0", "--port", "0")
    assert refused.returncode == 2
    assert "--host 0.0.0.0 listens beyond this machine: give a token" in refused.stderr
    assert "Traceback" not in refused.stderr
    with serving(env) as (url, _):
        port = url.split(":")[2].split("/")[0]
        taken = agctl(env, "serve", "--port", port)
    assert taken.returncode == 1
    assert f"cannot listen on 127.0.0.1:{port}" in taken.stderr


def test_json_logs_a_line_per_request_with_its_turn(tmp_path: Path) -> None:
    env = base_env(tmp_path)
    logged: list[str] = []
    with serving(env, "--json", "--token", "t", logged=logged) as (url, _):
        client = openai.OpenAI(base_url=url, api_key="t", max_retries=0)
        client.chat.completions.create(model="m", messages=[SYSTEM, HELLO])
        stream = client.chat.completions.create(model="m", messages=[HELLO], stream=True)
        assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
        assert httpx.get(f"{url}/models", timeout=30).status_code == 401

    whole, streamed, refused = (json.loads(line) for line in logged)
    session = sessions(env)[0]["id"]
    assert {k: whole[k] for k in ("method", "path", "status", "session", "slot", "turn")} == {
        "method": "POST",
        "path": "/v1/chat/completions",
        "status": 200,
        "session": session,
        "slot": "default",
        "turn": 1,
    }
    assert whole["prompt_tokens"] > 0 and whole["completion_tokens"] > 0
    assert whole["cached_share"] is None  # the offline provider says nothing of a cache
    assert whole["latency_ms"] > 0 and whole["checkpoint"]
    assert (streamed["status"], streamed["turn"], streamed["slot"]) == (200, 1, "default")
    assert streamed["session"] != session  # no system prompt: another conversation
    assert refused == {
        "method": "GET",
        "path": "/v1/models",
        "status": 401,
        "latency_ms": refused["latency_ms"],
    }


def test_concurrent_clients_on_many_sessions_and_on_one_each_get_their_turn(
    tmp_path: Path,
) -> None:
    """8 clients on 8 conversations, then 4 on one: every turn is whole, none lost; the
    store's lock orders the turns of one session."""
    from concurrent.futures import ThreadPoolExecutor

    env = base_env(tmp_path)
    assert agctl(env, "session", "new", "shared").returncode == 0
    with serving(env) as (url, _):
        client = openai.OpenAI(base_url=url, api_key="unused", max_retries=0)
        root = url.removesuffix("/v1")
        shared = openai.OpenAI(base_url=f"{root}/s/shared/v1", api_key="unused", max_retries=0)

        def own(n: int) -> str:
            first = {"role": "user", "content": f"conversation {n}"}
            reply = client.chat.completions.create(model="m", messages=[first])
            return reply.choices[0].message.content or ""

        def together(n: int) -> str:
            message = {"role": "user", "content": f"message {n}"}
            reply = shared.chat.completions.create(model="m", messages=[message])
            return reply.choices[0].message.content or ""

        with ThreadPoolExecutor(8) as pool:
            apart = list(pool.map(own, range(8)))
            joined = list(pool.map(together, range(4)))

    assert all("turn 1 in slot" in said for said in apart)
    listed = {s["id"]: s for s in sessions(env)}
    assert len(listed) == 9 and listed["shared"]["turn_count"] == 4
    texts = [
        m["content"] for m in json.loads(agctl(env, "-s", "shared", "msg", "list", "--json").stdout)
    ]
    assert sorted(texts[0::2]) == [f"message {n}" for n in range(4)]
    assert sorted(texts[1::2]) == sorted(joined)


def test_the_upstream_key_never_reaches_a_client_or_the_log(tmp_path: Path) -> None:
    """An upstream that echoes the key in its error: the client's error document, the
    streamed error event and the -v log hold no copy of it."""
    key = "sk-agctl-serve-secret-0123456789"
    with FakeOpenAI() as upstream:
        env = upstream_env(tmp_path, upstream.base_url, key)
        logged: list[str] = []
        for _ in range(2):
            upstream.fail("status", status=401, message=f"Incorrect API key provided: {key}")
        with serving(env, "-v", logged=logged) as (url, _):
            client = openai.OpenAI(base_url=url, api_key="unused", max_retries=0)
            with pytest.raises(openai.APIStatusError) as caught:
                client.chat.completions.create(model="m", messages=[HELLO])
            whole = httpx.post(
                f"{url}/chat/completions",
                json={"model": "m", "messages": [HELLO], "stream": True},
                timeout=30,
            )
        assert upstream.requests[0].headers["authorization"] == f"Bearer {key}"
    said = [json.dumps(caught.value.body), whole.text, *logged]
    assert "Incorrect API key provided" in said[0] and "Incorrect API key provided" in said[1]
    served = [line for line in logged if "agctl.serve:" in line]
    assert [line.split("status=")[1].split()[0] for line in served] == ["502", "200"], logged
    assert [text for text in said if key in text] == [], said


def test_a_conversation_recorded_through_serve_replays_from_its_cassette_offline(
    tmp_path: Path,
) -> None:
    """--record keeps every request and reply; --cassette answers the same client with no
    upstream at all (CI), and a request the cassette lacks is a 502 naming the miss."""
    cassette = tmp_path / "ci.cassette"
    asked = [SYSTEM, HELLO]
    with FakeOpenAI() as upstream:
        env = upstream_env(tmp_path / "recorded", upstream.base_url)
        with serving(env, "--record", str(cassette)) as (url, _):
            client = openai.OpenAI(base_url=url, api_key="unused", max_retries=0)
            first = client.chat.completions.create(model="m", messages=asked)
            said = first.choices[0].message.content
            streamed = client.chat.completions.create(
                model="m",
                messages=[*asked, {"role": "assistant", "content": said}, ONWARD],
                stream=True,
            )
            then = "".join(c.choices[0].delta.content or "" for c in streamed if c.choices)
        assert len(upstream.requests) == 2
    assert (said, then) == ("echo: hello there", "echo: and then?")

    # Replayed: a new data dir, the upstream gone.
    env["AGCTL_BASE_URL"] = "http://127.0.0.1:9/v1"
    env["AGCTL_DATA_DIR"] = str(tmp_path / "replayed")
    with serving(env, "--cassette", str(cassette)) as (url, _):
        client = openai.OpenAI(base_url=url, api_key="unused", max_retries=0)
        again = client.chat.completions.create(model="m", messages=asked)
        assert again.choices[0].message.content == said
        streamed = client.chat.completions.create(
            model="m",
            messages=[*asked, {"role": "assistant", "content": said}, ONWARD],
            stream=True,
        )
        assert "".join(c.choices[0].delta.content or "" for c in streamed if c.choices) == then
        with pytest.raises(openai.APIStatusError) as missed:
            client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "never recorded"}]
            )
    assert missed.value.status_code == 502
    assert missed.value.body["code"] == 6  # type: ignore[index]
