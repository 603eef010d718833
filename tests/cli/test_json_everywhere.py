"""Every command takes --json and prints one valid JSON document (a walk of the Click tree)."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable
from pathlib import Path

import click
import pytest
from click.testing import Result

from agctl.cli import cli
from agctl.context.models import Draft
from agctl.store import Store
from agctl.store.checkpointer import Checkpointer

Run = Callable[..., Result]


def leaf_commands() -> list[str]:
    ctx = click.Context(cli)
    found: list[str] = []

    def walk(command: click.Command, path: list[str]) -> None:
        if isinstance(command, click.Group):
            for name in command.list_commands(ctx):
                sub = command.get_command(ctx, name)
                assert sub is not None
                walk(sub, [*path, name])
        else:
            found.append(" ".join(path))

    walk(cli, [])
    return found


@pytest.fixture
def world(run: Run, store: Store, tmp_path: Path) -> dict[str, str]:
    """A session with turns, two slots, memory, checkpoints, a profile and files to read."""
    assert run("session", "new", "s", "--system", "sys").exit_code == 0
    assert run("session", "new", "kid", "--parent", "s", "--no-use").exit_code == 0
    for text in ("one", "two", "three"):
        assert run("turn", "send", text).exit_code == 0
    assert run("slot", "derive", "b").exit_code == 0
    assert run("msg", "append", "user", "in b", "--slot", "b").exit_code == 0
    assert run("slot", "new", "spare").exit_code == 0
    assert run("memory", "set", "k", "v").exit_code == 0
    assert run("profile", "add", "p", "--preset", "ollama").exit_code == 0
    assert run("tool", "add", "echo", "--description", "d", "--", "cat").exit_code == 0
    assert run("template", "add", "t", "--system", "S {{ a }}", "--prompt", "{{ input }}",
               "--default", "a", "1").exit_code == 0  # fmt: skip
    mcp_server = str(Path(__file__).parents[1] / "mcp_server.py")
    assert run("mcp", "add", "m", "--", sys.executable, mcp_server).exit_code == 0
    store.save_draft("s", Draft(prompt="kept", slot="default"))
    ids = Checkpointer(store).ids("s")
    messages = tmp_path / "messages.json"
    messages.write_text(json.dumps([{"role": "user", "content": "imported"}]))
    transcript = tmp_path / "transcript.jsonl"
    transcript.write_text(json.dumps({"input": "replayed"}) + "\n")
    export = tmp_path / "export.json"
    assert run("session", "export", "-o", str(export)).exit_code == 0
    assert run("hook", "add", "TurnEnd", "seen", "--", "true").exit_code == 0
    hooks_file = tmp_path / "project" / ".agctl" / "hooks.json"
    hooks_file.parent.mkdir(parents=True)
    hooks_file.write_text(json.dumps([{"name": "p", "event": "PostFork", "command": ["true"]}]))
    assert run("hook", "trust", str(hooks_file)).exit_code == 0
    mcp_file = hooks_file.parent / "mcp.json"
    mcp_file.write_text(json.dumps({"web": {"url": "http://127.0.0.1:9/mcp"}}))
    assert run("mcp", "trust", str(mcp_file)).exit_code == 0
    hook_payload = tmp_path / "payload.json"
    hook_payload.write_text("{}")
    return {
        "newest": ids[0],
        "older": ids[-1],
        "messages": str(messages),
        "transcript": str(transcript),
        "export": str(export),
        "hooks_file": str(hooks_file),
        "mcp_file": str(mcp_file),
        "hook_payload": str(hook_payload),
        "store": store.shown,
        "copy_target": str(tmp_path / "copied"),
        "probes_dir": str(tmp_path / "probes"),
    }


INVOCATIONS: dict[str, list[str]] = {
    "chat": ["chat"],
    "ckpt create": ["ckpt", "create", "--label", "x"],
    "ckpt diff": ["ckpt", "diff", "{older}"],
    "ckpt fork": ["ckpt", "fork", "{older}", "--id", "forked"],
    "ckpt list": ["ckpt", "list"],
    "ckpt verify": ["ckpt", "verify"],
    "doctor": ["doctor"],
    "store copy": ["store", "copy", "{store}", "{copy_target}"],
    "store gc": ["store", "gc"],
    "store migrate": ["store", "migrate"],
    "store status": ["store", "status"],
    "man": ["man", "turn", "send"],
    "ckpt prune": ["ckpt", "prune", "--keep", "2"],
    "ckpt rm": ["ckpt", "rm", "{older}"],
    "ckpt rollback": ["ckpt", "rollback", "{older}"],
    "ckpt show": ["ckpt", "show", "{newest}"],
    "completion": ["completion", "bash"],
    "config set": ["config", "set", "max_retries", "4"],
    "config show": ["config", "show"],
    "ctx compress": ["ctx", "compress", "--keep-recent", "2", "--min-tokens", "0"],
    "ctx show": ["ctx", "show", "next"],
    "demo": ["demo"],
    "eval compaction": [
        *("eval", "compaction", "--runs", "1", "--messages", "120", "--facts", "6"),
        *("--drift", "1"),
    ],
    "eval probes": ["eval", "probes", "--out", "{probes_dir}", "--messages", "120"],
    "serve": ["serve", "--check", "--port", "0"],
    "draft rm": ["draft", "rm"],
    "draft show": ["draft", "show"],
    "hook add": ["hook", "add", "TurnEnd", "added", "true"],
    "hook list": ["hook", "list"],
    "hook rm": ["hook", "rm", "seen"],
    "hook test": ["hook", "test", "TurnEnd", "--payload", "{hook_payload}"],
    "hook trust": ["hook", "trust", "{hooks_file}"],
    "hook untrust": ["hook", "untrust", "{hooks_file}"],
    "memory get": ["memory", "get", "k"],
    "memory list": ["memory", "list"],
    "memory rm": ["memory", "rm", "k"],
    "memory set": ["memory", "set", "k2", "v2"],
    "msg append": ["msg", "append", "user", "hello"],
    "msg clear": ["msg", "clear", "--slot", "b"],
    "msg edit": ["msg", "edit", "0", "edited"],
    "msg export": ["msg", "export", "--format", "markdown"],
    "msg find": ["msg", "find", "user"],
    "msg get": ["msg", "get", "-1"],
    "msg import": ["msg", "import", "{messages}"],
    "msg insert": ["msg", "insert", "0", "system", "first"],
    "msg list": ["msg", "list"],
    "msg pin": ["msg", "pin", "0", "-1"],
    "msg pop": ["msg", "pop"],
    "msg retain": ["msg", "retain", "user"],
    "msg rm": ["msg", "rm", "0"],
    "msg unpin": ["msg", "unpin", "-1"],
    "profile add": ["profile", "add", "q", "--preset", "deepseek"],
    "profile list": ["profile", "list"],
    "profile rm": ["profile", "rm", "p"],
    "schema": ["schema", "slot"],
    "search": ["search", "one"],
    "session children": ["session", "children", "s"],
    "session export": ["session", "export"],
    "session graph": ["session", "graph", "--checkpoints", "--turns"],
    "session import": ["session", "import", "{export}", "--as", "copy"],
    "session list": ["session", "list"],
    "session new": ["session", "new", "fresh", "--no-use"],
    "session parent": ["session", "parent", "kid"],
    "session rm": ["session", "rm", "kid"],
    "session set": ["session", "set", "title", "T"],
    "session show": ["session", "show"],
    "session tree": ["session", "tree"],
    "session use": ["session", "use", "s"],
    "slot derive": ["slot", "derive", "c"],
    "slot diff": ["slot", "diff", "default", "b"],
    "slot list": ["slot", "list"],
    "slot merge": ["slot", "merge", "b"],
    "slot mode": ["slot", "mode", "focused"],
    "slot new": ["slot", "new", "n"],
    "slot rm": ["slot", "rm", "spare"],
    "slot set": ["slot", "set", "auto_compress", "false"],
    "slot show": ["slot", "show", "--view"],
    "slot summarize": ["slot", "summarize"],
    "slot use": ["slot", "use", "b"],
    # No "--": the --json the test appends must stay an option, not a word of the command.
    "template add": ["template", "add", "new", "--prompt", "p", "-o", "seed", "1"],
    "template edit": ["template", "edit", "t", "--editor", "true"],
    "template list": ["template", "list"],
    "template rm": ["template", "rm", "t"],
    "template show": ["template", "show", "t"],
    "mcp add": ["mcp", "add", "web", "--url", "http://127.0.0.1:9/mcp"],
    "mcp list": ["mcp", "list"],
    "mcp rm": ["mcp", "rm", "m"],
    "mcp tools": ["mcp", "tools", "m"],
    "mcp trust": ["mcp", "trust", "{mcp_file}"],
    "mcp untrust": ["mcp", "untrust", "{mcp_file}"],
    "tool add": ["tool", "add", "now", "--description", "d", "date"],
    "tool list": ["tool", "list"],
    "tool rm": ["tool", "rm", "echo"],
    "tool show": ["tool", "show", "echo"],
    "tool test": ["tool", "test", "echo"],
    "turn replay": ["turn", "replay", "{transcript}"],
    "turn edit": ["turn", "edit", "0", "again"],
    "turn retry": ["turn", "retry"],
    "turn send": ["turn", "send", "hi"],
    "turn undo": ["turn", "undo"],
    "usage": ["usage", "--since", "2000-01-01"],
}


def test_every_command_has_an_invocation_here() -> None:
    assert sorted(INVOCATIONS) == sorted(leaf_commands())


@pytest.mark.parametrize("name", sorted(INVOCATIONS))
def test_json_output_is_one_valid_document(name: str, run: Run, world: dict[str, str]) -> None:
    args = [arg.format(**world) for arg in INVOCATIONS[name]]
    if name == "chat":  # a document for each turn and command, one after the other
        result = run(*args, "--json", input="hi\n/slots\n/nope\n")
        decoder, text, documents = json.JSONDecoder(), result.stdout.strip(), []
        while text:
            document, end = decoder.raw_decode(text)
            documents.append(document)
            text = text[end:].strip()
        assert [type(d) for d in documents] == [dict, list], result.stdout
        assert json.loads(result.stderr)["error"]["type"] == "UsageError"
        return
    result = run(*args, "--json")
    assert result.exit_code == 0, result.stdout + result.stderr
    if name == "turn replay":
        lines = [json.loads(line) for line in result.stdout.splitlines()]
        assert lines[-1]["type"] == "summary"
        return
    if name == "search":  # JSON lines, one hit a line, printed as they are found
        hits = [json.loads(line) for line in result.stdout.splitlines()]
        assert hits and all(hit["snippet"] for hit in hits)
        return
    json.loads(result.stdout)


# A Python repr in text meant for people: True/False/None, a dict or list repr with
# quoted keys, a dataclass repr.
PYTHON_REPR = re.compile(r"\b(True|False|None)\b|\{'|\['|\b[A-Z][A-Za-z]+\([a-z_]+=")
# Values to set that print a boolean, a null and an object back.
SETTINGS = [
    ["config", "set", "auto_compress", "false"],
    ["config", "set", "prices.m", '{"prompt": 1.0, "completion": 2}'],
    ["session", "set", "auto_compress", "true"],
    ["session", "set", "title", "none"],
    ["slot", "set", "budget", "null"],
    ["slot", "set", "budget", '{"system": 1, "history": 1, "tools": 1, "tool_results": 1, '
     '"reserve": 100}'],
]  # fmt: skip


@pytest.mark.parametrize(
    "args",
    [*(INVOCATIONS[name] for name in sorted(INVOCATIONS) if name != "completion"), *SETTINGS],
    ids=lambda args: " ".join(args)[:40],
)
def test_text_output_holds_no_python_repr(args: list[str], run: Run, world: dict[str, str]) -> None:
    """Before: `config set`, `session set`, `slot set` printed {'prompt': 1.0}, True, None,
    and -v logged Usage(prompt_tokens=…)."""
    placeholder = {f"{{{name}}}": value for name, value in world.items()}
    result = run("-v", *[placeholder.get(arg, arg) for arg in args])
    assert result.exit_code == 0, result.output
    found = PYTHON_REPR.search(result.stdout + result.stderr)
    assert found is None, f"{found.group()!r} in: {result.stdout + result.stderr}"
