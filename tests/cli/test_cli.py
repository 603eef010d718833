"""CLI wiring, output and exit codes, in-process through Click's runner."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path

import click
import pytest
from click.testing import CliRunner, Result
from helpers import (
    EXIT_CONFLICT,
    EXIT_DATA,
    EXIT_ERROR,
    EXIT_NOT_FOUND,
    EXIT_USAGE,
    append_four_messages,
    as_json,
    data_dir_files,
    fails_with_message,
    new_first_session,
    ok,
)

import agctl
from agctl.cli import cli
from agctl.store import Store

Run = Callable[..., Result]


# ---- helpers ---------------------------------------------------------------------------


def slot_ids(data_dir: Path, session: str) -> list[str]:
    return Store(data_dir).slot_ids(session)


def current_session(data_dir: Path) -> str | None:
    return Store(data_dir).current_session_id()


def has_files(data_dir: Path, session: str) -> bool:
    """Whether anything of the session is on disk (a refused new one leaves nothing)."""
    return bool(data_dir_files(data_dir, session))


@pytest.fixture
def session(run: Run) -> str:
    """A current session 's1' with a system prompt and an empty default slot."""
    return new_first_session(run)


@pytest.fixture
def chat(run: Run, session: str) -> str:
    """The current session with four messages in its default slot."""
    append_four_messages(run)
    return session


def contents(run: Run, *args: str) -> list[str]:
    return [m["content"] for m in as_json(run("msg", "list", "--json", *args))]


# ---- the root group ------------------------------------------------------------------


def _walk(
    command: click.Command, ctx: click.Context, path: str
) -> Iterator[tuple[str, click.Command]]:
    """Every command under `command`, loading lazily registered groups as Click would."""
    yield path, command
    if isinstance(command, click.Group):
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            assert sub is not None, f"{path} {name} is listed but cannot be loaded"
            yield from _walk(sub, click.Context(sub, parent=ctx, info_name=name), f"{path} {name}")


def test_every_command_and_group_has_help_with_an_example() -> None:
    walked = list(_walk(cli, click.Context(cli, info_name="agctl"), "agctl"))
    names = {path for path, _ in walked}
    assert {"agctl session new", "agctl slot derive", "agctl msg import", "agctl memory rm"} <= (
        names
    )
    missing = [path for path, cmd in walked if "Example" not in (cmd.help or "")]
    assert missing == []
    # The examples render as a block of their own lines (a "\\b" typed as two characters
    # once ran them into one paragraph).
    runner = CliRunner()
    flowed = []
    for path, _cmd in walked:
        shown = runner.invoke(cli, [*path.split()[1:], "--help"], prog_name="agctl").stdout
        if not re.search(r"^  Examples?:$", shown, re.M) or "\\b" in shown:
            flowed.append(path)
    assert flowed == []


def test_version(run: Run) -> None:
    result = ok(run("--version"))
    assert result.stdout.strip() == f"agctl, version {agctl.__version__}"


def test_help_lists_the_command_groups_and_exit_codes(run: Run) -> None:
    out = ok(run("--help")).stdout
    for group in ("session", "slot", "msg", "memory"):
        assert re.search(rf"^\s+{group}\s", out, re.MULTILINE), group
    assert "Exit codes:" in out
    assert "AGCTL_DATA_DIR" in out


def test_the_help_lists_every_exit_code_the_errors_define(run: Run) -> None:
    from agctl.base import errors

    listed = ok(run("--help")).stdout.split("Exit codes:")[1]
    codes = {int(m) for m in re.findall(r"^\s+(\d+)  ", listed, re.MULTILINE)}
    defined = {v for k, v in vars(errors).items() if k.startswith("EXIT_")}
    assert defined - codes == set()
    assert {9, 10} <= codes


def test_unknown_command_is_a_usage_error(run: Run) -> None:
    result = run("sesion", "list")
    assert result.exit_code == EXIT_USAGE
    assert result.stdout == ""
    assert "No such command" in result.stderr


def test_missing_argument_is_a_usage_error(run: Run, session: str) -> None:
    result = run("msg", "get")
    assert result.exit_code == EXIT_USAGE
    assert "Missing argument" in result.stderr


def test_global_json_before_the_group(run: Run, session: str) -> None:
    rows = as_json(run("--json", "slot", "list"))
    assert [r["id"] for r in rows] == ["default"]


def test_per_command_json(run: Run, session: str) -> None:
    rows = as_json(run("slot", "list", "--json"))
    assert [r["id"] for r in rows] == ["default"]


def test_data_dir_option_overrides_the_environment(
    run: Run, tmp_path: Path, isolated_env: Path
) -> None:
    other = tmp_path / "elsewhere"
    ok(run("--data-dir", str(other), "session", "new", "x"))
    assert Store(other).session_ids() == ["x"]
    assert not data_dir_files(isolated_env)


# ---- session -------------------------------------------------------------------------


class TestSessionNew:
    def test_with_id_prints_the_id_and_selects_it(self, run: Run, isolated_env: Path) -> None:
        result = ok(run("session", "new", "review", "--system", "You review.", "--title", "PR"))
        assert result.stdout == "review\n"
        assert current_session(isolated_env) == "review"
        shown = as_json(run("session", "show", "--json"))
        assert shown["id"] == "review"
        assert shown["system_prompt"] == "You review."
        assert shown["title"] == "PR"
        assert shown["parent_id"] is None
        assert shown["current_slot"] == "default"
        assert [s["id"] for s in shown["slots"]] == ["default"]

    def test_without_id_generates_a_short_id(self, run: Run) -> None:
        sid = ok(run("session", "new")).stdout.strip()
        assert re.fullmatch(r"[0-9a-z]{10}", sid)
        assert as_json(run("session", "show", "--json"))["id"] == sid

    def test_json(self, run: Run) -> None:
        doc = as_json(run("session", "new", "j", "--system", "S", "--json"))
        assert doc["id"] == "j"
        assert doc["system_prompt"] == "S"
        assert doc["schema_version"] == "1.0"
        assert doc["current_slot"] == "default"
        assert doc["turn_count"] == 0
        assert doc["memory"] == {}

    def test_no_use_keeps_the_current_session(self, run: Run, session: str) -> None:
        assert ok(run("session", "new", "other", "--no-use")).stdout == "other\n"
        assert as_json(run("session", "show", "--json"))["id"] == "s1"

    def test_system_prompt_from_stdin(self, run: Run) -> None:
        ok(run("session", "new", "p", "--system", "-", input="From stdin.\n"))
        assert as_json(run("session", "show", "--json"))["system_prompt"] == "From stdin."

    def test_parent_by_prefix(self, run: Run, session: str) -> None:
        ok(run("session", "new", "child", "--parent", "s", "--no-use"))
        assert as_json(run("session", "show", "child", "--json"))["parent_id"] == "s1"
        assert as_json(run("session", "show", "--json"))["children"] == ["child"]

    def test_missing_parent_is_not_found(self, run: Run, isolated_env: Path) -> None:
        fails_with_message(
            run("session", "new", "child", "--parent", "nope"), EXIT_NOT_FOUND, "nope"
        )
        assert Store(isolated_env).session_ids() == []
        assert not has_files(isolated_env, "child")

    def test_existing_id_is_a_conflict(self, run: Run, session: str) -> None:
        fails_with_message(run("session", "new", "s1"), EXIT_CONFLICT, "already exists")

    @pytest.mark.parametrize("bad", ["a/b", "..", "x:y", "-x"])
    def test_invalid_id_is_a_usage_error(self, run: Run, bad: str, isolated_env: Path) -> None:
        fails_with_message(run("session", "new", "--", bad), EXIT_USAGE, "session id")
        assert current_session(isolated_env) is None


class TestSessionList:
    def test_empty(self, run: Run) -> None:
        result = ok(run("session", "list"))
        assert result.stdout == ""
        assert "no sessions" in result.stderr
        assert as_json(run("session", "list", "--json")) == []

    def test_table_marks_the_current_session(self, run: Run, session: str) -> None:
        ok(run("session", "new", "s2", "--parent", "s1", "--no-use"))
        lines = ok(run("session", "list")).stdout.splitlines()
        assert lines[0].split() == ["ID", "CREATED", "TURNS", "COST", "SLOT", "PARENT", "TITLE"]
        assert lines[1].startswith("*")
        assert lines[1].split()[1] == "s1"
        assert lines[1].split()[-1] == "First"
        assert not lines[2].startswith("*")
        assert lines[2].split()[0] == "s2"
        assert "s1" in lines[2].split()

    def test_json_rows(self, run: Run, session: str) -> None:
        ok(run("session", "new", "s2", "--parent", "s1", "--no-use"))
        rows = as_json(run("session", "list", "--json"))
        assert [r["id"] for r in rows] == ["s1", "s2"]
        first, second = rows
        assert first["current"] is True
        assert first["children"] == ["s2"]
        assert first["title"] == "First"
        assert first["current_slot"] == "default"
        assert first["turn_count"] == 0
        assert second["current"] is False
        assert second["parent_id"] == "s1"
        assert second["orphan"] is False
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT.*Z", second["created_at"])


class TestSessionShow:
    def test_human(self, run: Run, session: str) -> None:
        out = ok(run("session", "show")).stdout
        fields = dict(re.split(r"\s{2,}", line, maxsplit=1) for line in out.splitlines())
        assert fields["id"] == "s1"
        assert fields["title"] == "First"
        assert fields["system prompt"] == "Be terse."
        assert fields["current slot"] == "default"
        assert fields["slots"] == "default"
        assert fields["parent"] == "-"

    def test_by_id(self, run: Run, session: str) -> None:
        ok(run("session", "new", "s2", "--no-use"))
        assert as_json(run("session", "show", "s2", "--json"))["id"] == "s2"

    def test_missing(self, run: Run, session: str) -> None:
        fails_with_message(run("session", "show", "nope"), EXIT_NOT_FOUND, "nope")

    def test_no_session_selected(self, run: Run) -> None:
        fails_with_message(run("session", "show"), EXIT_USAGE, "no session selected")


class TestSessionUse:
    def test_switches_the_current_session(self, run: Run, session: str, isolated_env: Path) -> None:
        ok(run("session", "new", "s2", "--no-use"))
        result = ok(run("session", "use", "s2"))
        assert result.stdout == "current session: s2\n"
        assert current_session(isolated_env) == "s2"
        assert as_json(run("session", "use", "s1", "--json")) == {"current_session": "s1"}

    def test_missing_is_not_found(self, run: Run, session: str, isolated_env: Path) -> None:
        fails_with_message(run("session", "use", "nope"), EXIT_NOT_FOUND, "nope")
        assert current_session(isolated_env) == "s1"


class TestSessionRm:
    def test_destroys_the_session(self, run: Run, session: str, isolated_env: Path) -> None:
        ok(run("session", "new", "s2", "--no-use"))
        assert ok(run("session", "rm", "s2")).stdout == "destroyed s2\n"
        assert Store(isolated_env).session_ids() == ["s1"]
        assert not has_files(isolated_env, "s2")
        assert [r["id"] for r in as_json(run("session", "list", "--json"))] == ["s1"]

    def test_destroying_the_current_session_unselects_it(
        self, run: Run, session: str, isolated_env: Path
    ) -> None:
        assert as_json(run("session", "rm", "s1", "--json"))["destroyed"] == ["s1"]
        assert current_session(isolated_env) is None
        fails_with_message(run("msg", "list"), EXIT_USAGE, "no session selected")

    def test_refuses_a_session_with_children(
        self, run: Run, session: str, isolated_env: Path
    ) -> None:
        ok(run("session", "new", "kid", "--parent", "s1", "--no-use"))
        fails_with_message(run("session", "rm", "s1"), EXIT_CONFLICT, "has children", "kid")
        assert Store(isolated_env).session_ids() == ["kid", "s1"]

    def test_recursive_destroys_the_descendants(
        self, run: Run, session: str, isolated_env: Path
    ) -> None:
        ok(run("session", "new", "kid", "--parent", "s1", "--no-use"))
        ok(run("session", "new", "grandkid", "--parent", "kid", "--no-use"))
        ok(run("session", "new", "bystander", "--no-use"))
        destroyed = as_json(run("session", "rm", "--recursive", "s1", "--json"))["destroyed"]
        assert sorted(destroyed) == ["grandkid", "kid", "s1"]
        assert [r["id"] for r in as_json(run("session", "list", "--json"))] == ["bystander"]

    def test_missing_is_not_found(self, run: Run, session: str) -> None:
        fails_with_message(run("session", "rm", "nope"), EXIT_NOT_FOUND, "nope")

    def test_recursive_with_a_descendant_also_named(
        self, run: Run, session: str, isolated_env: Path
    ) -> None:
        ok(run("session", "new", "kid", "--parent", "s1", "--no-use"))
        destroyed = as_json(run("session", "rm", "--recursive", "s1", "kid", "--json"))
        assert sorted(destroyed["destroyed"]) == ["kid", "s1"]


# ---- choosing the session ----------------------------------------------------------


class TestSessionSelection:
    @pytest.fixture
    def two(self, run: Run) -> None:
        """Sessions 'alpha' (current) and 'beta', each with one message."""
        ok(run("session", "new", "alpha"))
        ok(run("msg", "append", "user", "in alpha"))
        ok(run("session", "new", "beta", "--no-use"))
        ok(run("-s", "beta", "msg", "append", "user", "in beta"))

    def test_the_current_session_is_the_default(self, run: Run, two: None) -> None:
        assert contents(run) == ["in alpha"]

    def test_global_option(self, run: Run, two: None) -> None:
        for argv in (["-s", "beta"], ["--session", "beta", "--json"]):
            rows = as_json(run(*argv, "msg", "list", "--json"))
            assert [m["content"] for m in rows] == ["in beta"]

    def test_per_command_option(self, run: Run, two: None) -> None:
        assert contents(run, "-s", "beta") == ["in beta"]

    def test_per_command_option_wins_over_the_global_one(self, run: Run, two: None) -> None:
        result = run("-s", "alpha", "msg", "list", "--json", "--session", "beta")
        assert [m["content"] for m in as_json(result)] == ["in beta"]

    def test_environment_variable(
        self, run: Run, two: None, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setenv("AGCTL_SESSION", "beta")
        assert contents(run) == ["in beta"]
        assert contents(run, "-s", "alpha") == ["in alpha"]

    def test_unique_prefix(self, run: Run, two: None) -> None:
        assert contents(run, "-s", "b") == ["in beta"]
        ok(run("session", "use", "be"))
        assert contents(run) == ["in beta"]

    def test_ambiguous_prefix_lists_the_candidates(self, run: Run, two: None) -> None:
        ok(run("session", "new", "beta2", "--no-use"))
        result = fails_with_message(run("-s", "bet", "msg", "list"), EXIT_USAGE, "ambiguous")
        assert "beta" in result.stderr
        assert "beta2" in result.stderr
        fails_with_message(run("session", "use", "bet"), EXIT_USAGE, "beta, beta2")

    def test_exact_id_wins_over_a_longer_match(self, run: Run, two: None) -> None:
        ok(run("session", "new", "beta2", "--no-use"))
        assert contents(run, "-s", "beta") == ["in beta"]

    def test_unknown_session_is_not_found(self, run: Run, two: None) -> None:
        fails_with_message(run("-s", "zzz", "msg", "list"), EXIT_NOT_FOUND, "zzz")

    def test_no_session_selected(self, run: Run) -> None:
        result = fails_with_message(run("msg", "list"), EXIT_USAGE, "no session selected")
        assert "--session" in result.stderr
        assert "AGCTL_SESSION" in result.stderr
        assert "session use" in result.stderr

    def test_environment_naming_a_destroyed_session_is_not_found(
        self, run: Run, two: None, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        ok(run("session", "rm", "beta"))
        monkeypatch.setenv("AGCTL_SESSION", "beta")
        fails_with_message(run("msg", "list"), EXIT_NOT_FOUND, "beta")


# ---- slot ----------------------------------------------------------------------------


class TestSlotNew:
    def test_creates_an_empty_slot(self, run: Run, session: str) -> None:
        assert ok(run("slot", "new", "notes")).stdout == "created slot notes\n"
        shown = as_json(run("slot", "show", "notes", "--json"))
        assert shown["id"] == "notes"
        assert shown["config"]["mode"] == "full"
        assert shown["config"]["source"]["kind"] == "new"
        assert shown["messages"] == []
        assert shown["current"] is False
        assert as_json(run("session", "show", "--json"))["current_slot"] == "default"

    def test_json_row(self, run: Run, session: str) -> None:
        row = as_json(run("slot", "new", "notes", "--json"))
        assert row["id"] == "notes"
        assert row["current"] is False
        assert row["mode"] == "full"
        assert row["source"] == "new"
        assert row["parent_id"] is None
        assert row["message_count"] == 0

    def test_use_switches_to_it(self, run: Run, session: str) -> None:
        row = as_json(run("slot", "new", "notes", "--use", "--json"))
        assert row["current"] is True
        assert as_json(run("session", "show", "--json"))["current_slot"] == "notes"
        ok(run("msg", "append", "user", "hi"))
        assert contents(run, "--slot", "notes") == ["hi"]
        assert contents(run, "--slot", "default") == []

    def test_focused_mode_with_recent(self, run: Run, session: str) -> None:
        row = as_json(
            run(
                "slot",
                "new",
                "recent",
                "--mode",
                "focused",
                "--recent",
                "3",
                "--stride",
                "1",
                "--json",
            )
        )
        assert row["mode"] == "focused"
        focused = as_json(run("slot", "show", "recent", "--json"))["config"]["focused"]
        assert focused["recent_messages"] == 3
        assert focused["keep_system"] is True

    def test_negative_recent_is_a_usage_error(self, run: Run, session: str) -> None:
        result = run("slot", "new", "x", "--mode", "focused", "--recent", "-1")
        assert result.exit_code == EXIT_USAGE
        assert result.stdout == ""

    def test_static_from_a_file(self, run: Run, session: str, tmp_path: Path) -> None:
        rules = tmp_path / "rules.json"
        rules.write_text(json.dumps([{"role": "system", "content": "Cite sources."}]))
        row = as_json(run("slot", "new", "rules", "--static", str(rules), "--use", "--json"))
        assert row["source"] == "static"
        assert row["message_count"] == 1
        shown = as_json(run("slot", "show", "rules", "--json"))
        assert shown["immutable"] == [{"role": "system", "content": "Cite sources."}]
        assert shown["messages"] == []
        view = as_json(run("slot", "show", "--view", "--json"))["messages"]
        assert [m["content"] for m in view] == ["Be terse.", "Cite sources."]

    def test_static_from_stdin_in_jsonl(self, run: Run, session: str) -> None:
        lines = '{"role": "system", "content": "one"}\n{"role": "user", "content": "two"}\n'
        ok(run("slot", "new", "st", "--static", "-", input=lines))
        shown = as_json(run("slot", "show", "st", "--json"))
        assert [m["content"] for m in shown["immutable"]] == ["one", "two"]

    def test_static_missing_file(self, run: Run, session: str, tmp_path: Path) -> None:
        fails_with_message(
            run("slot", "new", "st", "--static", str(tmp_path / "nope.json")), EXIT_NOT_FOUND
        )
        assert [r["id"] for r in as_json(run("slot", "list", "--json"))] == ["default"]

    def test_static_invalid_file_creates_nothing(
        self, run: Run, session: str, tmp_path: Path
    ) -> None:
        bad = tmp_path / "bad.json"
        bad.write_text('[{"role": "wizard", "content": "x"}]')
        fails_with_message(run("slot", "new", "st", "--static", str(bad)), EXIT_DATA, "message 0")
        assert [r["id"] for r in as_json(run("slot", "list", "--json"))] == ["default"]

    def test_existing_is_a_conflict(self, run: Run, session: str) -> None:
        fails_with_message(run("slot", "new", "default"), EXIT_CONFLICT, "already exists")

    def test_invalid_name_is_a_usage_error(self, run: Run, session: str) -> None:
        fails_with_message(run("slot", "new", "a/b"), EXIT_USAGE, "slot id")


class TestSlotDerive:
    def test_full_copy_leaves_the_parent_alone(self, run: Run, chat: str) -> None:
        text = ok(run("slot", "derive", "b", "--from", "default")).stdout
        assert text == "derived slot b from default (full)\n"
        ok(run("msg", "append", "user", "only in b", "--slot", "b"))
        assert contents(run, "--slot", "b") == ["u0", "a1", "u2", "a3", "only in b"]
        assert contents(run, "--slot", "default") == ["u0", "a1", "u2", "a3"]
        shown = as_json(run("slot", "show", "b", "--json"))
        assert shown["meta"]["parent_id"] == "default"
        assert shown["config"]["source"] == {
            "kind": "derived",
            "parent_id": "default",
            "strategy": "full",
            "root_id": "default",  # its line's first slot: their requests' prompt_cache_key
        }

    def test_focused_strategy_copies_the_recent_messages(self, run: Run, chat: str) -> None:
        row = as_json(
            run(
                "slot",
                "derive",
                "short",
                "--strategy",
                "focused",
                "--recent",
                "2",
                "--stride",
                "1",
                "--json",
            )
        )
        assert row["mode"] == "focused"
        assert row["parent_id"] == "default"
        assert row["message_count"] == 2
        assert row["current"] is False
        assert contents(run, "--slot", "short") == ["u2", "a3"]

    def test_use_switches_to_it(self, run: Run, chat: str) -> None:
        row = as_json(run("slot", "derive", "b", "--use", "--json"))
        assert row["current"] is True
        assert as_json(run("session", "show", "--json"))["current_slot"] == "b"

    def test_defaults_to_the_current_slot(self, run: Run, chat: str) -> None:
        ok(run("slot", "new", "other", "--use"))
        ok(run("msg", "append", "user", "x"))
        ok(run("slot", "derive", "b"))
        assert as_json(run("slot", "show", "b", "--json"))["meta"]["parent_id"] == "other"
        assert contents(run, "--slot", "b") == ["x"]

    def test_missing_parent(self, run: Run, chat: str) -> None:
        fails_with_message(run("slot", "derive", "b", "--from", "nope"), EXIT_NOT_FOUND, "nope")

    def test_existing_name(self, run: Run, chat: str) -> None:
        fails_with_message(run("slot", "derive", "default"), EXIT_CONFLICT, "already exists")


class TestSlotUse:
    def test_switches(self, run: Run, session: str) -> None:
        ok(run("slot", "new", "b"))
        assert ok(run("slot", "use", "b")).stdout == "current slot: b\n"
        assert as_json(run("slot", "use", "default", "--json")) == {
            "session": "s1",
            "current_slot": "default",
        }

    def test_missing(self, run: Run, session: str) -> None:
        fails_with_message(run("slot", "use", "nope"), EXIT_NOT_FOUND, "nope")
        assert as_json(run("session", "show", "--json"))["current_slot"] == "default"


class TestSlotList:
    def test_table(self, run: Run, chat: str) -> None:
        ok(run("slot", "derive", "b", "--use"))
        lines = ok(run("slot", "list")).stdout.splitlines()
        assert lines[0].split() == ["SLOT", "MODE", "SOURCE", "PARENT", "MSGS", "TOKENS"]
        assert lines[1].startswith("*")
        assert lines[1].split()[1:6] == ["b", "full", "derived", "default", "4"]
        assert not lines[2].startswith("*")
        assert lines[2].split()[:5] == ["default", "full", "new", "-", "4"]

    def test_json(self, run: Run, chat: str) -> None:
        ok(run("slot", "new", "b", "--mode", "readonly"))
        rows = as_json(run("slot", "list", "--json"))
        assert [(r["id"], r["current"], r["mode"]) for r in rows] == [
            ("b", False, "readonly"),
            ("default", True, "full"),
        ]
        assert rows[1]["message_count"] == 4
        assert rows[1]["total_tokens"] > 0
        assert set(rows[0]) >= {"source", "parent_id", "updated_at"}


class TestSlotShow:
    def test_human(self, run: Run, chat: str) -> None:
        out = ok(run("slot", "show")).stdout
        fields = dict(re.split(r"\s{2,}", line, maxsplit=1) for line in out.splitlines())
        assert fields["slot"] == "default (current)"
        assert fields["mode"] == "full"
        assert fields["messages"] == "4"
        assert fields["immutable"] == "0"

    def test_json(self, run: Run, chat: str) -> None:
        shown = as_json(run("slot", "show", "--json"))
        assert shown["id"] == "default"
        assert shown["current"] is True
        assert shown["schema_version"] == "1.0"
        assert [m["role"] for m in shown["messages"]] == ["user", "assistant"] * 2
        assert shown["meta"]["message_count"] == 4

    def test_missing(self, run: Run, session: str) -> None:
        fails_with_message(run("slot", "show", "nope"), EXIT_NOT_FOUND, "nope")


def focus_on_the_last(run: Run) -> None:
    """The current slot focused on its last message, under a summary, sliding (stride 1)."""
    ok(run("slot", "mode", "focused", "--recent", "1", "--stride", "1",
           "--summary", "Earlier: greetings."))  # fmt: skip


class TestSlotView:
    def test_full_view_starts_with_the_system_prompt(self, run: Run, chat: str) -> None:
        view = as_json(run("slot", "show", "--view", "--json"))
        assert view["session"] == "s1"
        assert view["slot"] == "default"
        assert view["mode"] == "full"
        assert view["messages"] == [
            {"role": "system", "content": "Be terse."},
            {"role": "user", "content": "u0"},
            {"role": "assistant", "content": "a1"},
            {"role": "user", "content": "u2"},
            {"role": "assistant", "content": "a3"},
        ]
        assert view["tokens"] > 0

    def test_focused_view_has_the_summary_and_recent_messages(self, run: Run, chat: str) -> None:
        focus_on_the_last(run)
        view = as_json(run("slot", "show", "--view", "--json"))
        assert view["mode"] == "focused"
        assert view["messages"] == [
            {"role": "system", "content": "Be terse."},
            {"role": "system", "content": "Earlier: greetings."},
            {"role": "assistant", "content": "a3"},
        ]

    def test_human_transcript(self, run: Run, chat: str) -> None:
        focus_on_the_last(run)
        out = ok(run("slot", "show", "--view")).stdout
        blocks = out.strip().split("\n\n")
        assert len(blocks) == 3
        assert blocks[0].startswith("[0] system")
        assert blocks[0].endswith("\nBe terse.")
        assert blocks[1].startswith("[1] system")
        assert blocks[1].endswith("\nEarlier: greetings.")
        assert blocks[2].startswith("[2] assistant")
        assert blocks[2].endswith("\na3")
        assert "tokens" in blocks[0].splitlines()[0]

    def test_empty_view(self, run: Run) -> None:
        ok(run("session", "new", "bare"))
        assert ok(run("slot", "show", "--view")).stdout == "(the view is empty)\n"
        assert as_json(run("slot", "show", "--view", "--json"))["messages"] == []


class TestSlotMode:
    def test_focused_then_full_keeps_every_message(self, run: Run, chat: str) -> None:
        text = ok(run("slot", "mode", "focused", "--recent", "2", "--stride", "1")).stdout
        assert text == "slot default is now focused\n"
        assert len(as_json(run("slot", "show", "--view", "--json"))["messages"]) == 3
        row = as_json(run("slot", "mode", "full", "--json"))
        assert row["mode"] == "full"
        assert row["message_count"] == 4
        assert contents(run) == ["u0", "a1", "u2", "a3"]

    def test_stride_drops_old_messages_k_at_a_time(self, run: Run, chat: str) -> None:
        """--recent 1 --stride 2 on 4 messages: 3 are droppable, 2 dropped (a stride)."""

        def view() -> list[str]:
            return [
                m["content"] for m in as_json(run("slot", "show", "--view", "--json"))["messages"]
            ]

        ok(run("slot", "mode", "focused", "--recent", "1", "--stride", "2"))
        assert view()[-2:] == ["u2", "a3"] and "u0" not in view() and "a1" not in view()
        assert as_json(run("slot", "show", "--json"))["config"]["focused"]["stride"] == 2
        ok(run("slot", "mode", "focused", "--stride", "4"))
        assert view()[-4:] == ["u0", "a1", "u2", "a3"]
        ok(run("slot", "mode", "focused", "--stride", "1"))
        assert view()[-1:] == ["a3"] and "u2" not in view()
        assert run("slot", "mode", "focused", "--stride", "0").exit_code == EXIT_USAGE

    def test_other_slot_by_name(self, run: Run, chat: str) -> None:
        ok(run("slot", "new", "b"))
        ok(run("slot", "mode", "readonly", "b"))
        modes = {r["id"]: r["mode"] for r in as_json(run("slot", "list", "--json"))}
        assert modes == {"b": "readonly", "default": "full"}

    def test_summary_is_shown_in_slot_show(self, run: Run, chat: str) -> None:
        ok(run("slot", "mode", "focused", "--recent", "3", "--stride", "1", "--summary", "S"))
        out = ok(run("slot", "show")).stdout
        assert "keep_system=True recent_messages=3 stride=1 summary=set" in out
        focused = as_json(run("slot", "show", "--json"))["config"]["focused"]
        assert focused["summary_override"] == "S"
        ok(run("slot", "mode", "focused", "--summary", ""))
        focused = as_json(run("slot", "show", "--json"))["config"]["focused"]
        assert focused["summary_override"] is None
        assert focused["recent_messages"] == 3

    def test_unknown_mode_is_a_usage_error(self, run: Run, chat: str) -> None:
        result = run("slot", "mode", "sideways")
        assert result.exit_code == EXIT_USAGE
        assert result.stdout == ""

    def test_missing_slot(self, run: Run, chat: str) -> None:
        fails_with_message(run("slot", "mode", "full", "nope"), EXIT_NOT_FOUND, "nope")

    def test_json_marks_the_current_slot(self, run: Run, chat: str) -> None:
        assert as_json(run("slot", "mode", "focused", "--json"))["current"] is True


class TestSlotRm:
    def test_deletes(self, run: Run, session: str, isolated_env: Path) -> None:
        ok(run("slot", "new", "b"))
        result = ok(run("slot", "rm", "b"))
        assert result.stdout == "deleted slot b; current slot: default\n"
        assert slot_ids(isolated_env, "s1") == ["default"]

    def test_deleting_the_current_slot_falls_back_to_default(self, run: Run, session: str) -> None:
        ok(run("slot", "new", "b", "--use"))
        assert as_json(run("slot", "rm", "b", "--json")) == {
            "deleted": "b",
            "current_slot": "default",
        }
        assert as_json(run("session", "show", "--json"))["current_slot"] == "default"

    def test_default_is_protected(self, run: Run, session: str, isolated_env: Path) -> None:
        ok(run("slot", "new", "b"))
        fails_with_message(run("slot", "rm", "default"), EXIT_CONFLICT, "default")
        assert slot_ids(isolated_env, "s1") == ["b", "default"]

    def test_the_only_slot_is_protected(self, run: Run, session: str) -> None:
        fails_with_message(run("slot", "rm", "default"), EXIT_CONFLICT)

    def test_missing(self, run: Run, session: str) -> None:
        fails_with_message(run("slot", "rm", "nope"), EXIT_NOT_FOUND, "nope")


# ---- msg -----------------------------------------------------------------------------


class TestMsgAppend:
    def test_from_argument(self, run: Run, session: str) -> None:
        result = ok(run("msg", "append", "user", "Hello"))
        assert result.stdout == "appended message 0 (user) in slot default\n"
        row = as_json(run("msg", "append", "assistant", "Hi", "--json"))
        assert row["index"] == 1
        assert row["role"] == "assistant"
        assert row["content"] == "Hi"
        assert row["created_at"].endswith("Z")
        assert contents(run) == ["Hello", "Hi"]

    def test_from_stdin_with_dash(self, run: Run, session: str) -> None:
        ok(run("msg", "append", "user", "-", input="line one\nline two\n"))
        assert contents(run) == ["line one\nline two"]

    def test_from_stdin_without_argument(self, run: Run, session: str) -> None:
        ok(run("msg", "append", "user", input="piped\n\n"))
        assert contents(run) == ["piped\n"]

    def test_invalid_utf8_on_stdin_writes_nothing(
        self, run: Run, session: str, isolated_env: Path
    ) -> None:
        before = data_dir_files(isolated_env, "s1")
        fails_with_message(
            run("msg", "append", "user", "-", input=b"caf\xe9\n"), EXIT_DATA, "UTF-8"
        )
        assert data_dir_files(isolated_env, "s1") == before

    @pytest.mark.parametrize("piped", ["", "\n"])
    def test_empty_stdin_is_refused(self, run: Run, session: str, piped: str) -> None:
        fails_with_message(
            run("msg", "append", "user", "-", input=piped), EXIT_USAGE, "standard input"
        )
        assert contents(run) == []

    def test_name_and_tool_call_id(self, run: Run, session: str) -> None:
        ok(run("msg", "append", "user", "hi", "--name", "ada"))
        ok(run("msg", "append", "tool", '{"ok": true}', "--tool-call-id", "call_1"))
        first, second = as_json(run("msg", "list", "--json"))
        assert first["name"] == "ada"
        assert second["role"] == "tool"
        assert second["tool_call_id"] == "call_1"

    def test_to_another_slot(self, run: Run, session: str) -> None:
        ok(run("slot", "new", "b"))
        assert ok(run("msg", "append", "user", "x", "--slot", "b")).stdout.endswith("slot b\n")
        assert contents(run, "--slot", "b") == ["x"]
        assert contents(run) == []

    def test_unknown_role(self, run: Run, session: str) -> None:
        result = run("msg", "append", "wizard", "x")
        assert result.exit_code == EXIT_USAGE
        assert result.stdout == ""

    def test_missing_slot(self, run: Run, session: str) -> None:
        fails_with_message(
            run("msg", "append", "user", "x", "--slot", "nope"), EXIT_NOT_FOUND, "nope"
        )

    def test_tool_message_without_call_id_is_a_usage_error_saying_why(
        self, run: Run, session: str
    ) -> None:
        result = fails_with_message(run("msg", "append", "tool", "x"), EXIT_USAGE, "tool_call_id")
        assert "errors.pydantic.dev" not in result.stderr
        assert contents(run) == []


class TestMsgList:
    def test_table(self, run: Run, chat: str) -> None:
        lines = ok(run("msg", "list")).stdout.splitlines()
        assert lines[0].split() == ["#", "ROLE", "TOKENS", "CONTENT"]
        assert [(ln.split()[0], ln.split()[1], ln.split()[-1]) for ln in lines[1:]] == [
            ("0", "user", "u0"),
            ("1", "assistant", "a1"),
            ("2", "user", "u2"),
            ("3", "assistant", "a3"),
        ]

    def test_long_content_is_cut_to_the_terminal_width(self, run: Run, session: str) -> None:
        ok(run("msg", "append", "user", "word " * 60))
        line = ok(run("msg", "list")).stdout.splitlines()[1]
        assert len(line) <= 80
        assert line.endswith("…")

    def test_json(self, run: Run, chat: str) -> None:
        rows = as_json(run("msg", "list", "--json"))
        assert [(r["index"], r["role"], r["content"]) for r in rows] == [
            (0, "user", "u0"),
            (1, "assistant", "a1"),
            (2, "user", "u2"),
            (3, "assistant", "a3"),
        ]

    def test_role_filter_keeps_the_real_indexes(self, run: Run, chat: str) -> None:
        rows = as_json(run("msg", "list", "--role", "assistant", "--json"))
        assert [(r["index"], r["content"]) for r in rows] == [(1, "a1"), (3, "a3")]
        rows = as_json(run("msg", "list", "--role", "assistant", "--role", "user", "--json"))
        assert len(rows) == 4

    def test_empty(self, run: Run, session: str) -> None:
        result = ok(run("msg", "list"))
        assert result.stdout == ""
        assert "no messages" in result.stderr
        assert as_json(run("msg", "list", "--json")) == []


class TestMsgFind:
    def test_indexes(self, run: Run, chat: str) -> None:
        assert ok(run("msg", "find", "assistant")).stdout == "1\n3\n"
        assert as_json(run("msg", "find", "user", "--json")) == [0, 2]
        assert as_json(run("msg", "find", "system", "--json")) == []
        assert ok(run("msg", "find", "system")).stdout == ""


class TestMsgGet:
    def test_by_index(self, run: Run, chat: str) -> None:
        assert ok(run("msg", "get", "0")).stdout == "u0\n"
        assert ok(run("msg", "get", "-1")).stdout == "a3\n"
        assert ok(run("msg", "get", "-4")).stdout == "u0\n"

    def test_json_gives_the_positive_index(self, run: Run, chat: str) -> None:
        row = as_json(run("msg", "get", "-1", "--json"))
        assert row["index"] == 3
        assert row["role"] == "assistant"
        assert row["content"] == "a3"

    @pytest.mark.parametrize("index", ["4", "-5"])
    def test_out_of_range(self, run: Run, chat: str, index: str) -> None:
        fails_with_message(run("msg", "get", index), EXIT_NOT_FOUND, "out of range")

    def test_not_a_number(self, run: Run, chat: str) -> None:
        result = run("msg", "get", "last")
        assert result.exit_code == EXIT_USAGE
        assert result.stdout == ""


class TestMsgInsert:
    def test_at_the_start(self, run: Run, chat: str) -> None:
        text = ok(run("msg", "insert", "0", "system", "Answer in French.")).stdout
        assert text == "inserted message 0 (system) in slot default\n"
        assert contents(run) == ["Answer in French.", "u0", "a1", "u2", "a3"]

    def test_at_the_end_and_before_the_last(self, run: Run, chat: str) -> None:
        ok(run("msg", "insert", "4", "user", "end"))
        row = as_json(run("msg", "insert", "-1", "user", "before end", "--json"))
        assert row["index"] == 4
        assert contents(run) == ["u0", "a1", "u2", "a3", "before end", "end"]

    def test_from_stdin(self, run: Run, chat: str) -> None:
        ok(run("msg", "insert", "1", "user", "-", input="piped\n"))
        assert contents(run)[1] == "piped"

    def test_out_of_range(self, run: Run, chat: str) -> None:
        fails_with_message(run("msg", "insert", "9", "user", "x"), EXIT_NOT_FOUND, "out of range")
        assert len(contents(run)) == 4


class TestMsgEdit:
    def test_from_argument(self, run: Run, chat: str) -> None:
        text = ok(run("msg", "edit", "-1", "A shorter answer.")).stdout
        assert text == "edited message 3 (assistant) in slot default\n"
        assert contents(run) == ["u0", "a1", "u2", "A shorter answer."]

    def test_from_stdin(self, run: Run, chat: str) -> None:
        row = as_json(run("msg", "edit", "0", "-", "--json", input="replaced\n"))
        assert row["index"] == 0
        assert row["content"] == "replaced"
        assert row["role"] == "user"
        assert contents(run)[0] == "replaced"

    def test_out_of_range(self, run: Run, chat: str) -> None:
        fails_with_message(run("msg", "edit", "7", "x"), EXIT_NOT_FOUND, "out of range")


class TestMsgRm:
    def test_removes(self, run: Run, chat: str) -> None:
        assert ok(run("msg", "rm", "1")).stdout == "removed message 1 (assistant) in slot default\n"
        row = as_json(run("msg", "rm", "-1", "--json"))
        assert (row["index"], row["content"]) == (2, "a3")
        assert contents(run) == ["u0", "u2"]

    def test_out_of_range(self, run: Run, chat: str) -> None:
        fails_with_message(run("msg", "rm", "-9"), EXIT_NOT_FOUND, "out of range")
        assert len(contents(run)) == 4


class TestMsgPop:
    def test_pops_the_last_and_prints_its_text(self, run: Run, chat: str) -> None:
        assert ok(run("msg", "pop")).stdout == "a3\n"
        assert contents(run) == ["u0", "a1", "u2"]

    def test_by_index_json(self, run: Run, chat: str) -> None:
        row = as_json(run("msg", "pop", "0", "--json"))
        assert (row["index"], row["role"], row["content"]) == (0, "user", "u0")
        assert contents(run) == ["a1", "u2", "a3"]

    def test_empty_slot(self, run: Run, session: str) -> None:
        fails_with_message(run("msg", "pop"), EXIT_NOT_FOUND, "out of range")


class TestMsgRetainAndClear:
    def test_retain(self, run: Run, chat: str) -> None:
        assert ok(run("msg", "retain", "user")).stdout == "dropped 2 messages\n"
        assert contents(run) == ["u0", "u2"]
        assert as_json(run("msg", "retain", "user", "assistant", "--json")) == {"dropped": 0}

    def test_clear(self, run: Run, chat: str) -> None:
        ok(run("slot", "derive", "b"))
        assert as_json(run("msg", "clear", "--json")) == {"dropped": 4}
        assert contents(run) == []
        assert ok(run("msg", "clear", "--slot", "b")).stdout == "dropped 4 messages\n"
        assert ok(run("msg", "clear", "--slot", "b")).stdout == "dropped 0 messages\n"


class TestMsgExport:
    def test_openai_to_stdout(self, run: Run, chat: str) -> None:
        result = ok(run("msg", "export"))
        assert json.loads(result.stdout) == [
            {"role": "user", "content": "u0"},
            {"role": "assistant", "content": "a1"},
            {"role": "user", "content": "u2"},
            {"role": "assistant", "content": "a3"},
        ]

    def test_jsonl_keeps_metadata(self, run: Run, chat: str) -> None:
        lines = ok(run("msg", "export", "--format", "jsonl")).stdout.splitlines()
        records = [json.loads(line) for line in lines]
        assert [r["content"] for r in records] == ["u0", "a1", "u2", "a3"]
        assert all("created_at" in r for r in records)

    def test_view(self, run: Run, chat: str) -> None:
        ok(run("slot", "mode", "focused", "--recent", "1", "--stride", "1"))
        exported = json.loads(ok(run("msg", "export", "--view")).stdout)
        assert exported == [
            {"role": "system", "content": "Be terse."},
            {"role": "assistant", "content": "a3"},
        ]

    def test_to_a_file(self, run: Run, chat: str, tmp_path: Path) -> None:
        target = tmp_path / "out" / "chat.jsonl"
        target.parent.mkdir()
        result = ok(run("msg", "export", "--format", "jsonl", "-o", str(target)))
        assert result.stdout == ""
        lines = target.read_text().splitlines()
        assert [json.loads(line)["content"] for line in lines] == ["u0", "a1", "u2", "a3"]

    def test_to_a_missing_directory(self, run: Run, chat: str, tmp_path: Path) -> None:
        target = tmp_path / "nope" / "chat.json"
        fails_with_message(run("msg", "export", "-o", str(target)), EXIT_ERROR, "cannot write")
        assert not target.parent.exists()

    def test_empty_slot(self, run: Run, session: str) -> None:
        assert json.loads(ok(run("msg", "export")).stdout) == []


IMPORTED = [
    {"role": "user", "content": "imported question"},
    {"role": "assistant", "content": "imported answer", "reasoning_content": "thought"},
]


class TestMsgImport:
    def test_from_a_file_appends(self, run: Run, chat: str, tmp_path: Path) -> None:
        source = tmp_path / "chat.json"
        source.write_text(json.dumps(IMPORTED))
        text = ok(run("msg", "import", str(source))).stdout
        assert text == "imported 2 messages into slot default (6 now)\n"
        exported = json.loads(ok(run("msg", "export")).stdout)
        assert exported[4:] == [
            {"role": "user", "content": "imported question"},
            {
                "role": "assistant",
                "content": "imported answer",
                "reasoning_content": "thought",
            },
        ]

    def test_from_stdin_with_replace(self, run: Run, chat: str) -> None:
        payload = as_json(
            run(
                "msg",
                "import",
                "-",
                "--replace",
                "--json",
                input=json.dumps({"messages": IMPORTED}),
            )
        )
        assert payload == {"slot": "default", "imported": 2, "message_count": 2}
        assert contents(run) == ["imported question", "imported answer"]

    def test_jsonl_round_trip_into_another_slot(self, run: Run, chat: str) -> None:
        ok(run("slot", "new", "copy"))
        exported = ok(run("msg", "export", "--format", "jsonl")).stdout
        ok(run("msg", "import", "-", "--slot", "copy", "--format", "jsonl", input=exported))
        original = as_json(run("msg", "list", "--json"))
        copied = as_json(run("msg", "list", "--json", "--slot", "copy"))
        assert copied == original

    def test_missing_file(self, run: Run, chat: str, tmp_path: Path) -> None:
        fails_with_message(
            run("msg", "import", str(tmp_path / "nope.json")), EXIT_NOT_FOUND, "no such file"
        )

    @pytest.mark.parametrize(
        ("data", "needle"),
        [
            ('[{"role": "user", "content": "fine"}, {"role": "wizard", "content": "x"}]', "1"),
            ('[{"role": "user", "content": "fine"}, "not an object"]', "not a JSON object"),
            ('{"role": "user", "content": "fine"}\n{not json}\n', "line 2"),
            ('[{"role": "tool", "content": "no call id"}]', "message 0"),
        ],
        ids=["bad-role", "not-an-object", "bad-jsonl-line", "tool-without-id"],
    )
    @pytest.mark.parametrize("replace", [False, True], ids=["append", "replace"])
    def test_invalid_input_writes_nothing(
        self,
        run: Run,
        chat: str,
        isolated_env: Path,
        tmp_path: Path,
        data: str,
        needle: str,
        replace: bool,
    ) -> None:
        source = tmp_path / "bad.json"
        source.write_text(data)
        before = data_dir_files(isolated_env, "s1")
        args = ["msg", "import", str(source), *(["--replace"] if replace else [])]
        fails_with_message(run(*args), EXIT_DATA, needle)
        assert data_dir_files(isolated_env, "s1") == before

    def test_invalid_stdin_writes_nothing(self, run: Run, chat: str, isolated_env: Path) -> None:
        before = data_dir_files(isolated_env, "s1")
        fails_with_message(
            run("msg", "import", "-", "--format", "openai", input="nope"), EXIT_DATA, "<stdin>"
        )
        assert data_dir_files(isolated_env, "s1") == before

    def test_empty_input_with_replace_is_refused(
        self, run: Run, chat: str, isolated_env: Path
    ) -> None:
        before = data_dir_files(isolated_env, "s1")
        fails_with_message(run("msg", "import", "-", "--replace", input=""), EXIT_DATA)
        assert data_dir_files(isolated_env, "s1") == before


# ---- readonly slots ----------------------------------------------------------------

READONLY_WRITES = {
    "append": ["msg", "append", "user", "x"],
    "append-stdin": ["msg", "append", "user", "-"],
    "insert": ["msg", "insert", "0", "user", "x"],
    "edit": ["msg", "edit", "0", "x"],
    "rm": ["msg", "rm", "0"],
    "pop": ["msg", "pop"],
    "retain": ["msg", "retain", "user"],
    "clear": ["msg", "clear"],
    "import": ["msg", "import", "{file}"],
    "import-replace": ["msg", "import", "{file}", "--replace"],
    "import-stdin": ["msg", "import", "-"],
}


class TestReadonly:
    @pytest.fixture
    def readonly(self, run: Run, chat: str, isolated_env: Path, tmp_path: Path) -> Path:
        """The current slot made readonly; returns the data dir."""
        ok(run("slot", "mode", "readonly"))
        (tmp_path / "in.json").write_text('[{"role": "user", "content": "new"}]')
        return isolated_env

    @pytest.mark.parametrize("args", READONLY_WRITES.values(), ids=READONLY_WRITES.keys())
    def test_every_write_is_refused_and_nothing_changes(
        self, run: Run, readonly: Path, tmp_path: Path, args: list[str]
    ) -> None:
        before = data_dir_files(readonly, "s1")
        argv = [a.replace("{file}", str(tmp_path / "in.json")) for a in args]
        stdin = '[{"role": "user", "content": "new"}]' if argv[-1] == "-" else None
        fails_with_message(run(*argv, input=stdin), EXIT_CONFLICT, "readonly", "slot mode full")
        assert data_dir_files(readonly, "s1") == before

    def test_refused_through_slot_option_too(self, run: Run, chat: str, isolated_env: Path) -> None:
        ok(run("slot", "new", "ref", "--mode", "readonly"))
        before = data_dir_files(isolated_env, "s1")
        fails_with_message(
            run("msg", "append", "user", "x", "--slot", "ref"), EXIT_CONFLICT, "'ref'"
        )
        assert data_dir_files(isolated_env, "s1") == before

    def test_reading_and_deriving_still_work(self, run: Run, readonly: Path) -> None:
        assert contents(run) == ["u0", "a1", "u2", "a3"]
        assert ok(run("msg", "get", "-1")).stdout == "a3\n"
        assert len(json.loads(ok(run("msg", "export")).stdout)) == 4
        row = as_json(run("slot", "derive", "writable", "--json"))
        assert row["mode"] == "full"
        ok(run("msg", "append", "user", "x", "--slot", "writable"))

    def test_mode_full_makes_it_writable_again(self, run: Run, readonly: Path) -> None:
        ok(run("slot", "mode", "full"))
        ok(run("msg", "append", "user", "x"))
        assert contents(run)[-1] == "x"

    @pytest.mark.parametrize(
        "args",
        [["msg", "edit", "9", "x"], ["msg", "rm", "9"], ["msg", "pop", "9"]],
        ids=["edit", "rm", "pop"],
    )
    def test_readonly_wins_over_a_bad_index(
        self, run: Run, readonly: Path, args: list[str]
    ) -> None:
        fails_with_message(run(*args), EXIT_CONFLICT, "readonly")


# ---- memory --------------------------------------------------------------------------


class TestMemory:
    def test_set_get_list_rm(self, run: Run, session: str) -> None:
        assert ok(run("memory", "set", "user.name", "Ada")).stdout == "user.name set\n"
        assert ok(run("memory", "get", "user.name")).stdout == "Ada\n"
        ok(run("memory", "set", "project", "agctl"))
        lines = ok(run("memory", "list")).stdout.splitlines()
        assert [line.split() for line in lines] == [
            ["KEY", "VALUE"],
            ["project", "agctl"],
            ["user.name", "Ada"],
        ]
        assert ok(run("memory", "rm", "project")).stdout == "project removed\n"
        assert as_json(run("memory", "list", "--json")) == {"user.name": "Ada"}

    def test_json(self, run: Run, session: str) -> None:
        assert as_json(run("memory", "set", "k", "v", "--json")) == {"key": "k", "value": "v"}
        assert as_json(run("memory", "get", "k", "--json")) == {"key": "k", "value": "v"}
        assert as_json(run("memory", "rm", "k", "--json")) == {"key": "k", "value": "v"}
        assert as_json(run("memory", "list", "--json")) == {}

    def test_value_from_stdin(self, run: Run, session: str) -> None:
        ok(run("memory", "set", "notes", "-", input="multi\nline\n"))
        assert as_json(run("memory", "get", "notes", "--json"))["value"] == "multi\nline"

    def test_kept_per_session(self, run: Run, session: str) -> None:
        ok(run("memory", "set", "k", "one"))
        ok(run("session", "new", "s2", "--no-use"))
        ok(run("memory", "set", "k", "two", "-s", "s2"))
        assert ok(run("memory", "get", "k")).stdout == "one\n"
        assert ok(run("-s", "s2", "memory", "get", "k")).stdout == "two\n"

    def test_empty_list(self, run: Run, session: str) -> None:
        result = ok(run("memory", "list"))
        assert result.stdout == ""
        assert "memory is empty" in result.stderr

    def test_missing_key(self, run: Run, session: str) -> None:
        fails_with_message(run("memory", "get", "nope"), EXIT_NOT_FOUND, "nope")
        fails_with_message(run("memory", "rm", "nope"), EXIT_NOT_FOUND, "nope")


# ---- broken data on disk -----------------------------------------------------------
