"""agctl.turn.setup: what a command line chose, resolved into one model setup."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agctl.base.errors import NotFound, UsageError
from agctl.config.file import Config, ConfigFile
from agctl.config.specs import HookSpec
from agctl.store import Store
from agctl.turn.send import send_turn
from agctl.turn.setup import (
    ModelChoice,
    ModelSetup,
    ToolsChoice,
    TurnChoice,
    TurnPlan,
    hooks_in_use,
    plan_turn,
)


def test_a_choice_resolves_as_its_keywords_do(store: Store) -> None:
    sid = store.create_session(model="session-model").id
    choice = ModelChoice(model="flag-model", provider="offline")
    chosen = ModelSetup.chosen(store, sid, choice)
    assert chosen.settings.model == "flag-model"
    assert chosen.settings.provider == "offline"
    assert (
        chosen.settings
        == ModelSetup.resolve(store, sid, model="flag-model", provider="offline").settings
    )


def test_nothing_chosen_leaves_the_session_settings(store: Store) -> None:
    sid = store.create_session(model="session-model").id
    assert ModelSetup.chosen(store, sid, ModelChoice()).settings.model == "session-model"


def test_a_cassette_or_a_script_chooses_the_provider(store: Store, tmp_path: Path) -> None:
    sid = store.create_session().id
    cassette = ModelSetup.chosen(store, sid, ModelChoice(cassette=tmp_path / "c.cassette"))
    assert (cassette.settings.provider, cassette.cassette) == ("replay", tmp_path / "c.cassette")
    script = ModelSetup.chosen(store, sid, ModelChoice(script=tmp_path / "s.txt"))
    assert (script.settings.provider, script.script) == ("offline", tmp_path / "s.txt")


# ---- a turn assembled in one place ----------------------------------------------------------

SCHEMA = {"type": "object", "properties": {"path": {"type": "string"}}}


@pytest.fixture
def tools_file(tmp_path: Path) -> Path:
    """Tools `cat` and `wc`, defined in a file (as --tools-file gives them)."""
    path = tmp_path / "tools.json"
    path.write_text(
        json.dumps(
            [
                {
                    "name": name,
                    "description": f"Run {name}",
                    "parameters": SCHEMA,
                    "command": [name],
                }
                for name in ("cat", "wc")
            ]
        )
    )
    return path


@pytest.fixture
def hooked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A config with one TurnEnd hook and call limits of its own."""
    path = tmp_path / "config.json"
    monkeypatch.setenv("AGCTL_CONFIG", str(path))
    hook = HookSpec(name="done", event="TurnEnd", command=["true"])
    ConfigFile(path).save(Config(hooks=[hook], max_calls_per_reply=3, max_calls_per_turn=9))


def offered(plan: TurnPlan) -> list[str]:
    assert plan.options.tools is not None
    return [tool["function"]["name"] for tool in plan.options.tools.definitions()]


def test_a_planned_turn_has_the_chosen_tools_hooks_and_limits(
    store: Store, tools_file: Path, hooked: None
) -> None:
    sid = store.create_session(model="session-model").id
    asked: list[str] = []

    def ask() -> None:
        asked.append("asked")

    tools = ToolsChoice(names=("wc",), tools_file=tools_file)
    chosen = TurnChoice(ModelChoice(provider="offline"), tools, {"max_steps": 2})
    plan = plan_turn(store, sid, chosen, ask=ask, slot="default", temperature=0.5)
    assert offered(plan) == ["wc"]
    assert plan.options.hooks is not None and plan.options.hooks.has("TurnEnd")
    assert (plan.options.max_steps, plan.options.tool_jobs) == (2, 1)
    assert (plan.options.max_calls_per_reply, plan.options.max_calls_per_turn) == (3, 9)
    assert (plan.options.model, plan.options.slot, plan.options.temperature) == (
        "session-model",
        "default",
        0.5,
    )
    assert asked == ["asked"]  # once, for the tool offered

    limits = {"max_calls_per_reply": 1, "max_calls_per_turn": 2}
    given = plan_turn(store, sid, TurnChoice(tools=tools, loop=limits), ask=ask)
    assert (given.options.max_calls_per_reply, given.options.max_calls_per_turn) == (1, 2)


def test_a_dry_run_plan_fires_no_hook_and_asks_nothing(
    store: Store, tools_file: Path, hooked: None
) -> None:
    sid = store.create_session().id
    asked: list[str] = []
    tools = ToolsChoice(every=True, tools_file=tools_file)
    plan = plan_turn(
        store, sid, TurnChoice(tools=tools), dry_run=True, ask=lambda: asked.append("x")
    )
    assert plan.options.hooks is None
    assert asked == []
    assert offered(plan) == ["cat", "wc"]


def test_no_tool_means_no_toolbox_and_nothing_asked(store: Store) -> None:
    sid = store.create_session().id
    plan = plan_turn(store, sid, TurnChoice(), ask=lambda: pytest.fail("asked"))
    assert plan.options.tools is None and plan.options.hooks is None
    with pytest.raises(UsageError, match="no tool is offered"):
        plan_turn(store, sid, TurnChoice(tools=ToolsChoice(approve="auto")))


def test_an_unknown_tool_is_refused_when_the_turn_is_planned(
    store: Store, tools_file: Path
) -> None:
    sid = store.create_session().id
    chosen = TurnChoice(tools=ToolsChoice(names=("cat", "nope"), tools_file=tools_file))
    with pytest.raises(NotFound, match=r"no tool named nope \(tools: cat, wc\)"):
        plan_turn(store, sid, chosen)


def test_the_planned_turn_sends_to_the_chosen_provider_and_records(
    store: Store, tmp_path: Path
) -> None:
    sid = store.create_session().id
    script = tmp_path / "script.json"
    script.write_text(json.dumps(["Scripted."]))
    record = tmp_path / "turns.cassette"
    plan = plan_turn(store, sid, TurnChoice(ModelChoice(script=script), record=record))
    assert plan.setup.settings.provider == "offline"
    assert not record.exists()  # the provider is built when the turn is sent
    result = send_turn(store, sid, "hello", plan.provider(), plan.options)
    assert result.reply.text() == "Scripted."
    assert record.stat().st_size > 0
    assert store.load_session(sid).turn_count == 1


def test_a_dry_run_shows_the_request_and_writes_nothing(store: Store) -> None:
    sid = store.create_session(system_prompt="Be brief.").id
    plan = plan_turn(store, sid, TurnChoice(ModelChoice(provider="offline")), dry_run=True)
    shown = plan.request(store, sid, "hello")
    assert (shown["provider"], shown["url"], shown["slot"], shown["turn"]) == (
        "offline",
        None,
        "default",
        1,
    )
    messages = shown["request"]["messages"]
    assert messages[0] == {"role": "system", "content": "Be brief."}
    assert messages[-1] == {"role": "user", "content": "hello"}
    assert shown["tokens"] > 0
    assert store.load_session(sid).turn_count == 0


def test_a_command_outside_a_turn_has_the_hooks_of_the_config(hooked: None, tmp_path: Path) -> None:
    found = hooks_in_use(tmp_path)
    assert found is not None and found.has("TurnEnd")


def test_with_no_hook_anywhere_a_command_outside_a_turn_loads_none(tmp_path: Path) -> None:
    assert hooks_in_use(tmp_path) is None
