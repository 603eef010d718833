"""`agctl serve`: an OpenAI-compatible endpoint whose conversations are agctl sessions.

A Starlette application (the `serve` extra): `GET /v1/models`, `POST
/v1/chat/completions` and `POST /v1/responses` (whole or streamed; agctl.serve.responses),
also under `/s/SESSION/v1/...` and
`/s/SESSION/SLOT/v1/...`; the `X-Agctl-Session` and `X-Agctl-Slot` headers name them too
(agctl.serve.chat says how a request finds its conversation). One store is opened for
the process and kept warm. A token, when set, is required as `Authorization: Bearer`.
Errors are OpenAI's error document, with agctl's exit code in it (1 for a failure that
is not agctl's own, whose traceback only the server's log sees).
"""

from __future__ import annotations

import queue
import secrets
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import orjson

from agctl.serve.flights import RETRY_AFTER_SECONDS, Flight, Flights, log

if TYPE_CHECKING:
    from pathlib import Path

    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response

    from agctl.serve.chat import Chat, Placed
    from agctl.serve.responses import Ask
    from agctl.store import Store
    from agctl.turn.send import TurnResult
    from agctl.turn.setup import ModelChoice

# What a request body may hold, unless the server is told otherwise.
MAX_BODY_BYTES = 8 * 1024 * 1024
# How many messages (or input items) one request may hold: each becomes a Message, about
# 1 KiB in memory however short, so 8 MiB of tiny ones would be ~260,000 (~240 MiB).
MAX_MESSAGES = 100_000
# HTTP statuses by agctl's exit code: a client error, a missing thing, a conflict, an
# upstream failure, a context that cannot fit; a turn cut short by the server stopping
# (SIGINT, SIGTERM: kept as a draft).
STATUS = {2: 400, 3: 404, 4: 409, 5: 400, 6: 502, 7: 400, 9: 403, 130: 503, 143: 503}
ERROR_TYPES = {
    400: "invalid_request_error",
    404: "not_found_error",
    409: "conflict_error",
    429: "requests",
}
# What a client is told of a failure that is not agctl's own error (its log has the rest).
UNEXPECTED = "agctl serve failed on this request: the server's log says why"


@dataclass
class Served:
    """What the server was started with."""

    store: Store
    choice: ModelChoice
    model: str
    token: str | None = None
    max_body: int = MAX_BODY_BYTES
    # Hears one record per request, once its response is sent (AccessLog).
    log: Callable[[dict[str, Any]], None] | None = None
    # The turns in flight (agctl.serve.flights).
    flights: Flights = field(default_factory=Flights)
    # The cassette every request and reply is appended to (None: none).
    record: Path | None = None


def error(
    status: int,
    message: str,
    code: int | str | None = None,
    headers: dict[str, str] | None = None,
) -> Response:
    """OpenAI's error document, with agctl's exit code when it comes from agctl."""
    from starlette.responses import Response

    body = {"error": {"message": message, "type": error_type(status), "code": code, "param": None}}
    return Response(orjson.dumps(body), status, headers, media_type="application/json")


def error_type(status: int) -> str:
    """The `type` of OpenAI's error document for an HTTP status."""
    return ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")


def failure(exc: BaseException) -> tuple[int, str, int]:
    """The HTTP status, message and exit code a client is told of `exc`: agctl's own
    error as it says; anything else as the server's failure, its traceback logged
    (agctl.serve, ERROR) and never sent."""
    from agctl.base.errors import AgctlError

    if isinstance(exc, AgctlError):
        return STATUS.get(exc.exit_code, 500), str(exc), exc.exit_code
    log.error("a request failed: %s: %s", type(exc).__name__, exc, exc_info=exc)
    return 500, UNEXPECTED, 1


def build_app(served: Served) -> Starlette:
    """The application serving `served`'s store and model."""
    from starlette.applications import Starlette
    from starlette.routing import Route

    def models(request: Request) -> Response:
        from starlette.responses import Response

        refused = _refused(served, request)
        if refused is not None:
            return refused
        listed = {"object": "list", "data": [_model(served.model)]}
        return Response(orjson.dumps(listed), media_type="application/json")

    def posted(
        handle: Callable[[Served, Request, Any, Flight], Awaitable[Response]],
    ) -> Callable[[Request], Awaitable[Response]]:
        """The endpoint taking a JSON body to `handle` as a turn's flight, admitted once
        the token passes and before the body is read (a refused request costs nothing
        but its headers): any failure is an error document (`failure`), and the flight
        is freed whatever happens, unless a stream took it to run its turn."""

        async def endpoint(request: Request) -> Response:
            refused = _refused(served, request)
            if refused is not None:
                return refused
            from starlette.responses import Response

            from agctl.serve.watch import WatchedStream

            flight = served.flights.admit()
            if flight is None:
                return _unadmitted(served.flights)
            response = None
            try:
                body = await _body(request, served.max_body)
                if isinstance(body, Response):
                    response = body
                else:
                    response = await handle(served, request, body, flight)
            except Exception as exc:
                response = _agctl_error(exc)
            finally:
                if not (isinstance(response, WatchedStream) and response.flight is flight):
                    flight.forgo()
            return response

        return endpoint

    async def look_up(request: Request) -> Response:
        refused = _refused(served, request)
        if refused is not None:
            return refused
        from starlette.concurrency import run_in_threadpool
        from starlette.responses import Response

        from agctl.serve.responses import stored

        try:
            found = await run_in_threadpool(stored, served.store, request.path_params["ident"])
        except Exception as exc:
            return _agctl_error(exc)
        return Response(orjson.dumps(found), media_type="application/json")

    routes = []
    for prefix in ("", "/s/{session}", "/s/{session}/{slot}"):
        routes.append(Route(f"{prefix}/v1/models", models, methods=["GET"]))
        routes.append(Route(f"{prefix}/v1/chat/completions", posted(_chat), methods=["POST"]))
        routes.append(Route(f"{prefix}/v1/responses", posted(_respond), methods=["POST"]))
        routes.append(Route(f"{prefix}/v1/responses/{{ident}}", look_up, methods=["GET"]))
    application = Starlette(routes=routes)
    if served.log is not None:
        application.add_middleware(AccessLog, log=served.log)
    return application


class AccessLog:
    """ASGI middleware: one record per HTTP request once its response is sent (a stream:
    once it ends), with the turn's facts a handler left in `request.state.agctl_turn`."""

    def __init__(self, app: Any, log: Callable[[dict[str, Any]], None]) -> None:
        self.app = app
        self.log = log

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status: dict[str, int] = {}

        async def sending(message: Any) -> None:
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            state = scope.get("state") or {}
            self.log(
                {
                    "method": scope["method"],
                    "path": scope["path"],
                    "status": status.get("code"),
                    "latency_ms": round((time.perf_counter() - started) * 1000, 1),
                    **state.get("agctl_turn", {}),
                }
            )


def _model(name: str) -> dict[str, Any]:
    return {"id": name, "object": "model", "created": 0, "owned_by": "agctl"}


def _refused(served: Served, request: Request) -> Response | None:
    """The 401 of a request without the server's token, if it has one."""
    import hmac

    if served.token is None:
        return None
    given = request.headers.get("authorization", "")
    expected = f"Bearer {served.token}"
    if hmac.compare_digest(given.encode(), expected.encode()):
        return None
    return error(401, "a bearer token is required (Authorization: Bearer TOKEN)")


async def _body(request: Request, limit: int) -> Any:
    """The request's JSON body, or the error response that refuses it; decoded off the
    event loop (8 MiB take ~100 ms)."""
    from starlette.concurrency import run_in_threadpool

    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        return error(413, f"the request body is over {limit} bytes")
    data = bytearray()
    async for part in request.stream():
        data += part
        if len(data) > limit:
            return error(413, f"the request body is over {limit} bytes")
    try:
        return await run_in_threadpool(orjson.loads, data)
    except orjson.JSONDecodeError as exc:
        return error(400, f"the request body is not valid JSON: {exc}")


def _named(request: Request) -> tuple[str | None, str | None]:
    """The session and slot a request names, by its path or else its headers."""
    session = request.path_params.get("session") or request.headers.get("x-agctl-session")
    slot = request.path_params.get("slot") or request.headers.get("x-agctl-slot")
    return session, slot


def bounded(items: Any, name: str) -> None:
    """Refuse (InvalidInput naming `name`) a list of more than MAX_MESSAGES items, before
    any becomes a Message."""
    from agctl.base.errors import InvalidInput

    if isinstance(items, list) and len(items) > MAX_MESSAGES:
        raise InvalidInput(
            f"{name}: {len(items)} items, more than the {MAX_MESSAGES} a request may hold"
        )


def refuse_unserved(body: dict[str, Any]) -> None:
    """Refuse (InvalidInput naming the field) what a chat request asks that the server
    cannot give, rather than answer as if it had not been asked: several choices,
    log probabilities, a JSON reply format."""
    from agctl.base.errors import InvalidInput

    n = body.get("n")
    if n is not None and (type(n) is not int or n != 1):
        raise InvalidInput(f"n: only 1 choice is served, not {n!r}")
    for name in ("logprobs", "top_logprobs"):
        if body.get(name) not in (None, False):
            raise InvalidInput(f"{name}: log probabilities are not served")
    shape = body.get("response_format")
    kind = shape.get("type") if isinstance(shape, dict) else shape
    if shape is not None and kind != "text":
        raise InvalidInput(
            f"response_format: only type 'text' is served, not {kind!r} "
            "(JSON modes and schemas are not served yet)"
        )


async def _chat(served: Served, request: Request, body: Any, flight: Flight) -> Response:
    """A chat completion, whole or streamed, placed first: a request that cannot be
    placed (an unknown session or slot, a bad id, a session busy while its history is
    written) is an error document, never a stream."""
    from starlette.concurrency import run_in_threadpool
    from starlette.responses import Response

    from agctl.serve.chat import completion, place, send_chat
    from agctl.serve.watch import watched

    session, slot = _named(request)
    chat = await run_in_threadpool(_parsed_chat, body)
    created = int(time.time())
    record: dict[str, Any] = {}
    request.state.agctl_turn = record  # what the access log says of the turn
    placed = await run_in_threadpool(place, served.store, chat, session, slot, flight)
    headers = _where(placed)
    if chat.stream:
        return _event_stream(
            flight, _streamed(served, flight, chat, placed, created, record), headers
        )

    def turn() -> Awaitable[TurnResult]:
        return run_in_threadpool(
            flight.run, send_chat, served.store, chat, placed, served.choice, record=served.record
        )

    result = await watched(flight, request.receive, turn)
    record.update(turn_record(placed, result))
    if result.checkpoint:
        headers["x-agctl-checkpoint"] = result.checkpoint
    document = completion(placed, result, created)
    return Response(orjson.dumps(document), media_type="application/json", headers=headers)


def _parsed_chat(body: Any) -> Chat:
    """A chat request's body checked (`parse_chat`, `refuse_unserved`), its messages
    bounded first."""
    from agctl.serve.chat import parse_chat

    if isinstance(body, dict):
        bounded(body.get("messages"), "messages")
    chat = parse_chat(body)
    refuse_unserved(body)
    return chat


def _parsed_response(body: Any) -> Ask:
    """A Responses API request's body checked (`parse_response`), its input bounded first."""
    from agctl.serve.responses import parse_response

    if isinstance(body, dict):
        bounded(body.get("input"), "input")
    return parse_response(body)


def _where(placed: Placed) -> dict[str, str]:
    """The headers that say where a request's turn went."""
    return {"x-agctl-session": placed.session, "x-agctl-slot": placed.slot}


def _event_stream(flight: Flight, events: Iterator[bytes], headers: dict[str, str]) -> Response:
    """Server-sent `events`, the flight cancelled when the client leaves."""
    from agctl.serve.watch import WatchedStream

    return WatchedStream(
        flight,
        events,
        media_type="text/event-stream",
        headers={"cache-control": "no-store", **headers},
    )


async def _respond(served: Served, request: Request, body: Any, flight: Flight) -> Response:
    """A Responses API request, whole or streamed (agctl.serve.responses), run as `flight`
    (admitted before it is placed: a refused request forks nothing), the flight marked on
    its slot until it lands; a failure before anything is sent is an error document."""
    from starlette.concurrency import run_in_threadpool
    from starlette.responses import Response

    from agctl.serve.responses import answer, document, place
    from agctl.serve.watch import watched

    session, slot = _named(request)
    created = time.time()
    record: dict[str, Any] = {}
    request.state.agctl_turn = record  # what the access log says of the turn
    ask = await run_in_threadpool(_parsed_response, body)
    placement = await run_in_threadpool(place, served.store, ask, session, slot, flight)
    placed = placement.placed
    headers = _where(placed)
    if ask.stream:
        events = _response_events(served, flight, ask, placement, created, record)
        return _event_stream(flight, events, headers)

    def turn() -> Awaitable[TurnResult]:
        return run_in_threadpool(
            flight.run, answer, placement, ask, served.choice, record=served.record
        )

    result = await watched(flight, request.receive, turn)
    record.update(turn_record(placed, result))
    if result.checkpoint:
        headers["x-agctl-checkpoint"] = result.checkpoint
    made = document(
        placement.id,
        ask,
        created,
        model=result.model,
        text=result.reply.text(),
        usage=result.usage,
    )
    return Response(orjson.dumps(made), media_type="application/json", headers=headers)


def _response_events(
    served: Served,
    flight: Flight,
    ask: Any,
    placement: Any,
    created: float,
    record: dict[str, Any],
) -> Iterator[bytes]:
    """The server-sent events of a streamed response (agctl.serve.responses.Events)."""
    from agctl.serve.responses import Events, answer

    turn = StreamedTurn(
        flight,
        lambda heard: answer(placement, ask, served.choice, on_event=heard, record=served.record),
    )
    events = Events(placement.id, ask, created, served.model)
    for kind, data in events.started():
        yield _named_event(kind, data)
    for piece in turn.pieces():
        yield _named_event(*events.delta(piece))
    if turn.error is not None:
        _, message, code = failure(turn.error)
        for kind, data in events.failed(message, code):
            yield _named_event(kind, data)
        return
    record.update(turn_record(placement.placed, turn.result))
    for kind, data in events.completed(turn.result):
        yield _named_event(kind, data)


def _unadmitted(flights: Flights) -> Response:
    """The refusal of a turn the server cannot take now: 429 when `flights` are full (the
    client retries after a second), 503 when it is stopping."""
    if flights.stopping is not None:
        return error(503, "the server is stopping: send this request to another one")
    return error(
        429,
        f"{flights.limit} turns are running, the most this server runs at once "
        "(--max-concurrent): retry shortly",
        "rate_limit_exceeded",
        {"retry-after": str(RETRY_AFTER_SECONDS)},
    )


def _agctl_error(exc: Exception) -> Response:
    """The error document of `exc` (see `failure`)."""
    return error(*failure(exc))


# What ends a stream's queue.
_END = object()


def turn_record(placed: Any, result: Any) -> dict[str, Any]:
    """What an access log line says of a request's turn."""
    usage = result.usage
    prompt = usage.prompt_tokens if usage is not None else None
    cached = usage.cached_tokens if usage is not None else None
    return {
        "session": placed.session,
        "slot": placed.slot,
        "turn": result.turn,
        "checkpoint": result.checkpoint,
        "prompt_tokens": prompt,
        "completion_tokens": usage.completion_tokens if usage is not None else None,
        "cached_share": round(cached / prompt, 4) if cached is not None and prompt else None,
    }


def text_piece(event: Any) -> str | None:
    """A text delta's text: what a stream of text only sends."""
    from agctl.providers.base import TextDelta

    return event.text if isinstance(event, TextDelta) else None


class StreamedTurn:
    """A turn run as `flight` in a thread while the response streams: what `piece` makes
    of its events as they come (`pieces`; None: nothing to send), then its outcome
    (`result`, or the `error` it failed with: a cancelled flight's TurnInterrupted)."""

    def __init__(
        self,
        flight: Flight,
        run: Callable[[Callable[[Any], None]], Any],
        piece: Callable[[Any], Any] = text_piece,
    ) -> None:
        self.result: Any = None
        self.error: Exception | None = None
        self._pieces: queue.Queue[Any] = queue.Queue()
        self._piece = piece
        self._flight = flight
        threading.Thread(
            target=self._turn, args=(run,), name="agctl-serve-turn", daemon=True
        ).start()

    def _turn(self, run: Callable[[Callable[[Any], None]], Any]) -> None:
        def heard(event: Any) -> None:
            if (piece := self._piece(event)) is not None:
                self._pieces.put(piece)

        try:
            with self._flight:
                self.result = run(self._flight.watching(heard))
        except Exception as exc:  # reported to the client, never a dropped connection
            self.error = exc
        finally:
            self._pieces.put(_END)

    def pieces(self) -> Iterator[Any]:
        while (piece := self._pieces.get()) is not _END:
            yield piece


def _streamed(
    served: Served,
    flight: Flight,
    chat: Any,
    placed: Placed,
    created: int,
    record: dict[str, Any],
) -> Iterator[bytes]:
    """Server-sent events of a placed turn: its text and tool calls as they come, then
    the last chunk (finish reason and usage) and [DONE]; an error mid-way as an error
    event. Its chunks' id is new for each stream (`stream_id`)."""
    from agctl.serve.chat import chunk, send_chat, usage_document
    from agctl.serve.tools import StreamedCalls

    deltas = StreamedCalls()
    turn = StreamedTurn(
        flight,
        lambda heard: send_chat(
            served.store, chat, placed, served.choice, on_event=heard, record=served.record
        ),
        deltas.delta,
    )
    ident = stream_id()
    # No content yet: a reply of tool calls has none (null, as the SDK puts it together).
    yield _event(chunk(ident, served.model, created, {"role": "assistant"}, None))
    for piece in turn.pieces():
        yield _event(chunk(ident, served.model, created, piece, None))
    if turn.error is not None:
        status, message, code = failure(turn.error)
        yield _event({"error": {"message": message, "type": error_type(status), "code": code}})
        return
    result = turn.result
    record.update(turn_record(placed, result))
    last = chunk(ident, result.model, created, {}, result.finish_reason or "stop")
    last["usage"] = usage_document(result.usage)
    last["agctl"] = {
        "session": placed.session,
        "slot": placed.slot,
        "checkpoint": result.checkpoint,
    }
    yield _event(last)
    yield b"data: [DONE]\n\n"


def stream_id() -> str:
    """A streamed completion's id, new for each: its checkpoint is not known when its first
    chunk goes out (a whole reply's id names its session, slot and checkpoint instead:
    agctl.serve.chat.completion_id)."""
    return "chatcmpl-" + secrets.token_hex(12)


def _event(data: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(data) + b"\n\n"


def _named_event(kind: str, data: dict[str, Any]) -> bytes:
    return b"event: " + kind.encode() + b"\n" + _event(data)
