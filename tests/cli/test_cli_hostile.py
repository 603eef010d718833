"""No tracebacks, ever: every command of the Click tree, run with hostile argument values and
with a broken environment, ends with a documented exit code and an error message.

The bulk runs in-process (CliRunner, a watchdog against hangs); a sample runs as real
processes with a timeout, passing real undecodable bytes on the command line.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import traceback
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

import click
import pytest
from click.testing import CliRunner, Result
from helpers import data_dir_files
from test_json_everywhere import INVOCATIONS, leaf_commands

from agctl.cli import cli

DOCUMENTED_EXIT_CODES = {*range(12), 130}
# Commands whose exit 1 is an answer, said by the status alone (grep's "no match").
QUIET_EXIT_1 = {"search"}
NOT_UTF8 = os.fsdecode(b"caf\xe9")  # what Python makes of the bytes on a command line
HOSTILE = {
    "not-utf8": NOT_UTF8,
    "empty": "",
    "huge": str(2**70),
    "negative": "-5",
    "nan": "nan",
    "nul": "a\x00b",  # only a caller of main() can pass one: no real argv holds a NUL
    "controls": "a\nb\x1b]52;c;ZXZpbA==\x07\x1b[2J\x9b\x9d0;t\x07\r\x08\x7f\t",
    "traversal": "../../etc/passwd",
    "100kB": "x" * 100_000,
}
# Whatever the developer's environment holds, nothing here may reach a network.
OFFLINE = {
    name: None
    for name in (
        "AGCTL_PROFILE",
        "AGCTL_PROVIDER",
        "AGCTL_MODEL",
        "AGCTL_BASE_URL",
        "AGCTL_API_KEY",
        "AGCTL_CONFIG",
        "AGCTL_SESSION",
        "AGCTL_LOG",
        "OPENAI_BASE_URL",
        "OPENAI_API_KEY",
    )
}
# The values most parameters accept, which go on to be stored, computed with and printed.
PARSED = ("huge", "negative", "controls", "100kB")
HANG_SECONDS = 20


# ---- the world commands run in -------------------------------------------------------------


def _invoke(runner: CliRunner, env: Mapping[str, str | None], *args: str) -> Result:
    result = runner.invoke(cli, list(args), env=dict(env), catch_exceptions=False)
    assert result.exit_code == 0, (args, result.output)
    return result


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A data dir with a session `s` (turns, checkpoints, two more slots, memory, a child
    session) and the files the invocations read; each test runs on its own copy."""
    root = tmp_path_factory.mktemp("world")
    env = {**OFFLINE, "AGCTL_DATA_DIR": str(root / "data"), "NO_COLOR": "1"}
    env["XDG_CONFIG_HOME"] = str(root / "config")
    runner = CliRunner()
    _invoke(runner, env, "session", "new", "s", "--system", "sys")
    _invoke(runner, env, "session", "new", "kid", "--parent", "s", "--no-use")
    for text in ("one", "two", "three"):
        _invoke(runner, env, "turn", "send", text)
    _invoke(runner, env, "slot", "derive", "b")
    _invoke(runner, env, "msg", "append", "user", "in b", "--slot", "b")
    _invoke(runner, env, "slot", "new", "spare")
    _invoke(runner, env, "memory", "set", "k", "v")
    _invoke(runner, env, "profile", "add", "p", "--preset", "ollama")
    _invoke(runner, env, "tool", "add", "echo", "--description", "d", "--", "cat")
    _invoke(runner, env, "template", "add", "t", "--system", "S {{ a }}", "--prompt",
            "{{ input }}", "--default", "a", "1")  # fmt: skip
    _invoke(runner, env, "hook", "add", "TurnEnd", "seen", "--", "true")
    hooks_file = root / "project" / ".agctl" / "hooks.json"
    hooks_file.parent.mkdir(parents=True)
    hooks_file.write_text(json.dumps([{"name": "p", "event": "PostFork", "command": ["true"]}]))
    _invoke(runner, env, "hook", "trust", str(hooks_file))
    mcp_file = hooks_file.parent / "mcp.json"
    mcp_file.write_text(json.dumps({"web": {"url": "http://127.0.0.1:9/mcp"}}))
    _invoke(runner, env, "mcp", "trust", str(mcp_file))
    (root / "payload.json").write_text("{}")
    _invoke(runner, env, "session", "export", "-o", str(root / "export.json"))
    (root / "messages.json").write_text(json.dumps([{"role": "user", "content": "imported"}]))
    (root / "transcript.jsonl").write_text(json.dumps({"input": "replayed"}) + "\n")
    checkpoints = json.loads(_invoke(runner, env, "ckpt", "list", "--json").stdout)
    ids = [c["id"] for c in checkpoints]
    (root / "ids.json").write_text(json.dumps({"newest": ids[0], "older": ids[-1]}))
    return root


@dataclass
class World:
    root: Path
    names: dict[str, str]
    runner: CliRunner

    def env(self, with_session: bool) -> dict[str, str | None]:
        data = self.root / ("data" if with_session else "empty")
        return {
            **OFFLINE,
            "AGCTL_DATA_DIR": str(data),
            "XDG_CONFIG_HOME": str(self.root / "config"),
        }

    def args(self, name: str) -> list[str]:
        return [arg.format(**self.names) for arg in INVOCATIONS[name]]


@pytest.fixture
def world(template: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> World:
    """A copy of the template, and a working directory two levels down in it: the hostile
    values include relative paths (`../../etc/passwd`, `nan`) that commands write to."""
    root = tmp_path / "world"
    shutil.copytree(template, root, symlinks=True)
    cwd = root / "cwd" / "a" / "b"
    cwd.mkdir(parents=True)
    monkeypatch.chdir(cwd)
    names = json.loads((root / "ids.json").read_text())
    for name in ("messages", "transcript", "export"):
        suffix = "jsonl" if name == "transcript" else "json"
        names[name] = str(root / f"{name}.{suffix}")
    names["hooks_file"] = str(root / "project" / ".agctl" / "hooks.json")
    names["mcp_file"] = str(root / "project" / ".agctl" / "mcp.json")
    names["hook_payload"] = str(root / "payload.json")
    names["store"] = str(root / "data")
    names["copy_target"] = str(root / "copied")
    names["probes_dir"] = str(root / "probes")
    return World(root, names, CliRunner())


# ---- running and judging --------------------------------------------------------------------


class Hang(BaseException):
    """Raised by the watchdog in a command that runs too long (BaseException: no `except
    Exception` in the code under test may swallow it)."""


@pytest.fixture
def watchdog() -> Iterator[None]:
    def fire(_signum: int, _frame: FrameType | None) -> None:
        raise Hang(f"still running after {HANG_SECONDS} s")

    previous = signal.signal(signal.SIGALRM, fire)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def cut(text: str, limit: int = 300) -> str:
    """Each line of `text` at most `limit` characters (errors quote 100 kB arguments)."""
    return "\n".join(
        line if len(line) <= limit else line[:limit] + f"…({len(line)} chars)"
        for line in text.splitlines()
    )


def problem(result: Result, args: Sequence[str] = ()) -> str | None:
    """What is wrong with how a command ended, if anything."""
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        assert result.exc_info is not None
        lines = traceback.format_exception(*result.exc_info)
        return cut("".join(lines[-6:]).strip())
    if "Traceback" in result.output:
        return "a traceback in the output:\n" + cut(result.output[-3000:])
    if result.exit_code not in DOCUMENTED_EXIT_CODES:
        return f"exit code {result.exit_code}, not a documented one: {cut(result.output)}"
    quiet = result.exit_code == 1 and bool(QUIET_EXIT_1.intersection(args))
    if result.exit_code != 0 and not result.stderr.strip() and not quiet:
        return f"exit code {result.exit_code} with nothing on stderr"
    return None


def run_hostile(world: World, args: list[str], env: Mapping[str, str | None]) -> str | None:
    signal.setitimer(signal.ITIMER_REAL, HANG_SECONDS)
    try:
        result = world.runner.invoke(cli, args, env=dict(env), catch_exceptions=True)
    except Hang as exc:
        return str(exc)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    if isinstance(result.exception, Hang):
        return str(result.exception)
    return problem(result, args)


def shown(args: list[str]) -> str:
    return " ".join(repr(a if len(a) < 40 else a[:20] + f"…({len(a)} chars)") for a in args)


# After the hostile runs, what they stored must not break the commands that read it all.
AFTERWARDS = (
    ["session", "show", "s"],
    ["slot", "list", "-s", "s"],
    ["slot", "show", "--view", "-s", "s"],
    ["msg", "list", "-s", "s"],
    ["ckpt", "create", "-s", "s"],
    ["ckpt", "list", "-s", "s"],
    ["session", "export", "s"],
    ["config", "show"],
    ["profile", "list"],
    ["session", "list"],
)


def check_all(world: World, cases: Sequence[tuple[list[str], Mapping[str, str | None]]]) -> None:
    # Relative paths among the values (`../../etc/passwd`) are written to: keep them here.
    assert Path.cwd().is_relative_to(world.root / "cwd")
    failures = []
    afterwards = [(args, world.env(with_session=True)) for args in AFTERWARDS]
    for number, (args, env) in enumerate([*cases, *afterwards]):
        found = run_hostile(world, args, env)
        if found is not None:
            changed = {k: v for k, v in env.items() if k not in OFFLINE or v is not None}
            after = "afterwards: " if number >= len(cases) else ""
            failures.append(f"{after}agctl {shown(args)}  (env {changed})\n{found}")
    assert not failures, f"{len(failures)} of {len(cases)} runs:\n\n" + "\n\n".join(failures)


# ---- the parameters of each command, and where a value goes ----------------------------------


def command_at(path: str) -> click.Command:
    command: click.Command = cli
    ctx = click.Context(cli)
    for name in path.split():
        assert isinstance(command, click.Group)
        sub = command.get_command(ctx, name)
        assert sub is not None
        command = sub
    return command


def takes_value(param: click.Parameter) -> bool:
    if isinstance(param, click.Option):
        return not param.is_flag and not param.count and param.name != "help"
    return True


def _find_option(command: click.Command, token: str) -> click.Option | None:
    for param in command.params:
        if isinstance(param, click.Option) and token in (*param.opts, *param.secondary_opts):
            return param
    return None


def split_invocation(command: click.Command, tail: list[str]) -> tuple[list[str], list[str]]:
    """A valid invocation's tokens after the command path, as (options, positionals)."""
    options: list[str] = []
    positionals: list[str] = []
    tokens = iter(tail)
    for token in tokens:
        option = _find_option(command, token)
        if option is None:
            positionals.append(token)
        else:
            options.append(token)
            if takes_value(option):
                options.append(next(tokens))
    return options, positionals


def with_value(world: World, name: str, param: click.Parameter, value: str) -> list[str]:
    """The invocation of command `name` with `value` given to `param` (positionals after
    `--`, so that `-5` is a value and not an option)."""
    path = name.split()
    command = command_at(name)
    options, positionals = split_invocation(command, world.args(name)[len(path) :])
    if isinstance(param, click.Option):
        flag = next(o for o in param.opts if o.startswith("--"))
        options = [*options, flag, value]
    else:
        position = 0
        for argument in command.params:
            if argument is param:
                break
            if isinstance(argument, click.Argument):
                position += max(argument.nargs, 1)
        positionals = positionals + [""] * (position - len(positionals))
        if param.nargs < 0:
            positionals[position:] = [value]
        else:
            positionals[position : position + 1] = [value]
    return [*path, *options, "--", *positionals]


def parameters() -> Iterator[tuple[str, str]]:
    # A command missing from INVOCATIONS fails test_json_everywhere's own check.
    for name in (name for name in leaf_commands() if name in INVOCATIONS):
        for param in command_at(name).params:
            if takes_value(param):
                yield name, param.name or ""


# Library bugs the walk finds in modules this test does not own, by (command, parameter):
# each an xfail(strict=True) with its reason, removed when the bug is fixed.
KNOWN: dict[tuple[str, str], str] = {}


def marked(cases: Iterator[tuple[str, str]]) -> Iterator[object]:
    for name, param in cases:
        reason = KNOWN.get((name, param))
        marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
        yield pytest.param(name, param, id=f"{name}:{param}", marks=marks)


@pytest.mark.usefixtures("watchdog")
@pytest.mark.parametrize(("name", "param_name"), list(marked(parameters())))
def test_every_parameter_with_hostile_values(name: str, param_name: str, world: World) -> None:
    """Each value of HOSTILE given to the parameter: with the session there, with an empty
    data dir; and the values that get past parsing with each flag of the command (--json,
    --dry-run, …) in turn."""
    command = command_at(name)
    param = next(p for p in command.params if p.name == param_name)
    flags = [
        next(o for o in p.opts if o.startswith("--"))
        for p in command.params
        if isinstance(p, click.Option) and p.is_flag and p.name not in ("help", "version")
    ]
    cases = []
    for label, value in HOSTILE.items():
        args = with_value(world, name, param, value)
        cases.append((args, world.env(with_session=True)))
        cases.append((args, world.env(with_session=False)))
        if label in PARSED:
            at = len(name.split())
            cases.extend(
                ([*args[:at], flag, *args[at:]], world.env(with_session=True)) for flag in flags
            )
    check_all(world, cases)


ROOT_INVOCATIONS = ("session list", "msg list", "turn send", "ckpt create", "memory set")


@pytest.mark.usefixtures("watchdog")
@pytest.mark.parametrize(
    "option",
    [
        "--data-dir",
        "--session",
    ],
)
def test_global_options_with_hostile_values(option: str, world: World) -> None:
    cases = []
    for name in ROOT_INVOCATIONS:
        for number, value in enumerate(HOSTILE.values()):
            cases.append(([option, value, *world.args(name)], world.env(number % 2 == 0)))
    check_all(world, cases)


def broken_environments(world: World) -> dict[str, dict[str, str | None]]:
    regular_file = world.root / "not-a-dir"
    regular_file.write_text("just a file\n")
    config_dir = world.root / "config-dir"
    config_dir.mkdir()
    base = world.env(with_session=True)
    return {
        "AGCTL_SESSION points at nothing": {**base, "AGCTL_SESSION": "nothing-here"},
        "AGCTL_DATA_DIR is a regular file": {**base, "AGCTL_DATA_DIR": str(regular_file)},
        "AGCTL_CONFIG is a directory": {**base, "AGCTL_CONFIG": str(config_dir)},
        "AGCTL_LOG is not a level": {**base, "AGCTL_LOG": "basic_format"},
        # No HOME, and no XDG dirs to fall back on; the data dir and the config stay in
        # the test's directory so that nothing is written to the real home.
        "HOME unset": {
            **base,
            "HOME": None,
            "XDG_CONFIG_HOME": None,
            "XDG_DATA_HOME": None,
            "AGCTL_CONFIG": str(world.root / "home-config.json"),
        },
    }


@pytest.mark.usefixtures("watchdog")
@pytest.mark.parametrize("name", sorted(INVOCATIONS))
def test_every_command_in_a_broken_environment(name: str, world: World) -> None:
    cases = [(world.args(name), env) for env in broken_environments(world).values()]
    check_all(world, cases)


# ---- the same as real processes: real bytes, a timeout ---------------------------------------


def agctl(
    env: Mapping[str, str], *args: str | bytes, stdin: bytes = b""
) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "agctl", *args],
        input=stdin,
        capture_output=True,
        env=dict(env),
        timeout=30,
        check=False,
    )


@pytest.fixture
def process_env(world: World) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in OFFLINE}
    return {**env, **{k: v for k, v in world.env(True).items() if v is not None}}


def assert_clean_refusal(result: subprocess.CompletedProcess[bytes], code: int) -> str:
    stderr = result.stderr.decode("utf-8", "replace")
    assert result.returncode == code, stderr
    assert "Traceback" not in stderr
    assert result.stdout == b""
    assert stderr.startswith("agctl: error: "), stderr
    assert stderr.count("\n") == 1, stderr
    return stderr


UNDECODABLE = [
    (["msg", "append", "user", b"caf\xe9"], "argument TEXT of 'agctl msg append' (argument 4)"),
    (["msg", "edit", "0", b"caf\xe9"], "argument TEXT of 'agctl msg edit' (argument 4)"),
    (["ckpt", "create", "--label", b"caf\xe9"], "the value of --label (argument 4)"),
    (["ckpt", "create", b"--label=caf\xe9"], "the value of --label (argument 3)"),
    (["session", "set", "title", b"caf\xe9"], "argument VALUE of 'agctl session set'"),
    (["memory", "set", b"caf\xe9", "v"], "argument KEY of 'agctl memory set' (argument 3)"),
    (["config", "set", "max_retries", b"\xff"], "argument VALUE of 'agctl config set'"),
    (["turn", "send", b"caf\xe9"], "argument PROMPT of 'agctl turn send' (argument 3)"),
    (["-s", b"caf\xe9", "msg", "list"], "the value of -s (argument 2)"),
    (["msg", b"caf\xe9"], "argument 2"),
]


@pytest.mark.parametrize(
    ("args", "named"), UNDECODABLE, ids=[" ".join(map(str, a)) for a, _ in UNDECODABLE]
)
def test_undecodable_bytes_on_the_command_line_are_refused_before_anything_runs(
    process_env: dict[str, str], world: World, args: list[str | bytes], named: str
) -> None:
    before = data_dir_files(world.root / "data")
    result = agctl(process_env, *args, "--json")  # the error too is JSON then
    assert result.returncode == 2 and not result.stdout, result
    error = json.loads(result.stderr)["error"]
    assert error["type"] == "UsageError" and error["exit"] == 2
    assert named in error["message"]
    assert "is not valid UTF-8: " in error["message"]
    assert "caf\\xe9'" in error["message"] or "'\\xff'" in error["message"]
    assert data_dir_files(world.root / "data") == before
    stderr = assert_clean_refusal(agctl(process_env, *args), 2)
    assert named in stderr


@pytest.mark.parametrize("variable", ["AGCTL_SESSION", "AGCTL_MODEL", "AGCTL_PROFILE"])
def test_undecodable_bytes_in_an_environment_variable_are_refused(
    process_env: dict[str, str], variable: str
) -> None:
    env = {**process_env, variable: os.fsdecode(b"caf\xe9")}
    stderr = assert_clean_refusal(agctl(env, "msg", "list"), 2)
    assert f"environment variable {variable} is not valid UTF-8: 'caf\\xe9'" in stderr


def test_a_data_dir_whose_name_is_not_utf8_works(
    process_env: dict[str, str], tmp_path: Path
) -> None:
    """A file name is bytes on POSIX: a data dir named with any of them is valid, through
    --data-dir or AGCTL_DATA_DIR, and --json escapes it (a review found it refused)."""
    data = os.fsdecode(bytes(tmp_path) + b"/d\xff")
    for extra, env in (
        (["--data-dir", data], process_env),
        ([], {**process_env, "AGCTL_DATA_DIR": data}),
    ):
        made = agctl(env, *extra, "session", "new")
        assert made.returncode == 0, made.stderr
        listed = agctl(env, *extra, "--json", "doctor")
        assert listed.returncode == 0, listed.stderr
        assert json.loads(listed.stdout)["data_dir"] == data


def test_agctl_log_must_name_a_level(process_env: dict[str, str]) -> None:
    stderr = assert_clean_refusal(
        agctl({**process_env, "AGCTL_LOG": "basic_format"}, "msg", "list"), 2
    )
    assert "AGCTL_LOG='basic_format' is not a log level" in stderr
    assert "debug, info, warning, error, critical" in stderr
    for level in ("debug", "INFO"):
        logged = agctl({**process_env, "AGCTL_LOG": level}, "session", "new", f"s-{level}")
        assert logged.returncode == 0, logged.stderr
        assert f"session created: s-{level}".encode() in logged.stderr


SAMPLE = [
    ["msg", "get", str(2**70)],
    ["msg", "append", "user", "x" * 100_000],
    ["ckpt", "prune", "--keep", str(2**70)],
    ["slot", "derive", "../../etc/passwd"],
    ["turn", "send", "hi", "--temperature", "nan"],
    ["--data-dir", "/dev/null", "session", "list"],
]


@pytest.mark.parametrize("args", SAMPLE, ids=[" ".join(a)[:40] for a in SAMPLE])
def test_a_sample_as_real_processes(process_env: dict[str, str], args: list[str]) -> None:
    result = agctl(process_env, *args)
    assert b"Traceback" not in result.stderr + result.stdout
    assert result.returncode in DOCUMENTED_EXIT_CODES, result.stderr
    if result.returncode:
        # One format: `agctl: error: ...` (a usage error keeps Click's usage line above it).
        errors = [line for line in result.stderr.splitlines() if line.startswith(b"agctl: ")]
        assert errors and errors[0].startswith(b"agctl: error: "), result.stderr


def test_a_broken_environment_as_real_processes(process_env: dict[str, str], world: World) -> None:
    for label, changes in broken_environments(world).items():
        env = {**process_env, **{k: v for k, v in changes.items() if v is not None}}
        for name, value in changes.items():
            if value is None:
                env.pop(name, None)
        result = agctl(env, "msg", "list")
        assert b"Traceback" not in result.stderr, (label, result.stderr)
        assert result.returncode in DOCUMENTED_EXIT_CODES, (label, result.stderr)


def test_undecodable_arguments_are_refused_in_process_too(world: World) -> None:
    """The check lives in the root group's main, which CliRunner calls as well."""
    result = world.runner.invoke(
        cli, ["memory", "set", NOT_UTF8, "v"], env=world.env(True), catch_exceptions=False
    )
    assert result.exit_code == 2
    assert result.stderr == (
        "agctl: error: argument KEY of 'agctl memory set' (argument 3) is not valid UTF-8: "
        "'caf\\xe9'\n"
    )
    memory = world.runner.invoke(cli, ["memory", "list", "--json"], env=world.env(True))
    assert NOT_UTF8 not in memory.stdout


def test_shell_completion_is_not_refused(world: World) -> None:
    """TAB completion reads COMP_WORDS, not argv, and must never print an error."""
    env = {
        **world.env(True),
        "_AGCTL_COMPLETE": "bash_complete",
        "COMP_WORDS": "agctl ses",
        "COMP_CWORD": "1",
        "AGCTL_SESSION": NOT_UTF8,
    }
    result = world.runner.invoke(cli, [], env=env, prog_name="agctl")
    assert result.exit_code == 0
    assert "session" in result.stdout
