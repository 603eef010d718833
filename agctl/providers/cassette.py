"""Cassettes: record any provider's replies, and replay them offline for CI.

A cassette is a JSON lines file; each line holds one request's model input, its stable
hash and every event of the reply. Replay matches by hash and never touches the network.
A tool loop's cassette also holds a line for each tool call (`"kind": "tool"`): its name,
arguments and the result the model got, so a replay answers the calls from it and never
runs a tool. Those lines, and requests that offer tools, are version 2.0 (an older agctl
refuses them by their version); a request or reply that holds wire parts (Anthropic's
signed thinking, Gemini's thought signatures: agctl.providers.base.WirePart) is 3.0; a
cassette of 1.0 lines still loads. Each request line names the wire it was recorded from
(`wire`); replay matches by the hash of the model input, the same on every wire. A usage event keeps
the counts the provider reported (cached, cache-write and reasoning tokens among them) and
replays them as they were; a field of an event this agctl does not know is left out when
read, so a newer agctl's cassette still replays here.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agctl.base.errors import InvalidInput, NotFound, ReplayMiss, StoreError
from agctl.base.fsio import append_durably
from agctl.base.validation import validation_summary
from agctl.context.models import ToolCall
from agctl.providers.base import (
    ChatRequest,
    Event,
    Provider,
    WirePart,
    event_from_dict,
    event_to_dict,
)
from agctl.turn.steps import CallRecord, ToolBox

CASSETTE_VERSION = "3.0"  # the newest this agctl reads: a line with wire parts
TOOLS_VERSION = "2.0"  # a tool line, or a request offering tools, without wire parts
PLAIN_VERSION = "1.0"  # what a line with neither is written as, for older readers


class RecordedRequest(BaseModel):
    model: str
    messages: list[dict[str, Any]]
    params: dict[str, Any] = Field(default_factory=dict)


class CassetteEntry(BaseModel):
    """One line of a cassette: a request's model input, its hash, and the reply's events."""

    model_config = ConfigDict(extra="allow")

    schema_version: str = CASSETTE_VERSION
    hash: str = Field(description="sha256 of the model input (model, messages, params)")
    request: RecordedRequest
    events: list[dict[str, Any]] = Field(
        description="text, reasoning, tool_call, usage, finish and part events, in order"
    )
    wire: str | None = Field(
        default=None, description="the provider it was recorded from (openai, anthropic, ...)"
    )


@dataclass
class Recording:
    hash: str
    request: dict[str, Any]
    events: list[Event]


class ToolEntry(BaseModel):
    """A line of a cassette for one tool call: what was asked and what the model got."""

    model_config = ConfigDict(extra="allow")

    schema_version: str = CASSETTE_VERSION
    kind: str = "tool"
    hash: str = Field(description="sha256 of the call's name and arguments (call_key)")
    name: str
    arguments: str
    result: str


@dataclass
class ToolRecording:
    hash: str
    name: str
    arguments: str
    result: str


def call_key(name: str, arguments: str) -> str:
    """What identifies a tool call in a cassette: its name and its arguments (parsed when
    they are JSON, so spacing and key order do not matter)."""
    import hashlib

    try:
        parsed: Any = orjson.loads(arguments)
        canonical = orjson.dumps(parsed, option=orjson.OPT_SORT_KEYS)
    except orjson.JSONDecodeError:
        canonical = arguments.encode()
    return hashlib.sha256(name.encode() + b"\0" + canonical).hexdigest()


def load_cassette(path: Path) -> list[Recording]:
    """The recorded requests of a cassette (its tool lines: see CassetteTools)."""
    return _read_cassette(path)[0]


def _read_cassette(path: Path) -> tuple[list[Recording], list[ToolRecording]]:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise NotFound(f"cassette not found: {path}") from None
    except OSError as exc:
        raise StoreError(f"cannot read cassette {path}: {exc.strerror}") from None
    recordings = []
    tools: list[ToolRecording] = []
    lines = raw.splitlines(keepends=True)
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        torn = number == len(lines) and not line.endswith(b"\n")
        try:
            data = orjson.loads(line)
            version = str(data.get("schema_version", PLAIN_VERSION))
            if int(version.split(".")[0]) > int(CASSETTE_VERSION.split(".")[0]):
                raise InvalidInput(
                    f"{path}: line {number} has cassette version {version}; "
                    f"this agctl reads versions up to {CASSETTE_VERSION}"
                )
            if data.get("kind") == "tool":
                tool = ToolEntry.model_validate(data)
                key = call_key(tool.name, tool.arguments)  # not the line's word for it
                tools.append(ToolRecording(key, tool.name, tool.arguments, tool.result))
                continue
            entry = CassetteEntry.model_validate(data)
            recordings.append(
                Recording(
                    hash=entry.hash,
                    request=entry.request.model_dump(),
                    events=[event_from_dict(e) for e in entry.events],
                )
            )
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError) as exc:
            if torn:
                break  # a recording cut short by a crash: the entries before it stand
            reason: object = exc
            if isinstance(exc, ValidationError):
                reason = validation_summary(exc)
            raise InvalidInput(
                f"{path}: line {number} is not a cassette entry ({reason})"
            ) from None
    return recordings, tools


def _text(message: dict[str, Any]) -> str:
    content = message.get("content")
    text = content if isinstance(content, str) else orjson.dumps(content).decode()
    flat = " ".join(text.split())
    return flat if len(flat) <= 60 else flat[:59] + "…"


def describe_miss(request: ChatRequest, recordings: list[Recording]) -> str:
    """Name the request's hash and the recorded request closest to it."""
    fingerprint = request.fingerprint()
    lines = [f"no recorded response for request {fingerprint[:12]}"]
    if not recordings:
        return lines[0] + " (the cassette is empty)"
    wanted = request.model_input()

    def shared(recording: Recording) -> tuple[int, int]:
        messages = recording.request.get("messages", [])
        common = 0
        for mine, theirs in zip(wanted["messages"], messages, strict=False):
            if mine != theirs:
                break
            common += 1
        same_settings = (
            recording.request.get("model") == wanted["model"]
            and recording.request.get("params") == wanted["params"]
        )
        return common, int(same_settings)

    closest = max(recordings, key=shared)
    common, same_settings = shared(closest)
    theirs = closest.request.get("messages", [])
    lines.append(
        f"closest recorded request {closest.hash[:12]} shares {common} of "
        f"{len(wanted['messages'])} messages"
    )
    if not same_settings:
        lines.append(
            f"  model/params differ: recorded {closest.request.get('model')} "
            f"{closest.request.get('params')}, now {wanted['model']} {wanted['params']}"
        )
    if common < len(wanted["messages"]):
        mine = wanted["messages"][common]
        lines.append(f"  now      [{common}] {mine.get('role')}: {_text(mine)}")
    if common < len(theirs):
        lines.append(f"  recorded [{common}] {theirs[common].get('role')}: {_text(theirs[common])}")
    return "\n".join(lines)


class ReplayProvider:
    """Answers from a cassette by request hash; a miss fails loudly, never reaching out."""

    name = "replay"

    def __init__(self, path: Path) -> None:
        self.path = path
        self.recordings = load_cassette(path)
        self.by_hash: dict[str, Recording] = {}
        for recording in self.recordings:
            self.by_hash.setdefault(recording.hash, recording)

    def stream(self, request: ChatRequest) -> Iterator[Event]:
        recording = self.by_hash.get(request.fingerprint())
        if recording is None:
            raise ReplayMiss(f"{self.path}: {describe_miss(request, self.recordings)}")
        yield from recording.events


def append_recording(
    path: Path, request: ChatRequest, events: list[Event], *, wire: str | None = None
) -> None:
    """Append one entry as a single write, under an exclusive lock on the cassette; `wire`:
    the provider it was recorded from."""
    version = PLAIN_VERSION
    if request.wire_parts or any(isinstance(event, WirePart) for event in events):
        version = CASSETTE_VERSION
    elif request.tools:
        version = TOOLS_VERSION
    entry: dict[str, Any] = {
        "schema_version": version,
        "hash": request.fingerprint(),
        "request": request.model_input(),
        "events": [event_to_dict(e) for e in events],
    }
    if wire is not None:
        entry["wire"] = wire
    line = orjson.dumps(entry) + b"\n"
    # The cassette is the user's file: a link to one in a fixtures folder is fine.
    append_durably(path, lambda offset: line, lock=True, follow=True)


class RecordingProvider:
    """Wraps any provider and appends each completed request and reply to a cassette."""

    def __init__(self, inner: Provider, path: Path) -> None:
        self.inner = inner
        self.path = path
        self.name = inner.name

    def stream(self, request: ChatRequest) -> Iterator[Event]:
        events: list[Event] = []
        for event in self.inner.stream(request):
            events.append(event)
            yield event
        append_recording(self.path, request, events, wire=self.name)


class CassetteTools:
    """A ToolBox answering each call with the result a cassette recorded for the same call
    (the same one twice: the recordings in order); it never runs a tool. A call it has
    no recording of fails the turn (ReplayMiss, exit 6), naming the closest one."""

    def __init__(self, path: Path, definitions: list[dict[str, Any]]) -> None:
        self.path = path
        self._definitions = definitions
        self.recorded = _read_cassette(path)[1]
        self._queues: dict[str, list[ToolRecording]] = {}
        for recording in self.recorded:
            self._queues.setdefault(recording.hash, []).append(recording)
        self._used: dict[str, int] = {}

    def definitions(self) -> list[dict[str, Any]]:
        return self._definitions

    def begin_turn(self) -> None:
        pass  # nothing is approved: nothing runs

    def end_turn(self) -> None:
        pass  # nothing was opened

    def run(self, call: ToolCall) -> tuple[str, CallRecord]:
        name, arguments = call.function.name, call.function.arguments
        key = call_key(name, arguments)
        queue = self._queues.get(key, [])
        used = self._used.get(key, 0)
        if not queue:
            raise ReplayMiss(f"{self.path}: {self._describe_miss(name, arguments)}")
        recording = queue[min(used, len(queue) - 1)]  # past the last: it again
        self._used[key] = used + 1
        record = CallRecord(call.id, name, arguments, outcome="replayed")
        return recording.result, record

    def _describe_miss(self, name: str, arguments: str) -> str:
        said = f"no recorded result for tool call {name}({arguments})"
        same = [r for r in self.recorded if r.name == name]
        if not self.recorded:
            return said + " (the cassette records no tool call)"
        if not same:
            names = ", ".join(sorted({r.name for r in self.recorded}))
            return f"{said}; the cassette records calls of: {names}"
        return f"{said}; the closest recorded call of {name} had arguments {same[0].arguments}"


class RecordingTools:
    """A ToolBox that answers with `inner` (running the tools) and appends each answer
    to a cassette, for CassetteTools to give back later."""

    def __init__(self, inner: ToolBox, path: Path) -> None:
        self.inner = inner
        self.path = path

    def definitions(self) -> list[dict[str, Any]]:
        return self.inner.definitions()

    def begin_turn(self) -> None:
        self.inner.begin_turn()

    def end_turn(self) -> None:
        self.inner.end_turn()

    def run(self, call: ToolCall) -> tuple[str, CallRecord]:
        text, record = self.inner.run(call)
        name, arguments = call.function.name, call.function.arguments
        entry = {
            "schema_version": TOOLS_VERSION,
            "kind": "tool",
            "hash": call_key(name, arguments),
            "name": name,
            "arguments": arguments,
            "result": text,
            "call": record.to_dict(),
        }
        line = orjson.dumps(entry) + b"\n"
        append_durably(self.path, lambda offset: line, lock=True, follow=True)
        return text, record
