"""Everything a model call needs, resolved once: config, settings, window, provider, options.

Shared by turns, replays, compression, summaries and merges, from the CLI or a script.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agctl.config import Config, Resolved
    from agctl.providers.base import Provider
    from agctl.store import Store
    from agctl.turns import TurnOptions


@dataclass(frozen=True)
class ModelChoice:
    """What a caller chose for a model call, each None when not chosen: the settings that
    override the session's (profile, model, provider kind) and where replies come from
    (`script` for the scripted offline provider, `cassette` for the replay one)."""

    profile: str | None = None
    model: str | None = None
    provider: str | None = None
    script: Path | None = None
    cassette: Path | None = None


@dataclass
class ModelSetup:
    """The config, the resolved settings and the model's window for one session."""

    config: Config
    settings: Resolved
    window: int
    script: Path | None = None
    cassette: Path | None = None

    @classmethod
    def resolve(
        cls,
        store: Store,
        session_id: str,
        *,
        profile: str | None = None,
        model: str | None = None,
        provider: str | None = None,
        script: Path | None = None,
        cassette: Path | None = None,
        config: Config | None = None,
    ) -> ModelSetup:
        """Settings by precedence (flag > env > session > profile > preset > default);
        `cassette` means the replay provider, `script` the scripted offline one."""
        from agctl.budget import context_window
        from agctl.config import ConfigStore, resolve

        config = config if config is not None else ConfigStore().load()
        session = store.load_session(session_id)
        settings = resolve(config, session=session, profile=profile, model=model, provider=provider)
        if cassette is not None:
            settings.provider = "replay"
        elif script is not None:
            settings.provider = "offline"
        window = settings.context_window or context_window(settings.model, config.context_windows)
        return cls(config, settings, window, script, cassette)

    @classmethod
    def chosen(
        cls, store: Store, session_id: str, choice: ModelChoice, *, config: Config | None = None
    ) -> ModelSetup:
        """`resolve` with what a command line chose, given as one value."""
        return cls.resolve(
            store,
            session_id,
            profile=choice.profile,
            model=choice.model,
            provider=choice.provider,
            script=choice.script,
            cassette=choice.cassette,
            config=config,
        )

    def provider(self, record: Path | None = None) -> Provider:
        from agctl.providers import build_provider

        return build_provider(
            self.settings, script=self.script, cassette=self.cassette, record=record
        )

    def turn_options(self, *, checkpoint: bool | None = None, **fields: Any) -> TurnOptions:
        """Turn options from the config (prices, checkpoints, window, compression) and
        `fields` (slot, temperature, max_tokens, system, scratch, stream)."""
        from agctl.turns import TurnOptions

        config = self.config
        return TurnOptions(
            model=self.settings.model,
            prices=config.price_overrides(),
            checkpoint=config.auto_checkpoint if checkpoint is None else checkpoint,
            window=self.window,
            auto_compress=config.auto_compress,
            keep_recent=config.compress_keep_recent,
            **fields,
        )
