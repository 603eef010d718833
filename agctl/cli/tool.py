"""`agctl tool`: the tools a model may call, kept in the config (or a profile), and
running one by hand."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click

from agctl.base.vocab import TOOL_APPROVALS, TOOL_ARGS_MODES
from agctl.cli.app import App, PathType, pass_app
from agctl.cli.complete import complete_profiles, complete_tools
from agctl.cli.options import json_option
from agctl.cli.output import plain

if TYPE_CHECKING:
    from agctl.config.file import Config
    from agctl.turn.tools import ToolSpec

F = TypeVar("F", bound=Callable[..., Any])


@click.group("tool")
def command() -> None:
    """Tools a model may call: argv commands given their arguments as JSON.

    A tool runs in its own process group, with a scrubbed environment (PATH, HOME, LANG,
    LC_*, TZ, TMPDIR, TERM and what --env-allow names; never a variable whose name holds
    KEY, TOKEN, SECRET, PASSWORD, PASSWD or CREDENTIAL, nor AGCTL_* or OPENAI_*), a time
    limit and capped output. The command is an argv array, never a shell string: give it
    after '--'. A profile's tools override the config's of the same name.

    \b
    Examples:
      agctl tool add word-count --description "Count words in text" --parameters \\
        '{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}' \\
        -- python3 -c 'import json,sys; print(len(json.load(sys.stdin)["text"].split()))'
      agctl tool test word-count --args '{"text": "one two three"}'
      agctl tool list
    """


def _profile_option(help_text: str) -> Callable[[F], F]:
    return click.option(
        "--profile", metavar="NAME", help=help_text, shell_complete=complete_profiles
    )


# What an argv tool and an MCP server's tools (agctl.cli.mcp) are both set with.
max_output_option = click.option(
    "--max-output",
    type=int,
    metavar="BYTES",
    help="At most this much of its result reaches the model, head and tail kept. [default: 32768]",
)


def approve_option(help_text: str) -> Callable[[F], F]:
    return click.option(
        "--approve",
        type=click.Choice(TOOL_APPROVALS),
        default="ask",
        show_default=True,
        help=help_text,
    )


def env_allow_option(help_text: str) -> Callable[[F], F]:
    return click.option("--env-allow", "env_allow", multiple=True, metavar="GLOB", help=help_text)


_tools_file_option = click.option(
    "--tools-file",
    metavar="FILE",
    type=PathType(dir_okay=False),
    help="Also the tools of FILE (a JSON array of tool objects), overriding by name.",
)


def _listed_profile(config: Config, profile: str | None) -> str | None:
    """The profile whose tools a turn would see: --profile, else AGCTL_PROFILE, else the
    config's default profile."""
    import os

    return profile or os.environ.get("AGCTL_PROFILE") or config.default_profile


def _found(profile: str | None, tools_file: str | None, name: str) -> tuple[ToolSpec, str]:
    """The tool `name` of the registry, and where it comes from; NotFound names the others."""
    from agctl.base.errors import NotFound
    from agctl.config.file import ConfigFile
    from agctl.turn.tools import tool_registry, tool_sources

    config = ConfigFile().load()
    chosen = _listed_profile(config, profile)
    registry = tool_registry(config, chosen, tools_file)
    if name not in registry:
        known = ", ".join(sorted(registry)) or "none"
        raise NotFound(
            f"tool {name!r} not found (tools: {known})",
            hint="add it with 'agctl tool add NAME --description TEXT -- COMMAND [ARG...]'",
        )
    return registry[name], tool_sources(config, chosen, tools_file)[name]


@command.command("add")
@click.argument("name", metavar="NAME")
@click.argument("argv", nargs=-1, required=True, metavar="-- COMMAND [ARG...]")
@click.option(
    "--description", required=True, metavar="TEXT", help="What the tool does, for the model."
)
@click.option(
    "--parameters",
    metavar="JSON",
    help="The JSON Schema of its arguments (an object schema; default: no arguments, "
    '{"type":"object","properties":{}}).',
)
@click.option(
    "--args",
    "args_mode",
    type=click.Choice(TOOL_ARGS_MODES),
    default="stdin",
    show_default=True,
    help="How the arguments reach it: one JSON document on stdin; AGCTL_TOOL_ARGS=JSON "
    "and TOOL_ARG_<NAME> for each top-level scalar; or the JSON as the last argument.",
)
@click.option(
    "--timeout",
    "timeout_s",
    type=float,
    metavar="S",
    help="Seconds before it is stopped (SIGTERM, then SIGKILL 2 s later). [default: 30]",
)
@max_output_option
@click.option(
    "--cwd",
    metavar="DIR",
    help="Where it runs, relative to where agctl is started (default: there); never "
    "inside the data dir.",
)
@approve_option("Run a model's call without asking, after asking on the terminal, or never.")
@env_allow_option("Also pass the variables this glob matches (repeatable); secrets never pass.")
@_profile_option("Keep it in this profile's tools, not the config's.")
@click.option("--force", is_flag=True, help="Replace a tool of that name.")
@json_option
@pass_app
def add(
    app: App,
    name: str,
    argv: tuple[str, ...],
    description: str,
    parameters: str | None,
    args_mode: str,
    timeout_s: float | None,
    max_output: int | None,
    cwd: str | None,
    approve: str,
    env_allow: tuple[str, ...],
    profile: str | None,
    force: bool,
) -> None:
    """Add the tool NAME, which runs COMMAND [ARG...] (given after '--').

    Nothing is run to check it; 'agctl tool test' runs it by hand.

    \b
    Examples:
      agctl tool add now --description "The date and time" --approve auto -- date -Iseconds
      agctl tool add grep --description "Search the project" --args argv \\
        --parameters '{"type":"object","properties":{"pattern":{"type":"string"}}}' \\
        -- ./tools/grep.sh
      agctl tool add deploy --description "Deploy" --profile work --env-allow 'DEPLOY_*' \\
        -- make deploy
    """
    from agctl.config.file import ConfigFile
    from agctl.turn.tools import new_tool

    fields = {
        "name": name,
        "description": description,
        "parameters": _json_schema(parameters),
        "command": list(argv),
        "args": args_mode,
        "timeout_s": timeout_s,
        "max_output": max_output,
        "cwd": cwd,
        "approve": approve,
        "env_allow": list(env_allow),
    }
    spec = new_tool(fields, data_dir=app.local_dir)
    replaced = ConfigFile().add_tool(spec, profile=profile, replace=force)
    where = f" to profile {profile}" if profile else ""
    app.done(
        {"tool": name, "profile": profile, "replaced": replaced},
        text=f"{'replaced' if replaced else 'added'} tool {name}{where}",
    )


def _json_schema(text: str | None) -> Any:
    """--parameters read as JSON (None when not given)."""
    import orjson

    if text is None:
        return None
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise click.BadParameter(f"not valid JSON: {exc}", param_hint="--parameters") from None


@command.command("list")
@_profile_option("Tools a turn with this profile sees (default: AGCTL_PROFILE, else the default).")
@_tools_file_option
@json_option
@pass_app
def list_(app: App, profile: str | None, tools_file: str | None) -> None:
    """List the tools, with where each comes from (config, profile or file).

    \b
    Examples:
      agctl tool list
      agctl tool list --profile work --tools-file ci-tools.json --json
    """
    from agctl.base.quoting import shell_words
    from agctl.config.file import ConfigFile
    from agctl.turn.tools import tool_registry, tool_sources

    config = ConfigFile().load()
    chosen = _listed_profile(config, profile)
    registry = tool_registry(config, chosen, tools_file)
    sources = tool_sources(config, chosen, tools_file)
    rows = [
        {
            "name": name,
            "source": sources[name],
            "approve": spec.approve,
            "args": spec.args,
            "timeout_s": spec.timeout_s,
            "command": spec.command,
            "description": spec.description,
        }
        for name, spec in sorted(registry.items())
    ]
    commands = [shell_words(spec.command) for _name, spec in sorted(registry.items())]
    display = [{**row, "command": command} for row, command in zip(rows, commands, strict=True)]
    columns = [
        ("name", "TOOL"),
        ("approve", "APPROVE"),
        ("source", "SOURCE"),
        ("command", "COMMAND"),
    ]
    app.emit_rows(rows, columns, empty="no tools (add one with 'agctl tool add')", display=display)


@command.command("show")
@click.argument("name", shell_complete=complete_tools)
@_profile_option("Look in this profile's tools too (default: AGCTL_PROFILE, else the default).")
@_tools_file_option
@json_option
@pass_app
def show(app: App, name: str, profile: str | None, tools_file: str | None) -> None:
    """Print the tool NAME: its definition and where it comes from.

    \b
    Examples:
      agctl tool show word-count
      agctl tool show word-count --json | jq .parameters
    """
    from agctl.base.quoting import shell_words

    spec, source = _found(profile, tools_file, name)
    payload = {**spec.model_dump(mode="json", exclude_none=True), "source": source}
    shown = {key: plain(value) for key, value in payload.items()}
    shown["command"] = shell_words(spec.command)
    app.emit(payload, text="\n".join(f"{key:<12} {value}" for key, value in shown.items()))


@command.command("rm")
@click.argument("name", shell_complete=complete_tools)
@_profile_option("Remove it from this profile's tools, not the config's.")
@json_option
@pass_app
def rm(app: App, name: str, profile: str | None) -> None:
    """Remove the tool NAME.

    \b
    Examples:
      agctl tool rm word-count
      agctl tool rm deploy --profile work
    """
    from agctl.config.file import ConfigFile

    ConfigFile().remove_tool(name, profile=profile)
    app.done({"removed": name, "profile": profile}, text=f"removed tool {name}")


@command.command("test")
@click.argument("name", shell_complete=complete_tools)
@click.option(
    "--args",
    "arguments",
    default="{}",
    show_default=True,
    metavar="JSON",
    help="The arguments, as a model would send them (checked against the schema).",
)
@_profile_option("Look in this profile's tools too (default: AGCTL_PROFILE, else the default).")
@_tools_file_option
@json_option
@pass_app
@click.pass_context
def test(
    ctx: click.Context,
    app: App,
    name: str,
    arguments: str,
    profile: str | None,
    tools_file: str | None,
) -> None:
    """Run the tool NAME now, with no model, and print the result the model would get.

    It runs whatever its --approve says: you ask, not a model. Exit 0 when the tool ran
    and exited 0; 1 when it ran and failed (non-zero exit, timeout) or could not be
    started, the outcome printed all the same; 2 when the arguments are not valid JSON
    or break its schema (nothing runs).

    \b
    Examples:
      agctl tool test word-count --args '{"text": "one two three"}'
      agctl tool test now --json
    """
    from agctl.base.errors import UsageError
    from agctl.turn.tools import check_call, run_tool

    spec, _source = _found(profile, tools_file, name)
    checked = check_call(spec, name, arguments)
    if isinstance(checked, str):
        raise UsageError(f"--args: {checked.removeprefix('error: ')}", hint="nothing was run")
    result = run_tool(spec, checked, data_dir=app.local_dir)
    app.emit(result.to_dict(), text=result.result_text.removesuffix("\n"))
    if not result.ok:
        ctx.exit(1)
