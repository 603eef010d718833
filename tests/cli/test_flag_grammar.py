"""One grammar for flags: each global option before the group, after it and after the
command, on every command; and errors a script can read (JSON on stderr with --json)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner, Result
from test_json_everywhere import INVOCATIONS

from agctl.cli import cli
from agctl.cli.app import App
from agctl.store import Store

Run = Callable[..., Result]

# Each global option with a value, and what the App (or the context) shows when it took.
GLOBAL_OPTIONS: dict[str, tuple[list[str], Callable[[App, click.Context], bool]]] = {
    "--data-dir": (["--data-dir", "/tmp/agctl-grammar"], lambda a, c: a.data_dir_given),
    "-s": (["-s", "chosen"], lambda a, c: a.session_arg == "chosen"),
    "--session": (["--session", "chosen"], lambda a, c: a.session_arg == "chosen"),
    "--json": (["--json"], lambda a, c: a.json),
    "-q": (["-q"], lambda a, c: a.quiet),
    "--quiet": (["--quiet"], lambda a, c: a.quiet),
    "--no-color": (["--no-color"], lambda a, c: c.color is False),
    "--no-hooks": (["--no-hooks"], lambda a, c: a.no_hooks),
    "-v": (["-v"], lambda a, c: a.verbose == 1),
}


def _path_and_args(name: str) -> tuple[list[str], list[str]]:
    words = name.split()
    args = [arg.format_map(_Anything()) for arg in INVOCATIONS[name]]
    assert args[: len(words)] == words
    return words, args[len(words) :]


class _Anything(dict[str, str]):
    def __missing__(self, key: str) -> str:
        return "x"


def positions(path: list[str], args: list[str], option: list[str]) -> dict[str, list[str]]:
    """The places a global option may go."""
    places = {
        "before the group": [*option, *path, *args],
        "after the command": [*path, *option, *args],
    }
    if len(path) > 1:
        places["after the group"] = [path[0], *option, *path[1:], *args]
    if "--" not in args:
        places["at the end"] = [*path, *args, *option]
    return places


@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[App, click.Context]]]:
    """Every leaf command's callback replaced by one that records the App it would see."""
    seen: list[tuple[App, click.Context]] = []
    ctx = click.Context(cli)

    def walk(command: click.Command) -> None:
        if isinstance(command, click.Group):
            for name in command.list_commands(ctx):
                sub = command.get_command(ctx, name)
                assert sub is not None
                walk(sub)
            return

        def record(**_kwargs: Any) -> None:
            here = click.get_current_context()
            seen.append((here.find_object(App), here))  # type: ignore[arg-type]

        monkeypatch.setattr(command, "callback", record)

    walk(cli)
    yield seen


CASES = [(name, option) for name in sorted(INVOCATIONS) for option in GLOBAL_OPTIONS]


@pytest.mark.parametrize(("name", "option"), CASES, ids=[f"{n}:{o}" for n, o in CASES])
def test_every_global_option_is_accepted_in_every_position(
    name: str, option: str, recorded: list[tuple[App, click.Context]]
) -> None:
    path, args = _path_and_args(name)
    words, took = GLOBAL_OPTIONS[option]
    runner = CliRunner()
    for place, argv in positions(path, args, words).items():
        recorded.clear()
        result = runner.invoke(cli, argv, catch_exceptions=False)
        assert result.exit_code == 0, f"{place}: agctl {' '.join(argv)}\n{result.stderr}"
        assert len(recorded) == 1, f"{place}: the command did not run"
        app, ctx = recorded[0]
        assert took(app, ctx), f"{place}: {option} did not take effect in agctl {' '.join(argv)}"


def test_the_rightmost_value_wins(recorded: list[tuple[App, click.Context]]) -> None:
    result = CliRunner().invoke(cli, ["-s", "left", "msg", "-s", "middle", "list", "-s", "right"])
    assert result.exit_code == 0, result.stderr
    assert recorded[0][0].session_arg == "right"


def test_an_environment_variable_never_overrides_the_command_line(
    monkeypatch: pytest.MonkeyPatch, recorded: list[tuple[App, click.Context]]
) -> None:
    monkeypatch.setenv("AGCTL_SESSION", "from-env")
    result = CliRunner().invoke(cli, ["msg", "list", "-s", "given"])
    assert result.exit_code == 0, result.stderr
    assert recorded[0][0].session_arg == "given"


def test_verbose_counts_across_positions(recorded: list[tuple[App, click.Context]]) -> None:
    result = CliRunner().invoke(cli, ["-v", "msg", "list", "-v"])
    assert result.exit_code == 0, result.stderr
    assert recorded[0][0].verbose == 2


# ---- the examples, run for real --------------------------------------------------


def test_session_show_takes_s_after_the_command(run: Run) -> None:
    """Before: `session show -s X` was a usage error."""
    assert run("session", "new", "first").exit_code == 0
    assert run("session", "new", "second").exit_code == 0
    result = run("session", "show", "-s", "first", "--json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["id"] == "first"


def test_slot_new_takes_q_after_the_command(run: Run) -> None:
    """Before: `slot new x -q` was a usage error."""
    assert run("session", "new", "s").exit_code == 0
    result = run("slot", "new", "x", "-q")
    assert result.exit_code == 0, result.stderr
    assert result.stdout == ""
    assert "x" in run("slot", "list").stdout


def test_data_dir_after_the_command_is_the_one_used(run: Run, tmp_path: Path) -> None:
    other = tmp_path / "other"
    assert run("session", "new", "here", "--data-dir", str(other)).exit_code == 0
    assert Store(other).session_ids() == ["here"]
    assert "here" not in run("session", "list").stdout


# ---- errors a script can read --------------------------------------------------------------


def _json_error(result: Result) -> dict[str, Any]:
    assert result.stdout == "", result.stdout
    document = json.loads(result.stderr)
    assert list(document) == ["error"]
    error: dict[str, Any] = document["error"]
    assert {"type", "exit", "message", "hint"} <= set(error)
    assert error["exit"] == result.exit_code
    return error


@pytest.mark.parametrize("name", sorted(INVOCATIONS))
def test_every_usage_error_is_one_json_object_with_json(name: str, run: Run) -> None:
    path, _ = _path_and_args(name)
    for argv in ([*path, "--no-such-option", "--json"], ["--json", *path, "--no-such-option"]):
        result = run(*argv)
        assert result.exit_code == 2
        error = _json_error(result)
        assert error["type"] == "UsageError"
        assert "--no-such-option" in error["message"]
        assert error["hint"] == f"Try 'agctl {' '.join(path)} -h' for help."


@pytest.mark.parametrize("name", sorted(INVOCATIONS))
def test_every_usage_error_has_one_text_format(name: str, run: Run) -> None:
    path, _ = _path_and_args(name)
    result = run(*path, "--no-such-option")
    assert result.exit_code == 2
    lines = result.stderr.splitlines()
    assert lines[0].startswith(f"Usage: agctl {' '.join(path)} ")
    assert f"Try 'agctl {' '.join(path)} -h' for help." in lines
    assert lines[-1].startswith("agctl: error: ") and "--no-such-option" in lines[-1]
    assert not any(line.startswith("Error:") for line in lines)


def test_a_library_error_is_json_with_its_type(run: Run) -> None:
    assert run("session", "new", "s").exit_code == 0
    assert run("slot", "new", "rules", "--mode", "readonly").exit_code == 0
    result = run("msg", "append", "user", "hi", "--slot", "rules", "--json")
    assert result.exit_code == 4
    error = _json_error(result)
    assert error["type"] == "ReadonlySlot"
    assert error["message"] == "slot 'rules' is readonly: cannot append"
    assert error["hint"] == "change it with 'agctl slot mode full rules'"
    text = run("msg", "append", "user", "hi", "--slot", "rules")
    assert text.exit_code == 4
    assert text.stderr.splitlines() == [
        "agctl: error: slot 'rules' is readonly: cannot append",
        "agctl: hint: change it with 'agctl slot mode full rules'",
    ]


@pytest.mark.parametrize(
    ("args", "kind", "hint"),
    [
        (["msg", "list"], "NoSessionSelected", "pass --session ID"),
        (["session", "rm", "parent"], "HasChildren", "--recursive"),
        (["session", "import", "{export}"], "AlreadyExists", "--as NEW"),
        (["turn", "send", "hi", "--provider", "replay"], "UsageError", "--cassette"),
        (["man", "sesion"], "UsageError", "agctl man session"),
    ],
)
def test_a_library_error_says_what_to_do_in_its_hint(
    args: list[str], kind: str, hint: str, run: Run, tmp_path: Path
) -> None:
    assert run("session", "new", "parent", "--no-use").exit_code == 0
    assert run("session", "new", "child", "--parent", "parent", "--no-use").exit_code == 0
    export = tmp_path / "export.json"
    assert run("-s", "parent", "session", "export", "-o", str(export)).exit_code == 0
    argv = [arg.format(export=export) for arg in args]
    if kind != "NoSessionSelected":
        argv = ["-s", "parent", *argv]
    error = _json_error(run(*argv, "--json"))
    assert error["type"] == kind
    assert hint in error["hint"]
    assert hint not in error["message"]


def test_agctl_json_is_the_same_as_json(run: Run, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGCTL_JSON", "1")
    missing = run("session", "show", "nosuch")
    assert missing.exit_code == 3
    assert _json_error(missing)["type"] == "NotFound"
    usage = run("session", "nosuch-command")
    assert usage.exit_code == 2
    assert _json_error(usage)["type"] == "UsageError"
    assert run("session", "new", "s").exit_code == 0
    assert json.loads(run("session", "show").stdout)["id"] == "s"


def test_a_missing_command_is_help_for_people_and_json_for_scripts(
    run: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    people = run("session")
    assert people.exit_code == 2 and "Commands:" in people.stderr + people.stdout
    scripts = run("session", "--json")
    assert scripts.exit_code == 2
    assert _json_error(scripts)["message"] == "Missing command."
    monkeypatch.setenv("AGCTL_JSON", "1")
    assert _json_error(run("session"))["message"] == "Missing command."


def test_an_error_in_the_environment_is_json_too(run: Run, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGCTL_LOG", "loud")
    result = run("--json", "session", "list")
    assert result.exit_code == 2
    assert "AGCTL_LOG" in _json_error(result)["message"]


def test_json_errors_as_a_real_process(tmp_path: Path) -> None:
    env = {**os.environ, "AGCTL_DATA_DIR": str(tmp_path / "data"), "AGCTL_JSON": "1"}
    env.pop("AGCTL_SESSION", None)
    result = subprocess.run(
        [sys.executable, "-m", "agctl", "msg", "list"],
        env=env,
        capture_output=True,
        text=True,
        cwd=tmp_path,
        check=False,
    )
    assert result.returncode == 2
    assert result.stdout == ""
    error = json.loads(result.stderr)["error"]
    assert error["type"] == "NoSessionSelected"
    assert "Traceback" not in result.stderr


# ---- one rule for selecting what a command makes ----------------------------------------


def _current(run: Run) -> str:
    return str(json.loads(run("session", "show", "--json").stdout)["id"])


def _makers(run: Run, tmp_path: Path) -> dict[str, list[str]]:
    """Each command that makes a session, with what it takes to make one named 'made'."""
    assert run("session", "new", "home").exit_code == 0
    assert run("turn", "send", "hi").exit_code == 0
    checkpoint = json.loads(run("ckpt", "list", "--json").stdout)[0]["id"]
    export = tmp_path / "home.json"
    assert run("session", "export", "-o", str(export)).exit_code == 0
    transcript = tmp_path / "t.jsonl"
    transcript.write_text(json.dumps({"input": "replayed"}) + "\n")
    return {
        "session new": ["session", "new", "made"],
        "ckpt fork": ["ckpt", "fork", checkpoint, "--id", "made"],
        "session import": ["session", "import", str(export), "--as", "made"],
        "turn replay --new-session": ["turn", "replay", str(transcript), "--new-session", "made"],
    }


@pytest.mark.parametrize(
    "maker", ["session new", "ckpt fork", "session import", "turn replay --new-session"]
)
@pytest.mark.parametrize("flag", [None, "--use", "--no-use"])
def test_a_new_session_is_selected_unless_no_use(
    maker: str, flag: str | None, run: Run, tmp_path: Path
) -> None:
    args = _makers(run, tmp_path)[maker]
    result = run(*args, *([flag] if flag else []))
    assert result.exit_code == 0, result.stdout + result.stderr
    assert _current(run) == ("home" if flag == "--no-use" else "made")


@pytest.mark.parametrize("maker", [["slot", "new", "made"], ["slot", "derive", "made"]])
@pytest.mark.parametrize("flag", [None, "--use"])
def test_a_new_slot_is_selected_only_with_use(maker: list[str], flag: str | None, run: Run) -> None:
    assert run("session", "new", "home").exit_code == 0
    assert run(*maker, *([flag] if flag else [])).exit_code == 0
    current = json.loads(run("session", "show", "--json").stdout)["current_slot"]
    assert current == ("made" if flag else "default")


def test_with_json_stderr_is_json_lines_warnings_included(
    run: Run, isolated_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: a warning came as `agctl: warning: ...` before the JSON error."""
    assert run("session", "new", "s").exit_code == 0
    assert run("slot", "set", "budget", '{"system": 1}').exit_code == 0
    assert run("session", "set", "system_prompt", "a system prompt of some length").exit_code == 0
    os.chmod(isolated_env, 0o755)  # loose: warned about, once per process
    result = subprocess.run(
        [sys.executable, "-m", "agctl", "turn", "send", "hi", "--json"],
        env={**os.environ, "AGCTL_SESSION": "s"},
        capture_output=True,
        text=True,
        cwd=isolated_env.parent,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    lines = [json.loads(line) for line in result.stderr.splitlines()]
    assert {"warning"} == {key for line in lines for key in line}
    assert any("over its budget" in line["warning"] for line in lines), lines
    assert any("open to other users" in line["warning"] for line in lines), lines
    people = run("turn", "send", "hi")
    assert any(
        line.startswith("agctl: warning: slot default: system uses")
        for line in people.stderr.splitlines()
    )


@pytest.mark.parametrize(
    "words",
    [
        "agctl --data-dir {d} slot use ",
        "agctl slot --data-dir {d} use ",
        "agctl slot use --data-dir {d} ",
        "agctl -s tabs --data-dir {d} slot use ",
    ],
)
def test_tab_completion_reads_the_data_dir_given_anywhere(
    words: str, tmp_path: Path, run: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: once the global options wrote into the App, completion still looked for
    --data-dir in the root's parameters, and offered nothing from that data dir."""
    elsewhere = tmp_path / "elsewhere"
    assert run("--data-dir", str(elsewhere), "session", "new", "tabs").exit_code == 0
    assert run("--data-dir", str(elsewhere), "slot", "new", "beta").exit_code == 0
    line = words.format(d=elsewhere)
    env = {**os.environ, "_AGCTL_COMPLETE": "bash_complete", "COMP_WORDS": line}
    env["COMP_CWORD"] = str(len(line.split()))
    env.pop("AGCTL_DATA_DIR")
    result = subprocess.run(
        [sys.executable, "-m", "agctl"], env=env, capture_output=True, text=True, check=False
    )
    assert result.stdout.split() == ["plain,beta", "plain,default"], result.stderr
