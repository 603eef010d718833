"""Any OpenAI-compatible chat-completions server, over httpx (streaming or not).

A reply is read within bounds — the time between events that carry data, a deadline for
the whole request, a cap on its size — and every field agctl reads from it is checked,
so a broken or hostile server gives a ProviderError, never a hang or a traceback. No
message, log line or event leaves this module with the key or a URL's password in it.
"""

from __future__ import annotations

import logging
import math
import random
import re
import time
from collections.abc import Callable, Iterator, Mapping
from email.utils import parsedate_to_datetime
from typing import TYPE_CHECKING, Any, NamedTuple

import orjson

from agctl import __version__
from agctl.base.errors import ProviderError
from agctl.base.redact import MARK, Redactor, mask_url, strip_userinfo, userinfo
from agctl.providers.base import (
    ChatRequest,
    Event,
    Finish,
    ReasoningDelta,
    TextDelta,
    ToolCallDelta,
    Usage,
    chat_completions_url,
    redacted_events,
)
from agctl.providers.body import request_body
from agctl.providers.fields import (
    MAX_TOKEN_COUNT,
    Malformed,
    a_list,
    a_string,
    a_whole_number,
    an_object,
    kind_of,
)

if TYPE_CHECKING:
    import httpx

log = logging.getLogger("agctl.provider")

RETRY_STATUSES = frozenset({408, 429, 500, 502, 503, 504})
JSON_HEADERS = {"Content-Type": "application/json"}
# Enough of an error body to show its message; the rest is not read.
ERROR_BODY_LIMIT = 64 * 1024
MAX_TOOL_INDEX = 65535
_LINE_BREAK = re.compile(rb"\r\n|\r|\n")


class HttpSettings(NamedTuple):
    base_url: str
    api_key: str | None = None
    headers: Mapping[str, str] = {}  # shared by the settings that name none: read only
    connect_timeout: float = 10.0
    # The longest wait for an event that carries data (keepalives do not count).
    read_timeout: float = 120.0
    # The whole call, retries and their waits included.
    request_timeout: float = 600.0
    max_reply_bytes: int = 16 * 1024 * 1024
    max_retries: int = 3
    # A server asking for a longer wait before a retry fails the call at once.
    max_retry_wait: float = 60.0
    backoff_base: float = 0.5
    backoff_max: float = 20.0
    # Send a request's prompt_cache_key (a server that refuses unknown fields: False).
    prompt_cache_key: bool = False


class _Retry(Exception):
    """A failure before any event was yielded, which a new attempt may fix."""

    def __init__(self, error: ProviderError, retry_after: float | None = None) -> None:
        self.error = error
        self.retry_after = retry_after


def _seconds(text: str, scale: float = 1.0) -> float | None:
    try:
        value = float(text) / scale
    except ValueError:
        return None
    return max(value, 0.0) if math.isfinite(value) else None


def _finite(seconds: float) -> float | None:
    """A socket timeout; an infinite one (which sockets refuse) is no timeout."""
    return seconds if math.isfinite(seconds) else None


def _retry_after(headers: httpx.Headers) -> float | None:
    if "retry-after-ms" in headers:
        wait = _seconds(headers["retry-after-ms"], 1000)
        if wait is not None:
            return wait
    value = headers.get("retry-after")
    if value is None:
        return None
    wait = _seconds(value)
    if wait is not None:
        return wait
    try:
        return max(parsedate_to_datetime(value).timestamp() - time.time(), 0.0)
    except (TypeError, ValueError, OverflowError):
        return None


def _server_message(body: bytes, redact: Callable[[str], str]) -> str:
    """The message of an error body, redacted before it is cut to a line."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        data = None
    text = body.decode("utf-8", "replace")
    if isinstance(data, dict):
        error = data.get("error", data)
        if isinstance(error, dict) and error.get("message"):
            text = str(error["message"])
        elif isinstance(error, str):
            text = error
    return " ".join(redact(text).split())[:500] or "(empty body)"


# ---- reading a reply ---------------------------------------------------------------------


def _content(message: dict[str, Any], where: str) -> str | None:
    """`content` as text: a string, or a list of text parts (some servers send those)."""
    value = message.get("content")
    if not isinstance(value, list):
        return a_string(message, "content", where)
    texts = []
    for number, item in enumerate(value):
        part = an_object(item, f"{where}.content[{number}]")
        if part.get("type", "text") != "text":
            raise Malformed(f"{where}.content[{number}] is a {part['type']!r} part, not text")
        texts.append(a_string(part, "text", f"{where}.content[{number}]") or "")
    return "".join(texts)


class ReplyParser:
    """The events of one reply, streamed or whole, with every field agctl reads checked."""

    def __init__(self) -> None:
        self._calls: set[int] = set()
        self._named: set[int] = set()

    def chunk(self, data: Any) -> list[Event]:
        """Events of one streamed `chat.completion.chunk`."""
        chunk = an_object(data, "the chunk")
        events: list[Event] = []
        for number, item in enumerate(a_list(chunk.get("choices"), "choices")):
            where = f"choices[{number}]"
            choice = an_object(item, where)
            delta = an_object(choice.get("delta"), f"{where}.delta", optional=True)
            events += self._message(delta, f"{where}.delta", streamed=True)
            reason = a_string(choice, "finish_reason", where)
            if reason:
                events.append(Finish(reason))
        return events + self._usage(chunk)

    def completion(self, data: Any) -> list[Event]:
        """Events of one whole `chat.completion` object."""
        reply = an_object(data, "the reply")
        if reply.get("choices") is None:
            raise Malformed("choices is missing")
        choices = a_list(reply["choices"], "choices")
        if not choices:
            raise Malformed("choices is empty")
        choice = an_object(choices[0], "choices[0]")
        if choice.get("message") is None:
            raise Malformed("choices[0].message is missing")
        message = an_object(choice["message"], "choices[0].message")
        events = self._message(message, "choices[0].message", streamed=False)
        events += self._usage(reply)
        events.append(Finish(a_string(choice, "finish_reason", "choices[0]") or "stop"))
        self.end()
        return events

    def end(self) -> None:
        """Check what only the whole reply shows: every tool call got a name."""
        unnamed = sorted(self._calls - self._named)
        if unnamed:
            raise Malformed(f"tool call {unnamed[0]} has no function name")

    def _message(self, message: dict[str, Any], where: str, *, streamed: bool) -> list[Event]:
        events: list[Event] = []
        reasoning_content = a_string(message, "reasoning_content", where)
        reasoning = reasoning_content or a_string(message, "reasoning", where)
        if reasoning:
            events.append(ReasoningDelta(reasoning))
        content = _content(message, where)
        if content:
            events.append(TextDelta(content))
        for number, item in enumerate(a_list(message.get("tool_calls"), f"{where}.tool_calls")):
            events.append(self._tool_call(item, number, f"{where}.tool_calls[{number}]", streamed))
        return events

    def _tool_call(self, item: Any, number: int, where: str, streamed: bool) -> ToolCallDelta:
        call = an_object(item, where)
        index = (
            a_whole_number(call.get("index", number), f"{where}.index", MAX_TOOL_INDEX)
            if streamed
            else number
        )
        function = an_object(call.get("function"), f"{where}.function", optional=streamed)
        name = a_string(function, "name", f"{where}.function")
        if not streamed and not name:
            shown = kind_of(name) if name is None else "empty"
            raise Malformed(f"{where}.function.name is {shown}")
        if "arguments" in function and function["arguments"] is None:
            raise Malformed(f"{where}.function.arguments is null, not a string")
        arguments = a_string(function, "arguments", f"{where}.function") or ""
        self._calls.add(index)
        if name:
            self._named.add(index)
        return ToolCallDelta(
            index, id=a_string(call, "id", where), name=name or None, arguments=arguments
        )

    @staticmethod
    def _usage(container: dict[str, Any]) -> list[Event]:
        """The usage event of a reply that reports one: OpenAI's counts and details, and
        DeepSeek's cache hits and misses (see Usage for what each count means)."""
        usage = an_object(container.get("usage"), "usage", optional=True)
        if not usage:
            return []

        def count(obj: dict[str, Any], key: str, where: str = "usage") -> int | None:
            value = obj.get(key)
            return (
                None if value is None else a_whole_number(value, f"{where}.{key}", MAX_TOKEN_COUNT)
            )

        prompt_details = an_object(
            usage.get("prompt_tokens_details"), "usage.prompt_tokens_details", optional=True
        )
        completion_details = an_object(
            usage.get("completion_tokens_details"),
            "usage.completion_tokens_details",
            optional=True,
        )
        in_details = "usage.prompt_tokens_details"
        hits, misses = (
            count(usage, "prompt_cache_hit_tokens"),
            count(usage, "prompt_cache_miss_tokens"),
        )
        prompt = count(usage, "prompt_tokens")
        if prompt is None and hits is not None and misses is not None:
            prompt = hits + misses
        prompt = prompt or 0
        completion = count(usage, "completion_tokens") or 0
        cached = count(prompt_details, "cached_tokens", in_details)
        parts = {
            "cached_tokens": hits if cached is None else cached,
            "cache_write_tokens": count(prompt_details, "cache_write_tokens", in_details),
            "reasoning_tokens": count(
                completion_details, "reasoning_tokens", "usage.completion_tokens_details"
            ),
        }
        for name, value in parts.items():
            whole = completion if name == "reasoning_tokens" else prompt
            if value is not None and value > whole:
                log.warning(
                    "the server reported %d %s, more than the %d they are part of: not counted",
                    value,
                    name.replace("_", " "),
                    whole,
                )
                parts[name] = None
        return [
            Usage(
                prompt,
                completion,
                cached_tokens=parts["cached_tokens"],
                cache_write_tokens=parts["cache_write_tokens"],
                reasoning_tokens=parts["reasoning_tokens"],
            )
        ]


# ---- the provider ------------------------------------------------------------------------


# How much of a whole (not streamed) body must arrive to count as data for read_timeout.
PROGRESS_BYTES = 1024


class _Body:
    """A response body, read within the request's bounds: time, deadline and size."""

    def __init__(self, provider: OpenAIProvider, response: httpx.Response, deadline: float):
        self.provider = provider
        self.response = response
        self.deadline = deadline
        self.size = 0
        self.last_data = time.monotonic()

    def data(self) -> None:
        """An event that carries data arrived: the read timeout starts again."""
        self.last_data = time.monotonic()

    def chunks(self) -> Iterator[bytes]:
        import httpx

        provider, settings = self.provider, self.provider.settings
        for chunk in self.response.iter_bytes():
            self.size += len(chunk)
            if max(self.size, self.response.num_bytes_downloaded) > settings.max_reply_bytes:
                raise provider.error(
                    f"the reply from {provider.url} is larger than max_reply_bytes "
                    f"({settings.max_reply_bytes} bytes)"
                )
            now = time.monotonic()
            if now > self.deadline:
                raise provider.overdue()
            if now - self.last_data > settings.read_timeout:
                raise httpx.ReadTimeout(f"no data for {settings.read_timeout:g} s (read_timeout)")
            yield chunk

    def read(self, limit: int | None = None) -> bytes:
        """A whole body (a reply, an error). Its one event is the body itself, so progress
        counts as data: every `PROGRESS_BYTES` received restart the read timeout, which a
        body dripping a byte at a time (or spaces before the JSON) never does."""
        parts: list[bytes] = []
        size = 0
        since_data = 0
        for chunk in self.chunks():
            parts.append(chunk)
            size += len(chunk)
            since_data += len(chunk.strip())
            if since_data >= PROGRESS_BYTES:
                self.data()
                since_data = 0
            if limit is not None and size >= limit:
                break
        return b"".join(parts)[:limit]


def _lines(body: _Body) -> Iterator[bytes]:
    """The lines of a body, split on any of CR LF, LF and CR."""
    buffer = bytearray()
    for chunk in body.chunks():
        buffer += chunk
        if b"\n" not in chunk and b"\r" not in chunk:
            continue
        *lines, rest = _LINE_BREAK.split(bytes(buffer))
        buffer = bytearray(rest)
        yield from lines
    if buffer:
        yield bytes(buffer)


class OpenAIProvider:
    """Chat completions over HTTP with retries, backoff, timeouts and SSE streaming."""

    name = "openai"

    def __init__(
        self, settings: HttpSettings, *, sleep: Callable[[float], None] = time.sleep
    ) -> None:
        self.settings = settings
        endpoint = chat_completions_url(settings.base_url)
        # Shown in messages and logs; httpx gets the URL without its userinfo, as Basic auth.
        self.url = mask_url(endpoint) or endpoint
        self._endpoint = strip_userinfo(endpoint)
        info = userinfo(endpoint)
        self._auth = (info.user, info.password or "") if info is not None else None
        self.redactor = Redactor.for_credentials(
            settings.api_key, settings.base_url, settings.headers
        )
        self._sleep = sleep
        self._client: httpx.Client | None = None

    def error(self, message: str, **kwargs: Any) -> ProviderError:
        return ProviderError(self.redactor.text(message), **kwargs)

    def overdue(self) -> ProviderError:
        return self.error(
            f"request to {self.url} did not finish within request_timeout "
            f"({self.settings.request_timeout:g} s)"
        )

    @property
    def client(self) -> httpx.Client:
        if self._client is None:
            import httpx

            settings = self.settings
            headers = {"User-Agent": f"agctl/{__version__}", **settings.headers}
            if settings.api_key:
                headers["Authorization"] = f"Bearer {settings.api_key}"
            self._client = httpx.Client(
                headers=headers,
                auth=self._auth,
                # An SSL context costs ~50 ms to build; plain http needs none.
                verify=not self._endpoint.startswith("http://"),
            )
        return self._client

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def stream(self, request: ChatRequest) -> Iterator[Event]:
        """The reply's events, with the key and the URL's password removed (even if the
        server echoes them, cut across pieces), before anyone stores or prints them."""
        if not self.redactor:
            return self._attempts(request)
        return redacted_events(self._attempts(request), self.redactor)

    def _attempts(self, request: ChatRequest) -> Iterator[Event]:
        deadline = time.monotonic() + self.settings.request_timeout
        attempt = 0
        while True:
            try:
                yield from self._attempt(request, deadline)
                return
            except _Retry as retry:
                if attempt >= self.settings.max_retries:
                    raise retry.error from None
                delay = self._delay(attempt, retry, deadline)
                attempt += 1
                log.info(
                    "retry %d/%d in %.2fs: %s",
                    attempt,
                    self.settings.max_retries,
                    delay,
                    retry.error,
                )
                self._sleep(delay)

    def _delay(self, attempt: int, retry: _Retry, deadline: float) -> float:
        """How long to wait before the next attempt; a wait too long fails at once."""
        settings = self.settings
        wait = retry.retry_after
        if wait is None:
            ceiling = min(settings.backoff_max, settings.backoff_base * 2**attempt)
            delay = random.uniform(ceiling / 2, ceiling)
            if time.monotonic() + delay >= deadline:
                raise retry.error from None
            return delay
        if wait > settings.max_retry_wait:
            why = f"longer than max_retry_wait ({settings.max_retry_wait:g} s)"
        elif time.monotonic() + wait >= deadline:
            why = f"past request_timeout ({settings.request_timeout:g} s)"
        else:
            return wait
        error = retry.error
        raise self.error(
            f"{error}; the server asks to wait {wait:g} s before a retry, {why}",
            status=error.status,
            retryable=error.retryable,
        ) from None

    def _status_error(self, response: httpx.Response, body: bytes) -> Exception:
        status = response.status_code
        message = self.redactor.text(
            f"{status} {response.reason_phrase} from {self.url}: {self._message_of(body)}"
        )
        if status in RETRY_STATUSES:
            error = ProviderError(message, status=status, retryable=True)
            return _Retry(error, _retry_after(response.headers))
        return ProviderError(message, status=status)

    def _transport_error(self, exc: Exception, started: bool) -> Exception:
        import httpx

        if isinstance(exc, httpx.UnsupportedProtocol | httpx.LocalProtocolError):
            # No retry can fix a URL agctl cannot speak to.
            return self.error(f"cannot send to {self.url}: {exc}")
        if isinstance(exc, httpx.DecodingError):
            return self.error(f"malformed response from {self.url}: {exc}")
        kind = "timed out" if isinstance(exc, httpx.TimeoutException) else "failed"
        phase = "mid-stream" if started else "before a reply"
        error = self.error(f"request to {self.url} {kind} {phase}: {exc or type(exc).__name__}")
        return error if started or not isinstance(exc, httpx.TransportError) else _Retry(error)

    def _attempt(self, request: ChatRequest, deadline: float) -> Iterator[Event]:
        import httpx

        settings = self.settings
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise self.overdue()
        wait = _finite(min(settings.read_timeout, remaining))
        connect = _finite(min(settings.connect_timeout, remaining))
        timeout = httpx.Timeout(connect=connect, read=wait, write=wait, pool=connect)
        headers = JSON_HEADERS
        if request.stream:
            headers = {**JSON_HEADERS, "Accept": "text/event-stream"}
        content = request_body(request, cache_key=settings.prompt_cache_key)
        if log.isEnabledFor(logging.DEBUG):
            log.debug(
                "POST %s: model=%s stream=%s, %d bytes, headers: %s",
                self.url,
                request.model,
                request.stream,
                len(content),
                self._shown_headers(headers),
            )
        started = False
        try:
            with self.client.stream(
                "POST",
                self._endpoint,
                content=content,
                headers=headers,
                timeout=timeout,
            ) as response:
                body = _Body(self, response, deadline)
                if response.status_code != 200:
                    raise self._status_error(response, body.read(ERROR_BODY_LIMIT))
                if not request.stream:
                    yield from self._whole(body.read())
                    return
                for events in self._sse(body):
                    started = started or bool(events)
                    yield from events
        except httpx.InvalidURL as exc:
            raise self.error(f"cannot send to {self.url}: {exc}") from None
        except httpx.RequestError as exc:
            raise self._transport_error(exc, started) from None

    def _shown_headers(self, extra: dict[str, str]) -> str:
        """The headers a request carries, for the debug log: credentials as `***` (the
        scheme of an Authorization kept), any other echo of a secret redacted."""
        headers = {name.lower(): value for name, value in self.client.headers.items()}
        headers.update((name.lower(), value) for name, value in extra.items())
        if self._auth is not None:
            headers["authorization"] = "Basic"  # added per request by httpx, from the URL
        shown = []
        for name, value in sorted(headers.items()):
            if name in ("authorization", "proxy-authorization"):
                value = f"{value.partition(' ')[0]} {MARK}"
            shown.append(f"{name}: {self.redactor.text(value)}")
        return "; ".join(shown)

    def _message_of(self, body: bytes) -> str:
        return _server_message(self.redactor.bytes(body), self.redactor.text)

    def _snippet(self, data: bytes) -> str:
        return " ".join(self.redactor.bytes(data).decode("utf-8", "replace").split())[:200]

    def _whole(self, body: bytes) -> list[Event]:
        try:
            data = orjson.loads(body)
        except orjson.JSONDecodeError:
            raise self.error(
                f"malformed response from {self.url}: {self._snippet(body)!r}"
            ) from None
        if isinstance(data, dict) and data.get("error") is not None and "choices" not in data:
            raise self.error(f"error from {self.url}: {self._message_of(body)}")
        try:
            return ReplyParser().completion(data)
        except Malformed as exc:
            raise self.error(f"malformed response from {self.url}: {exc}") from None

    def _sse(self, body: _Body) -> Iterator[list[Event]]:
        """The events of each `data:` line; comments, other fields and blank lines are skipped."""
        parser = ReplyParser()
        for line in _lines(body):
            if not line.startswith(b"data:"):
                continue
            data = line[5:].strip()
            if data == b"[DONE]":
                try:
                    parser.end()
                except Malformed as exc:
                    raise self.error(f"malformed stream from {self.url}: {exc}") from None
                return
            if not data:
                continue
            events = self._chunk(parser, data)
            if events:
                body.data()
            yield events
        raise self.error(f"the stream from {self.url} ended before [DONE]")

    def _chunk(self, parser: ReplyParser, data: bytes) -> list[Event]:
        try:
            chunk = orjson.loads(data)
        except orjson.JSONDecodeError:
            raise self.error(
                f"malformed stream data from {self.url}: {self._snippet(data)!r}"
            ) from None
        if isinstance(chunk, dict) and chunk.get("error") is not None:
            raise self.error(f"error mid-stream from {self.url}: {self._message_of(data)}")
        try:
            return parser.chunk(chunk)
        except Malformed as exc:
            raise self.error(f"malformed stream data from {self.url}: {exc}") from None
