"""Messages and sessions in and out of agctl: OpenAI arrays, JSON lines, Markdown, exports."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from agctl.errors import AlreadyExists, InvalidId, InvalidInput, SchemaTooNew
from agctl.ids import validate_id
from agctl.models import Message, Session, Slot, messages_to_openai
from agctl.store import Store

ImportFormat = Literal["auto", "openai", "jsonl"]
ExportFormat = Literal["openai", "jsonl", "markdown", "text"]


def _decode_lines(data: bytes, source: str) -> list[Any]:
    items = []
    for number, line in enumerate(data.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            items.append(orjson.loads(line))
        except orjson.JSONDecodeError as exc:
            raise InvalidInput(f"{source}: line {number} is not valid JSON: {exc}") from None
    return items


def parse_messages(data: bytes, fmt: ImportFormat = "auto", source: str = "input") -> list[Message]:
    """Validate every message in `data` before returning any; raise InvalidInput otherwise."""
    if not data.strip():
        raise InvalidInput(f"{source}: is empty (an empty JSON array, [], means no messages)")
    if fmt in ("auto", "openai"):
        try:
            decoded = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            if fmt == "openai":
                raise InvalidInput(f"{source}: not valid JSON: {exc}") from None
            decoded = None
        if isinstance(decoded, dict) and isinstance(decoded.get("messages"), list):
            decoded = decoded["messages"]
        if isinstance(decoded, list):
            items = decoded
        elif fmt == "openai":
            raise InvalidInput(f"{source}: expected a JSON array of messages")
        elif isinstance(decoded, dict):
            items = [decoded]
        else:
            items = _decode_lines(data, source)
    else:
        items = _decode_lines(data, source)
    messages = []
    for index, item in enumerate(items):
        if not isinstance(item, dict):
            raise InvalidInput(f"{source}: message {index} is not a JSON object")
        try:
            messages.append(Message.from_openai(item))
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            detail = f"{where}: {first['msg']}" if where else first["msg"]
            raise InvalidInput(f"{source}: message {index} is invalid: {detail}") from None
    return messages


def export_messages(messages: Sequence[Message], fmt: ExportFormat = "openai") -> bytes:
    """openai: a JSON array of chat messages; jsonl: one message a line, metadata kept;
    markdown: a heading per message; text: `role: text` blocks for reading or grepping."""
    if fmt == "openai":
        return orjson.dumps(messages_to_openai(messages), option=orjson.OPT_INDENT_2) + b"\n"
    if fmt == "jsonl":
        return b"".join(m.model_dump_json().encode() + b"\n" for m in messages)
    blocks = []
    for message in messages:
        text = message.text()
        calls = [f"{c.function.name}({c.function.arguments})" for c in message.tool_calls or ()]
        if fmt == "markdown":
            title = message.role + (f" ({message.name})" if message.name else "")
            parts = [f"### {title}", *([text] if text else []), *(f"`→ {c}`" for c in calls)]
            blocks.append("\n\n".join(parts) + "\n")
        else:
            lines = [*([text] if text else []), *(f"→ {c}" for c in calls)]
            blocks.append(f"{message.role}: " + "\n".join(lines) + "\n")
    return "\n".join(blocks).encode()


class SessionExport(BaseModel):
    """A whole session as one document: `session export` writes it, `session import` reads it."""

    model_config = ConfigDict(extra="allow")

    schema_version: str = "1.0"
    kind: Literal["agctl.session"] = "agctl.session"
    agctl_version: str = ""
    session: Session
    slots: list[Slot]
    checkpoints: list[dict[str, Any]] = Field(
        default_factory=list, description="Checkpoint summaries, for information only."
    )

    @field_validator("schema_version")
    @classmethod
    def _not_newer(cls, value: str) -> str:
        from agctl.schema import parse_version

        if parse_version(value)[0] > 1:
            raise SchemaTooNew("export", value, "1.0")
        return value


def export_session(store: Store, session_id: str) -> SessionExport:
    """The session, every slot, and its checkpoints' metadata."""
    from agctl import __version__
    from agctl.checkpoints import Checkpointer

    summaries = Checkpointer(store).summaries(session_id)
    return SessionExport(
        agctl_version=__version__,
        session=store.load_session(session_id),
        slots=store.list_slots(session_id),
        checkpoints=[s.model_dump(mode="json") for s in summaries],
    )


def import_session(
    store: Store, data: bytes, *, as_id: str | None = None, source: str = "input"
) -> Session:
    """Validate a whole export, then write it as a new session (under `as_id` if given)."""
    try:
        document = SessionExport.model_validate_json(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "document"
        raise InvalidInput(f"{source}: not a session export: {where}: {first['msg']}") from None
    try:
        orjson.dumps(document.model_dump(mode="json"))
    except TypeError as exc:  # agctl's JSON tools hold integers of up to 64 bits
        raise InvalidInput(f"{source}: {exc}") from None
    session = document.session
    if as_id is not None:
        session = session.model_copy(update={"id": validate_id(as_id, "session")})
    if session.id in store.session_ids():
        raise AlreadyExists(
            f"session {session.id!r} already exists; import it under another id with --as NEW"
        )
    ids = [slot.id for slot in document.slots]
    if len(set(ids)) != len(ids):
        raise InvalidInput(f"{source}: the export holds two slots with the same id")
    try:
        validate_id(session.id, "session")
        for slot_id in ids:
            validate_id(slot_id, "slot")
    except InvalidId as exc:
        raise InvalidInput(f"{source}: {exc}") from None
    if "default" not in ids:
        raise InvalidInput(f"{source}: the export has no 'default' slot, which every session has")
    if session.current_slot not in ids:
        raise InvalidInput(f"{source}: the current slot {session.current_slot!r} is not exported")
    try:
        store.check_parent(session.id, session.parent_id)
    except InvalidInput as exc:
        raise InvalidInput(f"{source}: {exc}") from None
    store.materialize_session(session, document.slots)
    return session
