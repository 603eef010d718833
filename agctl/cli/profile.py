"""`agctl profile`: named provider settings (endpoint, model, key) in the config file."""

from __future__ import annotations

import click

from agctl.base.vocab import PROVIDERS
from agctl.cli.app import App, pass_app, text_argument
from agctl.cli.complete import complete_profiles
from agctl.cli.options import json_option


@click.group("profile")
def command() -> None:
    """Provider profiles: endpoint, model and key.

    A preset name (openai, deepseek, zhipu, ollama, vllm, llamacpp, lmstudio, openrouter)
    works as a profile without adding one; its key comes from the usual variable
    (OPENAI_API_KEY, DEEPSEEK_API_KEY, ZHIPUAI_API_KEY, OPENROUTER_API_KEY).

    \b
    Examples:
      agctl profile add ds --preset deepseek --model deepseek-chat --default
      agctl profile add local --preset ollama --model qwen2.5:7b
      agctl profile list
    """


@command.command("add")
@click.argument("name")
@click.option("--provider", type=click.Choice(PROVIDERS), default="openai", show_default=True)
@click.option("--preset", metavar="NAME", help="Start from a preset's base URL, key and model.")
@click.option("--base-url", metavar="URL", help="Chat-completions base URL (…/v1).")
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
@click.option("--default", "make_default", is_flag=True, help="Make it the default profile.")
@click.option("--replace", is_flag=True, help="Replace an existing profile of that name.")
@json_option
@pass_app
def add(
    app: App,
    name: str,
    provider: str,
    preset: str | None,
    base_url: str | None,
    model: str | None,
    api_key_env: str | None,
    api_key: str | None,
    headers: tuple[str, ...],
    cassette: str | None,
    prompt_cache_key: bool | None,
    make_default: bool,
    replace: bool,
) -> None:
    """Add a profile. No network call is made to check it.

    \b
    Examples:
      agctl profile add work --preset openai --model gpt-4o-mini --api-key-env WORK_KEY
      printf %s "$KEY" | agctl profile add ds --preset deepseek --api-key -
      agctl profile add vllm --base-url http://gpu-box:8000/v1 --model qwen2.5
    """
    from agctl.config.file import ConfigFile, profile_from

    parsed = _headers(headers)
    if api_key == "-":
        api_key = text_argument("-", "the API key").strip()
    profile = profile_from(
        {
            "provider": provider,
            "preset": preset,
            "base_url": base_url,
            "model": model,
            "api_key": api_key,
            "api_key_env": api_key_env,
            "headers": parsed,
            "cassette": cassette,
            "prompt_cache_key": prompt_cache_key,
        }
    )
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
