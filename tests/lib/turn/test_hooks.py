"""Hooks as data and their runner (agctl.turn.hooks): every outcome of a blocking and of an
observing event, on_error both ways, chaining, the payload, and the project file's trust."""

from __future__ import annotations

import json
import logging
import os
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import Adder, Watching, calls

from agctl.base.errors import (
    AlreadyExists,
    Blocked,
    CorruptDocument,
    InvalidInput,
    NotFound,
    UsageError,
)
from agctl.base.vocab import HOOK_EVENTS, HookEvent
from agctl.config.file import Config, ConfigFile, Profile
from agctl.config.specs import HookSpec, ToolSpec
from agctl.context.models import Message
from agctl.providers.base import ChatRequest, Event
from agctl.providers.offline import OfflineProvider
from agctl.store import Store
from agctl.turn import hooks
from agctl.turn.compress import compress
from agctl.turn.hooks import (
    EVENTS,
    HookBlocked,
    Hooks,
    hook_environment,
    hook_spec,
    hooks_disabled,
    hooks_for,
    read_project_hooks,
    run_hooks,
)
from agctl.turn.send import TurnOptions, send_turn
from agctl.turn.tools import LiveTools

START = {"prompt": "hello", "scratch": []}


@pytest.fixture(autouse=True)
def warn_again() -> Iterator[None]:
    """Each test sees the project file's warnings afresh (they are given once a process)."""
    hooks._warned.clear()
    yield
    hooks._warned.clear()


def script(tmp_path: Path, name: str, body: str) -> list[str]:
    """A hook: a Python script run by this interpreter."""
    path = tmp_path / f"{name}.py"
    path.write_text("import json, os, sys\n" + textwrap.dedent(body))
    return [sys.executable, str(path)]


def hook(tmp_path: Path, name: str, event: HookEvent, body: str, **fields: Any) -> HookSpec:
    return HookSpec(name=name, event=event, command=script(tmp_path, name, body), **fields)


def test_every_event_has_a_rule_and_only_the_observing_ones_take_no_changes() -> None:
    assert set(EVENTS) == set(HOOK_EVENTS)
    observing = {event for event, rule in EVENTS.items() if not rule.may_block}
    assert observing == {"TurnEnd", "TurnError", "PostRollback", "PostFork"}


@pytest.mark.parametrize(
    ("fields", "complaint"),
    [
        ({"command": []}, "command"),
        ({"command": [""]}, "program"),
        ({"command": "rm -rf /"}, "command"),
        ({"name": "../x"}, "name"),
        ({"event": "OnTurnStart"}, "event"),
        ({"timeout": 5}, "timeout"),
        ({"timeout_s": 0}, "timeout_s"),
    ],
)
def test_a_hook_spec_refuses_what_would_be_a_surprise(
    fields: dict[str, Any], complaint: str
) -> None:
    base = {"name": "h", "event": "TurnStart", "command": ["true"], **fields}
    with pytest.raises(UsageError, match=complaint):
        hook_spec(base)


def test_no_hooks_run_nothing_without_a_process(tmp_path: Path) -> None:
    outcome = run_hooks("TurnStart", START, [])
    assert outcome.changes == {} and outcome.runs == []


@pytest.mark.parametrize("event", ["TurnStart", "TurnEnd"])
def test_exit_0_with_nothing_printed_proceeds(tmp_path: Path, event: HookEvent) -> None:
    quiet = hook(tmp_path, "quiet", event, "sys.stdin.read()\n")
    outcome = run_hooks(event, START if event == "TurnStart" else {}, [quiet])
    assert [(r.name, r.exit, r.outcome) for r in outcome.runs] == [("quiet", 0, "proceed")]
    assert outcome.changes == {}


def test_an_observing_hook_may_print_an_empty_object(tmp_path: Path) -> None:
    empty = hook(tmp_path, "empty", "TurnEnd", "print('{}')\n", on_error="block")
    assert run_hooks("TurnEnd", {}, [empty]).runs[0].outcome == "proceed"


def test_a_hook_replaces_the_prompt_and_adds_scratch_text(tmp_path: Path) -> None:
    upper = hook(
        tmp_path,
        "upper",
        "TurnStart",
        """
        payload = json.load(sys.stdin)
        print(json.dumps({"prompt": payload["prompt"].upper(), "scratch": ["date: today"]}))
        """,
    )
    outcome = run_hooks("TurnStart", START, [upper])
    assert outcome.changes == {"prompt": "HELLO", "scratch": ["date: today"]}


def test_each_hook_sees_the_previous_one_s_changes(tmp_path: Path) -> None:
    first = hook(
        tmp_path, "first", "TurnStart", 'print(json.dumps({"prompt": "one", "scratch": ["a"]}))\n'
    )
    second = hook(
        tmp_path,
        "second",
        "TurnStart",
        """
        payload = json.load(sys.stdin)
        print(json.dumps({"prompt": payload["prompt"] + " two", "scratch": payload["scratch"]}))
        """,
    )
    outcome = run_hooks("TurnStart", START, [first, second])
    assert outcome.changes["prompt"] == "one two"
    # scratch adds up: the second saw ["a"] and added it again
    assert outcome.changes["scratch"] == ["a", "a"]
    assert [r.name for r in outcome.runs] == ["first", "second"]


def test_exit_2_blocks_with_stderr_as_the_reason(tmp_path: Path) -> None:
    never = hook(
        tmp_path, "never", "TurnStart", "print('not today', file=sys.stderr)\nsys.exit(2)\n"
    )
    after = hook(tmp_path, "after", "TurnStart", "open(sys.argv[0] + '.ran', 'w')\n")
    with pytest.raises(HookBlocked) as caught:
        run_hooks("TurnStart", START, [never, after])
    assert caught.value.exit_code == 9
    assert caught.value.hook == "never" and caught.value.reason == "not today"
    assert "hook 'never' blocked TurnStart: not today" in str(caught.value)
    assert [(r.name, r.exit, r.outcome) for r in caught.value.runs] == [("never", 2, "blocked")]
    assert not Path(after.command[1] + ".ran").exists()


def test_exit_2_on_an_observing_event_is_a_failure_that_warns(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    two = hook(tmp_path, "two", "TurnEnd", "sys.exit(2)\n")
    with caplog.at_level(logging.WARNING, "agctl"):
        outcome = run_hooks("TurnEnd", {}, [two])
    (run,) = outcome.runs
    assert (run.exit, run.outcome) == (2, "warned")
    assert "cannot be blocked" in (run.message or "")
    assert "hook 'two' failed on TurnEnd" in caplog.text


FAILURES = {
    "exit 3": ("print('broken', file=sys.stderr)\nsys.exit(3)\n", "exit 3: broken"),
    "not JSON": ("print('yes please')\n", "not JSON"),
    "not an object": ("print('[1]')\n", "not a JSON object"),
    "unknown key": ('print(json.dumps({"promt": "typo"}))\n', "promt"),
    "wrong type": ('print(json.dumps({"prompt": 5}))\n', "prompt"),
}


@pytest.mark.parametrize("case", sorted(FAILURES))
def test_a_failure_blocks_a_blocking_event(tmp_path: Path, case: str) -> None:
    body, message = FAILURES[case]
    failing = hook(tmp_path, "failing", "TurnStart", body)
    with pytest.raises(HookBlocked) as caught:
        run_hooks("TurnStart", START, [failing])
    assert message in caught.value.reason
    assert caught.value.failed
    assert caught.value.runs[-1].outcome == "failed"


@pytest.mark.parametrize("case", sorted(FAILURES))
def test_a_failure_with_on_error_warn_goes_on_without_its_changes(
    tmp_path: Path, case: str
) -> None:
    body, message = FAILURES[case]
    failing = hook(tmp_path, "failing", "TurnStart", body, on_error="warn")
    later = hook(tmp_path, "later", "TurnStart", 'print(json.dumps({"scratch": ["later"]}))\n')
    outcome = run_hooks("TurnStart", START, [failing, later])
    assert [r.outcome for r in outcome.runs] == ["warned", "proceed"]
    assert message in (outcome.runs[0].message or "")
    assert outcome.changes == {"scratch": ["later"]}


@pytest.mark.parametrize("case", sorted(FAILURES))
def test_a_failure_warns_on_an_observing_event_and_blocks_with_on_error_block(
    tmp_path: Path, case: str
) -> None:
    body, message = FAILURES[case]
    if case == "unknown key":
        body = 'print(json.dumps({"prompt": "an observer takes no changes"}))\n'
        message = "prompt"
    warned = run_hooks("TurnEnd", {}, [hook(tmp_path, "obs", "TurnEnd", body)])
    assert warned.runs[0].outcome == "warned" and message in (warned.runs[0].message or "")
    strict = hook(tmp_path, "strict", "TurnEnd", body, on_error="block")
    with pytest.raises(HookBlocked, match="failed on TurnEnd"):
        run_hooks("TurnEnd", {}, [strict])


def test_a_program_that_does_not_exist_is_a_failure(tmp_path: Path) -> None:
    missing = HookSpec(name="gone", event="TurnStart", command=[str(tmp_path / "nope")])
    with pytest.raises(HookBlocked, match="cannot run"):
        run_hooks("TurnStart", START, [missing])
    observer = HookSpec(name="gone", event="TurnEnd", command=missing.command)
    warned = run_hooks("TurnEnd", {}, [observer])
    assert warned.runs[0].exit is None and warned.runs[0].outcome == "warned"


def test_pre_tool_use_may_deny_and_a_later_hook_does_not_run(tmp_path: Path) -> None:
    deny = hook(
        tmp_path, "deny", "PreToolUse", 'print(json.dumps({"decision": "deny", "reason": "rm"}))\n'
    )
    after = hook(tmp_path, "after", "PreToolUse", "open(sys.argv[0] + '.ran', 'w')\n")
    call = {"tool": "shell", "call_id": "c1", "arguments": {"cmd": "rm -rf ~"}}
    outcome = run_hooks("PreToolUse", call, [deny, after])
    assert outcome.changes == {"decision": "deny", "reason": "rm"}
    assert [r.name for r in outcome.runs] == ["deny"]
    assert not Path(after.command[1] + ".ran").exists()


def test_pre_tool_use_rewrites_arguments_and_a_later_allow_does_not_loosen_an_ask(
    tmp_path: Path,
) -> None:
    ask = hook(
        tmp_path,
        "ask",
        "PreToolUse",
        """
        payload = json.load(sys.stdin)
        arguments = dict(payload["arguments"], safe=True)
        print(json.dumps({"decision": "ask", "reason": "check", "arguments": arguments}))
        """,
    )
    allow = hook(
        tmp_path,
        "allow",
        "PreToolUse",
        """
        payload = json.load(sys.stdin)
        assert payload["arguments"]["safe"] is True and payload["decision"] == "ask"
        print(json.dumps({"decision": "allow", "reason": "fine"}))
        """,
    )
    call = {"tool": "shell", "call_id": "c1", "arguments": {"cmd": "ls"}}
    outcome = run_hooks("PreToolUse", call, [ask, allow])
    assert outcome.changes == {
        "decision": "ask",
        "reason": "check",
        "arguments": {"cmd": "ls", "safe": True},
    }


def test_post_tool_use_redacts_the_output(tmp_path: Path) -> None:
    redact = hook(
        tmp_path,
        "redact",
        "PostToolUse",
        """
        payload = json.load(sys.stdin)
        print(json.dumps({"output": payload["output"].replace("hunter2", "[redacted]")}))
        """,
    )
    result = {"tool": "cat", "call_id": "c1", "arguments": {}, "output": "pw=hunter2"}
    assert run_hooks("PostToolUse", result, [redact]).changes == {"output": "pw=[redacted]"}


def test_pre_compress_may_cancel_or_give_the_summary(tmp_path: Path) -> None:
    given = hook(tmp_path, "given", "PreCompress", 'print(json.dumps({"summary": "short"}))\n')
    cancel = hook(tmp_path, "cancel", "PreCompress", 'print(json.dumps({"cancel": True}))\n')
    data = {"strategy": "summarize", "keep_recent": 6}
    assert run_hooks("PreCompress", data, [given]).changes == {"summary": "short"}
    assert run_hooks("PreCompress", data, [given, cancel]).changes == {
        "summary": "short",
        "cancel": True,
    }
    bad = hook(tmp_path, "bad", "PreCompress", 'print(json.dumps({"cancel": "yes"}))\n')
    with pytest.raises(HookBlocked, match="cancel"):  # strict: "yes" is not a boolean
        run_hooks("PreCompress", data, [bad])


def test_post_compress_rewrites_the_summary_and_may_only_narrow_what_is_kept(
    tmp_path: Path,
) -> None:
    data = {"strategy": "summarize", "keep_recent": 6, "summary": "long"}
    narrow = hook(
        tmp_path,
        "narrow",
        "PostCompress",
        'print(json.dumps({"summary": "s", "keep_recent": 2}))\n',
    )
    assert run_hooks("PostCompress", data, [narrow]).changes == {"summary": "s", "keep_recent": 2}
    widen = hook(tmp_path, "widen", "PostCompress", 'print(json.dumps({"keep_recent": 9}))\n')
    with pytest.raises(HookBlocked, match="only narrow"):
        run_hooks("PostCompress", data, [widen])


def test_the_payload_names_the_event_and_its_context_and_holds_no_secret(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-live-secret-1")
    monkeypatch.setenv("AGCTL_API_KEY", "sk-live-secret-2")
    monkeypatch.setenv("GITHUB_TOKEN", "ghp-secret-3")
    monkeypatch.setenv("DB_PASSWORD", "secret-4")
    monkeypatch.setenv("LC_ALL", "C.UTF-8")
    dump = tmp_path / "seen.json"
    seen = hook(
        tmp_path,
        "seen",
        "TurnStart",
        f"""
        payload = json.load(sys.stdin)
        json.dump({{"payload": payload, "env": dict(os.environ)}}, open({str(dump)!r}, "w"))
        """,
    )
    context = {"session": "s1", "slot": "default", "turn": 3, "model": "m", "cwd": str(tmp_path)}
    run_hooks("TurnStart", {**context, **START}, [seen])
    recorded = json.loads(dump.read_text())
    assert recorded["payload"] == {
        "hook_event": "TurnStart",
        "schema_version": "1.0",
        **context,
        **START,
    }
    assert "secret" not in dump.read_text()
    env = recorded["env"]
    assert env["LC_ALL"] == "C.UTF-8" and "PATH" in env
    assert not [name for name in env if name.startswith(("AGCTL_", "OPENAI_"))]


def test_a_hook_runs_in_the_payload_s_cwd(tmp_path: Path) -> None:
    where = hook(tmp_path, "where", "TurnEnd", "open('here', 'w')\n")
    (tmp_path / "work").mkdir()
    run_hooks("TurnEnd", {"cwd": str(tmp_path / "work")}, [where])
    assert (tmp_path / "work" / "here").exists()


def test_the_environment_keeps_the_core_set_only() -> None:
    environ = {
        "PATH": "/bin",
        "HOME": "/h",
        "LANG": "C",
        "LC_CTYPE": "C",
        "TERM": "xterm",
        "TZ": "UTC",
        "TMPDIR": "/t",
        "AGCTL_DATA_DIR": "/d",
        "OPENAI_BASE_URL": "http://x",
        "LC_SECRET_KEY": "k",
        "PYTHONPATH": "/p",
    }
    assert sorted(hook_environment(environ)) == [
        "HOME", "LANG", "LC_CTYPE", "PATH", "TERM", "TMPDIR", "TZ"
    ]  # fmt: skip


def test_a_payload_without_the_event_s_fields_is_refused() -> None:
    with pytest.raises(InvalidInput, match="needs prompt, scratch"):
        run_hooks("TurnStart", {}, [])


def test_a_hook_of_another_event_is_a_caller_s_mistake() -> None:
    other = HookSpec(name="other", event="TurnEnd", command=["true"])
    with pytest.raises(ValueError, match="TurnEnd hook"):
        run_hooks("TurnStart", START, [other])


# ---- where hooks come from ----------------------------------------------------------------


def project(tmp_path: Path, specs: list[dict[str, Any]]) -> Path:
    path = tmp_path / "repo" / ".agctl" / "hooks.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(specs))
    return path


def spec(name: str, event: str = "TurnEnd") -> dict[str, Any]:
    return {"name": name, "event": event, "command": ["true"]}


def names(found: list[HookSpec]) -> list[str]:
    return [hook.name for hook in found]


def test_hooks_for_runs_the_config_s_then_the_profile_s_in_order(tmp_path: Path) -> None:
    config = Config(
        hooks=[HookSpec(**spec("b")), HookSpec(**spec("a")), HookSpec(**spec("s", "TurnStart"))],
        profiles={"p": Profile(hooks=[HookSpec(**spec("c"))])},
    )
    assert names(hooks_for(config, None, tmp_path, "TurnEnd")) == ["b", "a"]
    assert names(hooks_for(config, "p", tmp_path, "TurnEnd")) == ["b", "a", "c"]
    assert names(hooks_for(config, "p", tmp_path, "TurnStart")) == ["s"]
    assert names(hooks_for(config, "p", tmp_path, "TurnEnd", no_hooks=True)) == []


def test_agctl_no_hooks_bypasses_every_hook(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = Config(hooks=[HookSpec(**spec("b"))])
    monkeypatch.setenv("AGCTL_NO_HOOKS", "1")
    assert hooks_disabled() and hooks_for(config, None, tmp_path, "TurnEnd") == []
    monkeypatch.setenv("AGCTL_NO_HOOKS", "0")
    assert not hooks_disabled() and hooks_disabled(True)


def test_an_untrusted_project_file_is_ignored_with_one_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    project(tmp_path, [spec("proj")])
    with caplog.at_level(logging.WARNING, "agctl"):
        assert hooks_for(Config(), None, tmp_path / "repo", "TurnEnd") == []
        assert hooks_for(Config(), None, tmp_path / "repo", "TurnEnd") == []
    assert [r.getMessage() for r in caplog.records if "is ignored" in r.getMessage()] == [
        f"{tmp_path / 'repo' / '.agctl' / 'hooks.json'} is ignored: its hooks run once you "
        "trust it ('agctl hook trust')"
    ]


def test_a_trusted_project_file_runs_after_the_config_s_hooks_until_it_changes(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = project(tmp_path, [spec("proj")])
    store = ConfigFile(tmp_path / "config.json")
    store.save(Config(hooks=[HookSpec(**spec("mine"))]))
    pinned = hooks.trust_hooks_file(store, path)
    assert pinned.sha256 == store.load().trusted_hook_files[str(path.resolve())]
    assert names(hooks_for(store.load(), None, tmp_path / "repo", "TurnEnd")) == ["mine", "proj"]

    project(tmp_path, [spec("proj"), spec("sneaked")])
    with caplog.at_level(logging.WARNING, "agctl"):
        assert names(hooks_for(store.load(), None, tmp_path / "repo", "TurnEnd")) == ["mine"]
    assert "changed since 'agctl hook trust' pinned it" in caplog.text
    assert read_project_hooks(store.load(), tmp_path / "repo").state == "changed"

    hooks.trust_hooks_file(store, path)
    found = hooks_for(store.load(), None, tmp_path / "repo", "TurnEnd")
    assert names(found) == ["mine", "proj", "sneaked"]
    assert hooks.untrust_hooks_file(store, path).path == path.resolve()
    assert names(hooks_for(store.load(), None, tmp_path / "repo", "TurnEnd")) == ["mine"]


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ("{not json", "not JSON"),
        ('{"name": "x"}', "not a JSON array"),
        (json.dumps([{"name": "x", "event": "TurnEnd", "command": "true"}]), "hook 0"),
        (json.dumps([spec("x"), spec("x")]), "used twice"),
    ],
)
def test_an_invalid_project_file_cannot_be_trusted(
    tmp_path: Path, content: str, problem: str
) -> None:
    path = project(tmp_path, [])
    path.write_text(content)
    store = ConfigFile(tmp_path / "config.json")
    with pytest.raises(InvalidInput, match=problem):
        hooks.trust_hooks_file(store, path)
    assert store.load().trusted_hook_files == {}
    found = read_project_hooks(store.load(), tmp_path / "repo")
    assert found.state == "invalid" and problem in (found.problem or "")


def test_trusting_a_missing_file_or_untrusting_an_untrusted_one_is_not_found(
    tmp_path: Path,
) -> None:
    store = ConfigFile(tmp_path / "config.json")
    with pytest.raises(NotFound):
        hooks.trust_hooks_file(store, tmp_path / ".agctl" / "hooks.json")
    with pytest.raises(NotFound, match="is not trusted"):
        hooks.untrust_hooks_file(store, tmp_path / ".agctl" / "hooks.json")


def trusted_elsewhere(tmp_path: Path, store: ConfigFile) -> Path:
    """A project the user trusted ("a"), its hooks file naming a relative script."""
    path = tmp_path / "a" / ".agctl" / "hooks.json"
    path.parent.mkdir(parents=True)
    command = [sys.executable, ".agctl/check.py"]
    path.write_text(json.dumps([{"name": "check", "event": "TurnEnd", "command": command}]))
    hooks.trust_hooks_file(store, path)
    return path


def link_the_file(clone: Path, trusted: Path) -> None:
    """The file, to the one trusted in another project."""
    (clone / ".agctl").mkdir()
    (clone / ".agctl" / "hooks.json").symlink_to(trusted)


def link_the_folder(clone: Path, trusted: Path) -> None:
    """The folder, to the other project's."""
    (clone / ".agctl").symlink_to(trusted.parent)


def link_within(clone: Path, trusted: Path) -> None:
    """The file, to a copy inside the clone itself (relative, as git checks links out)."""
    (clone / "hooks.json").write_bytes(trusted.read_bytes())
    (clone / ".agctl").mkdir()
    (clone / ".agctl" / "hooks.json").symlink_to(Path("..") / "hooks.json")


LINKS = {"file": link_the_file, "folder": link_the_folder, "within": link_within}


@pytest.mark.parametrize("link", sorted(LINKS))
def test_a_link_in_place_of_a_project_hooks_file_is_refused_never_trusted_through_its_target(
    tmp_path: Path, link: str, caplog: pytest.LogCaptureFixture
) -> None:
    store = ConfigFile(tmp_path / "config.json")
    trusted = trusted_elsewhere(tmp_path, store)
    pins = store.load().trusted_hook_files
    clone = tmp_path / "clone"
    clone.mkdir()
    LINKS[link](clone, trusted)

    found = read_project_hooks(store.load(), clone)
    assert found.state == "invalid" and found.hooks == ()
    assert "is a symbolic link" in (found.problem or "")
    with caplog.at_level(logging.WARNING, "agctl"):
        assert hooks_for(store.load(), None, clone, "TurnEnd") == []
    assert "is a symbolic link" in caplog.text
    with pytest.raises(InvalidInput, match="is a symbolic link"):
        hooks.trust_hooks_file(store, clone / ".agctl" / "hooks.json")
    assert store.load().trusted_hook_files == pins
    assert read_project_hooks(store.load(), trusted.parent.parent).trusted


def test_a_project_hook_runs_in_its_project_whatever_the_payload_s_cwd(tmp_path: Path) -> None:
    store = ConfigFile(tmp_path / "config.json")
    trusted = trusted_elsewhere(tmp_path, store)
    elsewhere = tmp_path / "elsewhere"
    for root in (trusted.parent.parent, elsewhere):
        (root / ".agctl").mkdir(parents=True, exist_ok=True)
        marker = tmp_path / f"ran-in-{root.name}"
        (root / ".agctl" / "check.py").write_text(f"open({str(marker)!r}, 'w')\n")
    found = hooks_for(store.load(), None, trusted.parent.parent, "TurnEnd")
    assert names(found) == ["check"]
    outcome = run_hooks("TurnEnd", {"cwd": str(elsewhere)}, found)
    assert [run.outcome for run in outcome.runs] == ["proceed"]
    assert (tmp_path / "ran-in-a").exists()
    assert not (tmp_path / "ran-in-elsewhere").exists()
    assert outcome.payload["cwd"] == str(elsewhere)


@pytest.mark.parametrize("thing", ["directory", "fifo"])
def test_something_else_in_place_of_a_project_hooks_file_is_ignored_with_its_reason(
    tmp_path: Path, thing: str
) -> None:
    path = tmp_path / ".agctl" / "hooks.json"
    path.parent.mkdir()
    if thing == "directory":
        path.mkdir()
    else:
        os.mkfifo(path)  # read without a writer, it would never end
    found = read_project_hooks(Config(), tmp_path)
    assert found.state == "invalid"
    assert f"is a {'FIFO' if thing == 'fifo' else 'directory'}" in (found.problem or "")
    assert hooks_for(Config(), None, tmp_path, "TurnEnd") == []


def test_only_a_project_s_hooks_file_can_be_trusted(tmp_path: Path) -> None:
    store = ConfigFile(tmp_path / "config.json")
    path = tmp_path / "hooks.json"
    path.write_text(json.dumps([spec("x")]))
    with pytest.raises(UsageError, match="is not a project's hooks file"):
        hooks.trust_hooks_file(store, path)
    assert store.load().trusted_hook_files == {}


def test_add_and_remove_keep_the_order_and_refuse_a_second_of_a_name(tmp_path: Path) -> None:
    store = ConfigFile(tmp_path / "config.json")
    store.save(Config(profiles={"p": Profile()}))
    for name in ("one", "two"):
        hooks.add_hook(store, HookSpec(**spec(name)))
    with pytest.raises(AlreadyExists, match="--force"):
        hooks.add_hook(store, HookSpec(**spec("one")))
    hooks.add_hook(store, HookSpec(**spec("one", "TurnStart")), replace=True)
    assert [(h.name, h.event) for h in store.load().hooks] == [
        ("one", "TurnStart"),
        ("two", "TurnEnd"),
    ]
    hooks.add_hook(store, HookSpec(**spec("prof")), profile="p")
    with pytest.raises(NotFound) as caught:
        hooks.remove_hook(store, "prof")
    assert caught.value.hint == "it is a hook of profile p: add --profile p"
    assert hooks.remove_hook(store, "prof", profile="p").name == "prof"
    assert hooks.remove_hook(store, "one").name == "one"
    assert names(store.load().hooks) == ["two"]
    with pytest.raises(NotFound, match="profile 'q' not found"):
        hooks.add_hook(store, HookSpec(**spec("x")), profile="q")


def test_a_config_with_a_misspelt_hook_field_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"hooks": [{**spec("x"), "timeout": 1}]}))
    with pytest.raises(CorruptDocument, match="timeout"):
        ConfigFile(path).load()


def test_replacing_a_profile_keeps_its_hooks(tmp_path: Path) -> None:
    store = ConfigFile(tmp_path / "config.json")
    store.add_profile("p", Profile(model="old"))
    hooks.add_hook(store, HookSpec(**spec("prof")), profile="p")
    store.add_profile("p", Profile(model="new"), replace=True)
    replaced = store.load().profiles["p"]
    assert (replaced.model, names(replaced.hooks)) == ("new", ["prof"])


# ---- every outcome at every event ------------------------------------------------------

# A payload for each event, and a change its hooks may make (None: it observes only).
EVERY_EVENT: dict[str, tuple[dict[str, Any], dict[str, Any] | None]] = {
    "TurnStart": (START, {"prompt": "rewritten"}),
    "PreToolUse": (
        {"tool": "t", "call_id": "c", "arguments": {"a": 1}},
        {"arguments": {"a": 2}},
    ),
    "PostToolUse": (
        {"tool": "t", "call_id": "c", "arguments": {}, "output": "secret"},
        {"output": "[redacted]"},
    ),
    "PreCompress": ({"strategy": "summarize", "keep_recent": 6}, {"summary": "given"}),
    "PostCompress": (
        {"strategy": "summarize", "keep_recent": 6, "summary": "s"},
        {"summary": "rewritten"},
    ),
    "TurnEnd": ({}, None),
    "TurnError": ({"error": "boom"}, None),
    "PostRollback": ({"checkpoint": "k"}, None),
    "PostFork": ({"checkpoint": "k", "new_session": "n"}, None),
}
OUTCOMES = {
    "proceed": "pass\n",
    "block": "print('no', file=sys.stderr)\nsys.exit(2)\n",
    "failure": "sys.exit(3)\n",
    "timeout": "import time\ntime.sleep(30)\n",
}


def test_the_table_of_every_event_covers_every_event() -> None:
    assert set(EVERY_EVENT) == set(HOOK_EVENTS)


@pytest.mark.parametrize("outcome", sorted(OUTCOMES))
@pytest.mark.parametrize("event", sorted(EVERY_EVENT))
def test_every_outcome_at_every_event(tmp_path: Path, event: HookEvent, outcome: str) -> None:
    """Proceed goes on; exit 2 blocks a blocking event (exit 9) and is a failure that
    warns on an observing one; a failure or a timeout (its process killed) blocks the
    first kind and warns on the second."""
    payload, _ = EVERY_EVENT[event]
    # Only the hook that sleeps gets a short timeout: the others start Python, which a
    # loaded machine may take longer than half a second to do.
    patience = {"timeout_s": 0.5} if outcome == "timeout" else {}
    spec = hook(tmp_path, "h", event, OUTCOMES[outcome], **patience)
    blocking = EVENTS[event].may_block
    if outcome == "proceed" or not blocking:
        result = run_hooks(event, payload, [spec])
        (run,) = result.runs
        assert run.outcome == ("proceed" if outcome == "proceed" else "warned")
        assert result.changes == {}
        if outcome == "timeout":
            assert run.exit is None
        return
    with pytest.raises(HookBlocked) as caught:
        run_hooks(event, payload, [spec])
    assert caught.value.exit_code == 9 and caught.value.event == event
    assert caught.value.failed == (outcome != "block")
    if outcome == "timeout":
        assert caught.value.runs[-1].exit is None


@pytest.mark.parametrize("event", sorted(e for e, (_, change) in EVERY_EVENT.items() if change))
def test_every_blocking_event_takes_its_change(tmp_path: Path, event: HookEvent) -> None:
    payload, change = EVERY_EVENT[event]
    spec = hook(tmp_path, "h", event, f"print({json.dumps(json.dumps(change))})\n")
    result = run_hooks(event, payload, [spec])
    assert result.changes == change


# Hooks at their events: a turn's start and end, its failure, each tool call before and
# after, compression before and after. Every hook here is a real process (a small Python
# program) that logs the payload it read and answers as the test says.


HOOK = """
import json, sys
payload = json.load(sys.stdin)
with open(sys.argv[1], "a") as log:
    log.write(json.dumps(payload) + "\\n")
code, answer = int(sys.argv[2]), sys.argv[3]
if code == 2:
    sys.stderr.write(answer)
elif answer:
    print(answer)
sys.exit(code)
"""


class Hooked:
    """Hooks built from (event, exit code, stdout) triples, each logging its payloads."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.program = tmp_path / "hook.py"
        self.program.write_text(HOOK)
        self.specs: list[HookSpec] = []

    def add(self, event: str, answer: Any = "", code: int = 0) -> Path:
        log = self.tmp_path / f"{event}-{len(self.specs)}.log"
        text = answer if isinstance(answer, str) else json.dumps(answer)
        command = [sys.executable, str(self.program), str(log), str(code), text]
        self.specs.append(HookSpec(name=f"h{len(self.specs)}", event=event, command=command))
        return log

    def hooks(self) -> Hooks:
        return Hooks(Config(hooks=self.specs), None, self.tmp_path)


def payloads(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


@pytest.fixture
def sid(store: Store) -> str:
    return store.create_session("s").id


@pytest.fixture
def hooked(tmp_path: Path) -> Hooked:
    return Hooked(tmp_path)


def test_turn_start_rewrites_the_prompt_and_adds_scratch_and_turn_end_sees_it(
    store: Store, sid: str, hooked: Hooked
) -> None:
    start = hooked.add("TurnStart", {"prompt": "rewritten", "scratch": ["from the hook"]})
    end = hooked.add("TurnEnd")
    provider = Watching([["Fine."]])
    result = send_turn(
        store, sid, "original", provider, TurnOptions(model="offline", hooks=hooked.hooks())
    )
    assert [m.text() for m in store.load_slot(sid).messages] == ["rewritten", "Fine."]
    sent = [m["content"] for m in provider.requests[0].messages]
    assert "from the hook" in sent and sent[-1] == "rewritten"
    (seen,) = payloads(start)
    assert seen["hook_event"] == "TurnStart" and seen["prompt"] == "original"
    assert (seen["session"], seen["slot"], seen["turn"]) == (sid, "default", 1)
    (ended,) = payloads(end)
    assert ended["reply"] == "Fine." and ended["checkpoint"] == result.checkpoint
    assert [run["event"] for run in result.to_dict()["hooks"]] == ["TurnStart", "TurnEnd"]


def test_a_turn_start_hook_that_blocks_stops_the_turn_keeping_the_prompt(
    store: Store, sid: str, hooked: Hooked
) -> None:
    hooked.add("TurnStart", "no turns on Fridays", code=2)
    failed = hooked.add("TurnError")
    with pytest.raises(Blocked) as raised:
        send_turn(
            store,
            sid,
            "hello",
            OfflineProvider(),
            TurnOptions(model="offline", hooks=hooked.hooks()),
        )
    assert raised.value.exit_code == 9 and "no turns on Fridays" in str(raised.value)
    assert store.load_slot(sid).messages == []
    assert store.load_draft(sid, "default").prompt == "hello"
    assert "no turns on Fridays" in payloads(failed)[0]["error"]


def tools_with(hooked: Hooked, tmp_path: Path, approve: str = "auto") -> tuple[Adder, LiveTools]:
    adder = Adder(tmp_path)
    command = [sys.executable, str(adder.program), str(adder.runs)]
    schema = {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}}
    spec = ToolSpec(name="add", parameters=schema, command=command, approve=approve)
    return adder, LiveTools({"add": spec}, hooks=hooked.hooks())


def test_pre_tool_use_denies_a_call_and_the_model_is_told_why(
    store: Store, sid: str, hooked: Hooked, tmp_path: Path
) -> None:
    seen = hooked.add("PreToolUse", {"decision": "deny", "reason": "not on weekends"})
    adder, tools = tools_with(hooked, tmp_path)
    send_turn(
        store,
        sid,
        "add",
        Watching([[calls({"a": 1, "b": 2}), "ok"]]),
        TurnOptions(model="offline", tools=tools),
    )
    assert adder.ran() == []
    results = [m.text() for m in store.load_slot(sid).messages if m.role == "tool"]
    assert results == ["error: denied by a hook: not on weekends"]
    assert payloads(seen)[0]["arguments"] == {"a": 1, "b": 2}


def test_pre_tool_use_rewrites_arguments_which_are_checked_again(
    store: Store, sid: str, hooked: Hooked, tmp_path: Path
) -> None:
    hooked.add("PreToolUse", {"arguments": {"a": 10, "b": 20}})
    adder, tools = tools_with(hooked, tmp_path)
    send_turn(
        store,
        sid,
        "add",
        Watching([[calls({"a": 1, "b": 2}), "ok"]]),
        TurnOptions(model="offline", tools=tools),
    )
    assert adder.ran() == [{"a": 10, "b": 20}]
    (tmp_path / "bad").mkdir()
    bad = Hooked(tmp_path / "bad")
    bad.add("PreToolUse", {"arguments": {"a": "ten"}})
    adder2, tools2 = tools_with(bad, tmp_path / "bad")
    send_turn(
        store,
        sid,
        "add",
        Watching([[calls({"a": 1, "b": 2}, prefix="z"), "ok"]] * 2),
        TurnOptions(model="offline", tools=tools2),
    )
    assert adder2.ran() == []
    last_result = [m.text() for m in store.load_slot(sid).messages if m.role == "tool"][-1]
    assert last_result.startswith("error: the arguments a hook gave are invalid")


def test_pre_tool_use_allow_runs_a_tool_set_to_ask_with_no_terminal(
    store: Store, sid: str, hooked: Hooked, tmp_path: Path
) -> None:
    hooked.add("PreToolUse", {"decision": "allow"})
    adder, tools = tools_with(hooked, tmp_path, approve="ask")
    send_turn(
        store,
        sid,
        "add",
        Watching([[calls({"a": 2, "b": 2}), "ok"]]),
        TurnOptions(model="offline", tools=tools),
    )
    assert adder.ran() == [{"a": 2, "b": 2}]


def test_post_tool_use_redacts_what_the_model_gets_and_what_is_kept(
    store: Store, sid: str, hooked: Hooked, tmp_path: Path
) -> None:
    seen = hooked.add("PostToolUse", {"output": "[redacted]"})
    _, tools = tools_with(hooked, tmp_path)
    provider = Watching([[calls({"a": 40, "b": 2}), "ok"]])
    send_turn(store, sid, "add", provider, TurnOptions(model="offline", tools=tools))
    assert payloads(seen)[0]["output"].strip() == "42"
    (result,) = [m for m in store.load_slot(sid).messages if m.role == "tool"]
    assert result.text() == "[redacted]" and result.output is None
    assert provider.requests[1].messages[-1]["content"] == "[redacted]"


def long_slot(store: Store, sid: str) -> None:
    store.update_slot(
        sid,
        None,
        lambda slot: slot.extend(
            [
                Message(role="user" if n % 2 == 0 else "assistant", content=f"m{n}")
                for n in range(12)
            ]
        ),
    )


class Counting(OfflineProvider):
    def __init__(self) -> None:
        super().__init__()
        self.asked = 0

    def stream(self, request: ChatRequest) -> Iterator[Event]:
        self.asked += 1
        return super().stream(request)


def test_pre_compress_cancels_or_gives_the_summary(
    store: Store, sid: str, hooked: Hooked, tmp_path: Path
) -> None:
    long_slot(store, sid)
    hooked.add("PreCompress", {"cancel": True})
    provider = Counting()
    done = compress(store, sid, None, keep_recent=4, provider=provider, hooks=hooked.hooks())
    assert done.cancelled and done.folded == 0 and provider.asked == 0
    assert len(store.load_slot(sid).messages) == 12
    (tmp_path / "given").mkdir()
    given = Hooked(tmp_path / "given")
    given.add("PreCompress", {"summary": "They counted to twelve."})
    done = compress(store, sid, None, keep_recent=4, provider=provider, hooks=given.hooks())
    assert provider.asked == 0 and done.folded == 8
    assert [m.text() for m in store.load_slot(sid).compressed] == ["They counted to twelve."]


def test_post_compress_rewrites_the_summary_and_keeps_fewer(
    store: Store, sid: str, hooked: Hooked
) -> None:
    long_slot(store, sid)
    seen = hooked.add("PostCompress", {"summary": "Rewritten.", "keep_recent": 2})
    done = compress(
        store, sid, None, keep_recent=4, provider=OfflineProvider(), hooks=hooked.hooks()
    )
    slot = store.load_slot(sid)
    assert [m.text() for m in slot.compressed] == ["Rewritten."]
    assert len(slot.messages) == 2 and done.kept == 2
    assert payloads(seen)[0]["summary"].startswith("Extract of")


def test_pre_tool_use_ask_asks_even_about_a_tool_set_to_auto(
    store: Store, sid: str, hooked: Hooked, tmp_path: Path
) -> None:
    """With no one to ask (no terminal), an ask fails closed: exit 9, nothing runs."""
    hooked.add("PreToolUse", {"decision": "ask"})
    adder, tools = tools_with(hooked, tmp_path, approve="auto")
    provider = Watching([[calls({"a": 1, "b": 1}), "ok"]])
    with pytest.raises(Blocked, match="needs approval"):
        send_turn(store, sid, "add", provider, TurnOptions(model="offline", tools=tools))
    assert adder.ran() == []
    asked: list[str] = []
    adder2, tools2 = tools_with(hooked, tmp_path, approve="auto")
    tools2.ask = lambda spec, arguments, argv: asked.append(spec.name) or False
    send_turn(
        store,
        sid,
        "add",
        Watching([[calls({"a": 1, "b": 1}), "ok"]]),
        TurnOptions(model="offline", tools=tools2),
    )
    assert asked == ["add"] and adder2.ran() == []
    assert [m.text() for m in store.load_slot(sid).messages if m.role == "tool"] == [
        "error: denied by the user's approval policy"
    ]
