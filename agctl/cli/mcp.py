"""`agctl mcp`: MCP servers whose tools a turn may offer (agctl.turn.mcp), kept in the config."""

from __future__ import annotations

from pathlib import Path

import click

from agctl.cli.app import App, PathType, pass_app
from agctl.cli.options import json_option
from agctl.cli.tool import approve_option, env_allow_option, max_output_option


@click.group("mcp")
def command() -> None:
    """MCP servers: their tools offered to a model as SERVER__TOOL, like argv tools.

    A server is a command run over stdio (given after '--'), or a streamable HTTP URL. A
    turn offers a server's tool with -T SERVER__TOOL (or --tools all): its calls are
    checked, approved (ask, by default), capped and timed out as an argv tool's, and a
    cassette records their results, so a replay needs no server. A stdio server runs with
    the scrubbed environment an argv tool gets. Needs the MCP SDK: pip install 'agctl[mcp]'.

    \b
    Examples:
      agctl mcp add files -- npx -y @modelcontextprotocol/server-filesystem .
      agctl mcp add search --url https://mcp.example.com/mcp \\
        --header 'Authorization: Bearer ${SEARCH_TOKEN}'
      agctl mcp tools files
      agctl turn send -T files__read_text_file "What does README.md say?"
    """


@command.command("add")
@click.argument("name", metavar="NAME")
@click.argument("argv", nargs=-1, metavar="[-- COMMAND [ARG...]]")
@click.option("--url", metavar="URL", help="A streamable HTTP server at URL, not a command.")
@click.option(
    "--header",
    "headers",
    multiple=True,
    metavar="'NAME: VALUE'",
    help="An HTTP header (repeatable); ${VAR} in VALUE is read from the environment when "
    "it connects, so a token need not be kept in the config.",
)
@approve_option("Run a model's call of its tools without asking, after asking, or never.")
@click.option(
    "--connect-timeout",
    "connect_timeout_s",
    type=float,
    metavar="S",
    help="Seconds to start it, connect and list its tools. [default: 10]",
)
@click.option(
    "--timeout",
    "timeout_s",
    type=float,
    metavar="S",
    help="Seconds a call may take; then the model gets a timeout error. [default: 30]",
)
@max_output_option
@env_allow_option(
    "Also pass a stdio server the variables this glob matches (repeatable); secrets never pass."
)
@click.option("--force", is_flag=True, help="Replace a server of that name.")
@json_option
@pass_app
def add(
    app: App,
    name: str,
    argv: tuple[str, ...],
    url: str | None,
    headers: tuple[str, ...],
    approve: str,
    connect_timeout_s: float | None,
    timeout_s: float | None,
    max_output: int | None,
    env_allow: tuple[str, ...],
    force: bool,
) -> None:
    """Add the MCP server NAME: COMMAND [ARG...] after '--' (stdio), or --url URL (HTTP).

    Nothing is started to check it; 'agctl mcp tools NAME' connects and lists its tools.

    \b
    Examples:
      agctl mcp add suite -- python3 tests/mcp_server.py
      agctl mcp add docs --url http://127.0.0.1:8000/mcp --approve auto
      agctl mcp add api --url https://mcp.example.com/mcp \\
        --header 'Authorization: Bearer ${API_TOKEN}'
    """
    from agctl.config.file import ConfigFile
    from agctl.turn.mcp import new_server

    spec = new_server(
        name,
        list(argv),
        url,
        headers,
        approve=approve,
        connect_timeout_s=connect_timeout_s,
        timeout_s=timeout_s,
        max_output=max_output,
        env_allow=list(env_allow),
    )
    replaced = ConfigFile().add_mcp_server(spec, replace=force)
    app.done(
        {"server": name, "replaced": replaced},
        text=f"{'replaced' if replaced else 'added'} MCP server {name}",
    )


@command.command("list")
@json_option
@pass_app
def list_(app: App) -> None:
    """List the MCP servers: the config's, and the project's (./.agctl/mcp.json) with its
    trust; header values are masked, unless they name a ${VAR}.

    \b
    Examples:
      agctl mcp list
      agctl mcp list --json
    """
    from agctl.base.quoting import shell_words
    from agctl.cli.hook import warn_ignored
    from agctl.config.file import ConfigFile
    from agctl.turn.mcp import server_rows

    rows, invalid = server_rows(ConfigFile().load())
    if invalid is not None:
        warn_ignored(app, *invalid)
    display = [
        {
            **row,
            "source": row["source"] + (f" ({row['trust']})" if row["trust"] else ""),
            "target": shell_words(row["command"]) if row["command"] else row["url"],
        }
        for row in rows
    ]
    columns = [
        ("name", "SERVER"),
        ("source", "SOURCE"),
        ("approve", "APPROVE"),
        ("target", "COMMAND OR URL"),
    ]
    empty = "no MCP servers (add one with 'agctl mcp add')"
    app.emit_rows(rows, columns, empty=empty, display=display)


@command.command("rm")
@click.argument("name")
@json_option
@pass_app
def rm(app: App, name: str) -> None:
    """Remove the MCP server NAME.

    \b
    Examples:
      agctl mcp rm suite
    """
    from agctl.config.file import ConfigFile

    ConfigFile().remove_mcp_server(name)
    app.done({"removed": name}, text=f"removed MCP server {name}")


@command.command("tools")
@click.argument("names", nargs=-1, metavar="[NAME...]")
@json_option
@pass_app
def tools(app: App, names: tuple[str, ...]) -> None:
    """Connect to the MCP servers NAME (default: every one) and list their tools: the name
    a turn offers each by (-T SERVER__TOOL; '-' for a tool whose name cannot be one) and
    its parameters.

    \b
    Examples:
      agctl mcp tools
      agctl mcp tools suite --json | jq '.[].parameters'
    """
    from agctl.config.file import ConfigFile
    from agctl.turn.mcp import list_server_tools, parameter_summary, servers_in_use

    in_use = servers_in_use(ConfigFile().load())
    rows = list_server_tools(in_use, names or sorted(in_use.servers))
    display = [
        {**row, "name": row["name"] or "-", "parameters": parameter_summary(row["parameters"])}
        for row in rows
    ]
    columns = [("name", "TOOL"), ("parameters", "PARAMETERS"), ("description", "DESCRIPTION")]
    app.emit_rows(rows, columns, empty="no tools", display=display)


@command.command("trust")
@click.argument("file", required=False, type=PathType(dir_okay=False, path_type=Path))
@json_option
@pass_app
def trust(app: App, file: Path | None) -> None:
    """Trust a project's MCP servers file, as it is now: its servers may then be used.

    FILE defaults to ./.agctl/mcp.json (a JSON object of servers by name, each as 'mcp
    add' keeps one). It is pinned by its sha256 as a project's hooks file is ('agctl hook
    trust'): a change drops the trust. Read it ('agctl mcp list') first: a stdio server
    runs with your rights, in the project's directory; an HTTP server's headers are shown
    (masked, but for the ${VAR} they read; such a variable is read only if a tool's
    environment would get it, never one named like a secret). The config's server of the
    same name wins.

    \b
    Examples:
      agctl mcp trust
      agctl mcp trust ../other-project/.agctl/mcp.json
    """
    from agctl.base.quoting import shell_word
    from agctl.config.file import PROJECT_MCP_FILE, ConfigFile
    from agctl.turn.mcp import shown_headers, trust_servers_file

    project, digest, servers = trust_servers_file(
        ConfigFile(), file or Path.cwd() / PROJECT_MCP_FILE
    )
    path = project / PROJECT_MCP_FILE
    headers = {name: shown_headers(spec) for name, spec in servers.items() if spec.headers}
    lines = [
        f"trusted the MCP servers file of project {shell_word(str(project))}",
        f"  file    {shell_word(str(path))}",
        f"  sha256  {digest}",
        f"  servers {', '.join(servers) or 'none'}",
        *(f"  header  {name}: {h}: {v}" for name, sent in headers.items() for h, v in sent.items()),
    ]
    report = {
        "project": str(project),
        "file": str(path),
        "sha256": digest,
        "servers": list(servers),
        "headers": headers,
    }
    app.done(report, text="\n".join(lines))


@command.command("untrust")
@click.argument("file", required=False, type=PathType(dir_okay=False, path_type=Path))
@json_option
@pass_app
def untrust(app: App, file: Path | None) -> None:
    """Drop the trust of a project's MCP servers file: its servers are no longer used.

    FILE defaults to ./.agctl/mcp.json; it need not exist any more.

    \b
    Examples:
      agctl mcp untrust
    """
    from agctl.base.quoting import shell_word
    from agctl.config.file import PROJECT_MCP_FILE, ConfigFile
    from agctl.turn.mcp import untrust_servers_file

    project, digest = untrust_servers_file(ConfigFile(), file or Path.cwd() / PROJECT_MCP_FILE)
    path = project / PROJECT_MCP_FILE
    report = {"project": str(project), "file": str(path), "sha256": digest}
    app.done(report, text=f"untrusted {shell_word(str(path))}")
