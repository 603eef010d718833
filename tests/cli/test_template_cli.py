"""`agctl template` and `-t NAME -p KEY VALUE` on `turn send` and `session new`: every
command with and without --json, its exit codes, an edit through a real editor process,
and what a templated turn sends."""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import Result
from helpers import as_json, fails, ok

from agctl.store import Store

Run = Callable[..., Result]


def templates_dir(isolated_env: Path) -> Path:
    return isolated_env.parent / "xdg-config" / "agctl" / "templates"


@pytest.fixture
def review(run: Run) -> None:
    ok(run("template", "add", "review", "--system", "You review {{ lang }} code.", "--prompt",
           "Review this:", "--default", "lang", "Python", "-o", "seed", "7"))  # fmt: skip


def test_add_list_show_rm_as_json_and_for_people(
    run: Run, review: None, isolated_env: Path
) -> None:
    path = templates_dir(isolated_env) / "review.yaml"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    added = as_json(run("--json", "template", "add", "haiku", "--prompt", "A haiku on {{ input }}",
                        "--model", "m-1", "--tool", "wc", "--slot-mode", "focused"))  # fmt: skip
    assert added == {
        "name": "haiku", "prompt": "A haiku on {{ input }}", "model": "m-1", "tools": ["wc"],
        "slot_mode": "focused", "parameters": ["input"],
        "path": str(templates_dir(isolated_env) / "haiku.yaml"),
    }  # fmt: skip
    listed = as_json(run("template", "list", "--json"))
    assert [(row["name"], row["parameters"]) for row in listed] == [
        ("haiku", ["input"]),
        ("review", ["lang"]),
    ]
    table = ok(run("template", "list")).stdout
    assert table.splitlines()[0].split() == ["TEMPLATE", "MODEL", "PARAMETERS"]
    assert "haiku     m-1    input" in table
    assert ok(run("template", "show", "review")).stdout == path.read_text()
    shown = as_json(run("template", "show", "review", "--json"))
    assert shown["options"] == {"seed": 7} and shown["defaults"] == {"lang": "Python"}
    assert as_json(run("template", "rm", "review", "--json")) == {"removed": "review"}
    assert ok(run("template", "rm", "haiku")).stdout == "removed template haiku\n"
    assert ok(run("template", "list")).stderr.startswith("no templates")
    assert as_json(run("template", "list", "--json")) == []


def test_exit_codes_of_the_template_commands(run: Run, review: None) -> None:
    fails(run("template", "add", "review", "--prompt", "x"), 4, "exists", "--replace")
    ok(run("template", "add", "review", "--prompt", "x", "--replace"))
    for command in ("show", "rm", "edit"):
        fails(run("template", command, "nope"), 3, "no template named 'nope'", "review")
    fails(run("template", "add", "../x", "--prompt", "x"), 2, "must not contain '..'")
    fails(run("template", "show", "a/b"), 2, "not valid")
    fails(run("template", "add", "e"), 2, "an empty template")
    fails(run("template", "add", "d", "--prompt", "x", "--default", "y", "1"), 2, "default")
    fails(run("template", "add", "o", "--prompt", "x", "-o", "max_tokens", "5"), 2,
          "use --max-tokens")  # fmt: skip


EDITOR = """import pathlib, sys
path = pathlib.Path(sys.argv[-1])
pathlib.Path(sys.argv[1]).write_text(path.read_text())  # what the editor was shown
path.write_text(pathlib.Path(sys.argv[2]).read_text())
"""


def editor(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, new_text: str) -> Path:
    """$EDITOR, a real program that writes `new_text` over the file it is given; the
    path where it keeps what it was shown."""
    program, replacement, seen = tmp_path / "ed.py", tmp_path / "new.yaml", tmp_path / "seen"
    program.write_text(EDITOR)
    replacement.write_text(new_text)
    monkeypatch.delenv("VISUAL", raising=False)
    monkeypatch.setenv("EDITOR", f"{sys.executable} {program} {seen} {replacement}")
    return seen


def test_edit_saves_a_valid_edit_as_written(
    run: Run, review: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, isolated_env: Path
) -> None:
    path = templates_dir(isolated_env) / "review.yaml"
    before = path.read_text()
    seen = editor(tmp_path, monkeypatch, "# terse\nprompt: Review {{ what }}\n")
    edited = as_json(run("--json", "template", "edit", "review"))
    assert seen.read_text() == before
    assert edited["parameters"] == ["what"]
    assert path.read_text() == "# terse\nprompt: Review {{ what }}\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_an_invalid_edit_leaves_the_file_and_says_why(
    run: Run, review: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, isolated_env: Path
) -> None:
    path = templates_dir(isolated_env) / "review.yaml"
    before = path.read_bytes()
    editor(tmp_path, monkeypatch, "prompt: [unclosed\n")
    fails(run("template", "edit", "review"), 5, "not YAML", "'review' is unchanged",
          "review.yaml.rejected")  # fmt: skip
    assert path.read_bytes() == before
    editor(tmp_path, monkeypatch, "prompt: x\ndefaults: {nope: 1}\n")
    fails(run("template", "edit", "review"), 5, "a default for 'nope'")
    assert path.read_bytes() == before
    monkeypatch.setenv("EDITOR", f"{sys.executable} -c 'raise SystemExit(3)'")
    fails(run("template", "edit", "review"), 2, "exited with 3")
    monkeypatch.setenv("VISUAL", str(tmp_path / "no-such-editor"))
    fails(run("template", "edit", "review"), 2, "cannot run the editor")
    assert path.read_bytes() == before
    assert sorted(os.listdir(path.parent)) == ["review.yaml", "review.yaml.rejected"]


def test_a_templated_turn_sends_the_filled_prompt_with_its_system_and_options(
    run: Run, review: None, store: Store
) -> None:
    ok(run("session", "new", "s"))
    shown = as_json(run("turn", "send", "-t", "review", "-p", "lang", "Rust", "def f(): pass",
                        "--dry-run", "--provider", "openai"))  # fmt: skip
    assert shown["request"]["messages"] == [
        {"role": "system", "content": "You review Rust code."},
        {"role": "user", "content": "Review this:\n\ndef f(): pass"},
    ]
    assert shown["request"]["seed"] == 7
    # The command line wins: --system, and -o of the same key.
    mine = as_json(run("turn", "send", "-t", "review", "x", "--system", "Mine.", "-o", "seed",
                       "8", "--dry-run", "--provider", "openai"))  # fmt: skip
    assert mine["request"]["messages"][0]["content"] == "Mine." and mine["request"]["seed"] == 8
    ok(run("turn", "send", "-t", "review", "code"))
    assert store.load_slot("s", None).messages[0].content == "Review this:\n\ncode"


def test_missing_parameters_are_exit_2_naming_all_and_nothing_is_sent(
    run: Run, store: Store
) -> None:
    ok(run("template", "add", "t", "--system", "{{ a }}", "--prompt", "{{ b }} {{ input }}"))
    ok(run("session", "new", "s"))
    result = fails(run("turn", "send", "-t", "t"), 2, "template 't' needs a value for a, b, input")
    assert "-p NAME VALUE" in result.stderr
    fails(run("turn", "send", "-t", "t", "-p", "zz", "1", "x"), 2, "no parameter 'zz'")
    assert store.load_slot("s", None).messages == []


def test_a_bad_parameter_is_refused_before_a_first_turn_starts_a_session(
    run: Run, store: Store
) -> None:
    ok(run("template", "add", "p", "--prompt", "{{ a }}"))
    fails(run("turn", "send", "-t", "p", "hello"), 2, "template 'p' needs a value for a")
    fails(run("turn", "send", "-t", "p", "-p", "nope", "1", "x"), 2, "no parameter 'nope'")
    assert store.list_sessions() == [] and store.current_session_id() is None
    ok(run("turn", "send", "-t", "p", "-p", "a", "A", "x"))
    assert len(store.list_sessions()) == 1


def test_the_system_prompts_parameters_only_where_the_template_gives_the_system_prompt(
    run: Run, store: Store
) -> None:
    ok(run("template", "add", "t2", "--system", "Sys {{ lang }}", "--prompt", "About {{ topic }}"))
    ok(run("session", "new", "s", "-t", "t2", "-p", "lang", "Go", "-p", "topic", "cats"))
    assert store.load_session("s").system_prompt == "Sys Go"

    def sent(*args: str) -> list[dict[str, str]]:
        shown = as_json(run("turn", "send", "-t", "t2", "--dry-run", "--provider", "openai", *args))
        messages: list[dict[str, str]] = shown["request"]["messages"]
        return messages

    # --system wins, so lang is not needed; nor on the session holding the filled system
    # prompt, which the template's does not replace turn after turn.
    assert sent("-p", "topic", "dogs", "--system", "override")[0]["content"] == "override"
    assert sent("-p", "topic", "dogs")[:2] == [
        {"role": "system", "content": "Sys Go"},
        {"role": "user", "content": "About dogs"},
    ]
    assert sent("-p", "topic", "dogs", "-p", "lang", "Rust")[0]["content"] == "Sys Go"
    # A session without a system prompt of its own takes the template's, which needs lang.
    ok(run("session", "new", "bare"))
    fails(run("turn", "send", "-t", "t2", "-p", "topic", "dogs"), 2, "needs a value for lang")
    assert sent("-p", "topic", "dogs", "-p", "lang", "C")[0]["content"] == "Sys C"


def test_a_system_prompt_with_input_is_refused(run: Run, isolated_env: Path) -> None:
    fails(run("template", "add", "si", "--system", "Answer about {{ input }}"), 2,
          "system prompt uses {{ input }}")  # fmt: skip
    path = templates_dir(isolated_env) / "si.yaml"
    assert not path.exists()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("system: Answer about {{ input }}\n")
    fails(run("turn", "send", "-t", "si", "cats"), 5, "si.yaml", "uses {{ input }}")


def test_a_billion_laughs_file_is_refused_at_once_naming_it(
    run: Run, review: None, isolated_env: Path
) -> None:
    laughs = "".join(
        f"    {b}: &{b} [{','.join(['*' + a] * 10)}]\n"
        for a, b in zip("abcdefgh", "bcdefghi", strict=True)
    )
    text = "prompt: hi\noptions:\n  metadata:\n    a: &a [x,x,x,x,x,x,x,x,x,x]\n" + laughs
    assert len(text) < 500  # ~10**9 nodes once the aliases are followed
    (templates_dir(isolated_env) / "bomb.yaml").write_text(text)
    listed = ok(run("template", "list", "--json"))
    assert [row["name"] for row in as_json(listed)] == ["review"]
    assert "bomb.yaml: a YAML anchor or alias" in listed.stderr
    fails(run("template", "show", "bomb"), 5, "bomb.yaml: a YAML anchor or alias")
    fails(run("turn", "send", "-t", "bomb", "hi"), 5, "bomb.yaml: a YAML anchor or alias")


def test_an_editor_that_removes_the_file_leaves_the_template(
    run: Run, review: None, isolated_env: Path
) -> None:
    path = templates_dir(isolated_env) / "review.yaml"
    before = path.read_bytes()
    fails(run("template", "edit", "review", "--editor", "rm"), 5, "the edit not found",
          "template 'review' is unchanged")  # fmt: skip
    assert path.read_bytes() == before
    assert os.listdir(path.parent) == ["review.yaml"]


def test_t_and_p_misuse_and_an_unknown_template(run: Run, review: None, store: Store) -> None:
    fails(run("turn", "send", "hi", "-p", "a", "b"), 2, "name one with -t")
    fails(run("turn", "send", "-t", "nope", "hi"), 3, "no template named 'nope'")
    assert store.list_sessions() == []  # refused before a session was started
    ok(run("session", "new", "s"))
    fails(run("turn", "send", "--resume-draft", "-t", "review"), 2, "no -t")


def test_session_new_takes_the_templates_system_model_and_slot_mode(run: Run, store: Store) -> None:
    ok(run("template", "add", "tutor", "--system", "You teach {{ subject }}.", "--prompt",
           "{{ input }}", "--model", "m-9", "--slot-mode", "focused"))  # fmt: skip
    created = as_json(run("--json", "session", "new", "s", "-t", "tutor", "-p", "subject", "Go"))
    assert created["system_prompt"] == "You teach Go." and created["model"] == "m-9"
    assert store.load_slot("s", None).config.mode == "focused"
    own = as_json(run("--json", "session", "new", "o", "-t", "tutor", "-p", "subject", "Go",
                      "--system", "Own.", "--model", "m-1"))  # fmt: skip
    assert own["system_prompt"] == "Own." and own["model"] == "m-1"
    ok(run("session", "new", "o", "--replace", "-t", "tutor", "-p", "subject", "C"))
    assert store.load_slot("o", None).config.mode == "focused"
    fails(run("session", "new", "x", "-t", "tutor"), 2, "needs a value for subject")
    fails(run("session", "new", "y", "-t", "nope"), 3, "no template named")
    assert sorted(info.session.id for info in store.list_sessions()) == ["o", "s"]


def test_a_damaged_template_is_left_out_of_the_list_with_a_warning(
    run: Run, review: None, isolated_env: Path
) -> None:
    (templates_dir(isolated_env) / "broken.yaml").write_text("prompt: [")
    result = ok(run("template", "list", "--json"))
    assert [row["name"] for row in as_json(result)] == ["review"]
    assert "broken.yaml: not YAML" in result.stderr
    fails(run("template", "show", "broken"), 5, "broken.yaml: not YAML")
    fails(run("turn", "send", "-t", "broken", "hi"), 5, "broken.yaml: not YAML")
