"""Any OpenAI-compatible chat-completions server, over httpx (streaming or not)."""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime
from typing import TYPE_CHECKING, Any

import orjson

from agctl import __version__
from agctl.errors import ProviderError
from agctl.providers.base import (
    ChatRequest,
    Event,
    Finish,
    ReasoningDelta,
    TextDelta,
    ToolCallDelta,
    Usage,
)

if TYPE_CHECKING:
    import httpx

log = logging.getLogger("agctl.provider")

RETRY_STATUSES = frozenset({408, 429, 500, 502, 503, 504})
MAX_RETRY_AFTER = 120.0
JSON_HEADERS = {"Content-Type": "application/json"}


@dataclass
class HttpSettings:
    base_url: str
    api_key: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    connect_timeout: float = 10.0
    read_timeout: float = 120.0
    max_retries: int = 3
    backoff_base: float = 0.5
    backoff_max: float = 20.0


class _Retry(Exception):
    """A failure before any event was yielded, which a new attempt may fix."""

    def __init__(self, error: ProviderError, retry_after: float | None = None) -> None:
        self.error = error
        self.retry_after = retry_after


def _retry_after(headers: httpx.Headers) -> float | None:
    if "retry-after-ms" in headers:
        try:
            return float(headers["retry-after-ms"]) / 1000
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(float(value), 0.0)
    except ValueError:
        pass
    try:
        return max(parsedate_to_datetime(value).timestamp() - time.time(), 0.0)
    except (TypeError, ValueError):
        return None


def _server_message(body: bytes) -> str:
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        text = body.decode("utf-8", "replace").strip()
        return " ".join(text.split())[:300] or "(empty body)"
    if isinstance(data, dict):
        error = data.get("error", data)
        if isinstance(error, dict) and error.get("message"):
            return str(error["message"])
        if isinstance(error, str):
            return error
    return " ".join(body.decode("utf-8", "replace").split())[:300]


def chunk_events(chunk: dict[str, Any]) -> Iterator[Event]:
    """Events of one streamed `chat.completion.chunk`."""
    for choice in chunk.get("choices") or ():
        delta = choice.get("delta") or {}
        reasoning = delta.get("reasoning_content") or delta.get("reasoning")
        if reasoning:
            yield ReasoningDelta(str(reasoning))
        if delta.get("content"):
            yield TextDelta(str(delta["content"]))
        for call in delta.get("tool_calls") or ():
            function = call.get("function") or {}
            yield ToolCallDelta(
                index=int(call.get("index", 0)),
                id=call.get("id"),
                name=function.get("name"),
                arguments=function.get("arguments") or "",
            )
        if choice.get("finish_reason"):
            yield Finish(str(choice["finish_reason"]))
    usage = chunk.get("usage")
    if usage:
        yield Usage(int(usage.get("prompt_tokens", 0)), int(usage.get("completion_tokens", 0)))


def completion_events(data: dict[str, Any]) -> Iterator[Event]:
    """Events of one whole `chat.completion` object."""
    choice = data["choices"][0]
    message = choice["message"]
    reasoning = message.get("reasoning_content") or message.get("reasoning")
    if reasoning:
        yield ReasoningDelta(str(reasoning))
    if message.get("content"):
        yield TextDelta(str(message["content"]))
    for index, call in enumerate(message.get("tool_calls") or ()):
        function = call["function"]
        yield ToolCallDelta(
            index, id=call.get("id"), name=function["name"], arguments=function.get("arguments", "")
        )
    usage = data.get("usage")
    if usage:
        yield Usage(int(usage.get("prompt_tokens", 0)), int(usage.get("completion_tokens", 0)))
    yield Finish(str(choice.get("finish_reason") or "stop"))


class OpenAIProvider:
    """Chat completions over HTTP with retries, backoff, timeouts and SSE streaming."""

    name = "openai"

    def __init__(
        self, settings: HttpSettings, *, sleep: Callable[[float], None] = time.sleep
    ) -> None:
        self.settings = settings
        self.url = settings.base_url.rstrip("/") + "/chat/completions"
        self._sleep = sleep
        self._client: httpx.Client | None = None

    def _redact(self, text: str) -> str:
        key = self.settings.api_key
        return text.replace(key, "***") if key else text

    def _redact_bytes(self, body: bytes) -> bytes:
        """The key out of a server's body before any of it is cut or shown."""
        key = self.settings.api_key
        return body.replace(key.encode(), b"***") if key else body

    def _error(self, message: str, **kwargs: Any) -> ProviderError:
        return ProviderError(self._redact(message), **kwargs)

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
                timeout=httpx.Timeout(
                    connect=settings.connect_timeout,
                    read=settings.read_timeout,
                    write=settings.read_timeout,
                    pool=settings.connect_timeout,
                ),
                # An SSL context costs ~50 ms to build; plain http needs none.
                verify=not self.url.startswith("http://"),
            )
        return self._client

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def stream(self, request: ChatRequest) -> Iterator[Event]:
        attempt = 0
        while True:
            try:
                if request.stream:
                    yield from self._sse(request)
                else:
                    yield from self._complete(request)
                return
            except _Retry as retry:
                if attempt >= self.settings.max_retries:
                    raise retry.error from None
                delay = self._delay(attempt, retry.retry_after)
                if delay is None:
                    raise retry.error from None
                attempt += 1
                log.info(
                    "retry %d/%d in %.2fs: %s",
                    attempt,
                    self.settings.max_retries,
                    delay,
                    retry.error,
                )
                self._sleep(delay)

    def _delay(self, attempt: int, retry_after: float | None) -> float | None:
        if retry_after is not None:
            return retry_after if retry_after <= MAX_RETRY_AFTER else None
        ceiling = min(self.settings.backoff_max, self.settings.backoff_base * 2**attempt)
        return random.uniform(ceiling / 2, ceiling)

    def _status_error(self, response: httpx.Response, body: bytes) -> Exception:
        status = response.status_code
        message = self._redact(
            f"{status} {response.reason_phrase} from {self.url}: "
            f"{_server_message(self._redact_bytes(body))}"
        )
        if status in RETRY_STATUSES:
            error = ProviderError(message, status=status, retryable=True)
            return _Retry(error, _retry_after(response.headers))
        return ProviderError(message, status=status)

    def _transport_error(self, exc: Exception, started: bool) -> Exception:
        import httpx

        kind = "timed out" if isinstance(exc, httpx.TimeoutException) else "failed"
        phase = "mid-stream" if started else "before a reply"
        error = self._error(f"request to {self.url} {kind} {phase}: {exc or type(exc).__name__}")
        return error if started else _Retry(error)

    def _fatal_transport(self, exc: Exception) -> bool:
        """Errors no retry can fix: a URL agctl cannot speak to."""
        import httpx

        return isinstance(exc, httpx.UnsupportedProtocol | httpx.LocalProtocolError)

    def _complete(self, request: ChatRequest) -> Iterator[Event]:
        import httpx

        try:
            response = self.client.post(
                self.url, content=orjson.dumps(request.payload()), headers=JSON_HEADERS
            )
            body = response.content
        except httpx.TransportError as exc:
            if self._fatal_transport(exc):
                raise self._error(f"cannot send to {self.url}: {exc}") from None
            raise self._transport_error(exc, started=False) from None
        if response.status_code != 200:
            raise self._status_error(response, body)
        try:
            events = list(completion_events(orjson.loads(body)))
        except (orjson.JSONDecodeError, KeyError, IndexError, TypeError, ValueError):
            snippet = " ".join(self._redact_bytes(body).decode("utf-8", "replace").split())[:200]
            raise self._error(f"malformed response from {self.url}: {snippet!r}") from None
        yield from events

    def _sse(self, request: ChatRequest) -> Iterator[Event]:
        import httpx

        started = False
        try:
            with self.client.stream(
                "POST",
                self.url,
                content=orjson.dumps(request.payload()),
                headers={**JSON_HEADERS, "Accept": "text/event-stream"},
            ) as response:
                if response.status_code != 200:
                    raise self._status_error(response, response.read())
                for line in response.iter_lines():
                    if not line.startswith("data:"):
                        continue
                    data = line[5:].strip()
                    if data == "[DONE]":
                        return
                    try:
                        chunk = orjson.loads(data)
                        if isinstance(chunk, dict) and "error" in chunk:
                            raise self._error(
                                f"error mid-stream from {self.url}: "
                                f"{_server_message(self._redact_bytes(data.encode()))}"
                            )
                        events = list(chunk_events(chunk))
                    except (orjson.JSONDecodeError, AttributeError, TypeError, ValueError):
                        raise self._error(
                            f"malformed stream data from {self.url}: {self._redact(data)[:200]!r}"
                        ) from None
                    started = started or bool(events)
                    yield from events
        except httpx.TransportError as exc:
            if self._fatal_transport(exc):
                raise self._error(f"cannot send to {self.url}: {exc}") from None
            raise self._transport_error(exc, started) from None
        raise self._error(f"the stream from {self.url} ended before [DONE]")
