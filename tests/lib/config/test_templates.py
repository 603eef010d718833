"""Templates (agctl.config.templates): the YAML they are kept as, plain one-pass
parameter substitution, every missing parameter named at once, the PROMPT as `input`,
hostile names and values, and a command line's choices over the template's."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path

import pytest

from agctl.base.errors import (
    Conflict,
    CorruptDocument,
    InvalidId,
    InvalidInput,
    NotFound,
    UsageError,
)
from agctl.base.fsio import read_bytes
from agctl.config.templates import (
    Template,
    Templates,
    parameters_of,
    session_settings,
    substituted,
    template_from_text,
    templated_turn,
)
from agctl.turn.setup import ModelChoice, ToolsChoice


def template(**fields: object) -> Template:
    return Template(fields, UsageError, "t")


def test_parameters_are_named_once_in_order_of_first_use() -> None:
    assert parameters_of("{{ b }} {{a}} {{  b  }}", "{{ c_1 }} {{ a }}") == ["b", "a", "c_1"]
    # Not parameters: a name that is not an identifier, single braces, an empty pair.
    assert parameters_of("{{ 1x }} {{ a-b }} { a } {{}} {{ a b }}", None) == []


def test_substitution_is_one_pass_and_never_reads_a_value_again() -> None:
    values = {"a": "{{ b }}", "b": "B"}
    assert substituted("{{ a }}/{{ b }}", values) == "{{ b }}/B"


def test_hostile_values_are_text_and_nothing_is_evaluated(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SECRET_THING", "s3cret")
    values = {
        "a": "$SECRET_THING ${SECRET_THING} {0.__class__} %(x)s \\1 \\g<0> $(id) `id`",
        "b": f"@{tmp_path}/file",
    }
    (tmp_path / "file").write_text("contents")
    filled = template(prompt="{{ a }}|{{ b }}").fill(values)
    assert filled.prompt == f"{values['a']}|{values['b']}"


def test_every_missing_parameter_is_named_at_once_and_a_default_fills_one() -> None:
    tpl = template(system="You are {{ role }}.", prompt="{{ a }} {{ b }}", defaults={"b": "B"})
    with pytest.raises(UsageError, match=r"template 't' needs a value for role, a$"):
        tpl.fill({})
    assert tpl.fill({"role": "R", "a": "A"}).prompt == "A B"
    assert tpl.fill({"role": "R", "a": "A", "b": "b!"}) == ("A b!", "You are R.")


def test_the_system_prompts_parameters_are_needed_only_where_it_is_used() -> None:
    tpl = template(system="Sys {{ lang }}", prompt="About {{ topic }}")
    # A session takes its system prompt: a value for the prompt's parameter is no error.
    assert tpl.system_values({"lang": "Go", "topic": "cats"})["lang"] == "Go"
    settings = session_settings(tpl, {"lang": "Go", "topic": "cats"}, None, None)
    assert settings["system_prompt"] == "Sys Go"
    assert session_settings(tpl, {}, "own", None)["system_prompt"] == "own"
    with pytest.raises(UsageError, match="needs a value for lang"):
        session_settings(tpl, {"topic": "cats"}, None, None)
    with pytest.raises(UsageError, match=r"no parameter 'x' \(its parameters: lang, topic\)"):
        session_settings(tpl, {"x": "1"}, "own", None)
    # A turn whose system prompt is --system, or the session's own, needs no lang.
    assert tpl.fill({"topic": "dogs"}, system=False) == ("About dogs", None)
    for fields, own in (({"system": "override"}, None), ({"system": None}, "Sys Go")):
        turn = templated_turn(tpl, {"topic": "dogs"}, "", ModelChoice(), ToolsChoice(), fields, own)
        assert turn.prompt == "About dogs" and turn.fields["system"] == fields["system"]
    # The template's own system prompt, where the session has none, needs it.
    with pytest.raises(UsageError, match="needs a value for lang"):
        templated_turn(tpl, {"topic": "dogs"}, "", ModelChoice(), ToolsChoice(), {}, None)


def test_a_parameter_the_template_lacks_is_refused_naming_its_own() -> None:
    with pytest.raises(UsageError, match=r"no parameter 'colour' \(its parameters: a\)"):
        template(prompt="{{ a }}").fill({"a": "1", "colour": "red"})


def test_the_prompt_fills_input_or_follows_the_templates_prompt() -> None:
    assert template(prompt="Translate: {{ input }}!").fill({}, "hi").prompt == "Translate: hi!"
    assert template(prompt="Summarise.").fill({}, "text").prompt == "Summarise.\n\ntext"
    assert template(system="S").fill({}, "text") == ("text", "S")
    assert template(prompt="Summarise.").fill({}).prompt == "Summarise."
    with pytest.raises(UsageError, match="needs a value for input"):
        template(prompt="{{ input }}").fill({})
    assert template(prompt="{{ input }}").fill({"input": "by -p"}).prompt == "by -p"
    with pytest.raises(UsageError, match="not both"):
        template(prompt="{{ input }}").fill({"input": "x"}, "y")


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({}, "an empty template"),
        ({"prompt": "x", "defaults": {"q": "1"}}, "a default for 'q'"),
        ({"prompt": 1}, "prompt: Input should be a valid string"),
        ({"prompt": "x", "options": {"temperature": 1}}, "use --temperature"),
        ({"prompt": "x", "options": {"top_q": 1}}, "no wire accepts a model option 'top_q'"),
        ({"prompt": "x", "tools": ["../etc"]}, "must not contain '..'"),
        ({"prompt": "x", "slot_mode": "readonly"}, "slot_mode"),
        ({"prompt": "x", "script": "import os"}, "Extra inputs are not permitted"),
        ({"model": ""}, "model"),
        ({"system": "Answer about {{input}}", "prompt": "x"}, "system prompt uses {{ input }}"),
    ],
)
def test_an_invalid_template_is_refused_saying_why(fields: dict[str, object], says: str) -> None:
    with pytest.raises(UsageError, match="invalid template") as caught:
        Template(fields, UsageError)
    assert says in str(caught.value)


def test_a_file_is_readable_yaml_that_reads_back_the_same() -> None:
    tpl = template(
        system="You review {{ lang }}.",
        prompt="Review:\n{{ input }}\nBe brief.",
        model="gpt-4o",
        options={"top_p": 0.5, "seed": 1},
        tools=["grep", "grep", "wc"],
        defaults={"lang": 5},
        slot_mode="focused",
    )
    text = tpl.text()
    assert text == (
        "system: You review {{ lang }}.\n"
        "prompt: |-\n  Review:\n  {{ input }}\n  Be brief.\n"
        "model: gpt-4o\n"
        "options:\n  seed: 1\n  top_p: 0.5\n"
        "tools:\n- grep\n- wc\n"
        "defaults:\n  lang: '5'\n"
        "slot_mode: focused\n"
    )
    assert template_from_text(text, "f").to_dict() == tpl.to_dict()
    # JSON is YAML: a JSON file reads the same.
    assert template_from_text('{"prompt": "hi {{ a }}"}', "f").parameters == ["a"]


@pytest.mark.parametrize(
    "text",
    [
        "prompt: [unclosed",
        "- a list",
        "prompt: !!python/object/apply:os.system ['echo pwned']",
        "",
        "prompt: x\noptions: {seed: 1180591620717411303424}",
        "prompt: x\noptions: {top_p: .inf}",
        "prompt: x\noptions: {metadata: {when: 2001-12-14}}",
    ],
)
def test_a_file_that_is_not_a_template_is_invalid_input_and_runs_nothing(text: str) -> None:
    with pytest.raises(InvalidInput, match=r"^here: "):
        template_from_text(text, "here")


def test_the_store_writes_0600_files_in_a_0700_dir_and_lists_valid_names(tmp_path: Path) -> None:
    templates = Templates(tmp_path / "templates")
    assert templates.names() == []
    templates.add("b", template(prompt="B"))
    templates.add("a.v2", template(prompt="A"))
    (tmp_path / "templates" / ".hidden.yaml").write_text("prompt: x")
    (tmp_path / "templates" / "notes.txt").write_text("x")
    assert templates.names() == ["a.v2", "b"]
    assert stat.S_IMODE(os.stat(tmp_path / "templates").st_mode) == 0o700
    assert stat.S_IMODE(os.stat(templates.path("b")).st_mode) == 0o600
    with pytest.raises(Conflict, match="exists"):
        templates.add("b", template(prompt="B2"))
    templates.add("b", template(prompt="B2"), replace=True)
    assert templates.load("b").prompt == "B2"
    templates.remove("b")
    with pytest.raises(NotFound, match=r"no template named 'b' \(templates: a.v2\)"):
        templates.load("b")


@pytest.mark.parametrize("name", ["../evil", "a/b", ".hidden", "-x", "", "x" * 200, "a\x00b"])
def test_a_name_with_path_tricks_is_refused_and_nothing_is_written(
    tmp_path: Path, name: str
) -> None:
    templates = Templates(tmp_path / "templates")
    with pytest.raises(InvalidId):
        templates.add(name, template(prompt="x"))
    with pytest.raises(InvalidId):
        templates.load(name)
    assert not (tmp_path / "templates").exists() and list(tmp_path.iterdir()) == []


def test_a_damaged_or_huge_file_is_corrupt_naming_it(tmp_path: Path) -> None:
    templates = Templates(tmp_path)
    templates.path("bad").write_text("prompt: [")
    with pytest.raises(CorruptDocument, match=r"bad\.yaml: not YAML"):
        templates.load("bad")
    templates.path("huge").write_text("prompt: " + "x" * (1024 * 1024))
    with pytest.raises(CorruptDocument, match="larger than"):
        templates.load("huge")
    os.symlink(templates.path("bad"), templates.path("link"))
    with pytest.raises(CorruptDocument):
        templates.load("link")


BILLION_LAUGHS = "prompt: hi\noptions:\n  metadata:\n    a: &a [x,x,x,x,x,x,x,x,x,x]\n" + "".join(
    f"    {b}: &{b} [{','.join(['*' + a] * 10)}]\n"
    for a, b in zip("abcdefgh", "bcdefghi", strict=True)
)


@pytest.mark.parametrize(
    "text",
    [
        BILLION_LAUGHS,  # 10**9 nodes from 400 bytes: before, a hang
        "system: &s Be terse.\nprompt: *s\n",
        "prompt: &p hi\n",
    ],
    ids=["billion-laughs", "alias", "anchor"],
)
def test_a_file_with_yaml_anchors_or_aliases_is_corrupt_naming_it(
    tmp_path: Path, text: str
) -> None:
    templates = Templates(tmp_path)
    templates.path("bomb").write_text(text)
    with pytest.raises(CorruptDocument, match=r"bomb\.yaml: a YAML anchor or alias.* line \d"):
        templates.load("bomb")
    assert templates.load_all()[0] == {}


def test_a_file_is_read_no_further_than_one_byte_past_the_limit(tmp_path: Path) -> None:
    path = tmp_path / "big"
    path.write_bytes(b"x" * 200_000)  # more than one read's 64 KiB
    assert read_bytes(path, limit=10) == b"x" * 11
    assert read_bytes(path, limit=100_000) == b"x" * 100_001
    assert read_bytes(path, limit=300_000) == read_bytes(path) == path.read_bytes()


@pytest.mark.parametrize(
    ("does", "says"),
    [
        (os.unlink, "the edit not found"),
        (lambda path: (os.unlink(path), os.mkdir(path)), "not a regular file"),
        (lambda path: (os.unlink(path), os.symlink("/dev/zero", path)), "symbolic link"),
    ],
    ids=["removed", "directory", "symlink-to-dev-zero"],
)
def test_an_editor_that_removes_or_replaces_the_copy_leaves_the_template(
    tmp_path: Path, does: Callable[[Path], object], says: str
) -> None:
    templates = Templates(tmp_path)
    templates.add("t", template(prompt="old"))
    before = templates.path("t").read_bytes()
    with pytest.raises(InvalidInput, match=f"{says}.*: template 't' is unchanged"):
        templates.edit("t", does)
    assert templates.path("t").read_bytes() == before
    assert [p.name for p in tmp_path.iterdir() if not p.name.startswith(".")] == ["t.yaml"]


def test_an_invalid_edit_that_cannot_be_kept_says_so(tmp_path: Path) -> None:
    templates = Templates(tmp_path)
    templates.add("t", template(prompt="old"))
    (tmp_path / "t.yaml.rejected").mkdir()
    (tmp_path / "t.yaml.rejected" / "x").write_text("mine")
    with pytest.raises(InvalidInput, match=r"not YAML.*'t' is unchanged") as caught:
        templates.edit("t", lambda path: path.write_text("prompt: ["))
    assert caught.value.hint is not None and "could not be kept" in caught.value.hint
    assert (tmp_path / "t.yaml.rejected" / "x").read_text() == "mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.yaml", "t.yaml.rejected"]


def test_an_edit_replaces_the_file_as_written_or_leaves_it_and_keeps_the_edit(
    tmp_path: Path,
) -> None:
    templates = Templates(tmp_path)
    templates.add("t", template(prompt="old"))
    before = templates.path("t").read_bytes()

    def breaks(path: Path) -> None:
        path.write_text("prompt: new\nbogus: 1\n")

    with pytest.raises(InvalidInput, match=r"bogus: Extra inputs.*template 't' is unchanged") as e:
        templates.edit("t", breaks)
    assert templates.path("t").read_bytes() == before
    kept = tmp_path / "t.yaml.rejected"
    assert e.value.hint == f"your edit is kept in {kept}"
    assert kept.read_text() == "prompt: new\nbogus: 1\n"

    def fixes(path: Path) -> None:
        path.write_text("# mine\nprompt: new {{ x }}\n")

    assert templates.edit("t", fixes).parameters == ["x"]
    assert templates.path("t").read_text() == "# mine\nprompt: new {{ x }}\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.yaml", "t.yaml.rejected"]


def test_a_command_line_wins_over_the_template_key_by_key() -> None:
    tpl = template(
        system="S {{ a }}", prompt="P {{ a }}", model="m-t", options={"seed": 1, "top_p": 0.5},
        tools=["x"],
    )  # fmt: skip
    fields = {"system": None, "model_options": {"seed": 2}, "temperature": 0.1}
    turn = templated_turn(
        tpl, {"a": "A"}, "in", ModelChoice(), ToolsChoice(names=("y", "x")), fields
    )
    assert turn.prompt == "P A\n\nin"
    assert turn.fields == {
        "system": "S A", "model_options": {"seed": 2, "top_p": 0.5}, "temperature": 0.1
    }  # fmt: skip
    assert turn.choice.model == "m-t" and turn.tools.names == ("x", "y")
    typed = templated_turn(
        tpl, {"a": "A"}, "", ModelChoice(model="m-c"), ToolsChoice(), {"system": "mine"}
    )
    assert typed.choice.model == "m-c" and typed.fields["system"] == "mine"
    assert typed.prompt == "P A"


def test_a_sessions_settings_are_the_templates_unless_given() -> None:
    tpl = template(system="You are {{ who }}.", prompt="{{ input }}", model="m")
    assert session_settings(tpl, {"who": "W"}, None, None) == {
        "system_prompt": "You are W.",
        "model": "m",
        "slot_mode": None,
    }
    own = session_settings(tpl, {"who": "W"}, "own", "n")
    assert own == {"system_prompt": "own", "model": "n", "slot_mode": None}
    focused = template(system="s", prompt="{{ input }}", slot_mode="focused")
    assert session_settings(focused, {}, None, None)["slot_mode"] == "focused"
