"""`agctl config`: show and change the configuration file."""

from __future__ import annotations

import contextlib
from typing import Any

import click

from agctl.cli.app import App, pass_app
from agctl.cli.complete import complete_models, complete_profiles
from agctl.cli.options import json_option
from agctl.cli.output import aligned, json_text, plain


@click.group("config")
def command() -> None:
    """Show and change the configuration.

    \b
    Examples:
      agctl config show
      agctl config set max_retries 5
      agctl config set prices.my-model '{"prompt": 0.5, "completion": 1.5}'
    """


@command.command("show")
@click.option(
    "--profile",
    metavar="NAME",
    help="Resolve the settings a turn would use with NAME.",
    shell_complete=complete_profiles,
)
@click.option(
    "--model", metavar="NAME", help="Resolve with this model flag.", shell_complete=complete_models
)
@json_option
@pass_app
def show(app: App, profile: str | None, model: str | None) -> None:
    """Print the config (API keys masked) and the settings the next turn would use.

    The resolved settings say where each value came from: flag > environment > session >
    profile > preset > default.

    \b
    Examples:
      agctl config show
      agctl config show --profile deepseek --json
    """
    from agctl.base.errors import AgctlError
    from agctl.config.file import ConfigFile, masked_config, resolve

    config_store = ConfigFile()
    config = config_store.load()
    data = masked_config(config)
    session = None
    with contextlib.suppress(AgctlError):
        session = app.store.load_session(app.session_id())
    public: dict[str, Any]
    try:
        public = resolve(config, session=session, profile=profile, model=model).public()
    except AgctlError as exc:
        public = {"error": str(exc)}
    payload = {"path": str(config_store.path), "config": data, "resolved": public}
    lines = [f"# {config_store.path}", json_text(data, indent=True), "\n# the next turn would use"]
    if "error" in public:
        lines.append(f"nothing: {public['error']}")
    else:
        settings = [
            [
                key,
                "-" if public[key] is None else public[key],
                f"({public['sources'].get(key, '')})",
            ]
            for key in ("provider", "model", "profile", "base_url", "api_key")
        ]
        lines.append(aligned(settings, (9, 40, 0)))
    app.emit(payload, text="\n".join(lines))


@command.command("set")
@click.argument("key")
@click.argument("value")
@json_option
@pass_app
def set_(app: App, key: str, value: str) -> None:
    """Set KEY (dotted path) to VALUE (JSON when it parses, else a string).

    \b
    Keys: default_profile, auto_checkpoint, auto_compress, compress_keep_recent,
          compress_min_tokens, compress_fail_on_loss (see 'agctl ctx compress --help'),
          max_retries, connect_timeout, read_timeout, request_timeout, max_reply_bytes,
          max_retry_wait, lock_timeout, max_calls_per_reply, max_calls_per_turn,
          context_windows.MODEL,
          prices.MODEL.prompt / .completion / .cache_read / .cache_write /
          .cache_write_1h (USD per million tokens; a cache price unset is the prompt
          price, a 1-hour write price unset the write price),
          profiles.NAME.FIELD (see 'agctl profile add --help').

    \b
    Examples:
      agctl config set default_profile work
      agctl config set read_timeout 300
      agctl config set prices.gpt-4o.prompt 2.5
      agctl config set prices.gpt-4o.cache_read 1.25
    """
    from agctl.config.file import ConfigFile, masked_value

    node = masked_value(ConfigFile().set(key, value), key)
    app.done({"key": key, "value": node}, text=f"{key} = {plain(node)}")
