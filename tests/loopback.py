"""The plumbing the loopback fakes (fake_openai, fake_anthropic, fake_gemini) share.

A fake subclasses `LoopbackFake` (life cycle, request log, reply/fault/hook/pause queues,
connection tracking) and `LoopbackHandler` (setup, quiet error handling, reading and
recording a request, the write helpers), and keeps only its wire: routes, validation,
replies, stream format. Standard library only; real HTTP/1.1 on 127.0.0.1.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import re
import socket
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, ClassVar, Generic, Self, TypeVar, cast

GARBAGE_BODY = b"<html><body><h1>502 Bad Gateway</h1></body></html>\n"
ReplyT = TypeVar("ReplyT")
FaultT = TypeVar("FaultT")


class Headers(Mapping[str, str]):
    """Request headers with case-insensitive lookup (`headers["authorization"]`)."""

    def __init__(self, items: Iterable[tuple[str, str]]) -> None:
        self._items = {name.lower(): value for name, value in items}

    def __getitem__(self, name: str) -> str:
        return self._items[name.lower()]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __repr__(self) -> str:
        return f"Headers({self._items!r})"


@dataclass(frozen=True)
class RecordedRequest:
    """One request as the server received it; `body` is the parsed JSON, None if unparsable."""

    method: str
    path: str
    headers: Headers
    body: Any
    raw: bytes


@dataclass(frozen=True, kw_only=True)
class LoopbackFault:
    """A queued fault, as every wire's `fail` takes it; each fake adds its own fields."""

    kind: str
    status: int
    message: str | None
    retry_after: float | None
    seconds: float
    body: bytes
    events: tuple[Any, ...] = ()


class LoopbackFake(Generic[ReplyT, FaultT]):
    """A fake API server in a daemon thread, for one test: what every wire has in common."""

    name: ClassVar[str]  # the thread's name and the Server header ("FakeOpenAI")
    handler: ClassVar[type[LoopbackHandler]]

    def __init__(self, *, port: int) -> None:
        self.errors: list[BaseException] = []
        self._port = port
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._requests: list[RecordedRequest] = []
        self._replies: deque[ReplyT] = deque()
        self._faults: deque[FaultT] = deque()
        self._hooks: deque[Callable[[], object]] = deque()
        self._pauses: deque[tuple[int, threading.Event]] = deque()
        self._connections: set[socket.socket] = set()
        self._answered = 0
        self._httpd: LoopbackServer | None = None
        self._thread: threading.Thread | None = None

    # Life cycle

    def start(self) -> Self:
        self._stopping.clear()
        httpd = LoopbackServer(("127.0.0.1", self._port), self.handler)
        httpd.fake = self
        self._httpd = httpd
        self._thread = threading.Thread(
            target=httpd.serve_forever,
            kwargs={"poll_interval": 0.01},
            name=f"{self.name}:{self.port}",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and cut open connections, so slow or kept-alive handlers end at once."""
        httpd = self._httpd
        if httpd is None:
            return
        self._stopping.set()
        httpd.shutdown()
        with self._lock:
            connections = list(self._connections)
        for conn in connections:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._httpd = None
        self._thread = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def port(self) -> int:
        if self._httpd is None:
            raise RuntimeError("the server is not running")
        return int(self._httpd.server_address[1])

    @property
    def base_url(self) -> str:
        """The server's root, which the SDKs append the API's paths to."""
        return f"http://127.0.0.1:{self.port}"

    # Scripting

    @property
    def requests(self) -> list[RecordedRequest]:
        """A snapshot of every request received so far, oldest first (`raw` is the bytes)."""
        with self._lock:
            return list(self._requests)

    def pending(self) -> tuple[int, int]:
        """How many scripted replies and faults are still queued."""
        with self._lock:
            return len(self._replies), len(self._faults)

    def _queue_reply(self, reply: ReplyT) -> None:
        with self._lock:
            self._replies.append(reply)

    def _queue_fault(self, fault: FaultT) -> None:
        with self._lock:
            self._faults.append(fault)

    def _queue_hook(self, hook: Callable[[], object]) -> None:
        with self._lock:
            self._hooks.append(hook)

    def _queue_pause(self, after: int) -> threading.Event:
        gate = threading.Event()
        with self._lock:
            self._pauses.append((after, gate))
        return gate

    # Used by the handler

    def _record(self, request: RecordedRequest) -> None:
        with self._lock:
            self._requests.append(request)

    def _next_fault(self) -> FaultT | None:
        with self._lock:
            return self._faults.popleft() if self._faults else None

    def _run_hook(self) -> None:
        with self._lock:
            hook = self._hooks.popleft() if self._hooks else None
        if hook is None:
            return
        try:
            hook()
        except Exception as exc:  # the test sees it in `errors`
            self.errors.append(exc)

    def _next_pause(self) -> tuple[int, threading.Event] | None:
        with self._lock:
            return self._pauses.popleft() if self._pauses else None

    def _next_reply(self, *, scripted: bool) -> tuple[int, ReplyT | None]:
        """An answer number, and the next scripted reply when `scripted` and one is queued."""
        with self._lock:
            self._answered += 1
            reply = self._replies.popleft() if scripted and self._replies else None
            return self._answered, reply

    def _track(self, conn: socket.socket, *, open_: bool) -> None:
        with self._lock:
            if open_:
                self._connections.add(conn)
            else:
                self._connections.discard(conn)

    def _sleep(self, seconds: float) -> bool:
        """Sleep, waking at once if the server stops; False when it did."""
        return not self._stopping.wait(seconds)


class LoopbackServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128
    fake: LoopbackFake[Any, Any]

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Quiet: the handler records its own unexpected errors in `fake.errors`."""


class LoopbackHandler(BaseHTTPRequestHandler):
    """Serves one connection of a fake: routing is the subclass's `_route`."""

    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    # Sent with every reply (Anthropic's `request-id`).
    extra_headers: ClassVar[tuple[tuple[str, str], ...]] = ()
    event_stream_type: ClassVar[str] = "text/event-stream"

    def version_string(self) -> str:
        return f"{self.fake.name}/1"

    @property
    def fake(self) -> LoopbackFake[Any, Any]:
        return cast(LoopbackServer, self.server).fake

    def setup(self) -> None:
        super().setup()
        self.fake._track(self.connection, open_=True)

    def finish(self) -> None:
        self.fake._track(self.connection, open_=False)
        super().finish()

    def handle(self) -> None:
        try:
            super().handle()
        except OSError:
            self.close_connection = True
        except Exception as exc:
            self.fake.errors.append(exc)
            self.close_connection = True

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: no request log on stderr."""

    def do_GET(self) -> None:
        self._route()

    def do_POST(self) -> None:
        self._route()

    def _route(self) -> None:
        raise NotImplementedError

    def _receive(self, path: str) -> Any:
        """Read the body and record the request under `path`: the parsed JSON, else None."""
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        body: Any = None
        if raw:
            with contextlib.suppress(ValueError):
                body = json.loads(raw)
        self.fake._record(
            RecordedRequest(self.command, path, Headers(self.headers.items()), body, raw)
        )
        return body

    def _paced(self, events: Iterable[Any]) -> Iterator[Any]:
        """`events`, held after the first `after` of them while a `pause_stream` gate is shut."""
        pause = self.fake._next_pause()
        for index, event in enumerate(events):
            if pause is not None and index == pause[0]:
                self.wfile.flush()
                pause[1].wait(30)
            yield event

    # Faults every wire acts out alike

    def _plain_fault(self, kind: str, seconds: float, body: bytes) -> bool | None:
        """Act out `slow` (wait `seconds`, then answer: True, unless the server stops) or
        `garbage` (a 200 with a JSON content type and `body`); None for any other kind."""
        if kind == "slow":
            if self.fake._sleep(seconds):
                return True
            self.close_connection = True
            return False
        if kind == "garbage":
            self._send_bytes(200, body, "application/json")
            return False
        return None

    def _replay(
        self,
        events: Iterable[Any],
        raw_end: bytes = b"\n\n",
        *,
        frame: Callable[[Any], None] | None = None,
        last: bytes = b"",
    ) -> bool:
        """A 200 stream of `events`: objects framed by `frame` (else as the wire's events),
        bytes as raw lines ended by `raw_end`, then `last` and the end of the stream."""
        self._start_stream()
        for event in events:
            if isinstance(event, bytes):
                self._send_chunk(event + raw_end)
            else:
                (frame or self._send_event)(event)
        self._send_chunk(last)
        self._end_stream()
        return False

    def _drop_mid_stream(
        self,
        stream: bool,
        first: Iterable[Any],
        head: bytes,
        content_type: str = "application/json",
    ) -> bool:
        """Streams: the `first` events, then the connection closed; whole replies: a 200
        promising 4096 bytes of JSON, `head` of them, then the connection closed."""
        if stream:
            self._start_stream()
            for event in first:
                self._send_event(event)
        else:
            self.send_response(200)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", "4096")
            self.end_headers()
            self.wfile.write(head)
        self._drop_connection()
        return False

    # Writing

    def _send_bytes(
        self, status: int, data: bytes, content_type: str, headers: Mapping[str, str] | None = None
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        for name, value in [*self.extra_headers, *(headers or {}).items()]:
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def _send_event(self, event: dict[str, Any]) -> None:
        """One stream event in the wire's framing."""
        raise NotImplementedError

    def _send_json(self, status: int, obj: Any, headers: Mapping[str, str] | None = None) -> None:
        self._send_bytes(status, json.dumps(obj).encode(), "application/json", headers)

    def _start_stream(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", self.event_stream_type)
        self.send_header("Cache-Control", "no-cache")
        for name, value in self.extra_headers:
            self.send_header(name, value)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

    def _start_json_stream(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

    def _send_sse_line(self, line: bytes) -> None:
        self._send_chunk(line + b"\n\n")

    def _send_chunk(self, data: bytes) -> None:
        if data:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))

    def _write(self, data: bytes, *, chunked: bool) -> None:
        if chunked:
            self._send_chunk(data)
        else:
            self.wfile.write(data)

    def _end_stream(self) -> None:
        self.wfile.write(b"0\r\n\r\n")

    def _drop_connection(self) -> None:
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)


def pieces(text: str, size: int | None = None) -> list[str]:
    """Pieces that join back to `text`: of `size` characters, else each word with its space."""
    if size:
        return [text[i : i + size] for i in range(0, len(text), size)]
    return re.findall(r"\S+\s*|\s+", text)


def fragments(arguments: str) -> list[str]:
    """Tool call arguments cut in three pieces (two when very short), as models stream them."""
    if len(arguments) < 2:
        return [arguments] if arguments else []
    parts = 3 if len(arguments) >= 3 else 2
    cuts = [len(arguments) * i // parts for i in range(parts + 1)]
    return [arguments[a:b] for a, b in itertools.pairwise(cuts)]


def content_text(content: Any) -> str:
    """A message's text: the string, or the `text` of each of its parts joined."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return ""


def number_text(value: float) -> str:
    """A number as a header or duration shows it: no ".0" on a whole one."""
    return str(int(value)) if float(value).is_integer() else str(value)


def serve_in_foreground(fake: LoopbackFake[Any, Any]) -> None:
    """Serve until interrupted, printing the base URL first (the fakes' `main`)."""
    with fake as server:
        print(server.base_url, flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            threading.Event().wait()
