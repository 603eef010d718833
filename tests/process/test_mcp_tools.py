"""A real `agctl` with the suite's real MCP server (tests/mcp_server.py), over stdio and over
streamable HTTP on 127.0.0.1, and the fake OpenAI server scripting the model's calls:
`mcp add/list/tools/rm`, a turn that calls an MCP tool, approval, the timeouts, a crashed
server, a cassette replayed with the server gone, Ctrl-C leaving no server process, and
the clear error without the SDK."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from fake_openai import FakeOpenAI
from helpers import agctl_in, process_dead, served_env, wait_for

from agctl.store import Store

SERVER = str(Path(__file__).parents[1] / "mcp_server.py")
SID = "s"
ADD_SUITE = ("mcp", "add", "suite", "--", sys.executable, SERVER)
# The suite's server, passed the file its sleep tool writes to.
ADD_SLEEPER = ("mcp", "add", "suite", "--env-allow", "MCP_SLEEP_FILE", "--", sys.executable, SERVER)
WAIT_S = 60


def call(name: str, arguments: dict[str, object], id_: str = "call_1") -> dict[str, str]:
    return {"id": id_, "name": name, "arguments": json.dumps(arguments)}


def agctl(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return agctl_in(env, *args, session=SID, timeout=120)


def ok(result: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert result.returncode == 0, (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr, result.stderr
    return result


def tool_results(server: FakeOpenAI) -> list[str]:
    """What the model was given back for its calls, in the last request."""
    messages = server.requests[-1].body["messages"]
    return [m["content"] for m in messages if m["role"] == "tool"]


def interrupted(
    env: dict[str, str], command: tuple[str, ...], signum: int, ready: Callable[[], bool]
) -> tuple[int, str]:
    """Run agctl `command`, send it `signum` once `ready` says so: its status and stderr."""
    running = subprocess.Popen(
        [sys.executable, "-m", "agctl", "-s", SID, *command],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=env,
    )  # fmt: skip
    try:
        wait_for(ready, "the server to start")
        running.send_signal(signum)
        _, stderr = running.communicate(timeout=WAIT_S)
    finally:
        if running.poll() is None:
            running.kill()
            running.wait()
    return running.returncode, stderr


@pytest.fixture
def env(server: FakeOpenAI, isolated_env: Path) -> dict[str, str]:
    environ = served_env(server.base_url)
    ok(agctl_in(environ, "session", "new", SID, session=SID))
    return environ


@pytest.fixture
def http_server() -> Iterator[str]:
    """The suite's server on streamable HTTP: its URL, once it listens."""
    process = subprocess.Popen(
        [sys.executable, SERVER, "http"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        text=True,
    )  # fmt: skip
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line.startswith("listening "), line
        yield line.split()[1]
    finally:
        process.terminate()
        process.wait(timeout=WAIT_S)


@pytest.fixture(params=["stdio", "http"])
def suite(request: pytest.FixtureRequest, env: dict[str, str]) -> str:
    """The suite's server added as 'suite', over each transport."""
    if request.param == "stdio":
        ok(agctl(env, *ADD_SUITE))
    else:
        url = request.getfixturevalue("http_server")
        ok(agctl(env, "mcp", "add", "suite", "--url", url, "--header", "X-Suite: ${SUITE_HEADER}"))
        env["SUITE_HEADER"] = "yes"
    return request.param


def test_add_list_tools_rm(env: dict[str, str]) -> None:
    added = ok(
        agctl(env, "--json", "mcp", "add", "suite", "--timeout", "5", "--", sys.executable, SERVER)
    )
    assert json.loads(added.stdout) == {"server": "suite", "replaced": False}
    again = agctl(env, "mcp", "add", "suite", "--", "x")
    assert again.returncode == 4 and "--force" in again.stderr
    listed = json.loads(ok(agctl(env, "--json", "mcp", "list")).stdout)
    assert [(s["name"], s["transport"], s["timeout_s"]) for s in listed] == [
        ("suite", "stdio", 5.0)
    ]
    tools = json.loads(ok(agctl(env, "--json", "mcp", "tools", "suite")).stdout)
    by_name = {tool["name"]: tool for tool in tools}
    assert by_name["suite__add"]["parameters"]["required"] == ["a", "b"]
    assert by_name["suite__echo"]["description"] == "Give the text back."
    shown = ok(agctl(env, "mcp", "tools")).stdout
    assert "suite__add" in shown and "a: integer, b: integer" in shown
    ok(agctl(env, "mcp", "rm", "suite"))
    gone = agctl(env, "mcp", "rm", "suite")
    assert gone.returncode == 3 and "not found" in gone.stderr
    assert agctl(env, "mcp", "tools", "suite").returncode == 3


def test_a_turn_calls_an_mcp_tool(env: dict[str, str], suite: str, server: FakeOpenAI) -> None:
    server.reply(tool_calls=[call("suite__add", {"a": 2, "b": 3})])
    server.reply("It is 5.")
    sent = ok(agctl(env, "--json", "turn", "send", "-T", "suite__add", "--approve", "auto", "add"))
    assert json.loads(sent.stdout)["reply"] == "It is 5."
    offered = server.requests[0].body["tools"]
    assert [tool["function"]["name"] for tool in offered] == ["suite__add"]
    assert offered[0]["function"]["parameters"]["required"] == ["a", "b"]
    assert tool_results(server) == ["5"]


def test_an_unknown_server_tool_is_not_found(env: dict[str, str], server: FakeOpenAI) -> None:
    ok(agctl(env, *ADD_SUITE))
    missing = agctl(env, "turn", "send", "-T", "suite__nope", "hi")
    assert missing.returncode == 3 and "has no tool 'nope'" in missing.stderr
    assert server.requests == []


def test_a_call_denied_or_waiting_for_approval_runs_nothing(
    env: dict[str, str], server: FakeOpenAI, tmp_path: Path
) -> None:
    note = tmp_path / "slept"
    env["MCP_SLEEP_FILE"] = str(note)
    ok(agctl(env, *ADD_SLEEPER))
    server.reply(tool_calls=[call("suite__sleep", {"seconds": 0})])
    server.reply("Fine.")
    ok(agctl(env, "turn", "send", "-T", "suite__sleep", "--approve", "never", "nap"))
    assert tool_results(server) == ["error: denied by the user's approval policy"]
    server.reply(tool_calls=[call("suite__sleep", {"seconds": 0})])
    waiting = agctl(env, "turn", "send", "-T", "suite__sleep", "nap again")
    assert waiting.returncode == 9, waiting.stderr  # ask, and no terminal to ask on
    assert not note.exists(), "the server ran a call nobody approved"
    server.reply("Slept.")
    ok(
        agctl(
            env, "turn", "send", "--resume-draft", "--approve-call", "call_1", "-T", "suite__sleep"
        )
    )
    assert note.read_text().startswith("sleeping ")


def test_a_call_past_its_timeout_is_an_error_the_model_sees(
    env: dict[str, str], suite: str, server: FakeOpenAI
) -> None:
    ok(agctl(env, "mcp", "add", "slow", "--timeout", "1", "--", sys.executable, SERVER))
    server.reply(tool_calls=[call("slow__sleep", {"seconds": 30})])
    server.reply("Too slow.")
    sent = ok(agctl(env, "--json", "turn", "send", "-T", "slow__sleep", "--approve", "auto", "nap"))
    assert tool_results(server) == [
        "error: timed out after 1s: MCP server 'slow' did not run sleep in time (its timeout)"
    ]
    assert "timed out after 1s" in sent.stderr  # announced
    call_record = json.loads(sent.stdout)["steps"][0]["tool_calls"][0]
    assert call_record["exit"] is None


def test_a_server_that_does_not_connect_in_time_fails_the_turn(
    env: dict[str, str], server: FakeOpenAI, tmp_path: Path
) -> None:
    pid_file = tmp_path / "pid"
    mute = f"echo $$ > {pid_file}; exec sleep 600"
    ok(agctl(env, "mcp", "add", "mute", "--connect-timeout", "1", "--", "sh", "-c", mute))
    sent = agctl(env, "turn", "send", "-T", "mute__x", "hi")
    assert sent.returncode == 1 and "its connect timeout" in sent.stderr, sent.stderr
    assert sent.stderr.count("timed out after") == 1, sent.stderr  # said once
    assert "Traceback" not in sent.stderr
    assert process_dead(int(pid_file.read_text()))
    assert server.requests == []


def test_a_crashed_server_is_an_error_result_with_its_stderr(
    env: dict[str, str], server: FakeOpenAI
) -> None:
    ok(agctl(env, *ADD_SUITE))
    server.reply(tool_calls=[call("suite__crash", {})])
    server.reply("It crashed.")
    ok(agctl(env, "turn", "send", "-T", "suite__crash", "--approve", "auto", "crash it"))
    [result] = tool_results(server)
    assert result.startswith("error: MCP server 'suite' failed"), result
    assert "the suite's server crashes now" in result


def test_a_cassette_replays_mcp_calls_with_the_server_gone(
    env: dict[str, str], server: FakeOpenAI, tmp_path: Path
) -> None:
    cassette = tmp_path / "mcp.jsonl"
    ok(agctl(env, *ADD_SUITE))
    server.reply(tool_calls=[call("suite__echo", {"text": "recorded"})])
    server.reply("It said recorded.")
    args = ("turn", "send", "-T", "suite__echo", "--approve", "auto", "echo it", "--no-stream")
    ok(agctl(env, *args, "--record", str(cassette)))
    kinds = [json.loads(line).get("kind") for line in cassette.read_text().splitlines()]
    assert kinds == [None, "tool", None]

    ok(agctl(env, "mcp", "rm", "suite"))  # a CI job's replay: no server configured
    ok(agctl(env, "session", "new", "replayed"))
    replayed = agctl_in(
        env, "turn", "send", *args[2:], "--cassette", str(cassette), session="replayed"
    )
    assert replayed.returncode == 0, replayed.stderr
    assert replayed.stdout == "It said recorded.\n"
    assert len(server.requests) == 2, "the replay reached the model"


@pytest.mark.parametrize(
    ("signum", "status"), [(signal.SIGINT, 130), (signal.SIGTERM, 143), (signal.SIGHUP, 129)]
)
def test_ctrl_c_during_a_call_stops_the_server_and_keeps_the_draft(
    env: dict[str, str],
    server: FakeOpenAI,
    tmp_path: Path,
    isolated_env: Path,
    signum: signal.Signals,
    status: int,
) -> None:
    note = tmp_path / "slept"
    env["MCP_SLEEP_FILE"] = str(note)
    ok(agctl(env, *ADD_SLEEPER))
    server.reply(tool_calls=[call("suite__sleep", {"seconds": 600})])
    command = ("turn", "send", "-T", "suite__sleep", "--approve", "auto", "--no-stream", "nap")

    def started() -> bool:
        return note.exists() and note.read_text().endswith("\n")

    returncode, stderr = interrupted(env, command, signum, started)
    server_pid = int(note.read_text().split()[1])
    assert returncode == status, stderr
    assert "--resume-draft" in stderr and "Traceback" not in stderr, stderr
    assert process_dead(server_pid), "the server outlived agctl"
    steps = Store(isolated_env).load_draft(SID, "default").steps
    assert [m.role for m in steps] == ["assistant"]


def test_without_the_sdk_an_mcp_tool_names_the_extra(env: dict[str, str]) -> None:
    ok(agctl(env, *ADD_SUITE))
    blocked = subprocess.run(
        [sys.executable, "-c",
         "import sys; sys.modules['mcp'] = None; sys.argv = ['agctl', 'mcp', 'tools']; "
         "from agctl.cli import main; main()"],
        capture_output=True, text=True, env=env, timeout=WAIT_S, check=False,
    )  # fmt: skip
    assert blocked.returncode == 2, blocked.stderr
    assert "pip install 'agctl[mcp]'" in blocked.stderr and "Traceback" not in blocked.stderr


def test_a_projects_servers_are_used_only_once_trusted_as_they_are(
    env: dict[str, str], server: FakeOpenAI, tmp_path: Path
) -> None:
    project = tmp_path / "project"
    (project / ".agctl").mkdir(parents=True)
    (project / "mcp_server.py").write_text(Path(SERVER).read_text())
    servers = {"suite": {"command": [sys.executable, "mcp_server.py"], "approve": "auto"}}
    servers_file = project / ".agctl" / "mcp.json"
    servers_file.write_text(json.dumps(servers))

    def here(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "agctl", "-s", SID, *args], cwd=project, env=env,
            input="", capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip

    listed = json.loads(ok(here("--json", "mcp", "list")).stdout)
    assert [(s["name"], s["source"], s["trust"]) for s in listed] == [
        ("suite", "project", "untrusted")
    ]
    refused = here("turn", "send", "-T", "suite__add", "add")
    assert refused.returncode == 3 and "is ignored" in refused.stderr, refused.stderr
    assert server.requests == []

    trusted = json.loads(ok(here("--json", "mcp", "trust")).stdout)
    assert trusted["servers"] == ["suite"] and trusted["file"] == str(servers_file.resolve())
    server.reply(tool_calls=[call("suite__add", {"a": 1, "b": 2})])
    server.reply("3.")
    ok(here("turn", "send", "-T", "suite__add", "add"))  # started in the project: a relative path
    assert tool_results(server) == ["3"]

    servers_file.write_text(json.dumps({**servers, "other": {"url": "http://127.0.0.1:9/mcp"}}))
    changed = here("turn", "send", "-T", "suite__add", "add")
    assert changed.returncode == 3 and "changed since 'agctl mcp trust'" in changed.stderr
    ok(here("mcp", "untrust"))
    assert here("mcp", "untrust").returncode == 3


def test_hooks_see_and_redact_an_mcp_call_as_an_argv_tools(
    env: dict[str, str], server: FakeOpenAI, tmp_path: Path
) -> None:
    seen = tmp_path / "seen.jsonl"
    ok(agctl(env, *ADD_SUITE))
    redact = (
        "import json, sys; event = json.load(sys.stdin); "
        f"open({str(seen)!r}, 'a').write(json.dumps(event) + '\\n'); "
        "print(json.dumps({'output': event['output'].replace('secret', '[redacted]')}))"
    )
    ok(agctl(env, "hook", "add", "PostToolUse", "redact", "--", sys.executable, "-c", redact))
    server.reply(tool_calls=[call("suite__echo", {"text": "the secret is out"})])
    server.reply("Redacted.")
    ok(agctl(env, "turn", "send", "-T", "suite__echo", "--approve", "auto", "echo"))
    assert tool_results(server) == ["the [redacted] is out"]
    [event] = [json.loads(line) for line in seen.read_text().splitlines()]
    assert (event["tool"], event["arguments"]) == ("suite__echo", {"text": "the secret is out"})


def test_ctx_show_counts_an_mcp_tools_definition(env: dict[str, str]) -> None:
    ok(agctl(env, *ADD_SUITE))
    shown = json.loads(ok(agctl(env, "--json", "ctx", "show", "-T", "suite__echo")).stdout)
    [zone] = [z for z in shown["zones"] if z["zone"] == "tool definitions"]
    assert zone["tokens"] > 0


def test_calls_run_at_once_share_one_server(env: dict[str, str], server: FakeOpenAI) -> None:
    ok(agctl(env, *ADD_SUITE))
    calls = [call("suite__add", {"a": n, "b": n}, f"call_{n}") for n in range(1, 5)]
    server.reply(tool_calls=calls)
    server.reply("Done.")
    tools = ("-T", "suite__add", "--approve", "auto", "--tool-jobs", "4")
    ok(agctl(env, "turn", "send", *tools, "add them"))
    assert tool_results(server) == ["2", "4", "6", "8"]


@pytest.mark.parametrize(
    ("command", "signum", "status"),
    [
        (("mcp", "tools", "mute"), signal.SIGINT, 130),
        (("turn", "send", "-T", "mute__x", "hi"), signal.SIGTERM, 143),
    ],
)
def test_an_interrupt_while_a_server_connects_ends_it(
    env: dict[str, str],
    server: FakeOpenAI,
    tmp_path: Path,
    command: tuple[str, ...],
    signum: signal.Signals,
    status: int,
) -> None:
    pid_file = tmp_path / "pid"
    mute = f"echo $$ > {pid_file}.new; mv {pid_file}.new {pid_file}; exec sleep 600"
    ok(agctl(env, "mcp", "add", "mute", "--connect-timeout", "600", "--", "sh", "-c", mute))
    returncode, stderr = interrupted(env, command, signum, pid_file.exists)
    server_pid = int(pid_file.read_text())
    assert returncode == status, stderr
    assert "Traceback" not in stderr, stderr
    assert process_dead(server_pid), "the connecting server outlived agctl"
    assert server.requests == []


def test_a_server__tool_name_is_the_servers_and_a_call_runs_the_tool_offered(
    env: dict[str, str], server: FakeOpenAI, tmp_path: Path
) -> None:
    ok(agctl(env, *ADD_SUITE))
    local = ("--description", "local", "--", "sh", "-c", "echo LOCAL-ARGV")
    refused = agctl(env, "tool", "add", "suite__echo", *local)
    assert refused.returncode == 4 and "MCP server 'suite'" in refused.stderr, refused.stderr
    ok(agctl(env, "tool", "add", "other__echo", *local))
    clash = agctl(env, "mcp", "add", "other", "--", sys.executable, SERVER)
    assert clash.returncode == 4 and "other__echo" in clash.stderr, clash.stderr

    # A tools file may still define one: the argv tool is offered, and it is what runs.
    tools_file = tmp_path / "tools.json"
    argv_tool = {"name": "suite__echo", "command": ["sh", "-c", "echo LOCAL-ARGV"]}
    tools_file.write_text(json.dumps([{**argv_tool, "approve": "auto"}]))
    server.reply(tool_calls=[call("suite__echo", {"text": "from the server"})])
    server.reply("Done.")
    ok(agctl(env, "turn", "send", "--tools-file", str(tools_file), "-T", "suite__echo", "go"))
    offered = server.requests[0].body["tools"][0]["function"]
    assert offered["parameters"] == {"type": "object", "properties": {}}  # the argv tool's
    assert tool_results(server) == ["LOCAL-ARGV\n"]


def test_tools_all_leaves_out_a_broken_server_unless_its_tool_is_named(
    env: dict[str, str], server: FakeOpenAI
) -> None:
    ok(agctl(env, *ADD_SUITE))
    ok(agctl(env, "mcp", "add", "broken", "--", "/nonexistent/mcp-server"))
    server.reply(tool_calls=[call("suite__add", {"a": 1, "b": 1})])
    server.reply("2.")
    sent = ok(agctl(env, "turn", "send", "--tools", "all", "--approve", "auto", "add"))
    assert "MCP server 'broken' is left out" in sent.stderr, sent.stderr
    offered = {tool["function"]["name"] for tool in server.requests[0].body["tools"]}
    assert "suite__add" in offered and not any(n.startswith("broken__") for n in offered)
    assert tool_results(server) == ["2"]
    named = agctl(env, "turn", "send", "-T", "broken__x", "hi")
    assert named.returncode == 1 and "could not connect" in named.stderr, named.stderr


def test_mcp_list_warns_of_a_projects_servers_file_it_cannot_read(
    env: dict[str, str], tmp_path: Path
) -> None:
    project = tmp_path / "project"
    (project / ".agctl").mkdir(parents=True)
    servers_file = project / ".agctl" / "mcp.json"

    def listed() -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [sys.executable, "-m", "agctl", "mcp", "list"], cwd=project, env=env,
            input="", capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        return ok(result)

    servers_file.write_text("{not json")
    bad = listed()
    assert f"warning: {servers_file} is ignored: not JSON" in bad.stderr, bad.stderr
    real = tmp_path / "elsewhere.json"
    real.write_text(json.dumps({"suite": {"command": [sys.executable, SERVER]}}))
    servers_file.unlink()
    servers_file.symlink_to(real)
    linked = listed()
    assert f"warning: {servers_file} is ignored:" in linked.stderr, linked.stderr
    assert "suite" not in linked.stdout


def test_mcp_trust_shows_the_headers_a_projects_server_sends(
    env: dict[str, str], tmp_path: Path
) -> None:
    project = tmp_path / "project"
    (project / ".agctl").mkdir(parents=True)
    headers = {"Authorization": "Bearer ${OPENAI_API_KEY}", "X-Team": "sekrit-team-id"}
    servers = {"web": {"url": "http://127.0.0.1:9/mcp", "headers": headers}}
    (project / ".agctl" / "mcp.json").write_text(json.dumps(servers))
    trusted = subprocess.run(
        [sys.executable, "-m", "agctl", "mcp", "trust"], cwd=project, env=env,
        input="", capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    ok(trusted)
    assert "header  web: Authorization: Bearer ${OPENAI_API_KEY}" in trusted.stdout
    assert "X-Team" in trusted.stdout and "sekrit-team-id" not in trusted.stdout
    env["OPENAI_API_KEY"] = "sk-not-for-the-project"
    refused = subprocess.run(
        [sys.executable, "-m", "agctl", "mcp", "tools", "web"], cwd=project, env=env,
        input="", capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert refused.returncode == 2 and "may not read ${OPENAI_API_KEY}" in refused.stderr
