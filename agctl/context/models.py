"""The stored documents: messages, slots and sessions (pydantic v2).

Every model keeps unknown fields (`extra="allow"`), so a document written by a newer
minor version of agctl survives a rewrite by this one.
"""

import functools
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal, Self, get_args

import orjson
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    NonNegativeInt,
    PrivateAttr,
    StringConstraints,
    TypeAdapter,
    ValidationError,
    field_validator,
    model_validator,
)

from agctl.base import schema
from agctl.base.errors import NotFound, ReadonlySlot, UsageError
from agctl.base.vocab import (
    DEVELOPER_ROLE,
    ZONES,
    DeriveStrategy,
    MergeStrategy,
    Role,
    SlotMode,
    Zone,
)
from agctl.context.tokens import MESSAGE_OVERHEAD, estimate_content, estimate_text

if TYPE_CHECKING:
    from agctl.providers.base import Usage


def utcnow() -> datetime:
    return datetime.now(UTC)


def isoformat(moment: datetime) -> str:
    """The same form pydantic writes into documents: ISO 8601 with a 'Z'."""
    return moment.isoformat().replace("+00:00", "Z")


class Model(BaseModel):
    # Each model (and every subclass, in config, checkpoints and turns) builds its
    # validator on first use, not at import: a command pays only for the models it uses,
    # and the bases are never built. Those marked EAGER are the exception.
    model_config = ConfigDict(extra="allow", defer_build=True)


# For a model a turn uses both on its own and inside another (a Slot, a Session, the
# Config, a Checkpoint): built at import, its schema is made once and reused by the models
# that hold it; deferred, it would be made twice (measured: a turn runs 1% fewer
# instructions, `session list` 2%, than with every model built at import; SlotConfig,
# Profile and SlotEntry made eager too, 0.8% fewer again).
EAGER = ConfigDict(defer_build=False)


class ToolCallFunction(Model):
    name: str
    arguments: str = ""


class ToolCall(Model):
    id: str
    type: str = "function"
    function: ToolCallFunction


_METADATA_FIELDS = frozenset(
    {"created_at", "model", "usage", "tokens", "output", "output_sha256", "wire_parts", "pinned"}
)


def _is_none(value: object) -> bool:
    return value is None


def _is_not_true(value: object) -> bool:
    return value is not True


def _empty_dict() -> dict[Any, Any]:
    """`default_factory=dict` as a Python function, for the reason _empty_list gives."""
    return {}


def _empty_list() -> list[Any]:
    """`default_factory=list` as a Python function: pydantic reads each factory's signature,
    and reading the builtin's parses its text form (tokenize's regexes: ~4 ms of a turn)."""
    return []


class Deferred:
    """A field type validated through its own TypeAdapter, of the type `load` returns,
    imported and built when a value needs it: every command loads the config, few of them
    hold or use a tool or a hook, and building those models with the config was a tenth
    of a turn's start. Errors keep their place in the document; the JSON schema is the
    adapted type's own."""

    def __init__(self, load: Callable[[], Any]) -> None:
        self.load = load
        self._adapter: Any = None

    def adapter(self) -> Any:
        if self._adapter is None:
            self._adapter = TypeAdapter(self.load())
        return self._adapter

    def __get_pydantic_core_schema__(self, source: Any, handler: Any) -> Any:
        from pydantic_core import core_schema

        def validate(value: Any) -> Any:
            if not value and isinstance(value, dict | list):
                return type(value)()
            return self.adapter().validate_python(value)

        def serialize(value: Any, info: Any) -> Any:
            if not value:
                return type(value)()
            return self.adapter().dump_python(value, mode=info.mode, exclude_none=info.exclude_none)

        return core_schema.no_info_plain_validator_function(
            validate,
            serialization=core_schema.plain_serializer_function_ser_schema(
                serialize, info_arg=True
            ),
        )

    def __get_pydantic_json_schema__(self, schema: Any, handler: Any) -> Any:
        return handler(self.adapter().core_schema)


@functools.cache
def shared_field(**kwargs: Any) -> Any:
    """`Field(**kwargs)`, made once for all the fields defined alike: a model class copies
    the field it is given, and each call of Field cost a turn ~0.1M instructions (the
    models every command builds made 86, 37 of them repeats)."""
    return Field(**kwargs)


def _optional(**kwargs: Any) -> Any:
    """An optional field left out of documents while unset, to keep them small."""
    return shared_field(default=None, exclude_if=_is_none, **kwargs)


class Message(Model):
    """One chat message in the OpenAI shape, plus agctl's metadata."""

    model_config = EAGER
    role: Role
    content: str | list[dict[str, Any]] | None = None
    name: str | None = _optional()
    tool_calls: list[ToolCall] | None = _optional()
    tool_call_id: str | None = _optional()
    reasoning: str | None = _optional()
    created_at: datetime | None = _optional()
    model: str | None = _optional()
    usage: dict[str, Any] | None = _optional()
    tokens: int | None = _optional(ge=0)
    # A tool result's whole output (up to 1 MiB) when the model got it cut, and the
    # sha256 of what the tool printed: kept, never sent.
    output: str | None = _optional()
    output_sha256: str | None = _optional()
    # What only the wire a reply came from understands and needs back, by wire name
    # (agctl.providers.base.WirePart): sent to that wire only, never to another.
    wire_parts: dict[str, list[dict[str, Any]]] | None = _optional()
    # Kept verbatim by every compression (`msg pin`); stored only when true, never sent.
    pinned: bool | None = Field(default=None, exclude_if=_is_not_true)

    @model_validator(mode="after")
    def _check_shape(self) -> Self:
        if self.content is None and not (self.role == "assistant" and self.tool_calls):
            raise ValueError(f"a {self.role} message needs content")
        if self.role == "tool" and not self.tool_call_id:
            raise ValueError("a tool message needs tool_call_id")
        return self

    @classmethod
    def from_openai(cls, data: Any) -> Self:
        """Validate one message in the OpenAI chat format (`reasoning_content` accepted,
        and the `developer` role, OpenAI's newer name for `system`, stored as `system`)."""
        if isinstance(data, dict) and data.get("role") == DEVELOPER_ROLE:
            data = {**data, "role": "system"}
        if isinstance(data, dict) and "reasoning_content" in data:
            data = dict(data)
            reasoning = data.pop("reasoning_content")
            data.setdefault("reasoning", reasoning)
        return cls.model_validate(data)

    def to_openai(self) -> dict[str, Any]:
        """The message as an OpenAI chat message: metadata dropped, everything else kept."""
        return messages_to_openai([self])[0]

    def text(self) -> str:
        """The content as plain text (text parts joined; other parts skipped)."""
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "".join(str(p.get("text", "")) for p in self.content if isinstance(p, dict))

    def token_count(self) -> int:
        """Provider-reported tokens when known, else the estimate."""
        if self.tokens is not None:
            return self.tokens
        return self.counts()[0]

    def counts(self) -> tuple[int, int]:
        """`token_count()` and `content_estimate()`, the content estimated once (what a
        zone's memo sums for each message of a long slot)."""
        fields = self.__dict__  # one attribute lookup, not three
        content, tokens = fields["content"], fields["tokens"]
        if type(content) is str:  # nearly always: estimate_content's tests skipped
            estimate = MESSAGE_OVERHEAD + estimate_text(content)
        else:
            estimate = MESSAGE_OVERHEAD + estimate_content(content)
        if tokens is not None:
            return tokens, estimate
        total = estimate
        for call in fields["tool_calls"] or ():
            total += estimate_text(call.function.name) + estimate_text(call.function.arguments)
        return total, estimate

    def content_estimate(self) -> int:
        """The estimate of the message's content alone, whatever the provider reported:
        what the offline provider counts as prompt tokens."""
        return MESSAGE_OVERHEAD + estimate_content(self.content)


def messages_to_openai(
    messages: Sequence[Message], *, reasoning: bool = True
) -> list[dict[str, Any]]:
    """Many messages in the OpenAI chat format, serialised in one call (fast for long slots).

    `reasoning=False` leaves out `reasoning_content`, as requests must: DeepSeek refuses
    earlier rounds' reasoning in the input.
    """
    requests: list[dict[str, Any] | None] = []
    others: list[Message] = []  # what only pydantic dumps as it should, in order
    for message in messages:
        request = _plain_request(message, reasoning)
        requests.append(request)
        if request is None:
            others.append(message)
    if not others:
        return requests  # type: ignore[return-value]  # no None left
    dumped = iter(_dumped_requests(others, reasoning=reasoning))
    return [next(dumped) if request is None else request for request in requests]


def _plain_request(message: Message, reasoning: bool) -> dict[str, Any] | None:
    """A plain message's request form (text content, no tool calls, no unknown fields),
    built as pydantic's dump would build it, in a fifth of the time; None for any other."""
    fields = message.__dict__
    content = fields["content"]
    if type(content) is not str or fields["tool_calls"] is not None or message.__pydantic_extra__:
        return None
    request: dict[str, Any] = {"role": fields["role"], "content": content}
    if fields["name"] is not None:
        request["name"] = fields["name"]
    if fields["tool_call_id"] is not None:
        request["tool_call_id"] = fields["tool_call_id"]
    if reasoning and fields["reasoning"] is not None:
        request["reasoning_content"] = fields["reasoning"]
    return request


def _dumped_requests(messages: Sequence[Message], *, reasoning: bool) -> list[dict[str, Any]]:
    """The request form of any messages, by pydantic (what _plain_request must match)."""
    excluded = set(_METADATA_FIELDS) if reasoning else {*_METADATA_FIELDS, "reasoning"}
    dumped: list[dict[str, Any]] = message_list_adapter().dump_python(
        list(messages), mode="json", exclude={"__all__": excluded}
    )
    for data in dumped:
        if "reasoning" in data:
            data["reasoning_content"] = data.pop("reasoning")
    return dumped


@functools.cache
def message_list_adapter() -> TypeAdapter[list[Message]]:
    return TypeAdapter(list[Message])


_PLAIN_TEXT = frozenset({"name", "tool_call_id", "reasoning", "model", "output", "output_sha256"})
_ROLES = frozenset(get_args(Role))
_TIME_LENGTHS = (20, 27)  # "YYYY-MM-DDTHH:MM:SSZ", and with microseconds
_UNSET = dict.fromkeys(Message.model_fields)  # each field's default (None: a test checks)
_new_model = object.__new__
_set = object.__setattr__
# BaseModel's slots, set as pydantic sets them, without looking each name up again.
_set_fields_set = BaseModel.__dict__["__pydantic_fields_set__"].__set__
_set_extra = BaseModel.__dict__["__pydantic_extra__"].__set__
_set_private = BaseModel.__dict__["__pydantic_private__"].__set__


def stored_messages(items: object) -> list[Message]:
    """`message_list_adapter().validate_python(items)` for messages parsed from a store's
    JSON, which are nearly always in the plain form agctl writes (text content, no tool
    calls, no unknown fields): those are checked field by field and built here, in half
    the time pydantic takes (most of reading a long slot); any other goes through
    pydantic. Raises pydantic's ValidationError (placed within `items` or not)."""
    if type(items) is not list:
        return message_list_adapter().validate_python(items)
    return [
        Message.model_validate(item) if (message := _plain_message(item)) is None else message
        for item in items
    ]


def plain_request_message(data: object) -> Message | None:
    """The Message of a request's message in the plainest form, a role and a text and
    nothing else (what a client resending its history mostly sends), built as the store
    builds its own (a quarter of pydantic's time); None for any other form."""
    if type(data) is not dict or len(data) != 2 or "role" not in data or "content" not in data:
        return None
    return _plain_message(data)


def _plain_message(data: object) -> Message | None:
    """The Message pydantic would validate from `data` when it is in the plain form, else
    None. A `created_at` only in the form agctl writes, "YYYY-MM-DDTHH:MM:SS[.ffffff]Z"."""
    if type(data) is not dict:
        return None
    values = {**_UNSET, **data}
    if len(values) != len(_UNSET):
        return None  # a field agctl does not know
    role = values["role"]
    if type(role) is not str or role not in _ROLES or type(values["content"]) is not str:
        return None
    if len(data) > 2:  # more than role and content
        for key, value in data.items():
            if value is None or key == "role" or key == "content":
                continue
            if key in _PLAIN_TEXT:
                if type(value) is not str:
                    return None
            elif key == "created_at":
                if type(value) is not str or len(value) not in _TIME_LENGTHS:
                    return None
                if value[10] != "T" or value[-1] != "Z" or (len(value) > 20 and value[19] != "."):
                    return None
                try:
                    values[key] = datetime.fromisoformat(value)
                except ValueError:
                    return None
            elif key == "tokens":
                if type(value) is not int or value < 0:
                    return None
            elif key == "pinned":
                if value is not True:
                    return None
            elif key != "usage" or type(value) is not dict:
                return None  # tool calls: pydantic builds them
    if role == "tool" and not values["tool_call_id"]:
        return None
    message = _new_model(Message)
    _set(message, "__dict__", values)
    _set_fields_set(message, set(data))
    _set_extra(message, {})
    _set_private(message, None)
    return message


class ZoneMemo:
    """What is known of a zone's messages while they stay the same: each one's token count
    summed (in all, and for tool results), the content estimate, and, once asked for,
    their request form. A zone that only grew is brought up to date by its new messages
    alone, so a turn costs what it adds, not the slot's length."""

    __slots__ = ("_requests", "estimate", "seen", "tokens", "tool_messages", "tool_tokens")

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        self.seen: list[Message] = []
        self.tokens = 0
        self.tool_tokens = 0
        self.tool_messages = 0
        self.estimate = 0
        self._requests: list[dict[str, Any]] | None = None

    def update(self, messages: list[Message]) -> Self:
        """Bring the memo up to `messages`: kept when the ones it saw are still their
        beginning (the same objects: a C-speed check; equal copies pass too), else redone."""
        known = len(self.seen)
        prefix = messages[:known]
        if len(prefix) != known or prefix != self.seen:
            self._reset()
            prefix, known = [], 0
        new = messages[known:]
        self.seen = prefix + new
        if new:
            tokens, tool_tokens, tool_messages, estimates = 0, 0, 0, 0
            for message in new:
                fields = message.__dict__
                content = fields["content"]
                if (
                    type(content) is str
                    and content.isascii()
                    and fields["tokens"] is None
                    and not fields["tool_calls"]
                ):
                    # counts() of nearly every message of a long slot, without its two
                    # calls: estimate_text's ASCII case, and no reported count or calls.
                    count = estimate = MESSAGE_OVERHEAD + (len(content) + 3) // 4
                else:
                    count, estimate = message.counts()
                tokens += count
                estimates += estimate
                if fields["role"] == "tool":
                    tool_tokens += count
                    tool_messages += 1
            self.tokens += tokens
            self.tool_tokens += tool_tokens
            self.tool_messages += tool_messages
            self.estimate += estimates
            if self._requests is not None:
                self._requests.extend(messages_to_openai(new, reasoning=False))
        return self

    def requests(self) -> list[dict[str, Any]]:
        """The zone in a request's form (no reasoning; shared: never to be changed)."""
        if self._requests is None:
            self._requests = messages_to_openai(self.seen, reasoning=False)
        return self._requests


# How many old messages the focused view drops at once (see agctl.context.view.focused_messages).
# bench/stride.py, 200 turns of 300-token messages at --recent 20, cached input at a
# tenth: stride 1 (sliding) 24 % cached; 8: 77 %, 0.43 of sliding's cost; 16: 87 %,
# 0.35, with 25 % more input sent than sliding; 32: 92 %, 0.34, with 52 % more. 16 is
# within 3 % of the cheapest for a window of N to N+15 messages (at --recent 10: 86 %).
DEFAULT_STRIDE = 16


def _is_default_stride(value: object) -> bool:
    """Left out of a slot's document at the default, so a slot written before strides
    reads, hashes and dumps as it did (its draft's slot state included)."""
    return value == DEFAULT_STRIDE


class FocusedConfig(Model):
    keep_system: bool = True
    recent_messages: NonNegativeInt = 10
    # The window drops old messages `stride` at a time, so its start (and the cached
    # prefix of the request) stays put for about stride/2 turns; 1 slides every turn.
    stride: int = Field(default=DEFAULT_STRIDE, ge=1, exclude_if=_is_default_stride)
    summary_override: str | None = None
    # Regenerate summary_override with the model after every N turns (None: never).
    auto_summary_every: int | None = _optional(ge=1)

    def updated(self, changes: Mapping[str, Any] | None) -> "FocusedConfig":
        """A copy with `changes` applied (None values are ignored; "" clears the summary,
        an auto_summary_every of 0 turns it off)."""
        data = self.model_dump()
        data.update({k: v for k, v in (changes or {}).items() if v is not None})
        if data.get("summary_override") == "":
            data["summary_override"] = None
        if data.get("auto_summary_every") == 0:
            data["auto_summary_every"] = None
        return FocusedConfig.model_validate(data)


class SlotSource(Model):
    kind: Literal["new", "derived", "static"] = "new"
    parent_id: str | None = None
    strategy: DeriveStrategy | None = None
    # The slot its line of derives began with (agctl.context.cache.cache_key routes them together).
    root_id: str | None = _optional()


BUDGET_RATIOS = {
    "system": 0.06,
    "history": 0.64,
    "tools": 0.08,
    "tool_results": 0.14,
    "reserve": 0.08,
}


BUDGET_PARTS: tuple[str, ...] = tuple(BUDGET_RATIOS)


def _budget_part(value: object) -> int | float | None:
    """A part is a token count (an integer from 0), a share of the window (a fraction
    strictly between 0 and 1, such as 0.1), or None for its auto share."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError("must be a token count (2000), a share of the window (0.1) or null")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"a token count must be 0 or more, not {value}")
        return value
    if not 0 < value < 1:
        raise ValueError(
            f"{value} is neither a token count nor a share: write counts as whole numbers "
            "(2000) and shares as fractions strictly between 0 and 1 (0.1 for 10 %)"
        )
    return value


BudgetPart = Annotated[int | float | None, BeforeValidator(_budget_part)]


class TokenBudget(Model):
    """A budget in tokens for one window: what a request is checked against."""

    model_config = EAGER
    system: int
    history: int
    tools: int
    tool_results: int
    reserve: int

    @property
    def total(self) -> int:
        return self.system + self.history + self.tools + self.tool_results + self.reserve


class ContextBudget(Model):
    """How a slot shares the model's window between the parts of a request.

    Each part is a token count (an integer from 0), a share of the window (a fraction
    strictly between 0 and 1), or null: then it gets its auto share of the window, so a
    budget that names only some parts never gets fixed numbers for the others.
    """

    model_config = EAGER

    system: BudgetPart = None
    history: BudgetPart = None
    tools: BudgetPart = None
    tool_results: BudgetPart = None
    reserve: BudgetPart = None

    @classmethod
    def auto(cls, context_window: int) -> TokenBudget:
        """Split `context_window` by the fixed ratios in BUDGET_RATIOS."""
        if context_window <= 0:
            raise ValueError("context_window must be positive")
        parts = {k: int(context_window * r) for k, r in BUDGET_RATIOS.items()}
        parts["history"] += context_window - sum(parts.values())
        return TokenBudget(**parts)

    def resolve(self, context_window: int) -> TokenBudget:
        """The budget in tokens for `context_window`: shares taken of it, unset parts auto."""
        auto = self.auto(context_window)
        parts: dict[str, int] = {}
        for part in BUDGET_PARTS:
            value = getattr(self, part)
            if value is None:
                parts[part] = getattr(auto, part)
            elif isinstance(value, float):
                parts[part] = int(context_window * value)
            else:
                parts[part] = value
        return TokenBudget(**parts)


# A rolling summary's sections as the prompt gives them (or "plain"): text, not empty.
SummaryTemplate = Annotated[str, StringConstraints(min_length=1, max_length=4000)]


def _summary_template() -> Any:
    return SummaryTemplate | None


class SlotConfig(Model):
    model_config = EAGER
    mode: SlotMode = "full"
    focused: FocusedConfig = Field(default_factory=FocusedConfig)
    source: SlotSource = Field(default_factory=SlotSource)
    # None: split the model's context window by fixed ratios (ContextBudget.auto).
    budget: ContextBudget | None = None
    # None: follow the session, then the config.
    auto_compress: bool | None = None
    # The sections of a rolling summary (agctl.turn.summaries); "plain": one paragraph;
    # None: goal, decisions, user instructions, artifacts, open tasks.
    # (Deferred: checked when a slot has one; every command builds this model. Left out
    # of the document while unset: a null stored there was checked on every read.)
    summary_template: Annotated[Any, Deferred(_summary_template)] = _optional()
    # An agctl.context.clearing.ClearToolResults as JSON, validated when set and when used
    # (typed Any: every command builds this model, and a dict field cost a turn 0.1 % more);
    # None: every tool result is sent whole (left out of the document while unset).
    clear_tool_results: Any = _optional()


class MergeRecord(Model):
    """One `slot merge` into this slot: from where, how, and which messages."""

    source: str
    strategy: MergeStrategy
    hashes: list[str]
    added: int
    at: datetime = shared_field(default_factory=utcnow)


class SlotMeta(Model):
    model_config = EAGER
    parent_id: str | None = None
    # Content hashes of the messages the slot was derived with: what it added since is
    # everything else (see slot merge).
    branch: list[str] = shared_field(default_factory=_empty_list)
    merges: list[MergeRecord] = shared_field(default_factory=_empty_list)
    message_count: int = 0
    total_tokens: int = 0
    created_at: datetime = shared_field(default_factory=utcnow)
    updated_at: datetime = shared_field(default_factory=utcnow)
    # The last request a turn sent on the slot, as agctl.context.cache.sent_marks keeps it: what
    # `ctx show --cache` compares the next request with (a plain dict, read rarely).
    sent: dict[str, Any] | None = _optional()


class Document(Model):
    """A top-level stored document: versioned and upgraded on read."""

    kind: ClassVar[str]
    schema_version: str = "1.0"
    # The revision the backend stored it at: advanced on every write, never reused by
    # another document of the same id (see agctl.storage.base.next_rev). The backend's,
    # so never part of a dump (exports, checkpoints and hashes leave it out); the file
    # backend writes it into the document itself (see storage.file.backend.dump_document).
    rev: int = Field(default=0, ge=0, exclude=True)

    @model_validator(mode="before")
    @classmethod
    def _upgrade(cls, data: Any) -> Any:
        return schema.upgrade(cls.kind, data)

    @field_validator("schema_version")
    @classmethod
    def _check_version(cls, value: str) -> str:
        schema.parse_version(value)
        return value

    @classmethod
    def from_json(cls, raw: bytes | str) -> Self:
        """The document from its stored JSON (pydantic's errors): what backends read with."""
        return cls.model_validate_json(raw)


class Slot(Document):
    """A named context: config, meta and three zones (immutable, compressed, messages)."""

    kind: ClassVar[str] = "slot"
    schema_version: str = schema.format_version(schema.CURRENT["slot"])
    id: str
    config: SlotConfig = Field(default_factory=SlotConfig)
    meta: SlotMeta = Field(default_factory=SlotMeta)
    immutable: list[Message] = shared_field(default_factory=_empty_list)
    compressed: list[Message] = shared_field(default_factory=_empty_list)
    messages: list[Message] = shared_field(default_factory=_empty_list)
    _memos: dict[str, ZoneMemo] = PrivateAttr(default_factory=dict)

    @classmethod
    def from_json(cls, raw: bytes | str) -> Self:
        """`Slot.model_validate_json(raw)`, in half the time for a long slot: its zones'
        messages are built by stored_messages. Raises the same errors, placed the same
        (an invalid document is validated again, by pydantic alone, to say where)."""
        try:
            data = orjson.loads(raw)
        except orjson.JSONDecodeError:
            data = None
        slot = cls.header(data)
        if slot is None:
            return cls.model_validate_json(raw)  # not a slot of this format: pydantic says
        try:
            zones: dict[str, list[Message]] = {
                zone: stored_messages(data[zone]) for zone in ZONES if zone in data
            }
        except ValidationError:
            return cls.model_validate_json(raw)
        slot.__dict__.update(zones)
        return slot

    @classmethod
    def header(cls, data: object) -> Self | None:
        """The slot of a stored document (parsed, not validated) with its zones empty:
        config and meta (which counts the messages) without validating a message. None
        when it is not a valid slot document of the current format (to be upgraded, or
        wrong: the whole read says what is wrong)."""
        current = cls.model_fields["schema_version"].default
        if type(data) is not dict or data.get("schema_version") != current:
            return None
        try:
            return cls.model_validate({**data, **{zone: [] for zone in ZONES if zone in data}})
        except ValidationError:
            return None

    def memo(self, zone: Zone) -> ZoneMemo:
        """The zone's memo, up to date (see ZoneMemo): counts without counting again."""
        memos = self._memos
        memo = memos.get(zone)
        if memo is None:
            memo = memos[zone] = ZoneMemo()
        return memo.update(getattr(self, zone))

    @property
    def readonly(self) -> bool:
        return self.config.mode == "readonly"

    def check_writable(self, action: str) -> None:
        if self.readonly:
            raise ReadonlySlot(self.id, action)

    def refresh_meta(self) -> None:
        """Recompute the derived counts and stamp the update time."""
        self.meta.message_count = sum(len(getattr(self, zone)) for zone in ZONES)
        self.meta.total_tokens = sum(self.memo(zone).tokens for zone in ZONES)
        self.meta.updated_at = utcnow()

    def position(self, index: int, *, insert: bool = False) -> int:
        """The non-negative position of `index`, or NotFound when it is out of range."""
        size = len(self.messages)
        upper = size if insert else size - 1
        position = index + size if index < 0 else index
        if not 0 <= position <= upper:
            raise NotFound(
                f"slot {self.id!r} has {size} message{'s' if size != 1 else ''}; "
                f"index {index} is out of range"
            )
        return position

    def get(self, index: int) -> Message:
        return self.messages[self.position(index)]

    def find(self, roles: set[str]) -> list[int]:
        return [i for i, m in enumerate(self.messages) if m.role in roles]

    def append(self, message: Message) -> int:
        self.check_writable("append")
        self.messages.append(message)
        return len(self.messages) - 1

    def extend(self, messages: list[Message], *, replace: bool = False) -> int:
        self.check_writable("import")
        if replace:
            self.messages = list(messages)
        else:
            self.messages.extend(messages)
        return len(messages)

    def insert(self, index: int, message: Message) -> int:
        self.check_writable("insert")
        position = self.position(index, insert=True)
        self.messages.insert(position, message)
        return position

    def edit(self, index: int, content: str) -> tuple[int, Message]:
        """Replace a message's text; return its position and the new message."""
        self.check_writable("edit")
        position = self.position(index)
        old = self.messages[position]
        if old.content is None and old.tool_calls:
            raise UsageError(f"message {index} holds tool calls, not text content")
        updated = old.model_copy(update={"content": content, "tokens": None})
        self.messages[position] = updated
        return position, updated

    def remove(self, index: int) -> tuple[int, Message]:
        """Remove a message; return the position it had and the message."""
        self.check_writable("remove")
        position = self.position(index)
        return position, self.messages.pop(position)

    def pop(self, index: int = -1) -> tuple[int, Message]:
        """Remove and return a message (the last by default), with the position it had."""
        self.check_writable("pop")
        position = self.position(index)
        return position, self.messages.pop(position)

    def pin(self, indices: Sequence[int], *, pinned: bool = True) -> list[int]:
        """Pin (or unpin) the messages at `indices`, so every compression keeps them
        verbatim; return their positions, in order. Request bytes do not change."""
        self.check_writable("pin" if pinned else "unpin")
        positions = sorted({self.position(index) for index in indices})
        for position in positions:
            message = self.messages[position]
            self.messages[position] = message.model_copy(update={"pinned": pinned or None})
        return positions

    def pinned(self) -> list[int]:
        """The positions of the pinned messages of the incremental zone."""
        return [i for i, m in enumerate(self.messages) if m.pinned]

    def retain(self, roles: set[str]) -> int:
        """Keep only messages whose role is in `roles`; return how many were dropped."""
        self.check_writable("retain")
        kept = [m for m in self.messages if m.role in roles]
        dropped = len(self.messages) - len(kept)
        self.messages = kept
        return dropped

    def clear(self) -> int:
        self.check_writable("clear")
        dropped = len(self.messages)
        self.messages = []
        return dropped


def _is_zero(value: int) -> bool:
    return value == 0


class ModelCost(Model):
    model_config = EAGER
    requests: int = 0
    # Of those, the requests no one billed (answered offline or from a cassette): they
    # cost 0, known, whatever the model's price; left out of documents while 0.
    free_requests: int = Field(default=0, exclude_if=_is_zero)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    # None: unknown, because a request of this model had no price.
    cost: float | None = 0.0
    # What the providers said of their cache and of the model's reasoning (see
    # agctl.providers.base.Usage), each summed over the requests that said it, and left
    # out (None: not reported) while none did: of prompt_tokens, read from the cache and
    # written to it; of completion_tokens, reasoning; of the writes, those kept an hour.
    cached_tokens: int | None = _optional()
    cache_write_tokens: int | None = _optional()
    reasoning_tokens: int | None = _optional()
    cache_write_1h_tokens: int | None = _optional()
    # The prompt tokens of the requests that reported their cache reads: what
    # cached_tokens is a share of (older turns, and some providers, said nothing).
    cache_prompt_tokens: int | None = _optional()
    # Over those requests, the cost with every input token at the input price less the
    # cost: dollars the cache saved (negative when writes cost more than reads saved).
    # None while no request reported its cache reads, or when one had no price.
    cache_saved: float | None = _optional()

    @classmethod
    def of(
        cls,
        usage: "Usage",
        cost: float | None,
        cache_saved: float | None = None,
        requests: int = 1,
        *,
        free: bool = False,
    ) -> "ModelCost":
        """The counts of `requests` requests (a turn's) that used `usage` in all."""
        reported = usage.cached_tokens is not None
        return cls(
            requests=requests,
            free_requests=requests if free else 0,
            prompt_tokens=usage.prompt_tokens,
            completion_tokens=usage.completion_tokens,
            cost=cost,
            cached_tokens=usage.cached_tokens,
            cache_write_tokens=usage.cache_write_tokens,
            reasoning_tokens=usage.reasoning_tokens,
            cache_write_1h_tokens=usage.cache_write_1h_tokens,
            cache_prompt_tokens=usage.prompt_tokens if reported else None,
            cache_saved=cache_saved if reported else None,
        )

    def merge(self, other: "ModelCost") -> None:
        """Count `other`'s requests into these: a cost unknown in either is unknown, a count
        reported by neither stays not reported."""
        self.requests += other.requests
        self.free_requests += other.free_requests
        self.prompt_tokens += other.prompt_tokens
        self.completion_tokens += other.completion_tokens
        self.cost = None if self.cost is None or other.cost is None else self.cost + other.cost
        reported = (
            "cached_tokens",
            "cache_write_tokens",
            "reasoning_tokens",
            "cache_write_1h_tokens",
        )
        for name in reported:
            mine, theirs = getattr(self, name), getattr(other, name)
            if theirs is not None:
                setattr(self, name, (mine or 0) + theirs)
        if other.cache_prompt_tokens is None:
            return  # nothing said of the cache: the saving stands as it was
        if self.cache_prompt_tokens is None:
            self.cache_saved = other.cache_saved
        elif self.cache_saved is not None and other.cache_saved is not None:
            self.cache_saved += other.cache_saved
        else:
            self.cache_saved = None  # a request that said had no price: unknown from now on
        self.cache_prompt_tokens = (self.cache_prompt_tokens or 0) + other.cache_prompt_tokens


class Cost(Model):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    # None: unknown, because a request of some model had no price (see by_model).
    cost: float | None = 0.0
    by_model: dict[str, ModelCost] = shared_field(default_factory=_empty_dict)


class Session(Document):
    kind: ClassVar[str] = "session"
    schema_version: str = schema.format_version(schema.CURRENT["session"])
    id: str
    parent_id: str | None = None
    title: str | None = None
    created_at: datetime = shared_field(default_factory=utcnow)
    updated_at: datetime = shared_field(default_factory=utcnow)
    system_prompt: str | None = None
    profile: str | None = None
    model: str | None = None
    current_slot: str = "default"
    turn_count: NonNegativeInt = 0
    cost: Cost = Field(default_factory=Cost)
    memory: dict[str, str] = shared_field(default_factory=_empty_dict)
    memory_in_context: bool = False
    auto_compress: bool | None = None
    # A session made by `ckpt fork`: the checkpoint it came from, {"checkpoint": id,
    # "turn": N, "created_at": time}; the turn and time find it again after `store gc`
    # gave it a new id (a plain dict: a model here would be built by every command).
    forked_from: dict[str, Any] | None = _optional()


class Draft(Document):
    """A prompt whose turn did not complete, kept so that nothing typed is lost (a draft
    an older agctl kept has no schema_version: it reads as 1.0)."""

    kind: ClassVar[str] = "draft"
    schema_version: str = schema.format_version(schema.CURRENT["draft"])
    prompt: str
    slot: str
    created_at: datetime = shared_field(default_factory=utcnow)
    error: str | None = None
    # The model's answer when it came but could not be committed (the slot changed).
    reply: Message | None = None
    # What the slot held when the draft was kept (agctl.store.drafts.slot_state) and how many
    # messages: a draft is not sent again onto a slot that changed since, unless forced.
    slot_state: str | None = None
    slot_messages: int | None = None
    # A tool loop's messages after the prompt (replies with tool calls, and the tool
    # results), kept after each step: a resumed turn goes on from them.
    steps: list[Message] = shared_field(default_factory=_empty_list)
    # The ids of the last step's calls that wait for a person's approval (no terminal
    # to ask on): `turn send --resume-draft --approve-call/--deny-call` decides them.
    awaiting_approval: list[str] = shared_field(default_factory=_empty_list)
