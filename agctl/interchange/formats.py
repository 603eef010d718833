"""Messages and sessions in and out of agctl: OpenAI arrays, JSON lines, Markdown, exports."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import orjson
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from agctl.base.errors import AlreadyExists, InvalidId, InvalidInput, SchemaTooNew
from agctl.base.ids import validate_id
from agctl.base.validation import validation_summary
from agctl.base.vocab import DEVELOPER_ROLE, ZONES, ExportFormat, ImportFormat
from agctl.context.models import Message, Session, Slot, messages_to_openai
from agctl.store import Store
from agctl.store.checkpoints import CheckpointHistory


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
            summary = validation_summary(exc)
            raise InvalidInput(f"{source}: message {index} is invalid: {summary}") from None
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


# An export with its checkpoint history is version 2: an agctl that reads only version 1
# would import it without the history, so it refuses it instead, naming both versions.
EXPORT_VERSION = "1.0"
EXPORT_WITH_HISTORY_VERSION = "2.0"


def system_for_developer(message: Any) -> Any:
    """A message with the `developer` role as a `system` one (agctl stores that)."""
    if isinstance(message, dict) and message.get("role") == DEVELOPER_ROLE:
        return {**message, "role": "system"}
    return message


class SessionExport(BaseModel):
    """A whole session as one document: `session export` writes it, `session import` reads it."""

    model_config = ConfigDict(extra="allow")

    schema_version: str = Field(
        default=EXPORT_VERSION,
        description=f"{EXPORT_VERSION}, or {EXPORT_WITH_HISTORY_VERSION} with checkpoint_log",
    )
    kind: Literal["agctl.session"] = "agctl.session"
    agctl_version: str = ""
    session: Session
    slots: list[Slot]
    checkpoints: list[dict[str, Any]] = Field(
        default_factory=list, description="Checkpoint summaries, for information only."
    )
    checkpoint_log: CheckpointHistory | None = Field(
        default=None,
        exclude_if=lambda value: value is None,
        description="The checkpoint history (`session export --checkpoints`).",
    )

    @field_validator("schema_version")
    @classmethod
    def _not_newer(cls, value: str) -> str:
        from agctl.base.schema import parse_version

        if parse_version(value)[0] > parse_version(EXPORT_WITH_HISTORY_VERSION)[0]:
            raise SchemaTooNew("export", value, EXPORT_WITH_HISTORY_VERSION)
        return value

    @model_validator(mode="before")
    @classmethod
    def _developer_is_system(cls, data: Any) -> Any:
        """Slots exported by other tools may say `developer` for `system`."""
        if not isinstance(data, dict) or not isinstance(data.get("slots"), list):
            return data
        slots = []
        for slot in data["slots"]:
            if isinstance(slot, dict):
                slot = dict(slot)
                for zone in ZONES:
                    if isinstance(slot.get(zone), list):
                        slot[zone] = [system_for_developer(m) for m in slot[zone]]
            slots.append(slot)
        return {**data, "slots": slots}


def export_session(store: Store, session_id: str, *, checkpoints: bool = False) -> SessionExport:
    """The session, every slot, its checkpoints' metadata, and with `checkpoints` their
    whole history (verified first)."""
    from agctl import __version__
    from agctl.store.checkpointer import Checkpointer

    checkpointer = Checkpointer(store)
    history = checkpointer.export_history(session_id) if checkpoints else None
    summaries = checkpointer.summaries(session_id)
    return SessionExport(
        schema_version=EXPORT_WITH_HISTORY_VERSION if checkpoints else EXPORT_VERSION,
        agctl_version=__version__,
        session=store.load_session(session_id),
        slots=store.list_slots(session_id),
        checkpoints=[s.model_dump(mode="json") for s in summaries],
        checkpoint_log=history,
    )


def import_session(
    store: Store, data: bytes, *, as_id: str | None = None, source: str = "input"
) -> Session:
    """Validate a whole export, then write it as a new session (under `as_id` if given)."""
    try:
        document = SessionExport.model_validate_json(data)
    except ValidationError as exc:
        summary = validation_summary(exc, "document")
        raise InvalidInput(f"{source}: not a session export: {summary}") from None
    try:
        orjson.dumps(document.model_dump(mode="json"))
    except TypeError as exc:  # agctl's JSON tools hold integers of up to 64 bits
        raise InvalidInput(f"{source}: {exc}") from None
    session = document.session
    if as_id is not None:
        session = session.model_copy(update={"id": validate_id(as_id, "session")})
    if session.id in store.session_ids():
        raise AlreadyExists(
            f"session {session.id!r} already exists",
            hint="import it under another id with --as NEW",
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
    log_bytes = b""
    removed: list[str] = []
    if document.checkpoint_log is not None:
        from agctl.store.checkpointer import Checkpointer

        history = document.checkpoint_log
        try:
            for identifier in history.removed:
                validate_id(identifier, "checkpoint")
            log_bytes = history.log_bytes()
            Checkpointer(store).verify_import(session.id, log_bytes)
        except (InvalidId, InvalidInput) as exc:
            raise InvalidInput(f"{source}: {exc}") from None
        removed = list(history.removed)
    store.materialize_session(session, document.slots, checkpoint_log=log_bytes, removed=removed)
    return session
