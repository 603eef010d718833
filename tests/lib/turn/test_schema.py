"""agctl.turn.schema and agctl.providers.structured: a schema read from its three forms,
a reply checked against it, and the offline model's instance of it."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import orjson
import pytest
from fake_openai import FakeOpenAI

from agctl.base.errors import EXIT_REPLY_INVALID, EXIT_USAGE, ReplyInvalid, UsageError
from agctl.providers.anthropic import AnthropicWire
from agctl.providers.base import ChatRequest, Finish, TextDelta, ToolCallDelta, Usage
from agctl.providers.gemini import GeminiWire
from agctl.providers.openai import OpenAIWire
from agctl.providers.structured import (
    SCHEMA_TOOL,
    example_instance,
    response_format,
    strict_ready,
)
from agctl.turn.schema import (
    MAX_SCHEMA_DEPTH,
    checked_reply,
    concise_schema,
    load_schema,
    reply_problem,
    reply_text,
)

DOG = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "age": {"type": "integer"},
        "bio": {"type": "string", "description": "a short bio"},
    },
    "required": ["name", "age", "bio"],
    "additionalProperties": False,
}


# ---- the concise form --------------------------------------------------------------------


def test_the_concise_form_with_commas_types_and_a_description() -> None:
    assert concise_schema("name, age int, bio: a short bio") == DOG


def test_newlines_separate_fields_when_there_is_one_so_a_description_may_hold_commas() -> None:
    schema = concise_schema("name str: first, then last\n\nscore float\nok bool: yes, or no\n")
    assert schema["properties"] == {
        "name": {"type": "string", "description": "first, then last"},
        "score": {"type": "number"},
        "ok": {"type": "boolean", "description": "yes, or no"},
    }
    assert schema["required"] == ["name", "score", "ok"]


def test_json_schema_type_names_are_taken_too() -> None:
    schema = concise_schema("a integer, b number, c boolean, d string")
    types = [p["type"] for p in schema["properties"].values()]
    assert types == ["integer", "number", "boolean", "string"]


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ("", "the schema is empty"),
        (" ,, ,\t", "the schema is empty"),
        ("\n\n", "the schema is empty"),
        (": just a description", "has no name before ':'"),
        ("age integr", "has type 'integr'; choose from str, int"),
        ("first name str", "has 3 words before its ':'"),
        ("a, b int, a", "schema field 'a' is given twice"),
        ("a\x00 int, b dict", "has type 'dict'"),
    ],
)
def test_a_concise_form_that_says_nothing_usable_is_a_usage_error_naming_it(
    given: str, said: str
) -> None:
    with pytest.raises(UsageError) as raised:
        load_schema(given)
    assert said in str(raised.value)
    assert raised.value.exit_code == EXIT_USAGE


# ---- a file, inline JSON, a list ---------------------------------------------------------


def test_inline_json_and_a_file_are_read_as_they_are(tmp_path: Path) -> None:
    path = tmp_path / "dog.json"
    path.write_text(json.dumps(DOG))
    assert load_schema(json.dumps(DOG)) == DOG
    assert load_schema(f"  {json.dumps(DOG)}\n") == DOG
    assert load_schema(str(path)) == DOG
    assert list(load_schema(str(path))["properties"]) == ["name", "age", "bio"]  # order kept


def test_multi_wraps_the_schema_as_an_objects_items_as_llm_does() -> None:
    assert load_schema("name, age int, bio: a short bio", multi=True) == {
        "type": "object",
        "properties": {"items": {"type": "array", "items": DOG}},
        "required": ["items"],
        "additionalProperties": False,
    }


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ("{", "the inline schema is not valid JSON"),
        ("[1, 2]", "must be a JSON object (a JSON Schema), not an array"),
        ('{"type": 5}', "is not a valid JSON Schema: at ['type']"),
        ('{"properties": {"a": {"minimum": "x"}}}', "at ['properties']['a']['minimum']"),
        ('{"a": NaN}', "not valid JSON"),
    ],
)
def test_json_that_is_not_a_schema_is_a_usage_error_naming_where(given: str, said: str) -> None:
    with pytest.raises(UsageError) as raised:
        load_schema(given)
    assert said in str(raised.value)


def test_a_path_that_is_not_a_file_never_becomes_a_field_named_after_it(tmp_path: Path) -> None:
    for given, said in (
        (str(tmp_path / "dgo.json"), "no such file"),
        ("dgo.json", "no such file"),
        (str(tmp_path), "is not a regular file"),
        ("/dev/null", "is not a regular file"),
    ):
        with pytest.raises(UsageError, match=said):
            load_schema(given)


def test_a_file_that_is_not_json_too_big_or_nested_too_deep_is_refused(tmp_path: Path) -> None:
    broken, big, deep = tmp_path / "broken.json", tmp_path / "big.json", tmp_path / "deep.json"
    broken.write_text("type: object")
    big.write_text('{"description": "' + "x" * (1024 * 1024) + '"}')
    deep.write_text('{"items": ' * 1000 + "{}" + "}" * 1000)
    with pytest.raises(UsageError, match=r"broken\.json is not valid JSON"):
        load_schema(str(broken))
    with pytest.raises(UsageError, match=r"big\.json: the schema is over 1024 KiB"):
        load_schema(str(big))
    with pytest.raises(UsageError, match="nested too deeply"):
        load_schema(str(deep))


def test_a_ref_that_does_not_resolve_within_the_schema_is_a_usage_error_naming_it() -> None:
    def refers(ref: str, **more: Any) -> str:
        return json.dumps({"type": "object", "properties": {"a": {"$ref": ref}}, **more})

    for ref in ("#/nope", "#/$defs/y", "https://example.com/x.json", "other.json"):
        with pytest.raises(UsageError, match=re.escape(f"has a $ref {ref!r}")):
            load_schema(refers(ref, **{"$defs": {"x": {"type": "integer"}}}))
    # What resolves within it is taken: its own pointers, an embedded $id, a metaschema.
    load_schema(refers("#/$defs/x", **{"$defs": {"x": {"type": "integer"}}}))
    load_schema(refers("#"))
    embedded = {"$id": "https://example.com/root", "$defs": {"x": {"$id": "x.json"}}}
    load_schema(refers("x.json", **embedded))
    load_schema(refers("https://json-schema.org/draft/2020-12/schema"))
    draft7 = {"$schema": "http://json-schema.org/draft-07/schema#", "definitions": {"x": {}}}
    load_schema(refers("#/definitions/x", **draft7))
    with pytest.raises(UsageError, match="#/definitions/y"):
        load_schema(refers("#/definitions/y", **draft7))


def test_a_schema_multi_whose_own_pointers_no_longer_resolve_under_items_is_refused() -> None:
    schema = {"$defs": {"x": {"type": "integer"}}, "properties": {"a": {"$ref": "#/$defs/x"}}}
    assert load_schema(json.dumps(schema)) == schema
    with pytest.raises(UsageError, match=r"--schema-multi .* has a \$ref '#/\$defs/x'"):
        load_schema(json.dumps(schema), multi=True)


def test_a_remote_ref_is_never_fetched() -> None:
    with FakeOpenAI() as server:
        schema = {"properties": {"a": {"$ref": f"{server.base_url}/dog.json"}}}
        with pytest.raises(UsageError, match="agctl fetches no schema"):
            load_schema(json.dumps(schema))
        # A schema not read by load_schema: the check says so, the network is not asked.
        assert reply_problem('{"a": 1}', schema) == (
            {"a": 1},
            f"the schema refers to '{server.base_url}/dog.json', not within it",
        )
        assert server.requests == []


def test_a_schema_deeper_than_a_request_body_carries_is_refused_one_just_within_is_sent() -> None:
    def deep(levels: int) -> str:  # the const's own levels, and the schema's around them
        return '{"const": ' + "[" * (levels - 1) + "]" * (levels - 1) + "}"

    schema = load_schema(deep(MAX_SCHEMA_DEPTH), multi=True)
    request = ChatRequest("m", [{"role": "user", "content": "x"}], response_schema=schema)
    for wire in (OpenAIWire(), AnthropicWire(), GeminiWire()):
        assert orjson.loads(wire.body(request))  # every wire's encoder carries it
    assert example_instance(schema)["items"][0] == orjson.loads(deep(MAX_SCHEMA_DEPTH))["const"]
    with pytest.raises(UsageError, match=f"nested too deeply \\(over {MAX_SCHEMA_DEPTH} levels"):
        load_schema(deep(MAX_SCHEMA_DEPTH + 1))


# ---- the reply checked -------------------------------------------------------------------


def test_a_valid_reply_is_parsed() -> None:
    assert checked_reply('{"name": "Rex", "age": 3, "bio": "good"}', DOG) == {
        "name": "Rex",
        "age": 3,
        "bio": "good",
    }


@pytest.mark.parametrize(
    ("reply", "said"),
    [
        ("Sure! Here is a dog.", "the reply is not JSON"),
        ('{"name": "Rex", "age": "three", "bio": ""}', "at $.age: 'three' is not of type"),
        ('{"name": "Rex", "bio": ""}', "at $: 'age' is a required property"),
        ('{"name": "Rex", "age": 1, "bio": "", "x": 1}', "Additional properties"),
        ('{"items": [{"name": "A", "age": 1, "bio": ""}, {"name": 2}]}', "at $.items[1]"),
    ],
)
def test_a_reply_that_does_not_follow_is_exit_11_naming_the_first_failing_path(
    reply: str, said: str
) -> None:
    schema = load_schema("name, age int, bio", multi="items" in reply)
    with pytest.raises(ReplyInvalid) as raised:
        checked_reply(reply, schema)
    assert said in str(raised.value)
    assert raised.value.exit_code == EXIT_REPLY_INVALID == 11


def test_a_huge_failing_value_is_cut_short_in_the_message() -> None:
    problem = reply_problem(
        json.dumps({"name": "x" * 10_000}), {"properties": {"name": {"maxLength": 3}}}
    )[1]
    assert problem is not None and len(problem) < 300 and problem.endswith("…")


# ---- how each wire is asked --------------------------------------------------------------


def test_strict_mode_exactly_when_every_object_is_closed_and_fully_required() -> None:
    assert strict_ready(DOG)
    assert strict_ready(load_schema("a, b int", multi=True))
    assert not strict_ready({**DOG, "additionalProperties": True})
    assert not strict_ready({**DOG, "required": ["name"]})
    assert not strict_ready({"type": "array", "items": DOG})  # strict wants an object root
    nested_open = {**DOG, "properties": {"pet": {"type": "object", "properties": {}}}}
    assert not strict_ready({**nested_open, "required": ["pet"]})
    assert response_format(DOG) == {
        "type": "json_schema",
        "json_schema": {"name": "reply", "schema": DOG, "strict": True},
    }
    assert response_format({"type": "object"})["json_schema"]["strict"] is False


def test_the_forced_tools_call_becomes_the_replys_text_and_other_events_pass() -> None:
    events = [
        ToolCallDelta(0, id="toolu_1", name=SCHEMA_TOOL),
        ToolCallDelta(0, arguments='{"name": '),
        ToolCallDelta(0, arguments='"Rex"}'),
        Usage(10, 5),
        Finish("tool_calls"),
    ]
    assert list(reply_text(iter(events))) == [
        TextDelta('{"name": '),
        TextDelta('"Rex"}'),
        Usage(10, 5),
        Finish("stop"),
    ]
    other = [ToolCallDelta(1, id="c", name="calc", arguments="{}"), Finish("tool_calls")]
    assert list(reply_text(iter(other))) == other


@pytest.mark.parametrize(
    "schema",
    [
        DOG,
        load_schema("name, age int, bio", multi=True),
        {"type": "object", "properties": {"kind": {"enum": ["a", "b"]}, "n": {"const": 3}}},
        {"type": "object", "properties": {"n": {"type": "integer", "minimum": 5}}},
        {"type": "object", "properties": {"n": {"type": "number", "exclusiveMinimum": 1}}},
        {"type": "object", "properties": {"s": {"type": "string", "minLength": 9}}},
        {"type": "object", "properties": {"s": {"type": "string", "maxLength": 2}}},
        {"type": "array", "items": {"type": "boolean"}, "minItems": 3},
        {"type": ["null", "string"]},
        {"anyOf": [{"type": "integer"}, {"type": "string"}]},
        {"properties": {"deep": {"properties": {"deeper": {"type": "null"}}}}},
        {},
    ],
)
def test_the_offline_models_instance_of_a_schema_follows_it(schema: dict[str, Any]) -> None:
    instance = example_instance(schema)
    assert reply_problem(json.dumps(instance), schema) == (instance, None)


def test_the_offline_instance_names_its_strings_after_their_properties() -> None:
    assert example_instance(DOG) == {"name": "name", "age": 0, "bio": "bio"}
