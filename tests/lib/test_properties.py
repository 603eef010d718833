"""Property-based tests: documents survive the store and the interchange formats unchanged,
and random sequences of slot and message operations agree with a plain in-memory model.

Every example builds its Store on a fresh temporary directory, so no state leaks between
examples; the settings are derandomized so CI runs the same examples every time.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import pytest
from click.testing import CliRunner
from helpers import data_dir_files
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
)

from agctl.base.errors import AgctlError, AlreadyExists, NotFound, ProtectedSlot, ReadonlySlot
from agctl.cli import cli
from agctl.context.models import Message, Session, Slot
from agctl.interchange.formats import (
    export_messages,
    export_session,
    import_session,
    parse_messages,
)
from agctl.store import Store

T = TypeVar("T")

PROPERTY_SETTINGS = settings(
    max_examples=30,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
# Whole sessions are large documents written with fsync: fewer of them.
SESSION_SETTINGS = settings(PROPERTY_SETTINGS, max_examples=15)


@contextmanager
def fresh_store() -> Iterator[Store]:
    """A Store on its own temporary directory, removed afterwards."""
    root = tempfile.mkdtemp(prefix="agctl-prop-")
    try:
        yield Store(Path(root) / "data")
    finally:
        shutil.rmtree(root, ignore_errors=True)


# ---- strategies --------------------------------------------------------------------------

# Everything JSON can carry: any code point but lone surrogates, control characters included.
ANY_CHARACTER = st.characters(exclude_categories=["Cs"])
SAMPLES = st.sampled_from(
    [
        "上下文窗口的管理",
        "こんにちは、世界",
        "🧪🚀 👩‍👩‍👧 🇯🇵",
        "\x00\x01\x1b[31m\x7f",
        "\u2028\u2029\ufeff\u200b",
        "مرحبا بالعالم",
        "line\r\nbreaks\n\ttabs",
        '"quotes" \\ back\\slash </script>',
        "",
    ]
)
TEXT = st.one_of(
    st.text(ANY_CHARACTER, max_size=30),
    SAMPLES,
    st.lists(st.one_of(st.text(ANY_CHARACTER, max_size=8), SAMPLES), max_size=4).map("".join),
)
NAME = st.text(ANY_CHARACTER, min_size=1, max_size=12)
JSON_SCALAR = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    TEXT,
)
JSON_VALUE = st.recursive(
    JSON_SCALAR,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=6,
)
MOMENT = st.datetimes(timezones=st.just(UTC))
ID = st.from_regex(r"[a-z0-9_][a-z0-9_-]{0,15}", fullmatch=True)
ROLES = ("system", "user", "assistant", "tool")


def extras(declared: Any) -> st.SearchStrategy[dict[str, Any]]:
    """Unknown fields, as a newer minor version of agctl (or an OpenAI extension) adds."""
    reserved = {*declared, "reasoning_content", "kind", "schema_version"}
    keys = NAME.filter(lambda k: k not in reserved)
    return st.dictionaries(keys, JSON_VALUE, max_size=2)


def tool_calls() -> st.SearchStrategy[list[dict[str, Any]]]:
    call = st.fixed_dictionaries(
        {
            "id": NAME,
            "type": st.just("function"),
            "function": st.fixed_dictionaries({"name": NAME, "arguments": TEXT}),
        },
        optional={"index": st.integers(0, 5)},
    )
    return st.lists(call, min_size=1, max_size=2)


CONTENT_PARTS = st.lists(
    st.one_of(
        st.fixed_dictionaries({"type": st.just("text"), "text": TEXT}),
        st.fixed_dictionaries(
            {"type": st.just("image_url"), "image_url": st.fixed_dictionaries({"url": TEXT})}
        ),
        st.dictionaries(NAME, JSON_VALUE, max_size=3),
    ),
    max_size=3,
)


@st.composite
def message_data(draw: st.DrawFn, *, metadata: bool = True) -> dict[str, Any]:
    """The JSON of one valid message, every optional field sometimes there."""
    role = draw(st.sampled_from(ROLES))
    data: dict[str, Any] = {"role": role}
    calls = draw(st.none() | tool_calls()) if role == "assistant" else None
    if calls:
        data["tool_calls"] = calls
    content_choices = [TEXT, CONTENT_PARTS] + ([st.none()] if calls else [])
    data["content"] = draw(st.one_of(*content_choices))
    if role == "tool":
        data["tool_call_id"] = draw(NAME)
    optional: dict[str, st.SearchStrategy[Any]] = {"name": NAME, "reasoning": TEXT}
    if metadata:
        optional |= {
            "created_at": MOMENT,
            "model": NAME,
            "usage": st.dictionaries(NAME, JSON_VALUE, max_size=3),
            "tokens": st.integers(0, 2**40),
        }
    for key, strategy in optional.items():
        if draw(st.booleans()):
            data[key] = draw(strategy)
    data.update(draw(extras(Message.model_fields)))
    return data


def messages(*, metadata: bool = True) -> st.SearchStrategy[Message]:
    return message_data(metadata=metadata).map(Message.model_validate)


MESSAGE_LISTS = st.lists(messages(), max_size=5)


@st.composite
def slot_documents(draw: st.DrawFn, slot_id: str | None = None) -> Slot:
    """A valid slot document: every zone, config and meta field varied, unknown fields too."""
    mode = draw(st.sampled_from(["full", "focused", "readonly"]))
    config: dict[str, Any] = {
        "mode": mode,
        "focused": {
            "keep_system": draw(st.booleans()),
            "recent_messages": draw(st.integers(0, 50)),
            "summary_override": draw(st.none() | TEXT),
        },
        "source": draw(
            st.sampled_from(
                [
                    {"kind": "new"},
                    {"kind": "static"},
                    {"kind": "derived", "parent_id": "default", "strategy": "focused"},
                ]
            )
        ),
        "auto_compress": draw(st.none() | st.booleans()),
        **draw(extras({"mode", "focused", "source", "budget", "auto_compress"})),
    }
    if draw(st.booleans()):
        config["budget"] = draw(
            st.fixed_dictionaries(
                {k: st.integers(0, 10**6) for k in ("system", "history", "reserve")}
            )
        )
    meta = {
        "parent_id": draw(st.none() | ID),
        "branch": draw(st.lists(st.from_regex(r"[0-9a-f]{32}", fullmatch=True), max_size=2)),
        "merges": draw(
            st.lists(
                st.fixed_dictionaries(
                    {
                        "source": ID,
                        "strategy": st.sampled_from(["append", "summary"]),
                        "hashes": st.lists(st.from_regex(r"[0-9a-f]{8}", fullmatch=True)),
                        "added": st.integers(0, 9),
                        "at": MOMENT,
                    }
                ),
                max_size=1,
            )
        ),
        "message_count": draw(st.integers(0, 99)),
        "total_tokens": draw(st.integers(0, 10**6)),
        "created_at": draw(MOMENT),
        "updated_at": draw(MOMENT),
    }
    data = {
        "schema_version": draw(st.sampled_from(["1.0", "1.3"])),
        "id": slot_id or draw(ID),
        "config": config,
        "meta": meta,
        "immutable": draw(st.lists(message_data(), max_size=2)),
        "compressed": draw(st.lists(message_data(), max_size=2)),
        "messages": draw(st.lists(message_data(), max_size=4)),
        **draw(extras(Slot.model_fields)),
    }
    return Slot.model_validate(data)


@st.composite
def session_documents(draw: st.DrawFn, slot_ids: list[str]) -> Session:
    data = {
        "schema_version": draw(st.sampled_from(["1.0", "1.2"])),
        "id": draw(ID),
        "parent_id": draw(st.none() | ID),
        "title": draw(st.none() | TEXT),
        "created_at": draw(MOMENT),
        "updated_at": draw(MOMENT),
        "system_prompt": draw(st.none() | TEXT),
        "profile": draw(st.none() | NAME),
        "model": draw(st.none() | NAME),
        "current_slot": draw(st.sampled_from(slot_ids)),
        "turn_count": draw(st.integers(0, 10**6)),
        "cost": {
            "prompt_tokens": draw(st.integers(0, 10**9)),
            "completion_tokens": draw(st.integers(0, 10**9)),
            "cost": draw(st.floats(0, 1e6)),
            "by_model": draw(
                st.dictionaries(
                    NAME,
                    st.fixed_dictionaries(
                        {"requests": st.integers(0, 99), "cost": st.floats(0, 1e3)}
                    ),
                    max_size=2,
                )
            ),
        },
        "memory": draw(st.dictionaries(TEXT, TEXT, max_size=3)),
        "memory_in_context": draw(st.booleans()),
        "auto_compress": draw(st.none() | st.booleans()),
        **draw(extras(Session.model_fields)),
    }
    return Session.model_validate(data)


@st.composite
def whole_sessions(draw: st.DrawFn) -> tuple[Session, list[Slot]]:
    others = draw(st.lists(ID.filter(lambda i: i != "default"), max_size=2, unique=True))
    slot_ids = ["default", *others]
    slots = [draw(slot_documents(slot_id)) for slot_id in slot_ids]
    return draw(session_documents(slot_ids)), slots


def as_data(document: Session | Slot | Message) -> dict[str, Any]:
    """What a document holds (the private file version a load records is left aside)."""
    return document.model_dump()


# ---- round trips -------------------------------------------------------------------------


@SESSION_SETTINGS
@given(whole_sessions())
def test_any_session_and_its_slots_survive_the_store(whole: tuple[Session, list[Slot]]) -> None:
    session, slots = whole
    with fresh_store() as store:
        store.materialize_session(session, slots)
        assert as_data(store.load_session(session.id)) == as_data(session)
        loaded = {slot.id: slot for slot in store.list_slots(session.id)}
        assert {k: as_data(v) for k, v in loaded.items()} == {s.id: as_data(s) for s in slots}
        for slot in slots:
            assert loaded[slot.id].messages == slot.messages
            assert loaded[slot.id].immutable == slot.immutable


@SESSION_SETTINGS
@given(whole_sessions())
def test_rewriting_a_loaded_document_changes_no_byte(whole: tuple[Session, list[Slot]]) -> None:
    session, slots = whole
    with fresh_store() as store:
        store.materialize_session(session, slots)

        def stored() -> dict[str, bytes]:
            """Every byte of the session but its documents' revisions (the backend's, advanced
            by a write)."""
            return {
                name: re.sub(rb'^{\n  "rev": \d+,', b"{", data)
                for name, data in data_dir_files(store.root, session.id).items()
            }

        before = stored()
        store.replace_state(
            store.load_session(session.id),
            [store.load_slot(session.id, s.id) for s in slots],
        )
        assert stored() == before


@PROPERTY_SETTINGS
@given(MESSAGE_LISTS, st.sampled_from(["default", "other"]))
def test_any_messages_appended_through_the_store_load_back_equal(
    batch: list[Message], slot_id: str
) -> None:
    with fresh_store() as store:
        store.create_session("s")
        if slot_id != "default":
            store.create_slot("s", slot_id)
        for message in batch:
            store.update_slot("s", slot_id, partial(Slot.append, message=message))
        loaded = store.load_slot("s", slot_id)
        assert loaded.messages == batch
        assert loaded.meta.message_count == len(batch)


def without_metadata(message: Message) -> Message:
    cleared = {"created_at": None, "model": None, "usage": None, "tokens": None}
    return message.model_copy(update=cleared)


@PROPERTY_SETTINGS
@given(MESSAGE_LISTS, st.sampled_from(["auto", "openai"]))
def test_openai_export_then_import_keeps_everything_but_metadata(
    batch: list[Message], fmt: Any
) -> None:
    exported = export_messages(batch, "openai")
    assert parse_messages(exported, fmt) == [without_metadata(m) for m in batch]


@PROPERTY_SETTINGS
@given(messages())
def test_one_message_through_the_openai_format(message: Message) -> None:
    data = message.to_openai()
    assert Message.from_openai(data) == without_metadata(message)
    assert Message.from_openai(data).to_openai() == data
    assert ("reasoning_content" in data) == (message.reasoning is not None)


@PROPERTY_SETTINGS
@given(st.lists(messages(), min_size=1, max_size=5), st.sampled_from(["auto", "jsonl"]))
def test_jsonl_export_then_import_keeps_everything(batch: list[Message], fmt: Any) -> None:
    assert parse_messages(export_messages(batch, "jsonl"), fmt) == batch


@PROPERTY_SETTINGS
@given(st.lists(messages(metadata=False), max_size=5))
def test_openai_import_into_the_store_exports_the_same_bytes(batch: list[Message]) -> None:
    with fresh_store() as store:
        store.create_session("s")
        parsed = parse_messages(export_messages(batch, "openai"))
        store.update_slot("s", None, lambda slot: slot.extend(parsed))
        again = export_messages(store.load_slot("s").messages, "openai")
        assert again == export_messages(batch, "openai")


@SESSION_SETTINGS
@given(st.lists(messages(metadata=False), min_size=1, max_size=4))
def test_msg_import_then_msg_export_on_the_command_line_is_lossless(
    batch: list[Message],
) -> None:
    exported = export_messages(batch, "openai")
    runner = CliRunner()
    with fresh_store() as store:
        base = ["--data-dir", str(store.root)]
        for args in (["session", "new", "s"], ["msg", "import", "-", "--format", "openai"]):
            result = runner.invoke(cli, base + args, input=exported, catch_exceptions=False)
            assert result.exit_code == 0, result.output
        result = runner.invoke(cli, [*base, "msg", "export"], catch_exceptions=False)
        assert result.exit_code == 0, result.output
        assert result.stdout_bytes == exported
        assert store.load_slot("s").messages == batch


@SESSION_SETTINGS
@given(whole_sessions())
def test_session_export_then_import_gives_the_same_session(
    whole: tuple[Session, list[Slot]],
) -> None:
    session, slots = whole
    with fresh_store() as source, fresh_store() as target:
        source.materialize_session(session, slots)
        document = export_session(source, session.id).model_dump_json().encode()
        imported = import_session(target, document, as_id="copy")
        assert imported.id == "copy"
        copy = target.load_session("copy")
        assert as_data(copy) == {**as_data(session), "id": "copy"}
        assert [as_data(s) for s in target.list_slots("copy")] == [
            as_data(s) for s in sorted(slots, key=lambda s: s.id)
        ]


# ---- random operations against a model -----------------------------------------------------

SESSION = "s"
SLOT_NAMES = st.sampled_from(["default", "alpha", "beta", "c.d", "e-f"])
MODES = st.sampled_from(["full", "focused", "readonly"])
SIMPLE_ROLES = st.sampled_from(["system", "user", "assistant"])
SHORT_TEXT = st.one_of(st.text(ANY_CHARACTER, max_size=6), SAMPLES)
Entry = tuple[str, str]


def focused_view(entries: list[Entry], keep_system: bool, recent: int) -> list[Entry]:
    """The focused view as documented: the first system message, then the last `recent`."""
    head: list[Entry] = []
    rest = 0
    if keep_system and entries and entries[0][0] == "system":
        head, rest = [entries[0]], 1
    if recent == 0:
        return head
    return head + entries[max(rest, len(entries) - recent) :]


def position(size: int, index: int, *, insert: bool = False) -> int | None:
    """Where `index` points in a list of `size` (negative from the end), or None."""
    found = index + size if index < 0 else index
    return found if 0 <= found <= (size if insert else size - 1) else None


class SlotOperations(RuleBasedStateMachine):
    """Slot and message operations through the Store, checked against dicts and lists."""

    def __init__(self) -> None:
        super().__init__()
        self.root = tempfile.mkdtemp(prefix="agctl-machine-")
        self.store = Store(Path(self.root) / "data")
        self.store.create_session(SESSION)
        self.slots: dict[str, list[Entry]] = {"default": []}
        self.modes: dict[str, str] = {"default": "full"}
        self.focus: dict[str, tuple[bool, int]] = {"default": (True, 10)}
        self.current = "default"

    def teardown(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)

    # ---- helpers ---------------------------------------------------------------------

    def target(self, slot: str | None) -> str:
        return self.current if slot is None else slot

    def expect(self, error: type[AgctlError] | None, action: Callable[[], T]) -> T | None:
        """Run `action`; it must raise `error` (and then leave every file as it was)."""
        if error is None:
            return action()
        before = data_dir_files(self.store.root, SESSION)
        with pytest.raises(error):
            action()
        assert data_dir_files(self.store.root, SESSION) == before
        return None

    def message_error(self, slot: str) -> type[AgctlError] | None:
        if slot not in self.slots:
            return NotFound
        return ReadonlySlot if self.modes[slot] == "readonly" else None

    def change(self, slot: str | None, action: Callable[[Slot], Any]) -> Any:
        return self.store.update_slot(SESSION, slot, action)

    def pick(self, data: st.DataObject) -> tuple[str | None, str]:
        """A slot argument (None: the current slot; mostly one that exists) and its name."""
        slot = data.draw(st.none() | st.sampled_from(sorted(self.slots)) | SLOT_NAMES, "slot")
        return slot, self.target(slot)

    def index(self, data: st.DataObject, name: str) -> int:
        """An index around the slot's bounds: in range, negative, or just out of range."""
        size = len(self.slots.get(name, []))
        return data.draw(st.integers(-size - 1, size + 1), "index")

    # ---- slots -----------------------------------------------------------------------

    @rule(name=SLOT_NAMES, mode=MODES, use=st.booleans())
    def create_slot(self, name: str, mode: str, use: bool) -> None:
        error = AlreadyExists if name in self.slots else None
        self.expect(
            error,
            lambda: self.store.create_slot(SESSION, name, mode=mode, make_current=use),
        )
        if error is None:
            self.slots[name], self.modes[name], self.focus[name] = [], mode, (True, 10)
            self.current = name if use else self.current

    @rule(
        data=st.data(),
        name=SLOT_NAMES,
        strategy=st.sampled_from(["full", "focused"]),
        keep_system=st.none() | st.booleans(),
        recent=st.none() | st.integers(0, 3),
        use=st.booleans(),
    )
    def derive_slot(
        self,
        data: st.DataObject,
        name: str,
        strategy: str,
        keep_system: bool | None,
        recent: int | None,
        use: bool,
    ) -> None:
        source, parent = self.pick(data)
        error: type[AgctlError] | None = None
        if parent not in self.slots:
            error = NotFound
        elif name in self.slots:
            error = AlreadyExists
        self.expect(
            error,
            lambda: self.store.derive_slot(
                SESSION,
                name,
                source=source,
                strategy=strategy,  # type: ignore[arg-type]
                focus={"keep_system": keep_system, "recent_messages": recent},
                make_current=use,
            ),
        )
        if error is not None:
            return
        old_keep, old_recent = self.focus[parent]
        focus = (
            old_keep if keep_system is None else keep_system,
            old_recent if recent is None else recent,
        )
        if strategy == "full":
            self.slots[name] = list(self.slots[parent])
            self.modes[name] = "focused" if self.modes[parent] == "focused" else "full"
        else:
            self.slots[name] = focused_view(self.slots[parent], *focus)
            self.modes[name] = "focused"
        self.focus[name] = focus
        self.current = name if use else self.current

    @rule(name=SLOT_NAMES)
    def use_slot(self, name: str) -> None:
        error = NotFound if name not in self.slots else None
        self.expect(error, lambda: self.store.use_slot(SESSION, name))
        if error is None:
            self.current = name

    @rule(
        data=st.data(),
        mode=MODES,
        keep_system=st.none() | st.booleans(),
        recent=st.none() | st.integers(0, 3),
    )
    def set_mode(
        self, data: st.DataObject, mode: str, keep_system: bool | None, recent: int | None
    ) -> None:
        slot, name = self.pick(data)
        error = NotFound if name not in self.slots else None
        focus = {"keep_system": keep_system, "recent_messages": recent}
        self.expect(error, lambda: self.store.set_mode(SESSION, slot, mode, focus=focus))
        if error is None:
            old_keep, old_recent = self.focus[name]
            self.modes[name] = mode
            self.focus[name] = (
                old_keep if keep_system is None else keep_system,
                old_recent if recent is None else recent,
            )

    @rule(name=SLOT_NAMES)
    def delete_slot(self, name: str) -> None:
        error: type[AgctlError] | None = None
        if name == "default":
            error = ProtectedSlot
        elif name not in self.slots:
            error = NotFound
        self.expect(error, lambda: self.store.delete_slot(SESSION, name))
        if error is None:
            del self.slots[name], self.modes[name], self.focus[name]
            self.current = "default" if self.current == name else self.current

    # ---- messages --------------------------------------------------------------------

    @initialize(batch=st.lists(st.tuples(SIMPLE_ROLES, SHORT_TEXT), max_size=8))
    def fill_default(self, batch: list[Entry]) -> None:
        built = [Message.model_validate({"role": r, "content": t}) for r, t in batch]
        self.change("default", lambda s: s.extend(built))
        self.slots["default"] = list(batch)

    @rule(data=st.data(), role=SIMPLE_ROLES, text=SHORT_TEXT)
    def append(self, data: st.DataObject, role: str, text: str) -> None:
        slot, name = self.pick(data)
        message = Message.model_validate({"role": role, "content": text})
        error = self.message_error(name)
        self.expect(error, lambda: self.change(slot, lambda s: s.append(message)))
        if error is None:
            self.slots[name].append((role, text))

    @rule(data=st.data(), role=SIMPLE_ROLES, text=SHORT_TEXT)
    def insert(self, data: st.DataObject, role: str, text: str) -> None:
        slot, name = self.pick(data)
        index = self.index(data, name)
        message = Message.model_validate({"role": role, "content": text})
        error = self.message_error(name)
        where = position(len(self.slots[name]), index, insert=True) if error is None else None
        error = error or (NotFound if where is None else None)
        self.expect(error, lambda: self.change(slot, lambda s: s.insert(index, message)))
        if error is None and where is not None:
            self.slots[name].insert(where, (role, text))

    @rule(data=st.data(), text=SHORT_TEXT)
    def edit(self, data: st.DataObject, text: str) -> None:
        slot, name = self.pick(data)
        index = self.index(data, name)
        error = self.message_error(name)
        where = position(len(self.slots[name]), index) if error is None else None
        error = error or (NotFound if where is None else None)
        self.expect(error, lambda: self.change(slot, lambda s: s.edit(index, text)))
        if error is None and where is not None:
            self.slots[name][where] = (self.slots[name][where][0], text)

    @rule(data=st.data(), pop=st.booleans())
    def remove(self, data: st.DataObject, pop: bool) -> None:
        slot, name = self.pick(data)
        index = self.index(data, name)
        error = self.message_error(name)
        where = position(len(self.slots[name]), index) if error is None else None
        error = error or (NotFound if where is None else None)
        verb = Slot.pop if pop else Slot.remove
        removed = self.expect(error, lambda: self.change(slot, lambda s: verb(s, index)))
        if error is None and where is not None:
            entry = self.slots[name].pop(where)
            assert removed is not None
            assert removed[0] == where and (removed[1].role, removed[1].text()) == entry

    @rule(data=st.data())
    def pop_last(self, data: st.DataObject) -> None:
        slot, name = self.pick(data)
        error = self.message_error(name) or (NotFound if not self.slots[name] else None)
        self.expect(error, lambda: self.change(slot, lambda s: s.pop()))
        if error is None:
            self.slots[name].pop()

    @rule(data=st.data(), roles=st.sets(SIMPLE_ROLES))
    def retain(self, data: st.DataObject, roles: set[str]) -> None:
        slot, name = self.pick(data)
        error = self.message_error(name)
        dropped = self.expect(error, lambda: self.change(slot, lambda s: s.retain(roles)))
        if error is None:
            kept = [entry for entry in self.slots[name] if entry[0] in roles]
            assert dropped == len(self.slots[name]) - len(kept)
            self.slots[name] = kept

    @rule(data=st.data())
    def clear(self, data: st.DataObject) -> None:
        slot, name = self.pick(data)
        error = self.message_error(name)
        dropped = self.expect(error, lambda: self.change(slot, lambda s: s.clear()))
        if error is None:
            assert dropped == len(self.slots[name])
            self.slots[name] = []

    @rule(
        data=st.data(),
        batch=st.lists(st.tuples(SIMPLE_ROLES, SHORT_TEXT), max_size=3),
        replace=st.booleans(),
    )
    def extend(self, data: st.DataObject, batch: list[Entry], replace: bool) -> None:
        slot, name = self.pick(data)
        built = [Message.model_validate({"role": r, "content": t}) for r, t in batch]
        error = self.message_error(name)
        self.expect(error, lambda: self.change(slot, lambda s: s.extend(built, replace=replace)))
        if error is None:
            self.slots[name] = [*([] if replace else self.slots[name]), *batch]

    # ---- invariants ------------------------------------------------------------------

    @invariant()
    def store_equals_model(self) -> None:
        assert self.store.slot_ids(SESSION) == sorted(self.slots)
        assert self.store.load_session(SESSION).current_slot == self.current
        for name, entries in self.slots.items():
            slot = self.store.load_slot(SESSION, name)
            assert [(m.role, m.text()) for m in slot.messages] == entries, name
            assert slot.config.mode == self.modes[name]
            focus = slot.config.focused
            assert (focus.keep_system, focus.recent_messages) == self.focus[name]
            assert slot.meta.message_count == len(entries)

    @invariant()
    def default_slot_always_exists(self) -> None:
        assert "default" in self.slots
        assert "default" in self.store.slot_ids(SESSION)


SlotOperations.TestCase.settings = settings(
    max_examples=30,
    stateful_step_count=50,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
TestSlotOperations = SlotOperations.TestCase
