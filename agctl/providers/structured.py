"""Replies asked to follow a JSON Schema (`turn send --schema`), as each wire asks for them.

The request carries the schema (ChatRequest.response_schema); each wire says it its own way:
OpenAI's `response_format` of type json_schema (built here, so that it is part of the
request's parameters, and so of its fingerprint), Anthropic's one forced tool whose input
is the reply (SCHEMA_TOOL: agctl.turn.schema.reply_text turns its call back into the
reply's text), Gemini's `responseMimeType` with `responseJsonSchema`. The offline
provider answers with an instance built from the schema (`example_instance`), so a schema
turn works with no model at all.
Nothing here imports a JSON Schema library, nor the request model (which imports this
module to build its response_format): validating the reply is agctl.turn.schema's.
"""

from __future__ import annotations

import math
from typing import Any

# The name of the schema's reply in OpenAI's json_schema, and of the tool that carries it
# on the anthropic wire (both: letters, digits, _ and -, at most 64).
SCHEMA_NAME = "reply"
SCHEMA_TOOL = "structured_reply"
SCHEMA_TOOL_DESCRIPTION = "Give the reply: its input is the whole answer, as the schema says."
# How deep example_instance follows a schema (a recursive $ref would never end).
EXAMPLE_DEPTH = 32
# The integers the request body's encoder (orjson) carries: signed 64-bit.
LEAST_INT, MOST_INT = -(2**63), 2**63 - 1


def response_format(schema: dict[str, Any]) -> dict[str, Any]:
    """OpenAI's response_format for `schema`: strict (the server then guarantees the shape)
    exactly when the schema is one strict mode accepts (see strict_ready), else not (the
    server would refuse it with a 400); agctl validates the reply either way."""
    return {
        "type": "json_schema",
        "json_schema": {"name": SCHEMA_NAME, "schema": schema, "strict": strict_ready(schema)},
    }


def strict_ready(schema: Any) -> bool:
    """Whether OpenAI's strict mode takes `schema`: an object at the root, and every object
    in it closed (additionalProperties false) with all its properties required."""
    return isinstance(schema, dict) and schema.get("type") == "object" and _closed(schema, 0)


def _closed(schema: Any, depth: int) -> bool:
    if depth > EXAMPLE_DEPTH:
        return False
    if isinstance(schema, list):
        return all(_closed(item, depth + 1) for item in schema)
    if not isinstance(schema, dict):
        return True
    if schema.get("type") == "object" or "properties" in schema:
        properties = schema.get("properties", {})
        if schema.get("additionalProperties") is not False or not isinstance(properties, dict):
            return False
        if sorted(schema.get("required", [])) != sorted(properties):
            return False
    nested = ("properties", "$defs", "definitions")
    for key, value in schema.items():
        if key in nested and isinstance(value, dict):
            if not all(_closed(sub, depth + 1) for sub in value.values()):
                return False
        elif key in ("items", "anyOf", "allOf", "oneOf", "prefixItems") and not _closed(
            value, depth + 1
        ):
            return False
    return True


def example_instance(schema: Any, depth: int = 0, name: str = "") -> Any:
    """A small instance of `schema` made from the schema alone (the offline provider's
    reply): its const, first enum value, default or example, else the least value of its
    (first) type (a string: its property's `name`), every property of an object and the
    fewest items of an array. Keywords
    it does not follow ($ref, not, patterns) can make an instance that does not validate:
    the turn then says so (exit 11), as it would of a model's."""
    if depth > EXAMPLE_DEPTH or not isinstance(schema, dict):
        return None
    for key in ("const", "default"):
        if key in schema:
            return schema[key]
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return schema["enum"][0]
    if isinstance(schema.get("examples"), list) and schema["examples"]:
        return schema["examples"][0]
    for key in ("anyOf", "oneOf", "allOf"):
        if isinstance(schema.get(key), list) and schema[key]:
            return example_instance(schema[key][0], depth + 1)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), kind[0] if kind else None)
    if kind is None:
        kind = "object" if "properties" in schema else "array" if "items" in schema else None
    return _least(schema, kind, depth, name)


def _least(schema: dict[str, Any], kind: Any, depth: int, name: str) -> Any:
    """The least value of type `kind` that `schema`'s bounds allow."""
    if kind == "object":
        properties = schema.get("properties")
        if not isinstance(properties, dict):
            return {}
        return {key: example_instance(sub, depth + 1, key) for key, sub in properties.items()}
    if kind == "array":
        least = schema.get("minItems", 1)
        count = least if isinstance(least, int) and 0 <= least <= EXAMPLE_DEPTH else 1
        return [example_instance(schema.get("items", {}), depth + 1) for _ in range(count)]
    if kind == "string":
        least, most = schema.get("minLength", 0), schema.get("maxLength")
        text = name
        if isinstance(least, int) and len(text) < least <= 1024:
            text += "x" * (least - len(text))
        return text[:most] if isinstance(most, int) and most >= 0 else text
    if kind in ("integer", "number"):
        bound = schema.get("minimum", schema.get("exclusiveMinimum", 0))
        if not isinstance(bound, int | float) or isinstance(bound, bool):
            bound = 0
        value = bound + 1 if "exclusiveMinimum" in schema and "minimum" not in schema else bound
        if kind != "integer":
            return value
        least = math.ceil(value)
        # Past 64 bits, the same integer as a float: JSON Schema counts 1e300 an integer.
        return least if LEAST_INT <= least <= MOST_INT else float(least)
    if kind == "boolean":
        return False
    return None
