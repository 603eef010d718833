"""JSON Schemas a reply must follow: read from a file, inline JSON or a concise form, and
checked against the reply with the jsonschema library (imported here only when used).

The concise form is llm's (`name, age int, bio: a short bio`): fields separated by commas,
or by newlines when there is one (a description may then hold commas); each field is a
NAME, an optional TYPE (str, int, float, bool, or string, integer, number, boolean; str
when left out) and an optional `: description`. It makes an object schema with every
field required and no other field allowed, which is also what OpenAI's strict mode needs.
A schema for a list (--schema-multi) is, as llm makes it, an object whose `items` holds
them: {"items": [...]}, since every wire's structured output wants an object at the root.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import orjson

from agctl.base.errors import ReplyInvalid, UsageError
from agctl.providers.base import Event, Finish, TextDelta, ToolCallDelta
from agctl.providers.structured import SCHEMA_TOOL

if TYPE_CHECKING:
    from jsonschema.protocols import Validator
    from referencing import Resource
    from referencing._core import Resolver

# The concise form's types, as JSON Schema types.
CONCISE_TYPES = {
    "str": "string",
    "int": "integer",
    "float": "number",
    "bool": "boolean",
    **{name: name for name in ("string", "integer", "number", "boolean")},
}
# The largest schema file read: a schema is a few kilobytes; this bounds a mistake.
MAX_SCHEMA_BYTES = 1024 * 1024
# How much of a failing value an error shows.
SHOWN_CHARS = 200
# The deepest schema taken: a request's body nests it a few levels down, and its encoder
# (orjson) stops at 255 levels; a real schema is a dozen levels deep.
MAX_SCHEMA_DEPTH = 128


def load_schema(given: str, *, multi: bool = False) -> dict[str, Any]:
    """The JSON Schema `given` names: inline JSON (it starts with `{` or `[`), the path of a
    file holding one, else the concise form (never text with a `/` or ending in .json: a
    file that is not there); with `multi`, a schema for a list of them ({"items": [...]}).
    Anything that is not a usable schema is a UsageError (exit 2)."""
    text = given.strip()
    if text.startswith(("{", "[")):
        schema = _json(text.encode(), "the inline schema")
    elif text and os.path.isfile(given):
        schema = _json(_read(given), given)
    elif text.endswith(".json") or os.sep in text:
        # Meant as a file: a typo must not become a schema of one field named after it.
        found = "is not a regular file" if os.path.exists(given) else "no such file"
        raise UsageError(
            f"schema {given!r}: {found} (a schema is a file, inline JSON, or fields such as "
            "'name, age int')"
        )
    else:
        schema = concise_schema(given)
    check_schema(schema, "the schema")
    if not multi:
        return schema
    # Nested under items, a '#/...' of the schema's own points elsewhere: said now, not late.
    check_refs(wrapped := multi_schema(schema), "the schema of --schema-multi (under items)")
    return wrapped


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as file:
            data = file.read(MAX_SCHEMA_BYTES + 1)
    except OSError as exc:
        raise UsageError(f"{path}: cannot read the schema: {exc.strerror}") from None
    if len(data) > MAX_SCHEMA_BYTES:
        raise UsageError(f"{path}: the schema is over {MAX_SCHEMA_BYTES // 1024} KiB")
    return data


def _json(data: bytes, where: str) -> dict[str, Any]:
    try:
        schema = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise UsageError(f"{where} is not valid JSON: {exc}") from None
    if not isinstance(schema, dict):
        raise UsageError(f"{where} must be a JSON object (a JSON Schema), not {_kind(schema)}")
    return schema


def _kind(value: Any) -> str:
    return {list: "an array", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(value), "a number"
    )


def concise_schema(text: str) -> dict[str, Any]:
    """The object schema of llm's concise form (see the module docstring); a field that
    is not NAME [TYPE] [: description], a type not known or a name given twice is a
    UsageError naming it."""
    separator = "\n" if "\n" in text else ","
    fields = [field.strip() for field in text.split(separator) if field.strip()]
    if not fields:
        raise UsageError(
            "the schema is empty: give a JSON Schema (a file or inline JSON) or fields "
            "such as 'name, age int, bio: a short bio'"
        )
    properties: dict[str, Any] = {}
    for field in fields:
        head, colon, description = field.partition(":")
        words = head.split()
        if not words:
            raise UsageError(f"schema field {field!r} has no name before ':'")
        if len(words) > 2:
            raise UsageError(
                f"schema field {field!r} has {len(words)} words before its ':', where "
                "NAME [TYPE] is expected (a description goes after ':')"
            )
        name = words[0]
        kind = CONCISE_TYPES.get(words[1]) if len(words) == 2 else "string"
        if kind is None:
            known = ", ".join(CONCISE_TYPES)
            raise UsageError(f"schema field {name!r} has type {words[1]!r}; choose from {known}")
        if name in properties:
            raise UsageError(f"schema field {name!r} is given twice")
        properties[name] = {"type": kind}
        if colon and description.strip():
            properties[name]["description"] = description.strip()
    return {
        "type": "object",
        "properties": properties,
        "required": list(properties),
        "additionalProperties": False,
    }


def multi_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """A schema for a list of `schema`'s instances, as an object's `items` (as llm's)."""
    return {
        "type": "object",
        "properties": {"items": {"type": "array", "items": schema}},
        "required": ["items"],
        "additionalProperties": False,
    }


def _validator(schema: dict[str, Any]) -> Validator:
    from jsonschema.validators import validator_for
    from referencing import Registry

    # A registry that retrieves nothing: jsonschema's default one fetches a remote $ref
    # (any URL a schema names) with urllib.
    return validator_for(schema)(schema, registry=Registry())


def check_refs(schema: dict[str, Any], where: str) -> None:
    """Refuse (UsageError) a schema with a $ref that does not resolve within it, naming the
    first: a pointer to nowhere fails every reply, and a remote one is never fetched."""
    from jsonschema.validators import SPECIFICATIONS, validator_for  # type: ignore[attr-defined]
    from referencing import Specification
    from referencing.exceptions import Unresolvable
    from referencing.jsonschema import specification_with

    # As the validator reads it: the dialect its $schema names, the metaschemas known.
    meta = validator_for(schema).META_SCHEMA
    dialect_id = str(meta.get("$id", meta.get("id", "")))
    root = specification_with(dialect_id, default=Specification.OPAQUE).create_resource(schema)
    try:
        for ref, resolver in _refs(SPECIFICATIONS.resolver_with_root(root), root):
            try:
                resolver.lookup(ref)
            except Unresolvable:
                raise UsageError(
                    f"{where} has a $ref {ref!r} that does not resolve within it (a $ref "
                    "must point inside the schema, as '#/$defs/NAME': agctl fetches no schema)"
                ) from None
    except RecursionError:
        raise UsageError(f"{where} is nested too deeply to check") from None


def _refs(resolver: Resolver[Any], resource: Resource[Any]) -> Iterator[tuple[str, Resolver[Any]]]:
    """Every reference in `resource` and its subschemas, with the resolver it is read by."""
    contents = resource.contents
    if isinstance(contents, dict):
        for key in ("$ref", "$dynamicRef", "$recursiveRef"):
            if isinstance(contents.get(key), str):
                yield contents[key], resolver
    for sub in resource.subresources():
        yield from _refs(resolver.in_subresource(sub), sub)


def check_schema(schema: Any, where: str) -> None:
    """Refuse (UsageError) what is not a valid JSON Schema, naming where it is wrong, or
    one whose $ref does not resolve within it."""
    from jsonschema.exceptions import SchemaError
    from jsonschema.validators import validator_for

    if not isinstance(schema, dict):
        raise UsageError(f"{where} must be a JSON object (a JSON Schema), not {_kind(schema)}")
    if _deeper_than(schema, MAX_SCHEMA_DEPTH):
        raise UsageError(f"{where} is nested too deeply (over {MAX_SCHEMA_DEPTH} levels)")
    try:
        validator_for(schema).check_schema(schema)
    except SchemaError as exc:
        path = "".join(f"[{part!r}]" for part in exc.path)
        raise UsageError(
            f"{where} is not a valid JSON Schema: at {path or 'its root'}: {_short(exc.message)}"
        ) from None
    except RecursionError:
        raise UsageError(f"{where} is nested too deeply to check") from None
    check_refs(schema, where)


def _deeper_than(value: Any, most: int) -> bool:
    """Whether JSON `value` nests more than `most` levels (its values too: a const, an enum)."""
    level, items = 1, [value]
    while items := [
        child
        for item in items
        if isinstance(item, dict | list)
        for child in (item.values() if isinstance(item, dict) else item)
        if isinstance(child, dict | list)
    ]:
        level += 1
        if level > most:
            return True
    return False


def _short(text: str) -> str:
    return text if len(text) <= SHOWN_CHARS else text[: SHOWN_CHARS - 1] + "…"


def reply_problem(text: str, schema: dict[str, Any]) -> tuple[Any, str | None]:
    """The reply parsed, and what is wrong with it, if anything: not JSON, or the first
    place it fails the schema ($.items[0].age) and why."""
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        return None, f"the reply is not JSON ({exc})"
    from jsonschema.exceptions import best_match
    from referencing.exceptions import Unresolvable

    try:
        error = best_match(_validator(schema).iter_errors(value))
    except RecursionError:
        return value, "the reply is nested too deeply to check"
    except Unresolvable as exc:  # a schema not read by load_schema (check_refs refuses it)
        return value, f"the schema refers to {_short(str(exc.ref))!r}, not within it"
    if error is None:
        return value, None
    return value, f"at {error.json_path}: {_short(error.message)}"


def checked_reply(text: str, schema: dict[str, Any]) -> Any:
    """The reply parsed, when it is JSON valid against `schema`; else ReplyInvalid (exit
    11) naming the first failing path and reason."""
    value, problem = reply_problem(text, schema)
    if problem is not None:
        raise ReplyInvalid(
            f"the reply does not follow the schema: {problem}",
            hint="read it with 'agctl draft show'; the draft does not keep the schema: "
            "give --schema again with --resume-draft",
        )
    return value


def reply_text(events: Iterator[Event]) -> Iterator[Event]:
    """`events` with a call of SCHEMA_TOOL (the anthropic wire's forced tool) as the reply's
    text: its input is the JSON the schema asked for, not a call for the loop to run; the
    stop it caused is an ordinary one."""
    indexes: set[int] = set()
    for event in events:
        if isinstance(event, ToolCallDelta):
            if event.name == SCHEMA_TOOL:
                indexes.add(event.index)
            if event.index in indexes:
                if event.arguments:
                    yield TextDelta(event.arguments)
                continue
        elif isinstance(event, Finish) and indexes and event.reason == "tool_calls":
            yield Finish("stop")
            continue
        yield event
