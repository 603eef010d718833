"""Model providers: offline (default), openai (any compatible server) and replay."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from agctl.errors import UsageError
from agctl.providers.base import ChatRequest, Event, Provider, TurnContext

if TYPE_CHECKING:
    from agctl.config import Resolved

__all__ = ["ChatRequest", "Event", "Provider", "TurnContext", "build_provider"]


def build_provider(
    settings: Resolved,
    *,
    script: Path | None = None,
    cassette: Path | None = None,
    record: Path | None = None,
) -> Provider:
    """The provider for resolved settings; `cassette` replays, `record` records."""
    provider: Provider
    if cassette is not None or settings.provider == "replay":
        from agctl.providers.cassette import ReplayProvider

        path = cassette or (Path(settings.cassette) if settings.cassette else None)
        if path is None:
            raise UsageError("the replay provider needs a cassette: pass --cassette FILE")
        provider = ReplayProvider(path)
    elif script is not None:
        from agctl.providers.offline import OfflineProvider, load_script

        provider = OfflineProvider(load_script(script))
    elif settings.provider == "openai":
        from agctl.providers.openai import HttpSettings, OpenAIProvider

        if not settings.base_url:
            raise UsageError("the openai provider needs a base URL (profile, preset or env)")
        provider = OpenAIProvider(
            HttpSettings(
                base_url=settings.base_url,
                api_key=settings.api_key,
                headers=settings.headers,
                connect_timeout=settings.connect_timeout,
                read_timeout=settings.read_timeout,
                max_retries=settings.max_retries,
            )
        )
    else:
        from agctl.providers.offline import OfflineProvider

        provider = OfflineProvider()
    if record is not None:
        from agctl.providers.cassette import RecordingProvider

        provider = RecordingProvider(provider, record)
    return provider
