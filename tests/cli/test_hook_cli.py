"""`agctl hook`: the wiring and output of add, list, rm, test, trust, untrust and --no-hooks."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from click.testing import Result

from agctl.config.file import ConfigFile
from agctl.turn import hooks

Run = Callable[..., Result]
START = json.dumps({"prompt": "hello", "scratch": []})


@pytest.fixture(autouse=True)
def in_a_project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Each test runs in its own directory (where ./.agctl/hooks.json is looked for)."""
    project = tmp_path / "project"
    project.mkdir()
    monkeypatch.chdir(project)
    hooks._warned.clear()
    yield project
    hooks._warned.clear()


def python_hook(tmp_path: Path, name: str, body: str) -> list[str]:
    path = tmp_path / f"{name}.py"
    path.write_text("import json, sys\n" + body)
    return [sys.executable, str(path)]


def test_add_then_list_shows_the_hook_in_order_with_its_defaults(run: Run) -> None:
    assert run("hook", "add", "TurnEnd", "notify", "--", "echo", "-n", "done").exit_code == 0
    added = run("hook", "add", "TurnStart", "ctx", "--timeout", "3", "--", "ctx.sh", "--json")
    assert added.exit_code == 0, added.output
    assert added.stdout == "added TurnStart hook ctx\n"
    listed = json.loads(run("hook", "list", "--json").stdout)
    assert [(h["name"], h["command"], h["on_error"], h["timeout_s"]) for h in listed] == [
        ("notify", ["echo", "-n", "done"], "warn", 10.0),
        ("ctx", ["ctx.sh", "--json"], "block", 3.0),
    ]
    assert {h["source"] for h in listed} == {"config"}
    text = run("hook", "list").stdout
    assert "echo -n done" in text and "ctx.sh --json" in text


def test_add_refuses_a_second_hook_of_a_name_unless_forced(run: Run) -> None:
    assert run("hook", "add", "TurnEnd", "n", "--", "true").exit_code == 0
    again = run("hook", "add", "TurnEnd", "n", "--", "false")
    assert again.exit_code == 4 and "--force" in again.stderr
    forced = run("hook", "add", "TurnEnd", "n", "--force", "--on-error", "block", "--", "false")
    assert forced.exit_code == 0
    (only,) = ConfigFile().load().hooks
    assert (only.command, only.on_error) == (["false"], "block")


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["hook", "add", "OnTurnStart", "n", "--", "true"], 2, "OnTurnStart"),
        (["hook", "add", "TurnEnd", "n"], 2, "COMMAND"),
        (["hook", "add", "TurnEnd", "../n", "--", "true"], 2, "hook id"),
        (["hook", "add", "TurnEnd", "n", "--timeout", "0", "--", "true"], 2, "timeout_s"),
        (["hook", "add", "TurnEnd", "n", "--profile", "nope", "--", "true"], 3, "nope"),
        (["hook", "rm", "nope"], 3, "not found"),
        (["hook", "untrust"], 3, "not trusted"),
        (["hook", "trust"], 3, "no hooks file"),
        (["hook", "trust", "hooks.json"], 2, "is not a project's hooks file"),
        (["hook", "untrust", "../x/hooks.json"], 2, "is not a project's hooks file"),
        (["hook", "test", "TurnStart", "--payload", "-"], 5, "not JSON"),
    ],
)
def test_bad_input_is_an_error_without_a_traceback(
    run: Run, args: list[str], code: int, message: str
) -> None:
    result = run(*args)
    assert result.exit_code == code, result.output
    assert message in result.stderr
    assert "Traceback" not in result.output


def test_profile_hooks_are_listed_and_removed_with_their_profile(run: Run) -> None:
    assert run("profile", "add", "work", "--preset", "ollama").exit_code == 0
    assert run("hook", "add", "TurnStart", "ctx", "--profile", "work", "--", "x").exit_code == 0
    (row,) = json.loads(run("hook", "list", "--json").stdout)
    assert (row["source"], row["profile"]) == ("profile", "work")
    assert "profile work" in run("hook", "list").stdout
    wrong = run("hook", "rm", "ctx")
    assert wrong.exit_code == 3 and "add --profile work" in wrong.stderr
    removed = run("hook", "rm", "ctx", "--profile", "work", "--json")
    assert json.loads(removed.stdout) == {"removed": "ctx", "event": "TurnStart", "profile": "work"}
    assert json.loads(run("hook", "list", "--json").stdout) == []


def test_hook_test_prints_each_run_and_the_changes(run: Run, tmp_path: Path) -> None:
    body = 'p = json.load(sys.stdin)\nprint(json.dumps({"prompt": p["prompt"] + "!"}))\n'
    assert (
        run("hook", "add", "TurnStart", "bang", "--", *python_hook(tmp_path, "b", body)).exit_code
        == 0
    )
    result = run("hook", "test", "TurnStart", "--payload", "-", "--json", input=START)
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["outcome"] == "proceed" and report["changes"] == {"prompt": "hello!"}
    assert [(r["name"], r["exit"], r["outcome"]) for r in report["runs"]] == [
        ("bang", 0, "proceed")
    ]
    text = run("hook", "test", "TurnStart", "--payload", "-", input=START).stdout
    assert text.startswith("bang: proceed (exit 0, ")
    assert 'changes: {"prompt":"hello!"}' in text


def test_hook_test_reads_a_payload_file_and_exits_9_when_blocked(run: Run, tmp_path: Path) -> None:
    veto = python_hook(tmp_path, "veto", "print('no tools today', file=sys.stderr)\nsys.exit(2)\n")
    assert run("hook", "add", "PreToolUse", "veto", "--", *veto).exit_code == 0
    payload = tmp_path / "call.json"
    payload.write_text(json.dumps({"tool": "ls", "call_id": "c1", "arguments": {}}))
    result = run("hook", "test", "PreToolUse", "--payload", str(payload), "--json")
    assert result.exit_code == 9
    report = json.loads(result.stdout)
    assert (report["outcome"], report["hook"], report["reason"]) == (
        "blocked",
        "veto",
        "no tools today",
    )
    error = json.loads(result.stderr)["error"]
    assert (error["type"], error["exit"]) == ("HookBlocked", 9)


def test_hook_test_refuses_a_payload_missing_the_event_s_fields(run: Run) -> None:
    result = run("hook", "test", "PreToolUse", "--payload", "-", input="{}")
    assert result.exit_code == 5
    assert "needs tool, call_id, arguments" in result.stderr


def test_a_warned_failure_is_a_warning_on_stderr(run: Run) -> None:
    assert run("hook", "add", "TurnEnd", "broken", "--", "false").exit_code == 0
    result = run("hook", "test", "TurnEnd", "--payload", "-", input="{}")
    assert result.exit_code == 0
    assert result.stdout.startswith("broken: warned (exit 1, ")
    assert "agctl: warning: hook 'broken' failed on TurnEnd (exit 1)" in result.stderr


@pytest.mark.parametrize("bypass", ["flag", "env"])
def test_no_hooks_bypasses_every_hook(
    run: Run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bypass: str
) -> None:
    marker = tmp_path / "ran"
    touch = python_hook(tmp_path, "touch", f"open({str(marker)!r}, 'w')\n")
    assert run("hook", "add", "TurnEnd", "touch", "--", *touch).exit_code == 0
    if bypass == "env":
        monkeypatch.setenv("AGCTL_NO_HOOKS", "1")
        args = ["hook", "test", "TurnEnd", "--payload", "-", "--json"]
    else:
        args = ["--no-hooks", "hook", "test", "TurnEnd", "--payload", "-", "--json"]
    result = run(*args, input="{}")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["runs"] == []
    assert not marker.exists()


def write_project_file(project: Path, command: list[str]) -> Path:
    path = project / ".agctl" / "hooks.json"
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps([{"name": "proj", "event": "TurnEnd", "command": command}]))
    return path


def test_trust_pins_the_project_file_and_an_edit_drops_it(
    run: Run, tmp_path: Path, in_a_project: Path
) -> None:
    marker = tmp_path / "ran"
    touch = python_hook(tmp_path, "touch", f"open({str(marker)!r}, 'w')\n")
    path = write_project_file(in_a_project, touch)

    (row,) = json.loads(run("hook", "list", "--json").stdout)
    assert (row["name"], row["source"], row["trust"]) == ("proj", "project", "untrusted")
    ignored = run("hook", "test", "TurnEnd", "--payload", "-", input="{}")
    assert "is ignored: its hooks run once you trust it" in ignored.stderr
    assert not marker.exists()

    trusted = run("hook", "trust", "--json")
    assert trusted.exit_code == 0, trusted.output
    pin = json.loads(trusted.stdout)
    assert pin["project"] == str(in_a_project.resolve())
    assert pin["file"] == str(path.resolve()) and len(pin["sha256"]) == 64
    assert [(h["name"], h["event"], h["command"]) for h in pin["hooks"]] == [
        ("proj", "TurnEnd", touch)
    ]
    assert ConfigFile().load().trusted_hook_files == {str(path.resolve()): pin["sha256"]}
    assert run("hook", "trust").stdout.splitlines() == [
        f"trusted the hooks file of project {in_a_project.resolve()}",
        f"  file    {path.resolve()}",
        f"  sha256  {pin['sha256']}",
        f"its hooks run in {in_a_project.resolve()}, with your rights, until the file changes:",
        f"  proj (TurnEnd): {' '.join(touch)}",
    ]
    assert json.loads(run("hook", "list", "--json").stdout)[0]["trust"] == "trusted"
    assert run("hook", "test", "TurnEnd", "--payload", "-", input="{}").exit_code == 0
    assert marker.exists()

    marker.unlink()
    write_project_file(in_a_project, [*touch, "--edited"])
    assert json.loads(run("hook", "list", "--json").stdout)[0]["trust"] == "changed"
    edited = run("hook", "test", "TurnEnd", "--payload", "-", input="{}")
    assert "changed since 'agctl hook trust' pinned it" in edited.stderr
    assert not marker.exists()

    untrusted = run("hook", "untrust", "--json")
    assert json.loads(untrusted.stdout) == {
        "project": str(in_a_project.resolve()),
        "file": str(path.resolve()),
        "sha256": pin["sha256"],
    }
    assert ConfigFile().load().trusted_hook_files == {}


def test_an_invalid_project_file_is_refused_by_trust_and_warned_about_by_list(
    run: Run, in_a_project: Path
) -> None:
    (in_a_project / ".agctl").mkdir()
    (in_a_project / ".agctl" / "hooks.json").write_text('[{"name": "x"}]')
    refused = run("hook", "trust")
    assert refused.exit_code == 5 and "hook 0" in refused.stderr
    listed = run("hook", "list")
    assert listed.exit_code == 0
    assert "hooks.json is ignored: hook 0" in listed.stderr


# A command that would show reversed (a right-to-left override), hide a part (an isolate,
# a zero-width space) or act on the terminal (OSC: set the window title).
HIDDEN = ["sh", "\u202ekcehc.sh", "\u2066x\u2069\u200b", "\x1b]0;pwned\x07", "it's"]
HIDDEN_SHOWN = "sh $'\\u202ekcehc.sh' $'\\u2066x\\u2069\\u200b' $'\\x1b]0;pwned\\x07' 'it'\"'\"'s'"


def test_trust_and_list_show_hidden_and_control_characters_escaped(
    run: Run, in_a_project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "200")  # the table's last column is not cut
    path = write_project_file(in_a_project, HIDDEN)
    for args in (["hook", "trust"], ["hook", "list"]):
        shown = run(*args)
        assert shown.exit_code == 0, shown.output
        assert HIDDEN_SHOWN in shown.stdout
        assert not {"\u202e", "\u2066", "\u2069", "\u200b", "\x1b", "\x07"} & set(shown.stdout)
    pin = json.loads(run("hook", "trust", "--json").stdout)
    assert pin["hooks"][0]["command"] == HIDDEN  # JSON is exact
    assert pin["file"] == str(path.resolve())
