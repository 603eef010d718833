"""`agctl serve`'s Responses API as a real process, its client the real `openai` SDK: a
conversation chained with previous_response_id (the bytes sent upstream checked on a real
HTTP server), an older response forking into a derived slot, two requests at once naming
one response becoming two branches, a failed turn leaving nothing of its input,
instructions that hold for their own request only, `store: false` leaving the store as
it was, streams through the SDK's helpers, and what it refuses."""

from __future__ import annotations

import hashlib
import json
import threading
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from fake_openai import FakeOpenAI
from serving import agctl, base_env, serving, sessions, upstream_env


def session_of(response_id: str) -> str:
    return response_id.removeprefix("resp_").split("~")[0]


def store_files(env: dict[str, str]) -> dict[str, str]:
    """Every file of the store with the hash of its bytes (lock files aside)."""
    root = Path(env["AGCTL_DATA_DIR"])
    return {
        str(path.relative_to(root)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(root.rglob("*"))
        if path.is_file() and not path.name.endswith(".lock")
    }


def test_a_conversation_chained_by_previous_response_id_sends_the_whole_turn_before(
    tmp_path: Path,
) -> None:
    with FakeOpenAI() as upstream:
        env = upstream_env(tmp_path, upstream.base_url)
        with serving(env) as (url, _):
            client = openai.OpenAI(base_url=url, api_key="unused", max_retries=0)
            raw = client.responses.with_raw_response.create(
                model="any", input="hello there", instructions="Be brief."
            )
            first = raw.parse()
            second = client.responses.create(
                model="any",
                input="and then?",
                instructions="Be brief.",
                previous_response_id=first.id,
            )
            fetched = client.responses.retrieve(first.id)
        session = session_of(first.id)
        assert (raw.headers["x-agctl-session"], raw.headers["x-agctl-slot"]) == (
            session,
            "default",
        )
        assert raw.headers["x-agctl-checkpoint"]
        assert (first.output_text, second.output_text) == ("echo: hello there", "echo: and then?")
        assert (first.status, first.model) == ("completed", "fake-model")
        assert first.to_dict()["store"] is True
        assert second.previous_response_id == first.id and first.previous_response_id is None
        assert first.usage is not None and first.usage.total_tokens == (
            first.usage.input_tokens + first.usage.output_tokens
        )
        assert first.output[0].type == "message" and first.output[0].role == "assistant"
        assert fetched.id == first.id and fetched.output_text == "echo: hello there"

        # The second turn's request holds the first turn whole, then the new input; and
        # the first request's bytes are a prefix of the second's (nothing earlier moved).
        one, two = upstream.requests
        assert two.body["messages"] == [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "hello there"},
            {"role": "assistant", "content": "echo: hello there"},
            {"role": "user", "content": "and then?"},
        ]
        assert one.body["messages"] == two.body["messages"][:2]
        # What serve sent is what `agctl turn send` sends for the same slot.
        sent = agctl(env, "-s", session, "turn", "send", "--system", "Be brief.", "third")
        assert sent.returncode == 0, sent.stderr
        three = upstream.requests[2]
        assert three.body["messages"] == [
            *two.body["messages"],
            {"role": "assistant", "content": "echo: and then?"},
            {"role": "user", "content": "third"},
        ]
        assert {k: v for k, v in three.body.items() if k != "messages"} == {
            k: v for k, v in two.body.items() if k != "messages"
        }
    assert [s["id"] for s in sessions(env)] == [session]


def test_naming_an_older_response_forks_a_derived_slot_and_keeps_the_old_branch(
    tmp_path: Path,
) -> None:
    env = base_env(tmp_path)
    with serving(env) as (url, _):
        client = openai.OpenAI(base_url=url, api_key="unused", max_retries=0)
        first = client.responses.create(model="m", input="hello")
        second = client.responses.create(model="m", input="more", previous_response_id=first.id)
        # The first response again, as a client regenerating the second would.
        again = client.responses.with_raw_response.create(
            model="m", input="other", previous_response_id=first.id
        )
        forked = again.parse()
        # Each branch continues from its own head.
        on_fork = client.responses.create(model="m", input="next", previous_response_id=forked.id)
        on_old = client.responses.create(model="m", input="back", previous_response_id=second.id)
        # Without a previous response, the same opening is a new conversation.
        fresh = client.responses.create(model="m", input="hello")

    session = session_of(first.id)
    assert again.headers["x-agctl-slot"] == "default-2"
    assert forked.output_text.startswith('Offline reply to turn 3 in slot "default-2"')
    assert "(5 messages in context)" in on_fork.output_text
    assert 'in slot "default"' in on_old.output_text and "(5 messages" in on_old.output_text
    assert session_of(fresh.id) != session
    slots = json.loads(agctl(env, "-s", session, "slot", "list", "--json").stdout)
    assert {s["id"]: (s["message_count"], s["parent_id"]) for s in slots} == {
        "default": (6, None),
        "default-2": (6, "default"),
    }
    listed = json.loads(
        agctl(env, "-s", session, "msg", "list", "--slot", "default-2", "--json").stdout
    )
    assert [m["content"] for m in listed][0::2] == ["hello", "other", "next"]
    graph = json.loads(agctl(env, "session", "graph", session, "--json").stdout)
    assert [edge["kind"] for edge in graph["edges"]] == ["derived"]
    # Every stored response is a checkpoint labelled with its id.
    labels = {
        c["label"] for c in json.loads(agctl(env, "-s", session, "ckpt", "list", "--json").stdout)
    }
    assert {first.id, second.id, forked.id, on_fork.id, on_old.id} <= labels


def test_two_requests_at_once_naming_one_response_are_two_branches(tmp_path: Path) -> None:
    with FakeOpenAI() as upstream:
        env = upstream_env(tmp_path, upstream.base_url)
        with serving(env) as (url, _):
            client = openai.OpenAI(base_url=url, api_key="unused", max_retries=0)
            first = client.responses.create(model="m", input="start")
            replies: dict[str, Any] = {}

            def request(name: str) -> None:
                replies[name] = client.responses.with_raw_response.create(
                    model="m", input=f"branch {name}", previous_response_id=first.id
                )

            other = threading.Thread(target=request, args=("B",))
            arrived = threading.Event()

            def hold_a() -> None:
                """A's request waits upstream until B's has come too: B is placed while
                A's turn runs, and B's reply is written first."""
                other.start()
                assert arrived.wait(60)

            upstream.before_reply(hold_a)
            upstream.before_reply(arrived.set)
            request("A")
            other.join(60)
            a, b = (replies[name].parse() for name in "AB")
            client.responses.create(model="m", input="after", previous_response_id=b.id)
        assert upstream.errors == []
    assert [replies[name].headers["x-agctl-slot"] for name in "AB"] == ["default", "default-2"]
    assert (a.output_text, b.output_text) == ("echo: branch A", "echo: branch B")
    sent = {r.body["messages"][-1]["content"]: r.body["messages"] for r in upstream.requests}
    assert [m["content"] for m in sent["after"]] == [
        "start",
        "echo: start",
        "branch B",
        "echo: branch B",
        "after",
    ]
    session = session_of(first.id)
    for slot, said in (("default", "branch A"), ("default-2", "branch B")):
        listed = json.loads(
            agctl(env, "-s", session, "msg", "list", "--slot", slot, "--json").stdout
        )
        # Each branch holds its own turn only, as its request was sent.
        assert [m["content"] for m in listed][:4] == ["start", "echo: start", said, f"echo: {said}"]
        assert [m["content"] for m in sent[said]] == ["start", "echo: start", said]


def test_a_failed_turn_leaves_nothing_of_its_input_and_its_retry_goes_on_in_the_slot(
    tmp_path: Path,
) -> None:
    given = [
        {"role": "developer", "content": "Use short words."},
        {"role": "user", "content": "next"},
    ]
    with FakeOpenAI() as upstream:
        env = upstream_env(tmp_path, upstream.base_url)
        with serving(env) as (url, _):
            client = openai.OpenAI(base_url=url, api_key="unused", max_retries=0)
            first = client.responses.create(model="m", input="start")
            session = session_of(first.id)
            upstream.fail("status", status=400, message="bad thing")
            with pytest.raises(openai.APIStatusError) as whole:
                client.responses.create(model="m", input=given, previous_response_id=first.id)  # type: ignore[arg-type]
            left = json.loads(agctl(env, "-s", session, "msg", "list", "--json").stdout)
            upstream.fail("status", status=400, message="bad thing")
            with client.responses.stream(
                model="m",
                input=given,  # type: ignore[arg-type]
                previous_response_id=first.id,
            ) as failing:
                failed = [event.type for event in failing]
            retried = client.responses.with_raw_response.create(
                model="m",
                input=given,  # type: ignore[arg-type]
                previous_response_id=first.id,
            )
    assert whole.value.status_code == 502 and failed[-2:] == ["error", "response.failed"]
    assert [m["content"] for m in left] == ["start", "echo: start"]
    # The retry goes on from the response in its own slot, as the first try would have.
    assert retried.headers["x-agctl-slot"] == "default"
    assert upstream.requests[-1].body["messages"] == [
        {"role": "user", "content": "start"},
        {"role": "assistant", "content": "echo: start"},
        {"role": "system", "content": "Use short words."},
        {"role": "user", "content": "next"},
    ]
    slots = json.loads(agctl(env, "-s", session, "slot", "list", "--json").stdout)
    assert [(s["id"], s["message_count"]) for s in slots] == [("default", 5)]


def test_instructions_are_their_own_requests_system_prompt_only(tmp_path: Path) -> None:
    with FakeOpenAI() as upstream:
        env = upstream_env(tmp_path, upstream.base_url)
        with serving(env) as (url, _):
            client = openai.OpenAI(base_url=url, api_key="unused", max_retries=0)
            one = client.responses.create(model="m", input="hi", instructions="Be terse.")
            two = client.responses.create(
                model="m", input="more", instructions="Be terse.", previous_response_id=one.id
            )
            client.responses.create(model="m", input="again", previous_response_id=two.id)
    first, second, third = upstream.requests
    assert first.body["messages"] == [
        {"role": "system", "content": "Be terse."},
        {"role": "user", "content": "hi"},
    ]
    # The same instructions again: the first request's messages are the second's first
    # bytes (a provider's prefix cache reads them).
    opened = first.raw.index(b'"messages":[')
    shared = first.raw[opened : first.raw.index(b"}]", opened) + 1]
    assert second.raw[opened : opened + len(shared)] == shared
    # None given: none sent, as OpenAI's instructions do not carry over.
    assert [m["role"] for m in third.body["messages"]] == ["user", "assistant"] * 2 + ["user"]
    shown = json.loads(agctl(env, "-s", session_of(one.id), "session", "show", "--json").stdout)
    assert shown["system_prompt"] is None


def test_store_false_leaves_the_store_as_it_was_and_its_id_is_unknown_after(
    tmp_path: Path,
) -> None:
    env = base_env(tmp_path)
    with serving(env) as (url, _):
        client = openai.OpenAI(base_url=url, api_key="unused", max_retries=0)
        first = client.responses.create(model="m", input="hello")
        before = store_files(env)
        unstored = client.responses.create(
            model="m", input="secret", previous_response_id=first.id, store=False
        )
        alone = client.responses.create(model="m", input="alone", store=False)
        after = store_files(env)
        refused = []
        for gone in (unstored.id, alone.id):
            with pytest.raises(openai.NotFoundError) as caught:
                client.responses.create(model="m", input="x", previous_response_id=gone)
            refused.append(caught.value.body)
            with pytest.raises(openai.NotFoundError):
                client.responses.retrieve(gone)
    assert unstored.to_dict()["store"] is False
    assert '"secret" (3 messages in context)' in unstored.output_text  # the first turn read
    assert after == before
    assert len(sessions(env)) == 1
    assert refused[0] == {
        "message": f"no response {unstored.id!r} (a response with store: false is not kept)",
        "type": "not_found_error",
        "code": 3,
        "param": None,
    }


def test_a_streamed_response_through_the_sdk_helpers_and_a_failure_mid_way(
    tmp_path: Path,
) -> None:
    with FakeOpenAI() as upstream:
        env = upstream_env(tmp_path, upstream.base_url)
        with serving(env) as (url, _):
            client = openai.OpenAI(base_url=url, api_key="unused", max_retries=0)
            with client.responses.stream(model="m", input="stream me") as stream:
                kinds = [event.type for event in stream]
                final = stream.get_final_response()
            events = list(
                client.responses.create(
                    model="m", input="and again", previous_response_id=final.id, stream=True
                )
            )
            second = events[-1].response.id  # type: ignore[union-attr]
            upstream.fail("status", status=400, message="no such model")
            with client.responses.stream(
                model="m", input="fails", previous_response_id=second
            ) as failing:
                failed = list(failing)
                with pytest.raises(RuntimeError, match=r"response\.completed"):
                    failing.get_final_response()
            after = client.responses.create(model="m", input="after", previous_response_id=second)
    assert kinds[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert kinds[-4:] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert "response.output_text.delta" in kinds
    assert final.output_text == "echo: stream me" and final.status == "completed"
    assert [event.sequence_number for event in events] == list(range(len(events)))
    deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
    assert "".join(deltas) == "echo: and again"
    assert upstream.requests[1].body["messages"][-3:] == [
        {"role": "user", "content": "stream me"},
        {"role": "assistant", "content": "echo: stream me"},
        {"role": "user", "content": "and again"},
    ]
    assert [event.type for event in failed][-2:] == ["error", "response.failed"]
    assert "no such model" in failed[-2].message and failed[-2].code == "6"  # type: ignore[union-attr]
    # The failed turn wrote nothing: the second response is still its slot's head.
    assert after.output_text == "echo: after"
    assert [m["content"] for m in upstream.requests[-1].body["messages"]] == [
        "stream me",
        "echo: stream me",
        "and again",
        "echo: and again",
        "after",
    ]
    session = session_of(final.id)
    slots = json.loads(agctl(env, "-s", session, "slot", "list", "--json").stdout)
    assert [s["id"] for s in slots] == ["default"]


def test_bad_ids_and_inputs_are_openai_error_documents(tmp_path: Path) -> None:
    env = base_env(tmp_path)
    with serving(env, "--token", "t") as (url, _):
        client = openai.OpenAI(base_url=url, api_key="t", max_retries=0)
        first = client.responses.create(model="m", input="hello")
        endpoint = f"{url}/responses"
        auth = {"authorization": "Bearer t"}
        unknown = first.id[:-4] + "0000"
        cases = [
            ({}, {"input": "hi"}, 401, "bearer token"),
            (auth, {"input": "hi", "previous_response_id": "resp_nope"}, 400, "not a response id"),
            (auth, {"input": "hi", "previous_response_id": unknown}, 404, "no response"),
            (
                auth,
                {"input": "hi", "previous_response_id": "resp_gone~default~0123456789abcdef"},
                404,
                "no response",
            ),
            (
                auth,
                {"input": [{"type": "function_call", "call_id": "c", "name": "f"}]},
                400,
                "input[0]: 'function_call' items are not served",
            ),
            (
                auth,
                {
                    "input": [
                        {
                            "role": "user",
                            "content": [{"type": "input_image", "image_url": "http://x"}],
                        }
                    ]
                },
                400,
                "input[0].content[0]: 'input_image' parts are not served",
            ),
            (auth, {"input": "hi", "tools": [{"type": "function"}]}, 400, "tools:"),
            (auth, {"input": 7}, 400, "input: a string or a non-empty array"),
        ]
        for headers, body, status, needle in cases:
            response = httpx.post(endpoint, json=body, headers=headers, timeout=30)
            assert response.status_code == status, (body, response.text)
            assert needle in response.json()["error"]["message"], response.text
        looked = [
            httpx.get(f"{endpoint}/{ident}", headers=auth, timeout=30)
            for ident in ("resp_bad", unknown, first.id)
        ]
        with pytest.raises(openai.BadRequestError) as caught:
            client.responses.create(model="m", input="x", previous_response_id="chatcmpl-1")
        root = url.removesuffix("/v1")
        elsewhere = openai.OpenAI(base_url=f"{root}/s/other/v1", api_key="t", max_retries=0)
        with pytest.raises(openai.NotFoundError):
            elsewhere.responses.create(model="m", input="x")
    assert [r.status_code for r in looked] == [400, 404, 200]
    assert looked[2].json()["output"][0]["content"][0]["text"] == first.output_text
    assert caught.value.body["code"] == 5  # type: ignore[index]
    assert caught.value.body["type"] == "invalid_request_error"  # type: ignore[index]
