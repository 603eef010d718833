"""Tools from MCP servers, offered and run like argv tools (agctl.turn.tools).

A server is kept in the config by name (`agctl mcp add`): a command run over stdio, or a
streamable HTTP URL. Its tools are offered as SERVER__TOOL: a server's name has no '_', so
the first '__' ends it, and the whole is a function name on every wire (letters, digits,
'_' and '-', at most 64); a tool whose name does not fit is listed, never offered. A call
goes through LiveTools like an argv tool's (its schema, the approval, `ask` by default,
hooks, the caps of calls, the cap of output, the cassette), with the server's timeouts.

The official SDK (`pip install 'agctl[mcp]'`) is async and a turn is not: an McpClient
runs one event loop in a thread of its own, connects to a server when its tools are first
needed (a stdio server started in a session of its own, with the scrubbed environment an
argv tool gets, plus the SDK's own HOME, LOGNAME, PATH, SHELL, TERM and USER), and closes
every connection when the turn ends or agctl is interrupted; every wait is bounded. A
replay from a cassette needs no server: the definitions come from the recorded requests
(RecordedMcpTools) and the results from its tool lines.
"""

from __future__ import annotations

import atexit
import hashlib
import logging
import os
import re
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from agctl.base.errors import Interrupted, InvalidInput, McpServerError, NotFound, UsageError
from agctl.base.interrupts import interrupt_count, interrupted_since
from agctl.base.procs import WATCH_S, Process, child_writing_to, kill_group
from agctl.config.specs import KEPT_OUTPUT, McpServerSpec, ToolSpec

if TYPE_CHECKING:
    import asyncio
    import concurrent.futures
    import threading

    from agctl.config.file import Config, ConfigFile
    from agctl.turn.hooks import PinnedFile
    from agctl.turn.tools import ToolRun

log = logging.getLogger("agctl.mcp")

SEPARATOR = "__"
INSTALL = "pip install 'agctl[mcp]'"
# How long closing a server may take: the SDK closes its stdin, waits 2 s, sends SIGTERM
# to its process group, SIGKILL 2 s later, and waits 2 s more for it to be reaped.
CLOSE_WAIT_S = 10.0
# How long closing waits before it says it is waiting (a server that ends well is quicker).
_QUIET_CLOSE_S = 1.0
# What is kept of a stdio server's stderr (its end), for the error of a failed call.
STDERR_TAIL = 4 * 1024
_FUNCTION_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
# What McpClient waits for within a server's connect timeout (the rest: its call timeout).
_CONNECTING = ("connect", "list its tools")


class McpTimeout(McpServerError):
    """A server did not connect, list or answer a call within its timeout."""


def function_name(server: str, tool: str) -> str | None:
    """The name SERVER__TOOL a model calls the tool by; None when it is not a valid one."""
    name = f"{server}{SEPARATOR}{tool}"
    return name if _FUNCTION_NAME.fullmatch(name) else None


def split_name(name: str) -> tuple[str, str] | None:
    """SERVER__TOOL as (SERVER, TOOL); None for a name of another shape."""
    server, separator, tool = name.partition(SEPARATOR)
    return (server, tool) if separator and server and tool else None


def server_argv(server: McpServerSpec) -> list[str]:
    """What runs a server's tools, as an approval question shows it: its command, or its URL."""
    return list(server.command) if server.command is not None else [str(server.url)]


def expanded_headers(
    server: McpServerSpec, environ: Mapping[str, str], *, project: bool = False
) -> dict[str, str]:
    """The server's headers with each `${VAR}` read from the environment (a secret need not
    be kept in the config); an unset variable is a UsageError naming it. A project file's
    server reads only what a stdio server of it would get (the scrubbed environment and
    its env_allow): a project cannot send your OPENAI_API_KEY to its server."""
    from agctl.turn.tools import scrubbed_environment

    readable = scrubbed_environment(server.env_allow, environ) if project else environ
    headers = {}
    for header, value in server.headers.items():
        names = _VARIABLE.findall(value)
        refused = [name for name in names if name in environ and name not in readable]
        if refused:
            raise UsageError(
                f"MCP server {server.name!r} of a project's file: header {header} may not "
                f"read ${{{refused[0]}}}: a project's server reads only what a tool's "
                "environment would get (its env_allow, never a name like a secret's)",
                hint="to give a server a secret, add it yourself with 'agctl mcp add'",
            )
        missing = [name for name in names if name not in readable]
        if missing:
            raise UsageError(
                f"MCP server {server.name!r}: header {header} needs ${{{missing[0]}}}, "
                "which is not set"
            )
        headers[header] = _VARIABLE.sub(lambda match: readable[match.group(1)], value)
    return headers


def new_server(
    name: str, command: list[str], url: str | None, headers: Iterable[str], **fields: Any
) -> McpServerSpec:
    """A server as `mcp add` defines it (COMMAND after '--', or --url; each header as
    'Name: value'), checked whole, or a UsageError saying what is wrong."""
    from pydantic import ValidationError

    from agctl.base.validation import validation_summary

    if bool(command) == (url is not None):
        raise UsageError("give either a COMMAND after '--' (stdio) or --url URL (HTTP), not both")
    parsed: dict[str, str] = {}
    for header in headers:
        key, colon, value = header.partition(":")
        if not colon or not key.strip():
            raise UsageError(f"--header {header!r}: give it as 'Name: value'")
        parsed[key.strip()] = value.strip()
    data = {"name": name, "command": command or None, "url": url, "headers": parsed, **fields}
    try:
        return McpServerSpec.model_validate({k: v for k, v in data.items() if v is not None})
    except ValidationError as exc:
        raise UsageError(f"invalid MCP server: {validation_summary(exc, 'server')}") from None


def parse_servers_file(data: bytes) -> dict[str, McpServerSpec]:
    """The servers of a project's `.agctl/mcp.json` (a JSON object of servers by name, each
    as `mcp add` keeps one), or InvalidInput."""
    import orjson
    from pydantic import TypeAdapter, ValidationError

    from agctl.base.validation import validation_summary
    from agctl.config.specs import McpTable

    try:
        parsed = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise InvalidInput(f"not JSON ({exc})") from None
    if not isinstance(parsed, dict):
        raise InvalidInput("not a JSON object of MCP servers by name")
    try:
        servers: dict[str, McpServerSpec] = TypeAdapter(McpTable).validate_python(parsed)
    except (ValidationError, ValueError) as exc:
        reason = validation_summary(exc) if isinstance(exc, ValidationError) else str(exc)
        raise InvalidInput(reason) from None
    return servers


def project_servers(config: Config, cwd: Path) -> PinnedFile:
    """The project's MCP servers file in `cwd`, parsed, with its trust (the project hooks'
    pin, agctl.turn.hooks.read_pinned_file)."""
    from agctl.config.file import PROJECT_MCP_FILE
    from agctl.turn.hooks import read_pinned_file

    return read_pinned_file(config, cwd, PROJECT_MCP_FILE, parse_servers_file)


class ServersInUse(NamedTuple):
    """The servers a turn may use: the config's, and a trusted project file's (its
    servers start in the project's directory); a name in both is the config's."""

    servers: dict[str, McpServerSpec]
    cwds: dict[str, Path]
    project: PinnedFile | None


def servers_in_use(config: Config, cwd: Path | None = None) -> ServersInUse:
    """The servers of the config and of the project in `cwd` (default: where agctl runs);
    a project file not trusted as it is now is warned about, once, and left out."""
    from agctl.config.file import PROJECT_MCP_FILE

    where = Path.cwd() if cwd is None else cwd
    if not os.path.lexists(where / PROJECT_MCP_FILE):  # cheap: one stat
        return ServersInUse(dict(config.mcp_servers), {}, None)
    found = project_servers(config, where)
    if found.state != "trusted":
        _warn_untrusted(found)
        return ServersInUse(dict(config.mcp_servers), {}, found)
    project = dict(found.parsed or {})
    cwds = {name: found.project for name in project if name not in config.mcp_servers}
    return ServersInUse({**project, **config.mcp_servers}, cwds, found)


_warned: set[tuple[str, str]] = set()


def _warn_untrusted(found: PinnedFile) -> None:
    from agctl.base.quoting import shell_word
    from agctl.config.file import PROJECT_MCP_FILE

    path = shell_word(str(found.project / PROJECT_MCP_FILE))
    if (path, found.state) in _warned:
        return
    _warned.add((path, found.state))
    if found.state == "untrusted":
        log.warning(
            "%s is ignored: its servers are used once you trust it ('agctl mcp trust')", path
        )
    elif found.state == "changed":
        log.warning(
            "%s changed since 'agctl mcp trust' pinned it: its servers are ignored until you "
            "trust it again",
            path,
        )
    else:
        log.warning("%s is ignored: %s", path, found.problem)


def trust_servers_file(store: ConfigFile, path: Path) -> tuple[Path, str, dict[str, McpServerSpec]]:
    """Pin the project MCP servers file at `path` (PROJECT/.agctl/mcp.json) as project
    hooks files are pinned: the project, the sha256 and its servers."""
    from agctl.config.file import PROJECT_MCP_FILE
    from agctl.turn.hooks import pin_project_file

    project, digest, servers = pin_project_file(store, path, PROJECT_MCP_FILE, parse_servers_file)
    return project, digest, servers


def untrust_servers_file(store: ConfigFile, path: Path) -> tuple[Path, str]:
    """Drop the pin of the project MCP servers file at `path`: the project and its sha256."""
    from agctl.config.file import PROJECT_MCP_FILE
    from agctl.turn.hooks import unpin_project_file

    return unpin_project_file(store, path, PROJECT_MCP_FILE)


def require_sdk() -> None:
    """Refuse (UsageError) to talk to an MCP server without the SDK installed."""
    import sys

    # The command line stubs anyio and trio out for httpcore's sake (agctl.cli.main); the
    # SDK runs on anyio.
    for stubbed in ("anyio", "trio"):
        if stubbed in sys.modules and sys.modules[stubbed] is None:
            del sys.modules[stubbed]
    try:
        import mcp  # noqa: F401
    except ImportError:
        raise UsageError(
            "tools from MCP servers need the MCP SDK, which is not installed", hint=INSTALL
        ) from None


class McpTool(NamedTuple):
    """A tool a server lists: its own name, the name a model calls it by (None: it has
    none, and is not offered), its description and the JSON Schema of its arguments."""

    server: str
    name: str
    function: str | None
    description: str
    parameters: dict[str, Any]

    def spec(self, server: McpServerSpec) -> ToolSpec:
        """The tool as LiveTools runs it: the server's approval, timeout, output cap and
        variables, and (for the approval question) the server's command or URL."""
        assert self.function is not None
        return ToolSpec(
            name=self.function,
            description=self.description,
            parameters=self.parameters,
            command=server_argv(server),
            approve=server.approve,
            timeout_s=server.timeout_s,
            max_output=server.max_output,
            env_allow=server.env_allow,
        )

    def public(self) -> dict[str, Any]:
        return {
            "server": self.server,
            "tool": self.name,
            "name": self.function,
            "description": self.description,
            "parameters": self.parameters,
        }


class McpTools(Protocol):
    """Where the specs of the MCP tools a turn offers come from: the servers themselves
    (McpClient) or a cassette's recorded requests (RecordedMcpTools)."""

    def serves(self, name: str) -> bool:
        """Whether `name` is SERVER__TOOL of a configured server."""
        ...

    def spec(self, name: str) -> ToolSpec:
        """The offered tool `name`, or NotFound naming the server's tools."""
        ...

    def every_spec(self) -> dict[str, ToolSpec]:
        """Every tool of every configured server that can be offered."""
        ...

    def close(self) -> None:
        """End what was opened to find the specs."""
        ...


class ServerRows(NamedTuple):
    """What `mcp list` shows: every server's row, and the project's servers file that
    cannot be read (its path and why), whose servers are left out."""

    rows: list[dict[str, Any]]
    invalid: tuple[Path, str] | None


def server_rows(config: Config, cwd: Path | None = None) -> ServerRows:
    """Every server as `mcp list` shows it, used or not: the config's, then the project's
    in `cwd` with its file's trust (listed untrusted too, to be read before `mcp trust`);
    header values masked, but for a `${VAR}` they name."""
    from agctl.config.file import PROJECT_MCP_FILE

    where = Path.cwd() if cwd is None else cwd
    listed: list[tuple[McpServerSpec, str, str | None]] = [
        (spec, "config", None) for spec in config.mcp_servers.values()
    ]
    invalid = None
    if os.path.lexists(where / PROJECT_MCP_FILE):
        found = project_servers(config, where)
        listed += [(spec, "project", found.state) for spec in (found.parsed or {}).values()]
        if found.state == "invalid":
            invalid = (found.project / PROJECT_MCP_FILE, found.problem or "it cannot be read")
    rows = sorted(listed, key=lambda row: (row[1] != "config", row[0].name))
    return ServerRows([_server_row(*row) for row in rows], invalid)


def shown_headers(spec: McpServerSpec) -> dict[str, str]:
    """A server's headers as they may be shown: each value masked, but for a `${VAR}`."""
    from agctl.config.file import mask

    return {
        header: value if "${" in value else mask(value) or ""
        for header, value in spec.headers.items()
    }


def _server_row(spec: McpServerSpec, source: str, trust: str | None) -> dict[str, Any]:
    return {
        "name": spec.name,
        "source": source,
        "trust": trust,
        "transport": "stdio" if spec.command is not None else "http",
        "command": spec.command,
        "url": spec.url,
        "headers": shown_headers(spec),
        "approve": spec.approve,
        "connect_timeout_s": spec.connect_timeout_s,
        "timeout_s": spec.timeout_s,
        "max_output": spec.max_output,
        "env_allow": spec.env_allow,
    }


def parameter_summary(parameters: Mapping[str, Any]) -> str:
    """A tool's parameters on one line: `text: string, count?: integer` (? : optional)."""
    required = set(parameters.get("required") or [])
    properties = parameters.get("properties") or {}
    return ", ".join(
        f"{name}{'' if name in required else '?'}: "
        f"{schema.get('type', 'any') if isinstance(schema, dict) else 'any'}"
        for name, schema in properties.items()
    )


def _listed(server: str, tool: Any) -> McpTool:
    return McpTool(
        server=server,
        name=tool.name,
        function=function_name(server, tool.name),
        description=tool.description or "",
        parameters=dict(tool.input_schema or {"type": "object", "properties": {}}),
    )


def _result_text(result: Any) -> tuple[str, bool]:
    """A CallToolResult as the model reads it (its text blocks; other blocks as JSON, their
    data left out; structured content when it has no block) and whether it is an error."""
    import orjson

    parts = []
    for block in result.content:
        if getattr(block, "type", None) == "text":
            parts.append(block.text)
            continue
        shown = block.model_dump(mode="json", exclude_none=True)
        data = shown.pop("data", None)
        if isinstance(data, str):
            shown["data_chars"] = len(data)
        parts.append(orjson.dumps(shown).decode())
    if not parts and result.structured_content is not None:
        parts.append(orjson.dumps(result.structured_content).decode())
    return "\n".join(parts), bool(result.is_error)


class _Connection:
    """One server's session, served by a task of the client's loop until `stop` is set."""

    def __init__(self, spec: McpServerSpec, headers: dict[str, str]) -> None:
        import concurrent.futures
        import threading

        self.spec = spec
        self.headers = headers  # an HTTP server's, each `${VAR}` read
        self.ready: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self.served: concurrent.futures.Future[None] | None = None
        # Set once its task is over, its process ended: cancelling the future does not wait.
        self.finished = threading.Event()
        self.stop: asyncio.Event | None = None
        self.errlog: Any = None  # a stdio server's stderr, a temporary file
        self.process: Process | None = None  # a stdio server's, once started (Linux)

    def end(self, loop: asyncio.AbstractEventLoop) -> None:
        """Tell the task to close the session: stop it when it is open, else cancel it
        (it may be waiting for the server to answer `initialize`)."""
        ready = self.ready.done() and not self.ready.cancelled() and self.ready.exception() is None
        if ready and self.stop is not None:
            loop.call_soon_threadsafe(self.stop.set)
        elif self.served is not None:
            self.served.cancel()

    def wait_ended(self, deadline: float) -> None:
        """Wait for the task to close the session, until `deadline` (announced when it is
        not at once); a stdio server still running then is killed with its group."""
        if not self.finished.wait(_QUIET_CLOSE_S):
            left = max(deadline - time.monotonic(), 0.0)
            log.warning("waiting up to %.0fs for MCP server %r to stop", left, self.spec.name)
            if not self.finished.wait(left) and self.process is not None:
                log.warning("MCP server %r did not stop: killing it", self.spec.name)
                kill_group(self.process)
                self.finished.wait(_QUIET_CLOSE_S)
        if self.errlog is not None:
            self.errlog.close()

    def stderr_tail(self) -> str:
        """The end of what a stdio server wrote on stderr: why it failed, often."""
        if self.errlog is None:
            return ""
        try:
            self.errlog.flush()
            self.errlog.seek(0, os.SEEK_END)
            size = self.errlog.tell()
            self.errlog.seek(max(size - STDERR_TAIL, 0))
            return str(self.errlog.read()).rstrip("\n")
        except (OSError, ValueError):
            return ""


class McpClient:
    """The connections of one turn to the MCP servers whose tools it offers (McpTools), on
    one event loop in a thread of its own; `close` ends them all (and a process exiting
    first does: atexit). A wait for a server is bounded by its connect timeout, a call by
    its timeout, and both stop at an interrupt (Ctrl-C, SIGTERM), which closes every
    server, so none outlives agctl."""

    def __init__(
        self,
        servers: Mapping[str, McpServerSpec],
        *,
        environ: Mapping[str, str] | None = None,
        cwds: Mapping[str, Path] | None = None,
    ) -> None:
        import threading

        self.servers = dict(servers)
        self.environ = dict(os.environ if environ is None else environ)
        # Where a project file's servers start (default: here); their headers are scrubbed.
        self.cwds = dict(cwds or {})
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._connections: dict[str, _Connection] = {}
        self._listed: dict[str, list[McpTool]] = {}  # kept across turns: definitions stay
        # Calls run at once (--tool-jobs) share one connection per server, made once.
        self._lock = threading.RLock()

    # ---- McpTools -----------------------------------------------------------------------

    def serves(self, name: str) -> bool:
        split = split_name(name)
        return split is not None and split[0] in self.servers

    def spec(self, name: str) -> ToolSpec:
        split = split_name(name)
        assert split is not None
        server = split[0]
        for tool in self.tools(server):
            if tool.function == name:
                return tool.spec(self.servers[server])
        offered = ", ".join(t.function for t in self.tools(server) if t.function) or "none"
        raise NotFound(f"MCP server {server!r} has no tool {split[1]!r} (its tools: {offered})")

    def every_spec(self) -> dict[str, ToolSpec]:
        """Every tool of every server that answers: one that cannot be reached is left out
        with a warning naming it (`--tools all` is not stopped by a broken server; a tool
        of it named with -T is, through `spec`)."""
        specs: dict[str, ToolSpec] = {}
        for server in self.servers:
            try:
                listed = self.tools(server)
            except (McpServerError, UsageError) as exc:
                log.warning("MCP server %r is left out: %s", server, str(exc).splitlines()[0])
                continue
            specs.update(
                (tool.function, tool.spec(self.servers[server]))
                for tool in listed
                if tool.function is not None
            )
        return specs

    # ---- talking to servers -------------------------------------------------------------

    def tools(self, server: str) -> list[McpTool]:
        """What `server` lists (every page), asked once per client."""
        with self._lock:
            if server not in self._listed:
                connection = self._connection(server)
                spec = self.servers[server]
                listed = self._wait(
                    self._listing(connection), spec.connect_timeout_s, server, "list its tools"
                )
                self._listed[server] = [_listed(server, tool) for tool in listed]
            return self._listed[server]

    def call(self, spec: ToolSpec, arguments: Mapping[str, Any]) -> ToolRun:
        """Run one call of the offered tool `spec` (SERVER__TOOL) with checked `arguments`;
        a server that cannot be reached, a failed or timed-out call is an error result."""
        split = split_name(spec.name)
        assert split is not None
        server, tool = split[0], self._tool_name(split[0], spec.name)
        argv = server_argv(self.servers[server])
        started = time.monotonic()
        timed_out = False
        stderr_tail = ""
        try:
            connection = self._connection(server)
            session = connection.ready.result()
            result = self._wait(
                session.call_tool(tool, dict(arguments)), spec.timeout_s, server, f"run {tool}"
            )
            text, failed = _result_text(result)
        except McpServerError as exc:
            text, failed = f"error: {exc}", True
            timed_out = isinstance(exc, McpTimeout)
            stderr_tail = self._stderr_tail(server)
        except Exception as exc:  # the session's error: the server failed or went away
            text, failed = f"error: MCP server {server!r} failed: {_reason(exc)}", True
            stderr_tail = self._stderr_tail(server)
            if stderr_tail:
                text += "\n" + stderr_tail
        return self._run(spec, arguments, argv, text, failed, timed_out, started, stderr_tail)

    @staticmethod
    def _run(
        spec: ToolSpec,
        arguments: Mapping[str, Any],
        argv: list[str],
        text: str,
        failed: bool,
        timed_out: bool,
        started: float,
        stderr_tail: str,
    ) -> ToolRun:
        from agctl.turn.tools import ToolRun, cut_text

        data = text.encode("utf-8", "replace")
        if failed and not text.startswith("error:"):
            text = f"error: {text}" if text else "error: the tool failed"
        result_text, truncated = cut_text(text, spec.max_output)
        return ToolRun(
            name=spec.name,
            arguments=dict(arguments),
            argv=argv,
            exit_code=None if timed_out else int(failed),
            timed_out=timed_out,
            duration_ms=int((time.monotonic() - started) * 1000),
            output=data[:KEPT_OUTPUT].decode("utf-8", "ignore"),
            output_bytes=len(data),
            output_sha256=hashlib.sha256(data).hexdigest(),
            stderr_tail=stderr_tail,
            result_text=result_text,
            truncated=truncated,
        )

    def _tool_name(self, server: str, function: str) -> str:
        for tool in self._listed.get(server, []):
            if tool.function == function:
                return tool.name
        return function[len(server) + len(SEPARATOR) :]

    def _stderr_tail(self, server: str) -> str:
        connection = self._connections.get(server)
        return connection.stderr_tail() if connection is not None else ""

    def close(self) -> None:
        """End every connection (a stdio server's process with it) and the loop, each wait
        bounded; a client closed is opened again by its next call."""
        atexit.unregister(self.close)
        with self._lock:
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None
            connections = list(self._connections.values())
            self._connections.clear()
        if loop is None or thread is None:
            return
        deadline = time.monotonic() + CLOSE_WAIT_S
        for connection in connections:
            connection.end(loop)
        for connection in connections:
            connection.wait_ended(deadline)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(max(deadline - time.monotonic(), 0.1))
        if not thread.is_alive():
            loop.close()

    # ---- the loop -----------------------------------------------------------------------

    def _start(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            import asyncio
            import threading

            require_sdk()
            loop = asyncio.new_event_loop()
            thread = threading.Thread(target=loop.run_forever, name="agctl-mcp", daemon=True)
            thread.start()
            self._loop, self._thread = loop, thread
            atexit.register(self.close)
        return self._loop

    def _connection(self, server: str) -> _Connection:
        """The open session to `server`, connecting (within its connect timeout) first."""
        with self._lock:
            connection = self._connections.get(server)
            if connection is None:
                import asyncio

                # A header's unset variable is the user's to fix: a UsageError, as it is.
                project = server in self.cwds  # a project file's servers start there
                headers = expanded_headers(self.servers[server], self.environ, project=project)
                loop = self._start()
                connection = _Connection(self.servers[server], headers)
                self._connections[server] = connection
                connection.served = asyncio.run_coroutine_threadsafe(self._serve(connection), loop)
        spec = connection.spec
        self._wait_future(connection.ready, spec.connect_timeout_s, server, "connect")
        return connection

    async def _serve(self, connection: _Connection) -> None:
        """Open the session, hand it over, hold it until told to stop, close it."""
        import asyncio
        from contextlib import AsyncExitStack

        connection.stop = asyncio.Event()
        try:
            from mcp import ClientSession

            async with AsyncExitStack() as stack:
                streams = await stack.enter_async_context(self._transport(connection))
                if connection.errlog is not None:
                    connection.process = child_writing_to(connection.errlog)
                session = await stack.enter_async_context(ClientSession(streams[0], streams[1]))
                await session.initialize()
                connection.ready.set_result(session)
                await connection.stop.wait()
        except BaseException as exc:
            if not connection.ready.done():
                connection.ready.set_exception(exc)
            if not isinstance(exc, Exception):
                raise
        finally:
            connection.finished.set()

    def _transport(self, connection: _Connection) -> Any:
        spec = connection.spec
        if spec.command is not None:
            import tempfile

            from mcp import StdioServerParameters, stdio_client

            from agctl.turn.tools import scrubbed_environment

            # Closed with the connection (close, _drop), not at the end of this block.
            connection.errlog = tempfile.TemporaryFile(  # noqa: SIM115
                "w+", encoding="utf-8", errors="replace"
            )
            parameters = StdioServerParameters(
                command=spec.command[0],
                args=spec.command[1:],
                env=scrubbed_environment(spec.env_allow, self.environ),
                cwd=self.cwds.get(spec.name),
            )
            return stdio_client(parameters, errlog=connection.errlog)
        import httpx2

        client = httpx2.AsyncClient(
            headers=connection.headers,
            timeout=httpx2.Timeout(spec.connect_timeout_s, read=max(spec.timeout_s, 30.0)),
        )
        return _http(client, str(spec.url))

    async def _listing(self, connection: _Connection) -> list[Any]:
        session = connection.ready.result()
        tools: list[Any] = []
        cursor: str | None = None
        while True:
            if cursor is None:
                page = await session.list_tools()
            else:
                from mcp.types import PaginatedRequestParams

                page = await session.list_tools(params=PaginatedRequestParams(cursor=cursor))
            tools.extend(page.tools)
            cursor = page.next_cursor
            if not cursor:
                return tools

    def _wait(self, coroutine: Any, timeout_s: float, server: str, doing: str) -> Any:
        import asyncio

        loop = self._loop
        if loop is None:  # closed meanwhile: an interrupt, in another thread
            coroutine.close()
            raise McpServerError(f"MCP server {server!r} was closed")
        future = asyncio.run_coroutine_threadsafe(coroutine, loop)
        return self._wait_future(future, timeout_s, server, doing)

    def _wait_future(
        self, future: concurrent.futures.Future[Any], timeout_s: float, server: str, doing: str
    ) -> Any:
        """The future's result within `timeout_s`, else McpTimeout, announced on stderr. A
        failure to connect or list is McpServerError; a call's own failure is raised as it
        is. An interrupt closes every server and is raised again."""
        import concurrent.futures

        interrupts = interrupt_count()
        deadline = time.monotonic() + timeout_s
        try:
            while True:
                signum = interrupted_since(interrupts)
                if signum is not None:
                    raise Interrupted(signum)
                left = deadline - time.monotonic()
                if left <= 0:
                    future.cancel()
                    what = "its connect timeout" if doing in _CONNECTING else "its timeout"
                    message = (
                        f"timed out after {timeout_s:g}s: MCP server {server!r} did not "
                        f"{doing} in time ({what})"
                    )
                    if doing in _CONNECTING:
                        self._drop(server)  # the error that stops the command says it
                    else:
                        log.warning("%s", message)  # the model gets it; the user sees it
                    raise McpTimeout(message)
                try:
                    return future.result(timeout=min(left, WATCH_S))
                except concurrent.futures.TimeoutError:
                    continue
        except McpServerError:
            raise
        except KeyboardInterrupt:
            self.close()
            raise
        except BaseException as exc:
            if doing not in _CONNECTING:
                raise
            tail = self._stderr_tail(server)
            self._drop(server)
            raise McpServerError(
                f"MCP server {server!r} could not {doing}: {_reason(exc)}"
                + (f"\n{tail}" if tail else ""),
                hint=f"check it with 'agctl mcp tools {server}'",
            ) from None

    def _drop(self, server: str) -> None:
        """Forget a connection that failed, ending its task (and its process)."""
        with self._lock:
            connection = self._connections.pop(server, None)
        if connection is None:
            return
        if connection.served is not None:
            connection.served.cancel()
        connection.wait_ended(time.monotonic() + CLOSE_WAIT_S)


def _http(client: Any, url: str) -> Any:
    """The streamable HTTP transport on `client`, closing the client with it."""
    from contextlib import asynccontextmanager

    from mcp.client.streamable_http import streamable_http_client

    @asynccontextmanager
    async def transport() -> Any:
        async with client, streamable_http_client(url, http_client=client) as streams:
            yield streams

    return transport()


def _reason(exc: BaseException) -> str:
    """An exception as one line: an exception group by its first leaf."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]


class RecordedMcpTools:
    """MCP tools as a cassette's requests offered them, for a replay with no server: each
    definition the first recorded request offering it gave; a server need not even be
    configured (a CI job replays with none): its settings are the defaults then."""

    def __init__(self, servers: Mapping[str, McpServerSpec], cassette: Path) -> None:
        from agctl.providers.cassette import load_cassette

        self.servers = dict(servers)
        self.cassette = cassette
        self.recorded: dict[str, dict[str, Any]] = {}
        for recording in load_cassette(cassette):
            for offered in recording.request.get("params", {}).get("tools") or []:
                function = offered.get("function", {}) if isinstance(offered, dict) else {}
                name = function.get("name")
                if isinstance(name, str) and split_name(name) is not None:
                    self.recorded.setdefault(name, function)

    def serves(self, name: str) -> bool:
        split = split_name(name)
        return name in self.recorded or (split is not None and split[0] in self.servers)

    def spec(self, name: str) -> ToolSpec:
        function = self.recorded.get(name)
        if function is None:
            known = ", ".join(self.recorded) or "none"
            raise NotFound(
                f"{self.cassette}: no recorded request offers MCP tool {name!r} "
                f"(MCP tools recorded: {known})"
            )
        return self._spec(name, function)

    def every_spec(self) -> dict[str, ToolSpec]:
        return {name: self._spec(name, function) for name, function in self.recorded.items()}

    def close(self) -> None:
        pass  # nothing was opened

    def _spec(self, name: str, function: Mapping[str, Any]) -> ToolSpec:
        split = split_name(name)
        assert split is not None
        description, parameters = function.get("description", ""), function["parameters"]
        server = self.servers.get(split[0])
        if server is None:  # an MCP tool's settings are its server's: the defaults
            argv = [f"MCP server {split[0]}"]
            return ToolSpec(name=name, description=description, parameters=parameters, command=argv)
        return McpTool(split[0], split[1], name, description, parameters).spec(server)


def mcp_tools(in_use: ServersInUse, *, cassette: Path | None) -> McpTools:
    """Where a turn's MCP tools come from: the cassette it replays, else the servers."""
    if cassette is not None:
        return RecordedMcpTools(in_use.servers, cassette)
    return McpClient(in_use.servers, cwds=in_use.cwds)


def list_server_tools(in_use: ServersInUse, names: Iterable[str]) -> list[dict[str, Any]]:
    """`mcp tools`: each named server's tools, connecting to each and closing it after."""
    servers = in_use.servers
    client = McpClient(servers, cwds=in_use.cwds)
    try:
        rows: list[dict[str, Any]] = []
        for name in names:
            if name not in servers:
                known = ", ".join(sorted(servers)) or "none"
                raise NotFound(f"MCP server {name!r} not found (servers: {known})")
            rows.extend(tool.public() for tool in client.tools(name))
        return rows
    finally:
        client.close()
