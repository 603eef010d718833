"""agctl.serve.app's HTTP layer, its application on a real Uvicorn server in this process
(loopback), its client the `openai` SDK: how a streaming client that leaves is heard
whatever ASGI version the server speaks."""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import openai
import pytest
import uvicorn
from fake_openai import FakeOpenAI

from agctl.serve.app import Served, build_app
from agctl.store import Store
from agctl.turn.setup import ModelChoice

HELLO = {"role": "user", "content": "hello"}


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
