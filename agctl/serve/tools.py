"""`agctl serve`'s tools: a client's function definitions offered upstream, the calls the
model asks for handed back to the client, never run here.

A request's `tools`, `tool_choice` and `parallel_tool_calls` are checked as OpenAI's API
would and become the turn's caller tools (agctl.turn.send.TurnOptions.caller_tools): the
definitions go upstream as the client gave them, in its order. A reply asking for calls
ends the turn (finish_reason "tool_calls"); the client runs them and sends their results
as tool messages, the next turn's input (agctl.serve.chat places them).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, NamedTuple

from agctl.base.errors import InvalidInput

if TYPE_CHECKING:
    from agctl.context.models import Message
    from agctl.providers.base import Event

# OpenAI's rule for a function's name.
NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
MODES = ("auto", "none", "required")


class ClientTools(NamedTuple):
    """A request's tools, checked: the definitions, which the model may call ("auto",
    "none", "required" or a tool's name, as TurnOptions.tool_choice) and whether it may
    ask for several calls at once (None: the upstream's default)."""

    definitions: list[dict[str, Any]]
    choice: str | None = None
    parallel: bool | None = None

    def turn_fields(self) -> dict[str, Any]:
        """What agctl.turn.send.TurnOptions takes of them: the caller's tools."""
        return {
            "caller_tools": self.definitions,
            "tool_choice": self.choice,
            "parallel_tool_calls": self.parallel,
        }


def parse_tools(body: dict[str, Any]) -> ClientTools | None:
    """The request's tools (None when it offers none), InvalidInput naming the field."""
    tools = body.get("tools")
    if tools is None or tools == []:
        return None
    if not isinstance(tools, list):
        raise InvalidInput("tools: expected an array of function definitions")
    names: list[str] = []
    for index, tool in enumerate(tools):
        names.append(_definition(tool, f"tools[{index}]"))
        if names[-1] in names[:-1]:
            raise InvalidInput(f"tools[{index}]: a second function named {names[-1]!r}")
    parallel = body.get("parallel_tool_calls")
    if parallel is not None and not isinstance(parallel, bool):
        raise InvalidInput("parallel_tool_calls: expected a boolean")
    return ClientTools(tools, _choice(body.get("tool_choice"), names), parallel)


def _definition(tool: Any, where: str) -> str:
    """The name of a function definition, once checked."""
    if not isinstance(tool, dict) or tool.get("type") != "function":
        raise InvalidInput(f'{where}: expected {{"type": "function", "function": {{...}}}}')
    function = tool.get("function")
    if not isinstance(function, dict):
        raise InvalidInput(f"{where}.function: expected an object")
    name = function.get("name")
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise InvalidInput(
            f"{where}.function.name: expected 1 to 64 letters, digits, '_' or '-', not {name!r}"
        )
    if "parameters" in function and not isinstance(function["parameters"], dict):
        raise InvalidInput(f"{where}.function.parameters: expected a JSON Schema object")
    description = function.get("description")
    if description is not None and not isinstance(description, str):
        raise InvalidInput(f"{where}.function.description: expected a string")
    return name


def _choice(choice: Any, names: list[str]) -> str | None:
    """tool_choice as TurnOptions.tool_choice: a mode, or the name of one offered tool."""
    if choice is None or choice in MODES:
        return choice and str(choice)
    function = choice.get("function") if isinstance(choice, dict) else None
    name = function.get("name") if isinstance(function, dict) else None
    if not isinstance(choice, dict) or choice.get("type") != "function" or name is None:
        raise InvalidInput(
            'tool_choice: expected "auto", "none", "required" or '
            '{"type": "function", "function": {"name": ...}}'
        )
    if name not in names:
        raise InvalidInput(f"tool_choice: no tool named {name!r} is offered")
    return str(name)


def sent_back(message: Any) -> Any:
    """A request's message as OpenAI's request schema has it: a null field is absent, and
    a tool call is its id, type and function's name and arguments. A client sends back
    what its SDK put together of a reply (the openai SDK's stream: `refusal`, `parsed`
    and `audio` null, a call's `index` and `parsed_arguments`), and the slot keeps the
    reply as it came: compared as they are, the two would differ, and make a branch."""
    if not isinstance(message, dict):
        return message
    plain = {key: value for key, value in message.items() if value is not None}
    calls = plain.get("tool_calls")
    if isinstance(calls, list):
        plain["tool_calls"] = [_call(call) for call in calls]
    return plain


def _call(call: Any) -> Any:
    function = call.get("function") if isinstance(call, dict) else None
    if not isinstance(function, dict):
        return call  # refused as it is, by the message's own check
    kept = {key: call[key] for key in ("id", "type") if key in call}
    kept["function"] = {key: function[key] for key in ("name", "arguments") if key in function}
    return kept


def message_document(reply: Message) -> dict[str, Any]:
    """A reply as a chat completion's message: its text (null when it has none and asks
    for calls) and the calls it asks for."""
    document: dict[str, Any] = {"role": "assistant", "content": reply.text()}
    if reply.tool_calls:
        document["content"] = reply.text() or None
        document["tool_calls"] = [call.model_dump(mode="json") for call in reply.tool_calls]
    return document


class StreamedCalls:
    """A turn's events as the deltas of chat.completion.chunk: text as `content`, and
    tool call fragments as OpenAI streams them (the client's SDK accumulates by index):
    the first of a call with its index, id, type and name, the rest with arguments.

    Calls are numbered as agctl.turn.reply.ReplyBuilder tells them apart (by index, and a
    new id on an index in use starts another), and one without an id gets the id the
    builder gives it, so the ids a client sees are those the slot keeps."""

    def __init__(self) -> None:
        self._open: dict[int, tuple[int, str | None, bool]] = {}  # index: (number, id, named)
        self._count = 0

    def delta(self, event: Event) -> dict[str, Any] | None:
        """The delta of `event`, None for one a client is not sent (usage, finish)."""
        from agctl.providers.base import TextDelta, ToolCallDelta

        if isinstance(event, TextDelta):
            return {"content": event.text}
        if not isinstance(event, ToolCallDelta):
            return None
        begun = self._open.get(event.index)
        if begun is None or (event.id and begun[1] and event.id != begun[1]):
            number = self._count
            self._count += 1
            self._open[event.index] = (number, event.id, bool(event.name))
            function = {"name": event.name or "", "arguments": event.arguments}
            call = {
                "index": number,
                "id": event.id or f"call_{number}",
                "type": "function",
                "function": function,
            }
            return {"tool_calls": [call]}
        number, ident, named = begun
        more: dict[str, Any] = {"arguments": event.arguments}
        if event.name and not named:  # a name after the call began: sent once
            self._open[event.index] = (number, ident, True)
            more["name"] = event.name
        return {"tool_calls": [{"index": number, "function": more}]}
