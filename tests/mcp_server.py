"""A small real MCP server for the suite, written with the official SDK (mcp.server.mcpserver).

`python tests/mcp_server.py` serves stdio; `python tests/mcp_server.py http` serves streamable
HTTP on 127.0.0.1 at a free port and prints `listening URL` on stdout once it accepts
connections (the tests' handshake). Its tools: echo, add, fail (always an error), sleep
(writes `sleeping PID` to the file $MCP_SLEEP_FILE names when set, then sleeps), big (a
long text), crash (the server exits at once, saying so on stderr), env (the server's
environment as JSON).
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time

from mcp.server.mcpserver import MCPServer

server = MCPServer("suite", log_level="CRITICAL")


@server.tool()
def echo(text: str) -> str:
    """Give the text back."""
    return text


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@server.tool()
def fail(reason: str = "it always fails") -> str:
    """Fail with the reason given."""
    raise ValueError(reason)


@server.tool()
def sleep(seconds: float) -> str:
    """Sleep, after saying so in the file $MCP_SLEEP_FILE names."""
    where = os.environ.get("MCP_SLEEP_FILE")
    if where:
        with open(where, "w") as note:
            note.write(f"sleeping {os.getpid()}\n")
    time.sleep(seconds)
    return f"slept {seconds}"


@server.tool()
def big(size: int) -> str:
    """A text of `size` characters."""
    return "".join(chr(ord("a") + i % 26) for i in range(size))


@server.tool()
def crash() -> str:
    """Say so on stderr, then end the server at once (exit 3)."""
    sys.stderr.write("the suite's server crashes now\n")
    sys.stderr.flush()
    os._exit(3)


@server.tool()
def env() -> str:
    """The server's environment, as JSON."""
    return json.dumps(dict(os.environ), sort_keys=True)


def serve_http() -> None:
    """Streamable HTTP on a free loopback port, announced once the socket listens."""
    import anyio
    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    port = sock.getsockname()[1]
    app = server.streamable_http_app(host="127.0.0.1")
    config = uvicorn.Config(app, log_level="warning")
    uvicorn_server = uvicorn.Server(config)

    async def main() -> None:
        async with anyio.create_task_group() as group:
            group.start_soon(uvicorn_server.serve, [sock])
            while not uvicorn_server.started:
                await anyio.sleep(0.01)
            print(f"listening http://127.0.0.1:{port}/mcp", flush=True)

    anyio.run(main)


if __name__ == "__main__":
    if sys.argv[1:] == ["http"]:
        serve_http()
    else:
        server.run()
