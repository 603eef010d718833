"""What the config holds of tools and hooks (ToolSpec, HookSpec), without the tool runner
or the hook runner (agctl.turn.tools and agctl.turn.hooks, which re-export these). The config
validates its tools and hooks with these models only when it holds some (agctl.config.file)."""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator, model_validator

from agctl.base.errors import UsageError
from agctl.base.ids import validate_id
from agctl.base.vocab import HookEvent, HookOnError, ToolApproval, ToolArgsMode
from agctl.context.models import Model, _empty_list

# The stdout a run keeps (the stored tool message's output); the rest is read and counted.
KEPT_OUTPUT = 1024 * 1024
DEFAULT_MAX_OUTPUT = 32 * 1024
# Below this a cut result would be mostly its marker.
MIN_MAX_OUTPUT = 256
DEFAULT_PARAMETERS: dict[str, Any] = {"type": "object", "properties": {}}
# OpenAI's rule for a function name, within agctl's rule for an id (so no '.').
_FUNCTION_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
DEFAULT_TIMEOUT_S = 10.0
# The hook events that only observe (a failure there warns, by default).
OBSERVING_EVENTS = frozenset({"TurnEnd", "TurnError", "PostRollback", "PostFork"})


class ToolSpec(Model):
    """One tool as the user defined it; a session stores its name, never this."""

    name: str
    description: str = ""
    parameters: dict[str, Any] = Field(default_factory=lambda: dict(DEFAULT_PARAMETERS))
    command: list[str] = Field(min_length=1)
    args: ToolArgsMode = "stdin"
    timeout_s: float = Field(default=30.0, gt=0, le=24 * 3600, allow_inf_nan=False)
    max_output: int = Field(default=DEFAULT_MAX_OUTPUT, ge=MIN_MAX_OUTPUT, le=KEPT_OUTPUT)
    cwd: str | None = None
    approve: ToolApproval = "ask"
    env_allow: list[str] = Field(default_factory=_empty_list)

    @field_validator("name")
    @classmethod
    def _name_is_an_id_and_a_function_name(cls, name: str) -> str:
        try:
            validate_id(name, "tool")
        except UsageError as exc:
            raise ValueError(str(exc)) from None
        if not _FUNCTION_NAME.fullmatch(name):
            raise ValueError(
                f"tool name {name!r} is not a valid function name: at most 64 letters, "
                "digits, '_' and '-'"
            )
        return name

    @field_validator("parameters")
    @classmethod
    def _parameters_describe_an_object(cls, parameters: dict[str, Any]) -> dict[str, Any]:
        # The cheap part of the check; the whole schema is checked by schema_problem.
        if parameters.get("type", "object") != "object":
            raise ValueError("a tool's parameters must be a schema of type 'object'")
        return parameters

    @field_validator("command")
    @classmethod
    def _command_can_be_run(cls, command: list[str]) -> list[str]:
        if not command[0]:
            raise ValueError("the command's first element (the program) must not be empty")
        if any("\x00" in part for part in command):
            raise ValueError("the command must not contain a NUL character")
        return command

    @field_validator("cwd")
    @classmethod
    def _cwd_is_a_path(cls, cwd: str | None) -> str | None:
        if cwd is not None and (not cwd or "\x00" in cwd):
            raise ValueError("cwd must be a non-empty path without NUL characters")
        return cwd

    @field_validator("env_allow")
    @classmethod
    def _globs_are_not_empty(cls, globs: list[str]) -> list[str]:
        if any(not glob for glob in globs):
            raise ValueError("an env_allow glob must not be empty")
        return globs


def _names_from_keys(value: Any) -> Any:
    """A tool table is keyed by name: an entry may leave its name out, never contradict it."""
    if not isinstance(value, dict):
        return value
    named: dict[Any, Any] = {}
    for key, entry in value.items():
        if isinstance(entry, dict):
            if entry.get("name", key) != key:
                raise ValueError(f"tool {key!r} is named {entry['name']!r}: its name is its key")
            entry = {"name": key, **entry}
        named[key] = entry
    return named


# `Config.tools` and `Profile.tools`: tools by name.
ToolTable = Annotated[dict[str, ToolSpec], BeforeValidator(_names_from_keys)]


# An MCP server's name: no '_', so the first '__' of SERVER__TOOL ends it (agctl.turn.mcp).
_SERVER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]{0,29}")
DEFAULT_CONNECT_TIMEOUT_S = 10.0


class McpServerSpec(Model):
    """One MCP server as the user added it: a command run over stdio, or a streamable HTTP
    URL (with headers, whose `${VAR}` are read from the environment when it connects);
    its tools' approval, timeouts and output cap are the server's."""

    name: str
    command: list[str] | None = None
    url: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    approve: ToolApproval = "ask"
    connect_timeout_s: float = Field(
        default=DEFAULT_CONNECT_TIMEOUT_S, gt=0, le=3600, allow_inf_nan=False
    )
    timeout_s: float = Field(default=30.0, gt=0, le=24 * 3600, allow_inf_nan=False)
    max_output: int = Field(default=DEFAULT_MAX_OUTPUT, ge=MIN_MAX_OUTPUT, le=KEPT_OUTPUT)
    env_allow: list[str] = Field(default_factory=_empty_list)

    @field_validator("name")
    @classmethod
    def _name_fits_a_function_name(cls, name: str) -> str:
        if not _SERVER_NAME.fullmatch(name):
            raise ValueError(
                f"MCP server name {name!r}: 1 to 30 letters, digits and '-' (no '_': a "
                "tool is offered as SERVER__TOOL), starting with a letter or digit"
            )
        return name

    @model_validator(mode="after")
    def _one_transport(self) -> McpServerSpec:
        if (self.command is None) == (self.url is None):
            raise ValueError("an MCP server has either a command (stdio) or a URL (HTTP)")
        if self.command is not None:
            if not self.command or not self.command[0]:
                raise ValueError("the command's first element (the program) must not be empty")
            if any("\x00" in part for part in self.command):
                raise ValueError("the command must not contain a NUL character")
        if self.url is not None and not self.url.startswith(("http://", "https://")):
            raise ValueError(f"the URL {self.url!r} is not http:// or https://")
        if self.headers and self.url is None:
            raise ValueError("headers are for an HTTP server (--url)")
        for header, value in self.headers.items():
            if not header.isascii() or not value.isascii() or "\n" in value or "\r" in value:
                raise ValueError(f"header {header!r} must be ASCII on one line")
        if any(not glob for glob in self.env_allow):
            raise ValueError("an env_allow glob must not be empty")
        return self


# `Config.mcp_servers`: MCP servers by name.
McpTable = Annotated[dict[str, McpServerSpec], BeforeValidator(_names_from_keys)]


class HookSpec(BaseModel):
    """One configured hook. Unknown fields are refused: `timeout` for `timeout_s` must
    not quietly mean the default."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    name: str
    event: HookEvent
    command: list[str] = Field(min_length=1)
    timeout_s: float = Field(default=DEFAULT_TIMEOUT_S, gt=0, le=86400, allow_inf_nan=False)
    on_error: HookOnError = "block"

    @model_validator(mode="before")
    @classmethod
    def _default_on_error(cls, data: Any) -> Any:
        """A failure blocks an event that can be blocked, and only warns on the others."""
        observing = isinstance(data, dict) and data.get("event") in OBSERVING_EVENTS
        if observing and "on_error" not in data:
            return {**data, "on_error": "warn"}
        return data

    @field_validator("name")
    @classmethod
    def _valid_name(cls, name: str) -> str:
        try:
            return validate_id(name, "hook")
        except UsageError as exc:
            raise ValueError(str(exc)) from None

    @field_validator("command")
    @classmethod
    def _argv(cls, command: list[str]) -> list[str]:
        if not command[0]:
            raise ValueError("the program (the command's first word) must not be empty")
        if any("\x00" in arg for arg in command):
            raise ValueError("a command argument cannot contain a NUL character")
        return command
