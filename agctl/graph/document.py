"""The JSON form of the session graph (Graph.to_json), as pydantic models: the schema
`agctl schema graph` prints. The graph is built as plain data; these only describe it."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class _Part(BaseModel):
    model_config = ConfigDict(extra="allow")


class Current(_Part):
    session: str | None
    slot: str | None


class _Node(_Part):
    id: str = Field(pattern=r"^n[0-9]+$", description="synthetic: never user text")
    session: str
    slot: str | None
    label: str = Field(description="display text (may hold user text)")


class SessionNode(_Node):
    kind: Literal["session"]
    title: str | None
    parent: str | None
    current: bool
    orphan: bool
    missing: bool = Field(description="a stand-in for an orphan's parent that is gone")
    created_at: str | None


class SlotNode(_Node):
    kind: Literal["slot"]
    mode: str
    messages: int
    tokens: int
    current: bool = Field(description="the session's current slot")
    depth: int = Field(description="derivation depth: 0 for a slot not derived")
    source: str
    created_at: str
    turns: list[dict[str, Any]] | None = Field(
        default=None, description="with --turns: the slot's messages (zone, role, text, tokens)"
    )


class CheckpointNode(_Node):
    kind: Literal["checkpoint"]
    checkpoint: str
    turn: int
    checkpoint_label: str | None
    auto: bool
    created_at: str


class GraphEdge(_Part):
    from_: str = Field(alias="from")
    to: str
    kind: Literal["derived", "forked", "parent", "merged", "rolled_back"]
    strategy: str | None
    dashed: bool
    at: str | None = Field(
        default=None, description="when the derive, merge, fork or rollback happened"
    )


class GraphDocument(_Part):
    """`agctl session graph --format json`: version 1."""

    version: Literal[1]
    current: Current
    nodes: list[Annotated[SessionNode | SlotNode | CheckpointNode, Field(discriminator="kind")]]
    edges: list[GraphEdge]
