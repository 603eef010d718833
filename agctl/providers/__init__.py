"""Model providers: offline (default), the HTTP wires — openai (any compatible server),
anthropic, gemini — and replay."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from agctl.base.errors import ProviderError, UsageError
from agctl.base.redact import Redactor, mask_url
from agctl.providers.base import ChatRequest, Event, Provider, RedactingProvider, TurnContext

if TYPE_CHECKING:
    from agctl.config.file import Resolved
    from agctl.providers.wire import Wire

__all__ = [
    "ChatRequest",
    "Event",
    "Provider",
    "TurnContext",
    "build_provider",
    "check_base_url",
    "wire_for",
]

# Headers that carry a key: a profile that sets one needs no key variable.
_KEY_HEADERS = ("authorization", "api-key", "x-api-key", "x-goog-api-key")
# The least thinking budget Anthropic accepts.
ANTHROPIC_MIN_THINKING = 1024


def check_base_url(url: str) -> None:
    """Refuse a base URL no request could be sent to, naming it with its password masked."""
    from urllib.parse import urlsplit

    shown = mask_url(url)
    problem = None
    if any(char.isspace() or not char.isprintable() for char in url):
        problem = "it contains spaces or control characters"
    else:
        try:
            parts = urlsplit(url)
            port = parts.port
        except ValueError as exc:
            problem = str(exc)
        else:
            if parts.scheme not in ("http", "https"):
                problem = "the scheme must be http or https"
            elif not parts.hostname:
                problem = "it names no host"
            elif port == 0:
                problem = "port 0 is not a port a server listens on"
    if problem is None:
        import httpx

        try:
            httpx.URL(url)
        except httpx.InvalidURL as exc:
            problem = str(exc)
    if problem is not None:
        problem = Redactor.for_credentials(None, url).text(problem)
        raise UsageError(f"invalid base URL {shown!r}: {problem}")


def check_key(settings: Resolved) -> None:
    """A profile that expects a key from a variable that is unset fails here, before any
    request, instead of sending one unauthenticated and retrying its 401 (exit 6)."""
    from agctl.base.vocab import KEY_VARIABLES

    authorized = any(name.lower() in _KEY_HEADERS for name in settings.headers)
    if settings.api_key or settings.key_env is None or authorized:
        return
    profile = (
        f"profile {settings.profile}" if settings.profile else f"the {settings.provider} preset"
    )
    own = KEY_VARIABLES.get(settings.provider, ())
    others = [name for name in own if name != settings.key_env and settings.key_env in own]
    variable = settings.key_env + "".join(f" (or {name})" for name in others)
    raise ProviderError(
        f"{variable} is not set ({profile})",
        hint="export it, or give the key with 'agctl profile add NAME --api-key -' or "
        "AGCTL_API_KEY",
    )


def wire_for(settings: Resolved) -> Wire | None:
    """The wire a provider of `settings` speaks (None: offline, replay), built from the
    profile's wire settings; a setting the wire cannot use is a UsageError."""
    if settings.provider == "openai":
        from agctl.providers.openai import OpenAIWire

        return OpenAIWire(cache_key=settings.prompt_cache_key)
    budget = settings.thinking_budget
    if settings.provider == "anthropic":
        if budget is not None and budget < ANTHROPIC_MIN_THINKING:
            raise UsageError(
                f"thinking_budget {budget} is below Anthropic's least "
                f"({ANTHROPIC_MIN_THINKING} tokens)"
            )
        from agctl.providers.anthropic import AnthropicWire

        return AnthropicWire(cache_ttl=settings.cache_ttl, thinking_budget=budget)
    if settings.provider == "gemini":
        from agctl.providers.gemini import GeminiWire

        return GeminiWire(thinking_budget=budget)
    return None


def build_provider(
    settings: Resolved,
    *,
    script: Path | None = None,
    cassette: Path | None = None,
    record: Path | None = None,
) -> Provider:
    """The provider for resolved settings; `cassette` replays, `record` records."""
    provider: Provider
    # An HTTP provider redacts its own replies; importing it (and what it imports) only
    # for an HTTP turn keeps an offline or replayed turn's start-up short.
    redacts_itself = False
    if cassette is not None or settings.provider == "replay":
        from agctl.providers.cassette import ReplayProvider

        path = cassette or (Path(settings.cassette) if settings.cassette else None)
        if path is None:
            raise UsageError("the replay provider needs a cassette", hint="pass --cassette FILE")
        provider = ReplayProvider(path)
    elif script is not None:
        from agctl.providers.offline import OfflineProvider, load_script

        provider = OfflineProvider(load_script(script))
    elif (wire := wire_for(settings)) is not None:
        from agctl.providers.http import HttpProvider, HttpSettings

        if not settings.base_url:
            raise UsageError(
                f"the {settings.provider} provider needs a base URL (profile, preset or env)"
            )
        check_base_url(settings.base_url)
        check_key(settings)
        provider = HttpProvider(
            wire,
            HttpSettings(
                base_url=settings.base_url,
                api_key=settings.api_key,
                headers=settings.headers,
                connect_timeout=settings.connect_timeout,
                read_timeout=settings.read_timeout,
                request_timeout=settings.request_timeout,
                max_reply_bytes=settings.max_reply_bytes,
                max_retries=settings.max_retries,
                max_retry_wait=settings.max_retry_wait,
                prompt_cache_key=settings.prompt_cache_key,
            ),
        )
        redacts_itself = True
    else:
        from agctl.providers.offline import OfflineProvider

        provider = OfflineProvider()
    redactor = Redactor.for_credentials(settings.api_key, settings.base_url, settings.headers)
    if redactor and not redacts_itself:
        # A cassette recorded before the HTTP providers redacted their replies, or a
        # script, must not bring the key back either.
        provider = RedactingProvider(provider, redactor)
    if record is not None:
        from agctl.providers.cassette import RecordingProvider

        provider = RecordingProvider(provider, record)
    return provider
