"""`agctl serve` when things go wrong under load, as real processes on loopback: a client
leaving mid-stream, SIGTERM with turns in flight, a session held busy by another process,
more turns than the server runs at once. Upstream is the suite's fake OpenAI server, holding
a reply mid-way so that each test says when it goes on (handshakes, never sleeps)."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import openai
from fake_openai import FakeOpenAI
from serving import HELLO, Stderr, agctl, serving, stop_line, upstream_env

REPLY = "one two three four five six seven eight"


def with_sessions(upstream: FakeOpenAI, tmp_path: Path, *sessions: str) -> dict[str, str]:
    """agctl's environment with the fake as its profile, and `sessions` made, empty."""
    env = upstream_env(tmp_path, upstream.base_url)
    for session in sessions:
        assert agctl(env, "session", "new", session).returncode == 0
    return env


def client(url: str, session: str) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=url.replace("/v1", f"/s/{session}/v1"), api_key="-", max_retries=0
    )


def slot_messages(env: dict[str, str], session: str) -> list[dict[str, Any]]:
    listed: list[dict[str, Any]] = json.loads(
        agctl(env, "-s", session, "msg", "list", "--json").stdout
    )
    return listed


def drafts(env: dict[str, str], session: str) -> list[dict[str, Any]]:
    shown = agctl(env, "-s", session, "draft", "show", "--all", "--json")
    assert shown.returncode == 0, shown.stderr
    listed: list[dict[str, Any]] = json.loads(shown.stdout)
    return listed


def test_a_client_leaving_mid_stream_cancels_its_turn_into_a_draft(tmp_path: Path) -> None:
    with FakeOpenAI() as upstream:
        env = with_sessions(upstream, tmp_path, "talk")
        upstream.reply(REPLY)
        gate = upstream.pause_stream(after=3)
        with serving(env, "-v") as (url, process):
            stderr = Stderr(process)
            stream = client(url, "talk").chat.completions.create(
                model="m", messages=[HELLO], stream=True
            )
            heard = ""
            for piece in stream:
                heard += piece.choices[0].delta.content or "" if piece.choices else ""
                if heard.strip():
                    break
            stream.close()  # the client leaves, the upstream still holding the rest
            stderr.until("client disconnected")
            gate.set()
            stderr.until("turn drafted (the client disconnected)")
        assert heard.strip() == "one"
    assert slot_messages(env, "talk") == []  # nothing half-written
    (draft,) = drafts(env, "talk")
    assert draft["prompt"] == "hello there"
    assert "the client disconnected" in draft["error"]


def test_a_client_leaving_before_a_whole_reply_cancels_its_turn_into_a_draft(
    tmp_path: Path,
) -> None:
    with FakeOpenAI() as upstream:
        env = with_sessions(upstream, tmp_path, "talk")
        arrived, held = threading.Event(), threading.Event()
        upstream.before_reply(lambda: (arrived.set(), held.wait(60)))
        with serving(env, "-v") as (url, process):
            stderr = Stderr(process)
            address = httpx.URL(url)
            body = json.dumps({"model": "m", "messages": [HELLO]}).encode()
            with socket.create_connection((address.host, address.port), timeout=60) as client:
                client.sendall(
                    b"POST /s/talk/v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                    b"Content-Type: application/json\r\n"
                    + f"Content-Length: {len(body)}\r\n\r\n".encode()
                    + body
                )
                assert arrived.wait(60)  # the turn waits on its upstream; the client leaves
            stderr.until("client disconnected")
            held.set()
            stderr.until("turn drafted (the client disconnected)")
    assert slot_messages(env, "talk") == []
    assert [d["prompt"] for d in drafts(env, "talk")] == ["hello there"]


def test_sigterm_finishes_or_drafts_each_turn_in_flight_then_exits_zero(tmp_path: Path) -> None:
    with FakeOpenAI() as upstream:
        env = with_sessions(upstream, tmp_path, "streamed", "whole")
        upstream.reply(REPLY)
        held_stream = upstream.pause_stream(after=3)
        with serving(env, "--grace", "2") as (url, process):
            stderr = Stderr(process)
            streamed: dict[str, Any] = {"text": ""}
            first_piece = threading.Event()

            def read_stream() -> None:
                stream = client(url, "streamed").chat.completions.create(
                    model="m", messages=[HELLO], stream=True
                )
                try:
                    for piece in stream:
                        streamed["text"] += (
                            piece.choices[0].delta.content or "" if piece.choices else ""
                        )
                        if streamed["text"].strip():
                            first_piece.set()
                except openai.APIError as exc:
                    streamed["error"] = exc

            reading = threading.Thread(target=read_stream)
            reading.start()
            assert first_piece.wait(60)
            # The whole turn is held before its reply (the stream has passed that point).
            arrived, held_whole = threading.Event(), threading.Event()
            upstream.before_reply(lambda: (arrived.set(), held_whole.wait(60)))
            whole: dict[str, Any] = {}

            def ask_whole() -> None:
                try:
                    whole["reply"] = client(url, "whole").chat.completions.create(
                        model="m", messages=[{"role": "user", "content": "whole please"}]
                    )
                except openai.APIError as exc:
                    whole["error"] = exc

            asking = threading.Thread(target=ask_whole)
            asking.start()
            assert arrived.wait(60)

            process.send_signal(signal.SIGTERM)
            stderr.until("SIGTERM: waiting up to 2 s for 2 turns in flight")
            held_whole.set()  # this one may finish within the grace
            stderr.until("grace over: cancelling")
            held_stream.set()  # the stream's turn, cancelled, stops at its next piece
            reading.join(60)
            asking.join(60)
            _, rest = process.communicate(timeout=60)
            assert process.returncode == 0, stderr.text + rest.decode()

    said = (stderr.text + rest.decode()).splitlines()
    assert not any("Traceback" in line for line in said), said
    # The stream's client heard its turn stopped; nothing of it is in the slot.
    assert "the server is stopping" in str(streamed["error"])
    assert slot_messages(env, "streamed") == []
    (draft,) = drafts(env, "streamed")
    assert draft["prompt"] == "hello there" and "the server is stopping" in draft["error"]
    # The whole turn either committed whole (and its client got it) or was drafted.
    if "reply" in whole:
        assert [m["role"] for m in slot_messages(env, "whole")] == ["user", "assistant"]
        assert drafts(env, "whole") == []
    else:
        assert whole["error"].status_code == 503
        assert slot_messages(env, "whole") == []
        assert [d["prompt"] for d in drafts(env, "whole")] == ["whole please"]
    finished = int("reply" in whole)
    assert stop_line(said[-1]) == {
        "stopped": "SIGTERM",
        "finished": finished,
        "drafted": 2 - finished,
    }


@contextmanager
def lock_held(env: dict[str, str], session: str) -> Iterator[subprocess.Popen[str]]:
    """Another process holding `session`'s lock (agctl's own), until the block ends."""
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys\n"
            "from agctl.store import Store\n"
            "store = Store()\n"
            f"with store.work({session!r}) as work, work.locked():\n"
            "    print('held', flush=True)\n"
            "    sys.stdin.read()\n",
        ],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None and holder.stdin is not None
    try:
        assert holder.stdout.readline() == "held\n"
        yield holder
    finally:
        holder.stdin.close()
        assert holder.wait(60) == 0


def test_a_session_held_busy_past_the_lock_wait_is_a_409_with_agctl_exit_code(
    tmp_path: Path,
) -> None:
    with FakeOpenAI() as upstream:
        env = with_sessions(upstream, tmp_path, "busy")
        env["AGCTL_LOCK_TIMEOUT"] = "0.5"
        with serving(env) as (url, _), lock_held(env, "busy"):
            response = httpx.post(
                url.replace("/v1", "/s/busy/v1") + "/chat/completions",
                json={"model": "m", "messages": [HELLO]},
                timeout=60,
            )
        assert response.status_code == 409, response.text
        error = response.json()["error"]
        assert error["type"] == "conflict_error" and error["code"] == 4
        assert "(lock_timeout)" in error["message"]
    # Nothing written. (The draft needs the same lock: it was not kept, as in the CLI.)
    assert slot_messages(env, "busy") == []


def test_turns_beyond_max_concurrent_get_429_at_once(tmp_path: Path) -> None:
    with FakeOpenAI() as upstream:
        env = with_sessions(upstream, tmp_path, "first", "second")
        arrived, held = threading.Event(), threading.Event()
        upstream.before_reply(lambda: (arrived.set(), held.wait(60)))
        with serving(env, "--max-concurrent", "1") as (url, _):
            first: dict[str, Any] = {}
            asking = threading.Thread(
                target=lambda: first.update(
                    reply=client(url, "first").chat.completions.create(model="m", messages=[HELLO])
                )
            )
            asking.start()
            assert arrived.wait(60)
            try:
                refused = httpx.post(
                    url.replace("/v1", "/s/second/v1") + "/chat/completions",
                    json={"model": "m", "messages": [HELLO]},
                    timeout=60,
                )
                with_sdk = None
                try:
                    client(url, "second").chat.completions.create(model="m", messages=[HELLO])
                except openai.RateLimitError as exc:
                    with_sdk = exc
            finally:
                held.set()
                asking.join(60)
            # Once the first turn is done, the next is taken.
            later = client(url, "second").chat.completions.create(model="m", messages=[HELLO])
        assert refused.status_code == 429
        assert refused.headers["retry-after"] == "1"
        assert refused.json()["error"]["code"] == "rate_limit_exceeded"
        assert with_sdk is not None and "--max-concurrent" in str(with_sdk)
        assert first["reply"].choices[0].message.content == "echo: hello there"
        assert later.choices[0].message.content == "echo: hello there"


def test_responses_api_turns_share_the_limit_and_are_drafted_when_their_client_leaves(
    tmp_path: Path,
) -> None:
    """A Responses API turn is a flight like a chat turn: refused with 429 while the only
    place is taken, and cancelled into a draft when its streaming client leaves."""
    with FakeOpenAI() as upstream:
        env = with_sessions(upstream, tmp_path, "talk")
        upstream.reply(REPLY)
        gate = upstream.pause_stream(after=3)
        with serving(env, "-v", "--max-concurrent", "1") as (url, process):
            stderr = Stderr(process)
            talk = client(url, "talk")
            stream = talk.responses.create(model="m", input="hello there", stream=True)
            heard = ""
            for event in stream:
                if event.type == "response.output_text.delta":
                    heard += event.delta
                    if heard.strip():
                        break
            refused = httpx.post(
                f"{url}/responses", json={"model": "m", "input": "more"}, timeout=60
            )
            stream.close()
            stderr.until("client disconnected")
            gate.set()
            stderr.until("turn drafted (the client disconnected)")
        assert heard.strip() == "one"
        assert refused.status_code == 429, refused.text
    assert [s["id"] for s in json.loads(agctl(env, "session", "list", "--json").stdout)] == ["talk"]
    assert slot_messages(env, "talk") == []
    (draft,) = drafts(env, "talk")
    assert draft["prompt"] == "hello there"
