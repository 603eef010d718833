"""agctl.serve.app's HTTP layer, its application on a real Uvicorn server in this process
(loopback), its clients httpx and the `openai` SDK: what any failure of a request becomes,
where a streamed turn is placed, what a request asks that is not served, and how a
streaming client that leaves is heard whatever ASGI version the server speaks."""

from __future__ import annotations

import http.client
import importlib
import logging
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import openai
import orjson
import pytest
import uvicorn
from fake_openai import FakeOpenAI

import agctl.turn.send
from agctl.base.errors import Conflict
from agctl.cli.serve import SERVE_HELP
from agctl.serve.app import MAX_MESSAGES, UNEXPECTED, Served, bounded, build_app
from agctl.serve.flights import Flights
from agctl.store import Store
from agctl.turn.setup import ModelChoice

OFFLINE = ModelChoice(provider="offline")
HELLO = {"role": "user", "content": "hello"}
# A body for each POST route, by the end of its path: a new route must say its own here.
BODIES: dict[str, dict[str, Any]] = {
    "/v1/chat/completions": {"model": "m", "messages": [HELLO]},
    "/v1/responses": {"model": "m", "input": "hello"},
}


@pytest.fixture
def store(isolated_env: Path) -> Store:
    """The file store: a lock another thread holds keeps the server waiting."""
    return Store(isolated_env)


class Heard(logging.Handler):
    """The agctl.serve logger's records, waited for by what they say."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.records: list[logging.LogRecord] = []
        self.changed = threading.Condition()

    def emit(self, record: logging.LogRecord) -> None:
        with self.changed:
            self.records.append(record)
            self.changed.notify_all()

    def until(self, text: str) -> None:
        with self.changed:
            said = self.changed.wait_for(
                lambda: any(text in r.getMessage() for r in self.records), timeout=30
            )
        assert said, f"never logged {text!r}: {[r.getMessage() for r in self.records]}"


@pytest.fixture
def heard() -> Iterator[Heard]:
    logger = logging.getLogger("agctl.serve")
    handler, level = Heard(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    yield handler
    logger.removeHandler(handler)
    logger.setLevel(level)


@contextmanager
def serving(served: Served, spec_version: str | None = None) -> Iterator[str]:
    """`served`'s application on Uvicorn in a thread: its root URL while it runs. With
    `spec_version`, the application is told that ASGI version (Uvicorn 0.55 says 2.3)."""
    application = build_app(served)

    async def told(scope: Any, receive: Any, send: Any) -> None:
        if spec_version is not None and scope["type"] == "http":
            scope = {**scope, "asgi": {**scope["asgi"], "spec_version": spec_version}}
        await application(scope, receive, send)

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()  # a client may connect at once: the server accepts when it runs
    config = uvicorn.Config(told, log_level="warning", access_log=False, lifespan="off")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(60)
        sock.close()


def post_routes(served: Served) -> list[str]:
    """Every POST route of the application, its session `s` and slot `default` named."""
    return [
        route.path.format(session="s", slot="default")
        for route in build_app(served).routes
        if "POST" in (getattr(route, "methods", None) or ())
    ]


def events(text: str) -> list[dict[str, Any]]:
    """The JSON data of a stream's server-sent events."""
    return [
        orjson.loads(line.removeprefix("data: "))
        for line in text.splitlines()
        if line.startswith("data: {")
    ]


def fails(*args: Any, **kwargs: Any) -> Any:
    raise OSError(28, "No space left on device: /srv/private/agctl")


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("where", ["placing", "turn"])
def test_an_unexpected_failure_on_every_post_route_is_an_openai_error_and_frees_its_flight(
    store: Store, heard: Heard, monkeypatch: pytest.MonkeyPatch, where: str, stream: bool
) -> None:
    """With one turn at a time, each route fails twice with an error that is not agctl's,
    then answers: a failure never keeps the only place. The client hears OpenAI's error
    document (or a stream's error event) saying nothing of the failure, the log its
    traceback."""
    store.create_session("s")
    served = Served(store, OFFLINE, "offline", flights=Flights(limit=1))
    paths = post_routes(served)
    assert sorted({path[path.index("/v1/") :] for path in paths}) == sorted(BODIES)
    assert len(paths) == 3 * len(BODIES)  # each bare, under /s/SESSION and /s/SESSION/SLOT
    failing = (store, "session_ids") if where == "placing" else (agctl.turn.send, "send_turn")
    with (
        serving(served) as root,
        httpx.Client(base_url=root, headers={"x-agctl-session": "s"}, timeout=60) as client,
    ):
        for path in paths:
            body = {**BODIES[path[path.index("/v1/") :]], "stream": stream}
            with monkeypatch.context() as patched:
                patched.setattr(*failing, fails)
                for _ in range(2):
                    failed = client.post(path, json=body)
                    if stream and where == "turn":  # the stream had begun: an error event
                        assert failed.status_code == 200, (path, failed.text)
                        (told,) = [e for e in events(failed.text) if "error" in e or "code" in e]
                        if "error" in told:  # a chat completion's
                            told = told["error"]
                            assert told["type"] == "api_error"
                        assert told["message"] == UNEXPECTED and str(told["code"]) == "1"
                    else:
                        assert failed.status_code == 500, (path, failed.text)
                        assert failed.headers["content-type"] == "application/json"
                        assert failed.json() == {
                            "error": {
                                "message": UNEXPECTED,
                                "type": "api_error",
                                "code": 1,
                                "param": None,
                            }
                        }
                    assert "private" not in failed.text and "Traceback" not in failed.text
            answered = client.post(path, json={**body, "stream": False})
            assert answered.status_code == 200, (path, answered.text)
    assert served.flights.flying == set()
    logged = [r for r in heard.records if r.levelno == logging.ERROR]
    assert len(logged) == 2 * len(paths)
    assert all(r.exc_info and isinstance(r.exc_info[1], OSError) for r in logged)


def test_a_streamed_chat_that_cannot_be_placed_is_refused_with_its_status_not_streamed(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The SDK raises its status's error (an error event inside a 200 stream would be an
    APIError without one), before anything is sent upstream or written. (A session busy
    only when the turn commits, after its reply streamed, is an error event: see below.)"""
    monkeypatch.setenv("AGCTL_LOCK_TIMEOUT", "0.5")
    store.create_session("busy")
    served = Served(store, OFFLINE, "offline")
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with store.work("busy") as work, work.locked():
            held.set()
            release.wait(60)

    def streamed(root: str, **headers: str) -> openai.APIStatusError:
        client = openai.OpenAI(base_url=root, api_key="-", max_retries=0, default_headers=headers)
        # A history the slot lacks: placing it writes, under the session's lock.
        history = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]
        with pytest.raises(openai.APIStatusError) as raised:
            client.chat.completions.create(model="m", messages=[*history, HELLO], stream=True)
        return raised.value

    with serving(served) as root:
        missing = streamed(f"{root}/s/nope/v1")
        bad_slot = streamed(f"{root}/s/busy/v1", **{"x-agctl-slot": "../x"})
        holder = threading.Thread(target=hold)
        holder.start()
        try:
            assert held.wait(60)
            busy = streamed(f"{root}/s/busy/v1")
        finally:
            release.set()
            holder.join(60)
    assert isinstance(missing, openai.NotFoundError) and "no session 'nope'" in str(missing)
    assert isinstance(bad_slot, openai.BadRequestError) and "'..'" in str(bad_slot)
    assert isinstance(busy, openai.ConflictError) and "(lock_timeout)" in str(busy)
    assert store.session_ids() == ["busy"] and store.load_slot("busy").messages == []


def test_an_error_mid_stream_has_the_type_of_its_status(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    store.create_session("s")

    def moved_on(*args: Any, **kwargs: Any) -> Any:
        raise Conflict("slot 'default' was written meanwhile")

    monkeypatch.setattr(agctl.turn.send, "send_turn", moved_on)
    with serving(Served(store, OFFLINE, "offline")) as root:
        streamed = httpx.post(
            f"{root}/s/s/v1/chat/completions",
            json={**BODIES["/v1/chat/completions"], "stream": True},
        )
    assert streamed.status_code == 200
    assert events(streamed.text)[-1] == {
        "error": {
            "message": "slot 'default' was written meanwhile",
            "type": "conflict_error",
            "code": 4,
        }
    }


@pytest.mark.parametrize(
    ("asked", "field"),
    [
        ({"n": 2}, "n"),
        ({"n": 0}, "n"),
        ({"logprobs": True}, "logprobs"),
        ({"top_logprobs": 2}, "top_logprobs"),
        ({"response_format": {"type": "json_object"}}, "response_format"),
        ({"response_format": {"type": "json_schema", "json_schema": {}}}, "response_format"),
    ],
)
def test_what_a_chat_asks_that_is_not_served_is_refused_naming_it(
    store: Store, asked: dict[str, Any], field: str
) -> None:
    """Refused before anything is placed, rather than answered as if not asked."""
    with serving(Served(store, OFFLINE, "offline")) as root:
        client = openai.OpenAI(base_url=f"{root}/v1", api_key="-", max_retries=0)
        with pytest.raises(openai.BadRequestError) as raised:
            client.chat.completions.create(model="m", messages=[HELLO], **asked)
        plain = {"n": 1, "logprobs": False, "response_format": {"type": "text"}}
        answered = client.chat.completions.create(model="m", messages=[HELLO], **plain)
    assert str(raised.value.message).startswith(f"Error code: 400 - {field}: ")
    assert raised.value.code == "5"  # the SDK makes it text
    assert len(answered.choices) == 1
    assert len(store.session_ids()) == 1  # the answered one's


def test_each_stream_has_its_own_id_and_names_its_session_in_its_headers(store: Store) -> None:
    """Streams started in the same second are told apart (their chunks share one id)."""
    store.create_session("s")
    with serving(Served(store, OFFLINE, "offline")) as root:
        client = openai.OpenAI(base_url=f"{root}/s/s/v1", api_key="-", max_retries=0)
        ids, named = [], []
        for _ in range(3):
            raw = client.chat.completions.with_raw_response.create(
                model="m", messages=[HELLO], stream=True
            )
            named.append((raw.headers.get("x-agctl-session"), raw.headers.get("x-agctl-slot")))
            (ident,) = {piece.id for piece in raw.parse()}
            ids.append(ident)
    assert len(set(ids)) == 3
    assert named == [("s", "default")] * 3


@pytest.mark.parametrize("spec_version", ["2.3", "2.4"])
def test_a_streaming_client_leaving_cancels_its_turn_whatever_asgi_version_the_server_says(
    store: Store, wired: FakeOpenAI, heard: Heard, spec_version: str
) -> None:
    """Starlette listens for the disconnect itself only below 2.4; from 2.4 on the stream
    must, or the turn runs on and commits for a client that is gone."""
    store.create_session("talk")
    wired.reply("one two three four five six seven eight")
    gate = wired.pause_stream(after=3)
    with serving(Served(store, ModelChoice(), "fake-model"), spec_version) as root:
        client = openai.OpenAI(base_url=f"{root}/s/talk/v1", api_key="-", max_retries=0)
        stream = client.chat.completions.create(model="m", messages=[HELLO], stream=True)
        said = ""
        for piece in stream:
            said += piece.choices[0].delta.content or "" if piece.choices else ""
            if said.strip():
                break
        stream.close()  # the client leaves, the upstream holding the rest
        heard.until("client disconnected")
        gate.set()
        heard.until("turn drafted (the client disconnected)")
    assert said.strip() == "one"
    assert store.load_slot("talk").messages == []
    draft = store.load_draft("talk", "default")
    assert draft is not None and draft.prompt == "hello"


def test_a_turn_refused_for_the_limit_gets_429_before_its_body_is_read(store: Store) -> None:
    """With the only place taken, each POST route answers 429 to a request whose body never
    comes (it would wait for it forever if it read it first); a body refused (413, not
    JSON) frees its place like any failure."""
    store.create_session("s")
    served = Served(store, OFFLINE, "offline", max_body=1024, flights=Flights(limit=1))
    taken = served.flights.admit()
    assert taken is not None
    with serving(served) as root:
        port = int(root.rsplit(":", 1)[1])
        for path in post_routes(served):
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            try:
                connection.putrequest("POST", path)
                connection.putheader("content-type", "application/json")
                connection.putheader("content-length", "1000")  # and nothing sent
                connection.endheaders()
                refused = connection.getresponse()
                assert refused.status == 429, (path, refused.status)
                assert refused.getheader("retry-after") == "1"
                told = orjson.loads(refused.read())["error"]
                assert "(--max-concurrent)" in told["message"]
                assert told["code"] == "rate_limit_exceeded"
            finally:
                connection.close()
        taken.forgo()
        with httpx.Client(base_url=root, headers={"x-agctl-session": "s"}, timeout=60) as client:
            for path in post_routes(served):
                not_json = client.post(path, content=b"{")
                assert not_json.status_code == 400, (path, not_json.text)
                over = client.post(path, content=b" " * 1025)
                assert over.status_code == 413, (path, over.text)
                answered = client.post(path, json=BODIES[path[path.index("/v1/") :]])
                assert answered.status_code == 200, (path, answered.text)
    assert served.flights.flying == set()


@pytest.mark.parametrize(
    ("path", "parser"),
    [("/v1/chat/completions", "chat.parse_chat"), ("/v1/responses", "responses.parse_response")],
)
def test_a_request_being_parsed_leaves_the_server_answering_others(
    store: Store, monkeypatch: pytest.MonkeyPatch, path: str, parser: str
) -> None:
    """A body is checked off the event loop: while a long history's request is held in
    its parsing, another client's GET /v1/models is answered; the held one then is."""
    module, name = parser.split(".")
    parsers = importlib.import_module(f"agctl.serve.{module}")
    real = getattr(parsers, name)
    parsing, release = threading.Event(), threading.Event()

    def held(body: Any) -> Any:
        parsing.set()
        assert release.wait(60)
        return real(body)

    monkeypatch.setattr(parsers, name, held)
    history = [{"role": ("user", "assistant")[i % 2], "content": f"m{i}"} for i in range(2000)]
    field = "messages" if module == "chat" else "input"
    body = {"model": "m", field: [*history, HELLO]}
    answered: list[httpx.Response] = []
    with serving(Served(store, OFFLINE, "offline")) as root:
        poster = threading.Thread(
            target=lambda: answered.append(httpx.post(root + path, json=body, timeout=120))
        )
        poster.start()
        try:
            assert parsing.wait(60)
            listed = httpx.get(f"{root}/v1/models", timeout=30)
        finally:
            release.set()
            poster.join(120)
    assert listed.status_code == 200 and listed.json()["data"][0]["id"] == "offline"
    (posted,) = answered
    assert posted.status_code == 200, posted.text


@pytest.mark.parametrize(
    ("path", "field", "parser"),
    [
        ("/v1/chat/completions", "messages", "chat.parse_chat"),
        ("/v1/responses", "input", "responses.parse_response"),
    ],
)
def test_a_request_of_more_than_max_messages_is_refused_naming_the_bound_before_parsing(
    store: Store, monkeypatch: pytest.MonkeyPatch, path: str, field: str, parser: str
) -> None:
    """Refused on the JSON list's length, before any item becomes a Message; the bound is
    what `agctl serve --help` says, and a request at the bound is not refused for it."""
    module, name = parser.split(".")
    parsers = importlib.import_module(f"agctl.serve.{module}")
    parsed: list[Any] = []
    monkeypatch.setattr(parsers, name, parsed.append)
    body = {"model": "m", field: [HELLO] * (MAX_MESSAGES + 1)}
    with serving(Served(store, OFFLINE, "offline")) as root:
        refused = httpx.post(root + path, json=body, timeout=60)
    assert refused.status_code == 400, refused.text
    assert refused.json()["error"]["message"] == (
        f"{field}: {MAX_MESSAGES + 1} items, more than the {MAX_MESSAGES} a request may hold"
    )
    assert refused.json()["error"]["code"] == 5  # InvalidInput
    assert parsed == [] and store.session_ids() == []
    bounded([HELLO] * MAX_MESSAGES, field)  # at the bound: not refused
    assert f"more than {MAX_MESSAGES:,} messages" in " ".join(SERVE_HELP.split())
