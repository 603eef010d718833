"""The HTTP transport every wire shares (agctl.providers.wire): one request posted over
httpx, streamed or not, with retries and Retry-After, and read within bounds — the time
between events that carry data, a deadline for the whole request, a cap on its size.
The wire's parser checks every field agctl reads, so a broken or hostile server gives a
ProviderError, never a hang or a traceback. No message, log line or event leaves this
module with the key or a URL's password in it.
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
    redacted_events,
)
from agctl.providers.fields import Malformed

if TYPE_CHECKING:
    import httpx

    from agctl.providers.wire import StreamParser, Wire

log = logging.getLogger("agctl.provider")

# 529: Anthropic's "overloaded".
# Headers that carry a key, whichever wire sends them: shown as *** in the debug log.
KEY_HEADERS = frozenset({"api-key", "x-api-key", "x-goog-api-key"})
RETRY_STATUSES = frozenset({408, 429, 500, 502, 503, 504, 529})
JSON_HEADERS = {"Content-Type": "application/json"}
# Enough of an error body to show its message; the rest is not read.
ERROR_BODY_LIMIT = 64 * 1024
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
    # The OpenAI wire: send a request's prompt_cache_key (a server that refuses unknown
    # fields: False).
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


# ---- the provider ------------------------------------------------------------------------


# How much of a whole (not streamed) body must arrive to count as data for read_timeout.
PROGRESS_BYTES = 1024


class _Body:
    """A response body, read within the request's bounds: time, deadline and size."""

    def __init__(self, provider: HttpProvider, response: httpx.Response, deadline: float):
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


class HttpProvider:
    """One wire's requests over HTTP, with retries, backoff, timeouts and SSE streaming."""

    def __init__(
        self, wire: Wire, settings: HttpSettings, *, sleep: Callable[[float], None] = time.sleep
    ) -> None:
        self.wire = wire
        self.name = wire.name
        self.settings = settings
        # Where the request being sent goes (set by each `stream`): shown in messages and
        # logs with its password masked; httpx gets it without its userinfo, as Basic auth.
        self.url = self._endpoint = ""
        info = userinfo(settings.base_url)
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
            headers = {"User-Agent": f"agctl/{__version__}", **self.wire.headers()}
            headers.update(settings.headers)
            if settings.api_key:
                headers.update(self.wire.key_headers(settings.api_key))
            self._client = httpx.Client(
                headers=headers,
                auth=self._auth,
                # An SSL context costs ~50 ms to build; plain http needs none.
                verify=not settings.base_url.startswith("http://"),
            )
        return self._client

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def stream(self, request: ChatRequest) -> Iterator[Event]:
        """The reply's events, with the key and the URL's password removed (even if the
        server echoes them, cut across pieces), before anyone stores or prints them."""
        endpoint = self.wire.url(self.settings.base_url, request)
        self.url = mask_url(endpoint) or endpoint
        self._endpoint = strip_userinfo(endpoint)
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
            wait = _retry_after(response.headers)
            if wait is None:
                wait = self._asked_wait(body)
            return _Retry(error, wait)
        return ProviderError(message, status=status)

    def _asked_wait(self, body: bytes) -> float | None:
        """The wait an error body asks for before a retry, where the wire says it there."""
        try:
            data = orjson.loads(body)
        except orjson.JSONDecodeError:
            return None
        wait = self.wire.retry_delay(data) if isinstance(data, dict) else None
        return wait if wait is None or math.isfinite(wait) else None

    def _transport_error(self, exc: Exception, started: bool, remaining: float) -> Exception:
        """The error of a failed request; a timeout names the bound that ended it (the
        request's deadline when what was left of it was shorter than the bound's own)."""
        import httpx

        if isinstance(exc, httpx.UnsupportedProtocol | httpx.LocalProtocolError):
            # No retry can fix a URL agctl cannot speak to.
            return self.error(f"cannot send to {self.url}: {exc}")
        if isinstance(exc, httpx.DecodingError):
            return self.error(f"malformed response from {self.url}: {exc}")
        kind = "timed out" if isinstance(exc, httpx.TimeoutException) else "failed"
        phase = "mid-stream" if started else "before a reply"
        said = str(exc) or type(exc).__name__
        if isinstance(exc, httpx.TimeoutException) and "_timeout" not in said:
            settings = self.settings
            connecting = isinstance(exc, httpx.ConnectTimeout | httpx.PoolTimeout)
            name = "connect_timeout" if connecting else "read_timeout"
            seconds = settings.connect_timeout if connecting else settings.read_timeout
            if remaining < seconds:
                name, seconds = "request_timeout", settings.request_timeout
            said = f"{said} ({name} {seconds:g} s)"
        error = self.error(f"request to {self.url} {kind} {phase}: {said}")
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
        content = self.wire.body(request)
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
            raise self._transport_error(exc, started, remaining) from None

    def _shown_headers(self, extra: dict[str, str]) -> str:
        """The headers a request carries, for the debug log: credentials as `***` (the
        scheme of an Authorization kept), any other echo of a secret redacted."""
        headers = {name.lower(): value for name, value in self.client.headers.items()}
        headers.update((name.lower(), value) for name, value in extra.items())
        if self._auth is not None:
            headers["authorization"] = "Basic"  # added per request by httpx, from the URL
        keys = {name.lower() for name in self.wire.key_headers("-")} | KEY_HEADERS
        shown = []
        for name, value in sorted(headers.items()):
            if name in ("authorization", "proxy-authorization"):
                value = f"{value.partition(' ')[0]} {MARK}"
            elif name in keys:
                value = MARK
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
            return self.wire.reply(data)
        except Malformed as exc:
            raise self.error(f"malformed response from {self.url}: {exc}") from None

    def _sse(self, body: _Body) -> Iterator[list[Event]]:
        """The events of each `data:` line, until the wire's end of a stream; comments,
        other fields (`event:` names: each data line says its type) and blank lines are
        skipped."""
        parser = self.wire.parser()
        end = self.wire.stream_end
        for line in _lines(body):
            if not line.startswith(b"data:"):
                continue
            data = line[5:].strip()
            if data == b"[DONE]" and end == "[DONE]":
                break
            if not data:
                continue
            events = self._chunk(parser, data)
            if events:
                body.data()
            yield events
            if parser.done:
                break
        else:
            if end is not None:
                raise self.error(f"the stream from {self.url} ended before {end}")
        try:
            parser.end()
        except Malformed as exc:
            raise self.error(f"malformed stream from {self.url}: {exc}") from None

    def _chunk(self, parser: StreamParser, data: bytes) -> list[Event]:
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
