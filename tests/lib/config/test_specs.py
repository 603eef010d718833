"""agctl.config.specs: a tool's and a hook's definition as the config file holds it, its
defaults and what it refuses."""

from __future__ import annotations

from typing import Any

import pytest
from helpers import tool_spec as spec
from pydantic import ValidationError

from agctl.config.specs import HookSpec


def test_on_error_defaults_to_what_the_event_can_do() -> None:
    assert HookSpec(name="a", event="TurnStart", command=["x"]).on_error == "block"
    assert HookSpec(name="a", event="TurnEnd", command=["x"]).on_error == "warn"
    assert HookSpec(name="a", event="TurnEnd", command=["x"], on_error="block").on_error == "block"
    assert HookSpec(name="a", event="TurnEnd", command=["x"]).timeout_s == 10


def test_the_light_spec_module_knows_the_same_observing_events_as_the_runner() -> None:
    """HookSpec (agctl.config.specs, loaded with the config) defaults on_error by the events
    that only observe; the runner's table must agree."""
    from agctl.config.specs import OBSERVING_EVENTS
    from agctl.turn.hooks import EVENTS

    assert {event for event, rule in EVENTS.items() if not rule.may_block} == OBSERVING_EVENTS


def test_a_tool_has_the_documented_defaults() -> None:
    tool = spec()
    assert (tool.args, tool.timeout_s, tool.max_output, tool.cwd, tool.approve) == (
        "stdin",
        30.0,
        32 * 1024,
        None,
        "ask",
    )
    assert tool.parameters == {"type": "object", "properties": {}}
    assert tool.env_allow == []


@pytest.mark.parametrize(
    ("fields", "needle"),
    [
        ({"name": "a.b"}, "function name"),
        ({"name": "../x"}, "'..'"),
        ({"name": "-x"}, "not valid"),
        ({"name": "x" * 65}, "function name"),
        ({"command": []}, "at least 1"),
        ({"command": [""]}, "must not be empty"),
        ({"command": ["a\x00b"]}, "NUL"),
        ({"args": "shell"}, "stdin"),
        ({"approve": "yes"}, "auto"),
        ({"timeout_s": 0}, "greater than 0"),
        ({"max_output": 10}, "greater than or equal to 256"),
        ({"max_output": 2 * 1024 * 1024}, "less than or equal"),
        ({"parameters": {"type": "string"}}, "type 'object'"),
        ({"env_allow": [""]}, "must not be empty"),
    ],
)
def test_a_bad_definition_is_refused_naming_what(fields: dict[str, Any], needle: str) -> None:
    with pytest.raises(ValidationError, match=needle):
        spec(**fields)


def test_a_name_may_use_letters_digits_underscore_and_dash() -> None:
    assert spec(name="get_weather-2").name == "get_weather-2"
