"""`agctl profile`: named provider settings (endpoint, model, key) in the config file."""

from __future__ import annotations

from typing import Any

import click

from agctl.base.vocab import CACHE_TTLS, PROVIDERS
from agctl.cli.app import App, pass_app, text_argument
from agctl.cli.complete import complete_profiles
from agctl.cli.options import gathered, json_option


@click.group("profile")
def command() -> None:
    """Provider profiles: endpoint, model and key.

    A preset name (openai, deepseek, zhipu, ollama, vllm, llamacpp, lmstudio, openrouter,
    anthropic, gemini) works as a profile without adding one; its key comes from the usual
    variable (OPENAI_API_KEY, DEEPSEEK_API_KEY, ZHIPUAI_API_KEY, OPENROUTER_API_KEY,
    ANTHROPIC_API_KEY, GOOGLE_API_KEY or GEMINI_API_KEY). The anthropic and gemini presets
    speak those services' own wires (Messages API, generateContent); the others speak
    OpenAI's chat completions.

    \b
    Examples:
      agctl profile add ds --preset deepseek --model deepseek-chat --default
      agctl profile add local --preset ollama --model qwen2.5:7b
      agctl profile add claude --kind anthropic --model claude-sonnet-4-5 --cache-ttl 1h
      agctl profile add gem --kind gemini --model gemini-2.5-flash --thinking-budget 2048
      agctl profile list
    """


# The options of `profile add` that are a profile's fields as typed.
PROFILE_FIELDS = (
    "provider",
    "preset",
    "base_url",
    "model",
    "api_key_env",
    "cassette",
    "prompt_cache_key",
    "cache_ttl",
    "thinking_budget",
)


@command.command("add")
@click.argument("name")
@click.option(
    "--kind",
    "--provider",
    "provider",
    type=click.Choice(PROVIDERS),
    help="The wire the profile speaks (default: its preset's, else openai).",
)
@click.option("--preset", metavar="NAME", help="Start from a preset's base URL, key and model.")
@click.option(
    "--base-url",
    metavar="URL",
    help="Base URL: chat completions' (…/v1), or the Anthropic or Gemini service's root.",
)
@click.option("--model", metavar="NAME", help="Default model of the profile.")
@click.option("--api-key-env", metavar="VAR", help="Read the key from this env variable.")
@click.option(
    "--api-key",
    metavar="KEY",
    help="Store the key in the 0600 config file ('-' reads it from stdin).",
)
@click.option("--header", "headers", metavar="NAME:VALUE", multiple=True, help="Extra header.")
@click.option("--cassette", metavar="FILE", help="For --provider replay: the cassette.")
@click.option(
    "--prompt-cache-key/--no-prompt-cache-key",
    default=None,
    help="Send prompt_cache_key, which routes a conversation's requests to the cache of "
    "its prefix (default: only to OpenAI itself).",
)
@click.option(
    "--cache-ttl",
    type=click.Choice(CACHE_TTLS),
    help="Anthropic: keep the cache entries agctl's breakpoints write this long (default "
    "5m; 1h writes cost more).",
)
@click.option(
    "--thinking-budget",
    type=click.IntRange(min=-1),
    metavar="TOKENS",
    help="Anthropic and Gemini: the model's thinking budget (Anthropic: at least 1024; "
    "Gemini: 0 off, -1 the model's choice).",
)
@click.option("--default", "make_default", is_flag=True, help="Make it the default profile.")
@click.option("--replace", is_flag=True, help="Replace an existing profile of that name.")
@json_option
@gathered("fields", *PROFILE_FIELDS)
@pass_app
def add(
    app: App,
    name: str,
    api_key: str | None,
    headers: tuple[str, ...],
    make_default: bool,
    replace: bool,
    fields: dict[str, Any],
) -> None:
    """Add a profile. No network call is made to check it.

    \b
    Examples:
      agctl profile add work --preset openai --model gpt-4o-mini --api-key-env WORK_KEY
      printf %s "$KEY" | agctl profile add ds --preset deepseek --api-key -
      agctl profile add vllm --base-url http://gpu-box:8000/v1 --model qwen2.5
      agctl profile add claude --kind anthropic --model claude-sonnet-4-5 --cache-ttl 1h
      agctl profile add gem --preset gemini --thinking-budget 1024
    """
    from agctl.config.file import ConfigFile, profile_from

    if api_key == "-":
        api_key = text_argument("-", "the API key").strip()
    profile = profile_from({**fields, "api_key": api_key, "headers": _headers(headers)})
    config = ConfigFile().add_profile(name, profile, replace=replace, make_default=make_default)
    default = config.default_profile == name
    app.done(
        {"profile": name, "default": default},
        text=f"added profile {name}" + (" (default)" if default else ""),
    )


def _headers(given: tuple[str, ...]) -> dict[str, str]:
    """The --header NAME:VALUE pairs, each stripped."""
    parsed: dict[str, str] = {}
    for header in given:
        key, sep, value = header.partition(":")
        if not sep or not key.strip():
            # Not echoed: a malformed header is often a secret typed without its ':'.
            raise click.BadParameter("a header must be NAME:VALUE", param_hint="--header")
        parsed[key.strip()] = value.strip()
    return parsed


@command.command("list")
@json_option
@pass_app
def list_(app: App) -> None:
    """List profiles; '*' marks the default.

    \b
    Examples:
      agctl profile list --json
    """
    from agctl.config.file import ConfigFile, profile_listing

    rows = profile_listing(ConfigFile().load())
    display = [{**r, "mark": "*" if r["default"] else ""} for r in rows]
    columns = [
        ("mark", ""),
        ("name", "PROFILE"),
        ("provider", "PROVIDER"),
        ("model", "MODEL"),
        ("base_url", "BASE URL"),
        ("api_key", "KEY"),
    ]
    app.emit_rows(
        rows, columns, empty="no profiles (add one with 'agctl profile add')", display=display
    )


@command.command("rm")
@click.argument("name", shell_complete=complete_profiles)
@json_option
@pass_app
def rm(app: App, name: str) -> None:
    """Remove a profile.

    \b
    Examples:
      agctl profile rm work
    """
    from agctl.config.file import ConfigFile

    ConfigFile().remove_profile(name)
    app.done({"removed": name}, text=f"removed profile {name}")
