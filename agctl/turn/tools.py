"""Tools as data: what a model may call, how its call is checked, and how the call runs.

A tool is an argv command (never a shell string) that gets the model's arguments as JSON,
runs in its own process group with a scrubbed environment, a time limit and capped
output. Nothing here imports jsonschema at import time (about 100 ms): it is imported when
a tool is defined, offered or called, never by a command that only loads the config.
"""

from __future__ import annotations

import codecs
import fnmatch
import hashlib
import os
import re
import selectors
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

from pydantic import ValidationError

from agctl.base.errors import ApprovalNeeded, Interrupted, InvalidInput, NotFound, UsageError
from agctl.base.interrupts import interrupt_count, interrupted_since, raise_if_interrupted
from agctl.base.procs import WATCH_S, CallProcesses, call_exited
from agctl.base.validation import validation_summary
from agctl.base.vocab import ApproveMode
from agctl.config.specs import (  # re-exported: the tool API in one place
    KEPT_OUTPUT as KEPT_OUTPUT,
)
from agctl.config.specs import (
    ToolSpec as ToolSpec,
)
from agctl.context.models import ToolCall
from agctl.turn.steps import CallRecord

if TYPE_CHECKING:
    from agctl.config.file import Config
    from agctl.turn.hooks import Hooks

# The end of stderr that an error result shows.
STDERR_TAIL = 4 * 1024
# Between SIGTERM to a tool's process group and SIGKILL.
KILL_GRACE_S = 2.0
# After SIGKILL, how long to wait for the pipes to close: only a process that left the
# group (setsid) can keep them open, and it is not waited for.
PIPE_GRACE_S = 1.0
DENIED = "error: denied by the user's approval policy"

# The environment every tool gets (when set), before its env_allow globs.
CORE_ENV = ("PATH", "HOME", "LANG", "LC_*", "TZ", "TMPDIR", "TERM")
# Never passed on, whatever a glob says: a name holding one of these words (any case)...
SECRET_WORDS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL")
# ... or one of these prefixes (agctl's own settings and OpenAI's credentials, and the
# argument variables of env mode, which only the call itself sets).
NEVER_PREFIXES = ("AGCTL_", "OPENAI_", "TOOL_ARG_")
ARGS_VARIABLE = "AGCTL_TOOL_ARGS"
ARG_VARIABLE_PREFIX = "TOOL_ARG_"

_NOT_ENV_NAME = re.compile(r"[^A-Z0-9_]")
_READ_CHUNK = 64 * 1024
# How often a run checks whether its process exited, where os.pidfd_open is missing.
_EXIT_POLL_S = 0.01


# ---- defining tools ---------------------------------------------------------------------


def schema_problem(parameters: dict[str, Any]) -> str | None:
    """What makes `parameters` an invalid JSON Schema (against its own `$schema`, else
    draft 2020-12), or None."""
    import jsonschema

    validator = jsonschema.validators.validator_for(
        parameters, default=jsonschema.Draft202012Validator
    )
    try:
        validator.check_schema(parameters)
    except jsonschema.SchemaError as exc:
        where = "/".join(str(part) for part in exc.absolute_path)
        return f"{exc.message}" + (f" (at {where})" if where else "")
    return None


class _SpecError(Exception):
    pass


def _checked_spec(data: Any) -> ToolSpec:
    if not isinstance(data, dict):
        raise _SpecError(f"a tool must be a JSON object, not {_json_type(data)}")
    unknown = sorted(set(data) - set(ToolSpec.model_fields))
    if unknown:
        raise _SpecError(
            f"unknown field {unknown[0]!r} (fields: {', '.join(ToolSpec.model_fields)})"
        )
    try:
        spec = ToolSpec.model_validate(data)
    except ValidationError as exc:
        raise _SpecError(validation_summary(exc, "tool")) from None
    problem = schema_problem(spec.parameters)
    if problem is not None:
        raise _SpecError(f"parameters: not a valid JSON Schema: {problem}")
    return spec


def spec_from(fields: Mapping[str, Any]) -> ToolSpec:
    """A tool defined on the command line, checked whole (its schema too), or a UsageError
    naming the field."""
    try:
        return _checked_spec({k: v for k, v in fields.items() if v is not None})
    except _SpecError as exc:
        raise UsageError(f"invalid tool: {exc}") from None


def new_tool(fields: Mapping[str, Any], *, data_dir: Path | None) -> ToolSpec:
    """A tool defined on the command line, as `spec_from` checks it, refused (UsageError)
    when its cwd would put its runs inside the data dir."""
    spec = spec_from(fields)
    if spec.cwd is not None:
        tool_cwd(spec, started_in=None, data_dir=data_dir)
    return spec


def load_tools_file(path: Path | str) -> dict[str, ToolSpec]:
    """The tools of a `--tools-file` (a JSON array of tool objects), each checked whole;
    exit 5 (InvalidInput) naming the item (1 is the first) and the field, for a bad one."""
    import orjson

    try:
        raw = Path(path).read_bytes()
    except FileNotFoundError:
        raise NotFound(f"tools file {path}: no such file") from None
    except OSError as exc:
        raise InvalidInput(f"tools file {path}: cannot read it: {exc.strerror}") from None
    try:
        items = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise InvalidInput(f"tools file {path}: not valid JSON: {exc}") from None
    if not isinstance(items, list):
        raise InvalidInput(
            f"tools file {path}: must be a JSON array of tools, not {_json_type(items)}"
        )
    tools: dict[str, ToolSpec] = {}
    first_seen: dict[str, int] = {}
    for number, item in enumerate(items, start=1):
        named = f" (tool {item['name']!r})" if isinstance(item, dict) and "name" in item else ""
        try:
            spec = _checked_spec(item)
        except _SpecError as exc:
            raise InvalidInput(f"tools file {path}: item {number}{named}: {exc}") from None
        if spec.name in tools:
            raise InvalidInput(
                f"tools file {path}: item {number}{named}: defined twice (also item "
                f"{first_seen[spec.name]})"
            )
        tools[spec.name] = spec
        first_seen[spec.name] = number
    return tools


def _layers(
    config: Config, profile_name: str | None, tools_file: Path | str | None
) -> Iterator[tuple[str, Mapping[str, ToolSpec]]]:
    yield "config", config.tools
    profile = config.profiles.get(profile_name) if profile_name else None
    if profile is not None:
        yield f"profile {profile_name}", profile.tools
    if tools_file is not None:
        yield f"file {tools_file}", load_tools_file(tools_file)


def tool_registry(
    config: Config, profile_name: str | None, tools_file: Path | str | None
) -> dict[str, ToolSpec]:
    """Every tool by name: the config's, overridden by name by the profile's (a profile
    that is only a preset has none), overridden by those of the tools file."""
    registry: dict[str, ToolSpec] = {}
    for _source, tools in _layers(config, profile_name, tools_file):
        registry.update(tools)
    return registry


def tool_sources(
    config: Config, profile_name: str | None, tools_file: Path | str | None
) -> dict[str, str]:
    """Where each tool of the registry comes from: config, profile NAME or file PATH."""
    sources: dict[str, str] = {}
    for source, tools in _layers(config, profile_name, tools_file):
        sources.update(dict.fromkeys(tools, source))
    return sources


def definitions(specs: Iterable[ToolSpec]) -> list[dict[str, Any]]:
    """The OpenAI `tools` request parameter offering `specs`, in their order; a tool whose
    parameters are not a valid JSON Schema (a hand-edited config) is exit 5."""
    offered = []
    for spec in specs:
        problem = schema_problem(spec.parameters)
        if problem is not None:
            raise InvalidInput(
                f"tool {spec.name!r}: parameters: not a valid JSON Schema: {problem}"
            )
        offered.append(
            {
                "type": "function",
                "function": {
                    "name": spec.name,
                    "description": spec.description,
                    "parameters": spec.parameters,
                },
            }
        )
    return offered


# ---- checking a model's call --------------------------------------------------------------


def check_call(spec: ToolSpec | None, name: str, arguments: str) -> dict[str, Any] | str:
    """The arguments of a model's call of tool `name` (`spec`: None when no such tool is
    offered), parsed and checked against the tool's schema; or, when they cannot be run,
    the error text the model gets instead (nothing runs). Blank arguments mean {} (some
    servers send "" for a call without arguments)."""
    import orjson

    if spec is None:
        return f"error: unknown tool {name!r}"
    try:
        parsed = orjson.loads(arguments) if arguments.strip() else {}
    except orjson.JSONDecodeError as exc:
        return f"error: the arguments of tool {name!r} are not valid JSON: {exc}"
    if not isinstance(parsed, dict):
        return (
            f"error: the arguments of tool {name!r} must be a JSON object, not {_json_type(parsed)}"
        )
    problem = arguments_problem(spec, parsed)
    if problem is not None:
        return f"error: the arguments of tool {name!r} {problem}"
    return parsed


def arguments_problem(spec: ToolSpec, arguments: Mapping[str, Any]) -> str | None:
    """How `arguments` break the tool's schema (the first error by place, and how many
    more), or None; also used on arguments a hook rewrote."""
    import jsonschema
    from referencing import Registry
    from referencing.exceptions import Unresolvable

    validator_class = jsonschema.validators.validator_for(
        spec.parameters, default=jsonschema.Draft202012Validator
    )
    # A registry that retrieves nothing: jsonschema's default one fetches a remote $ref.
    validator = validator_class(spec.parameters, registry=Registry())
    try:
        errors = sorted(
            validator.iter_errors(dict(arguments)),
            key=lambda error: [str(part) for part in error.absolute_path],
        )
    except jsonschema.SchemaError as exc:
        return (
            f"cannot be checked: the tool's parameters are not a valid JSON Schema ({exc.message})"
        )
    except Unresolvable as exc:
        return f"cannot be checked: the tool's parameters refer to {exc.ref!r}, not within them"
    if not errors:
        return None
    first = errors[0]
    where = "".join(
        f"[{part!r}]" if isinstance(part, int) else f".{part}" for part in first.absolute_path
    )
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"do not match its schema: {'at $' + where + ': ' if where else ''}{first.message}{more}"


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if value is None:
        return "null"
    names = {
        dict: "an object",
        list: "an array",
        str: "a string",
        int: "a number",
        float: "a number",
    }
    return names.get(type(value), type(value).__name__)


# ---- environment, argv, working directory ---------------------------------------------------


def _never_passed(name: str) -> bool:
    upper = name.upper()
    return upper.startswith(NEVER_PREFIXES) or any(word in upper for word in SECRET_WORDS)


def scrubbed_env(spec: ToolSpec, environ: Mapping[str, str]) -> dict[str, str]:
    """The environment a tool runs with: the core set and what its env_allow globs match
    (case-sensitive, as POSIX names are), less every name that could hold a credential."""
    return scrubbed_environment(spec.env_allow, environ)


def scrubbed_environment(env_allow: Iterable[str], environ: Mapping[str, str]) -> dict[str, str]:
    """`scrubbed_env` for the globs `env_allow` (an MCP server's process gets it too)."""
    globs = (*CORE_ENV, *env_allow)
    return {
        name: value
        for name, value in environ.items()
        if any(fnmatch.fnmatchcase(name, glob) for glob in globs) and not _never_passed(name)
    }


def arguments_json(arguments: Mapping[str, Any]) -> str:
    """The arguments as the tool reads them: one compact JSON document, keys in order."""
    import orjson

    return orjson.dumps(dict(arguments)).decode()


def argument_variables(arguments: Mapping[str, Any]) -> dict[str, str]:
    """env mode's variables: AGCTL_TOOL_ARGS (the JSON) and TOOL_ARG_<NAME> for each
    top-level scalar (NAME upper-cased, other characters as '_'; strings as they are,
    other scalars as JSON: true, 3, null; a value holding a NUL, which no environment
    can carry, only in AGCTL_TOOL_ARGS)."""
    import orjson

    variables = {ARGS_VARIABLE: arguments_json(arguments)}
    for key, value in arguments.items():
        if isinstance(value, (dict, list)):
            continue
        text = value if isinstance(value, str) else orjson.dumps(value).decode()
        if "\x00" not in text:
            variables[ARG_VARIABLE_PREFIX + _NOT_ENV_NAME.sub("_", str(key).upper())] = text
    return variables


def tool_env(
    spec: ToolSpec, arguments: Mapping[str, Any], environ: Mapping[str, str]
) -> dict[str, str]:
    """The whole environment of one call: scrubbed, plus env mode's argument variables."""
    env = scrubbed_env(spec, environ)
    if spec.args == "env":
        env.update(argument_variables(arguments))
    return env


def tool_argv(spec: ToolSpec, arguments: Mapping[str, Any]) -> list[str]:
    """The argv of one call: the command, and in argv mode the JSON as its last element."""
    if spec.args == "argv":
        return [*spec.command, arguments_json(arguments)]
    return list(spec.command)


def resolved_argv(
    spec: ToolSpec, arguments: Mapping[str, Any], environ: Mapping[str, str] | None = None
) -> list[str]:
    """The argv with its program found on the tool's PATH (as it will run), for people
    asked to approve it; a program not found stays as written."""
    argv = tool_argv(spec, arguments)
    if "/" not in argv[0]:
        path = scrubbed_env(spec, os.environ if environ is None else environ).get("PATH")
        found = shutil.which(argv[0], path=path)
        if found:
            argv[0] = found
    return argv


def _inside(path: Path, directory: Path) -> bool:
    real, root = os.path.realpath(path), os.path.realpath(directory)
    return os.path.commonpath([real, root]) == root


def tool_cwd(spec: ToolSpec, *, started_in: Path | str | None, data_dir: Path | None) -> Path:
    """Where a call runs: the tool's cwd (relative to where agctl was started), else where
    agctl was started; never inside the data dir (UsageError), where a tool could rewrite
    the sessions behind agctl's back."""
    base = Path(started_in) if started_in is not None else Path.cwd()
    where = base / Path(spec.cwd).expanduser() if spec.cwd else base
    if data_dir is not None and _inside(where, data_dir):
        raise UsageError(
            f"tool {spec.name!r} would run in {where}, inside agctl's data dir {data_dir}",
            hint="run agctl from another directory, or give the tool another cwd "
            f"('agctl tool add {spec.name} --cwd DIR --force -- ...')",
        )
    return where


# ---- running a call ---------------------------------------------------------------------


@dataclass
class ToolRun:
    """One call of a tool and its outcome, as the loop stores it and the model sees it.

    `exit_code` is the tool's exit status (negative: killed by that signal), None when it
    timed out or never started. `output` is stdout as text (at most the first 1 MiB,
    invalid UTF-8 replaced); `output_bytes` counts all of stdout and `output_sha256` is
    the SHA-256 of all of it (every byte read, past 1 MiB too), so it names the output
    exactly even when `output` is cut. `result_text` is what the model gets, at most the
    tool's max_output bytes; `truncated` says that it was cut.
    """

    name: str
    arguments: dict[str, Any]
    argv: list[str]
    exit_code: int | None
    timed_out: bool
    duration_ms: int
    output: str
    output_bytes: int
    output_sha256: str
    stderr_tail: str
    result_text: str
    truncated: bool
    started: bool = True

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out

    @classmethod
    def not_run(
        cls, name: str, arguments: Mapping[str, Any], text: str, argv: Iterable[str] = ()
    ) -> ToolRun:
        """A call that did not run (denied, invalid, no such program): `text` is its result."""
        return cls(
            name=name,
            arguments=dict(arguments),
            argv=list(argv),
            exit_code=None,
            timed_out=False,
            duration_ms=0,
            output="",
            output_bytes=0,
            output_sha256=hashlib.sha256(b"").hexdigest(),
            stderr_tail="",
            result_text=text,
            truncated=False,
            started=False,
        )

    def to_dict(self) -> dict[str, Any]:
        """The run for --json (the loop adds the call's id); `output`, up to 1 MiB, is left
        to the stored tool message."""
        return {
            "name": self.name,
            "arguments": self.arguments,
            "argv": self.argv,
            "started": self.started,
            "exit": self.exit_code,
            "timed_out": self.timed_out,
            "duration_ms": self.duration_ms,
            "output_bytes": self.output_bytes,
            "output_sha256": self.output_sha256,
            "truncated": self.truncated,
            "stderr_tail": self.stderr_tail,
            "result": self.result_text,
        }


class _Stream:
    """One of a tool's pipes as read: its first `head` bytes, its last `tail` bytes, its
    length and its SHA-256."""

    def __init__(self, head: int, tail: int) -> None:
        self.head_limit, self.tail_limit = head, tail
        self.head, self.tail = bytearray(), bytearray()
        self.total = 0
        self.digest = hashlib.sha256()

    def feed(self, data: bytes) -> None:
        self.total += len(data)
        self.digest.update(data)
        room = self.head_limit - len(self.head)
        if room > 0:
            self.head += data[:room]
        if self.tail_limit:
            self.tail += data[-self.tail_limit :]
            if len(self.tail) > self.tail_limit:
                del self.tail[: len(self.tail) - self.tail_limit]


def _text_of_prefix(data: bytes, whole: bool) -> str:
    """A leading part of a stream as text: a character cut at the end is dropped."""
    return codecs.getincrementaldecoder("utf-8")("replace").decode(bytes(data), final=whole)


def _text_of_suffix(data: bytes) -> str:
    """A trailing part of a stream as text: a character cut at the start is dropped."""
    start = 0
    while start < min(len(data), 3) and 0x80 <= data[start] <= 0xBF:
        start += 1
    return bytes(data[start:]).decode("utf-8", "replace")


# Room kept for the cut marker, whatever the number in it.
_MARKER_ROOM = 48


def _cut(head: bytes, tail: bytes, total: int, limit: int) -> tuple[str, bool]:
    """A text of `total` bytes (its first bytes `head`, its last `tail`) in at most
    `limit` bytes: whole, or its head and tail around `[... N bytes cut ...]`."""
    if total <= limit:
        return _text_of_prefix(head[:total], whole=True), False
    keep = (limit - _MARKER_ROOM) // 2
    cut = total - 2 * keep
    text = (
        _text_of_prefix(head[:keep], whole=False)
        + f"\n[... {cut} bytes cut ...]\n"
        + _text_of_suffix(tail[len(tail) - keep :])
    )
    return text, True


def cut_text(text: str, limit: int) -> tuple[str, bool]:
    """`text` in at most `limit` bytes (its head and tail around the cut), and whether cut."""
    data = text.encode("utf-8", "replace")
    return _cut(data, data, len(data), limit)


def _exit_watch(pid: int) -> int | None:
    """A descriptor that becomes readable when process `pid` exits (Linux), else None."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


def _supervise(
    process: subprocess.Popen[bytes],
    stdin_data: bytes | None,
    stdout: _Stream,
    stderr: _Stream,
    timeout_s: float,
    interrupts: int,
    processes: CallProcesses,
) -> bool:
    """Feed stdin and read stdout and stderr together until the tool has exited and its
    pipes closed, keeping watch on the `processes` it starts; on timeout SIGTERM them (its
    group, and those that left it), SIGKILL them 2 s later. When the tool exits, what it
    left running gets the same. An interrupt of agctl since the count was `interrupts`
    (raised in the main thread, seen here from a worker's) is raised here too. Returns
    whether it timed out."""
    assert process.stdout is not None and process.stderr is not None
    selector = selectors.DefaultSelector()
    streams = {process.stdout.fileno(): stdout, process.stderr.fileno(): stderr}
    for fd in streams:
        os.set_blocking(fd, False)
        selector.register(fd, selectors.EVENT_READ)
    pending = memoryview(stdin_data or b"")
    stdin_fd = process.stdin.fileno() if process.stdin is not None else None
    if stdin_fd is not None:
        os.set_blocking(stdin_fd, False)
        selector.register(stdin_fd, selectors.EVENT_WRITE)
    watch = _exit_watch(process.pid)
    if watch is not None:
        selector.register(watch, selectors.EVENT_READ)
    deadline = time.monotonic() + timeout_s
    timed_out = exited = False
    term_at: float | None = None  # when the group got SIGTERM
    kill_at: float | None = None  # when it got SIGKILL
    watched_at = time.monotonic()
    try:
        while True:
            signum = interrupted_since(interrupts)
            if signum is not None:
                raise Interrupted(signum)
            now = time.monotonic()
            if now >= watched_at + WATCH_S:
                processes.watch()
                watched_at = now
            if not exited and term_at is None and now >= deadline:
                timed_out = True
            if (timed_out or exited) and term_at is None:
                processes.watch()  # what the tool left, before the group's leader is reaped
                processes.signal(signal.SIGTERM)
                term_at = now
            if term_at is not None and kill_at is None and now >= term_at + KILL_GRACE_S:
                processes.signal(signal.SIGKILL)
                kill_at = now
            open_pipes = [fd for fd in streams if fd in selector.get_map()]
            if exited and not open_pipes:
                break
            if kill_at is not None and now >= kill_at + PIPE_GRACE_S:
                break
            waits = [deadline if term_at is None else term_at + KILL_GRACE_S]
            if kill_at is not None:
                waits = [kill_at + PIPE_GRACE_S]
            wait = min(max(min(waits) - now, 0.0), WATCH_S)
            if watch is None and not exited:
                wait = min(wait, _EXIT_POLL_S)
            for key, _events in selector.select(wait):
                fd = key.fd
                if fd == watch:
                    selector.unregister(watch)
                    exited = True
                elif fd == stdin_fd:
                    try:
                        written = os.write(fd, pending[:_READ_CHUNK])
                        pending = pending[written:]
                    except BrokenPipeError:
                        pending = pending[:0]
                    if not pending:
                        selector.unregister(fd)
                        assert process.stdin is not None
                        process.stdin.close()
                        stdin_fd = None
                else:
                    try:
                        data = os.read(fd, _READ_CHUNK)
                    except BlockingIOError:
                        continue
                    if data:
                        streams[fd].feed(data)
                    else:
                        selector.unregister(fd)
            if watch is None and not exited:
                exited = call_exited(process.pid)
    finally:
        selector.close()
        if watch is not None:
            os.close(watch)
    return timed_out


def run_tool(
    spec: ToolSpec,
    arguments: Mapping[str, Any],
    *,
    data_dir: Path | None,
    cwd: Path | str | None = None,
    environ: Mapping[str, str] | None = None,
) -> ToolRun:
    """Run one call of `spec` with checked `arguments` and report its outcome; a program
    that cannot be started is an error result, not an exception. Every process the call
    starts ends with it, those that left its process group too (agctl.base.procs). `cwd` is
    where agctl was started (default: the current directory); `data_dir` the data dir the
    tool must not run in (None: a store with no directory). An interrupt (Ctrl-C, SIGTERM,
    SIGHUP) kills the tool's processes and re-raises.
    """
    workdir = tool_cwd(spec, started_in=cwd, data_dir=data_dir)
    env = tool_env(spec, arguments, os.environ if environ is None else environ)
    argv = tool_argv(spec, arguments)
    if not workdir.is_dir():
        return ToolRun.not_run(
            spec.name,
            arguments,
            f"error: cannot run {argv[0]}: its working directory {workdir} is not a directory",
            argv,
        )
    stdin_data = arguments_json(arguments).encode() if spec.args == "stdin" else None
    raise_if_interrupted()  # a call a worker thread starts after the signal: none
    interrupts = interrupt_count()
    processes = CallProcesses()
    started = time.monotonic()
    try:
        process = processes.start(
            lambda: subprocess.Popen(
                argv,
                stdin=subprocess.PIPE if stdin_data is not None else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                cwd=workdir,
                env=env,
                start_new_session=True,
            )
        )
    except OSError as exc:
        processes.release()
        reason = exc.strerror or str(exc)
        return ToolRun.not_run(spec.name, arguments, f"error: cannot run {argv[0]}: {reason}", argv)
    stdout = _Stream(KEPT_OUTPUT, spec.max_output)
    stderr = _Stream(0, STDERR_TAIL)
    try:
        try:
            timed_out = _supervise(
                process, stdin_data, stdout, stderr, spec.timeout_s, interrupts, processes
            )
            processes.stop(KILL_GRACE_S)  # what is left of the call ends with it
        except BaseException:
            processes.stop(0)
            process.wait()
            raise
        finally:
            for pipe in (process.stdin, process.stdout, process.stderr):
                if pipe is not None:
                    pipe.close()
        status = process.wait()
    finally:
        processes.release()
    duration_ms = int((time.monotonic() - started) * 1000)
    exit_code = None if timed_out else status
    kept_stderr = bytes(stderr.tail)
    if stderr.total > len(kept_stderr):
        stderr_tail = _text_of_suffix(kept_stderr)
    else:
        stderr_tail = kept_stderr.decode("utf-8", "replace")
    if exit_code == 0:
        result_text, truncated = _cut(
            bytes(stdout.head), bytes(stdout.tail), stdout.total, spec.max_output
        )
    else:
        if timed_out:
            outcome = f"error: timed out after {spec.timeout_s:g}s"
        elif status < 0:
            outcome = f"error: killed by signal {_signal_name(-status)}"
        else:
            outcome = f"error: exit {status}"
        tail = stderr_tail.rstrip("\n")
        result_text, truncated = cut_text(outcome + (f"\n{tail}" if tail else ""), spec.max_output)
    return ToolRun(
        name=spec.name,
        arguments=dict(arguments),
        argv=argv,
        exit_code=exit_code,
        timed_out=timed_out,
        duration_ms=duration_ms,
        output=_text_of_prefix(bytes(stdout.head), whole=stdout.total <= KEPT_OUTPUT),
        output_bytes=stdout.total,
        output_sha256=stdout.digest.hexdigest(),
        stderr_tail=stderr_tail,
        result_text=result_text,
        truncated=truncated,
    )


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return str(number)


# ---- approval -----------------------------------------------------------------------------

# A person's answer about one call: run it, do not, or run it and every later call of
# the same tool in this turn without asking again.
Answer = Literal["yes", "no", "always"]
# Asks the user whether to run a call: (the tool, its arguments, the resolved argv).
AskFn = Callable[[ToolSpec, dict[str, Any], list[str]], Answer]
Decision = Literal["run", "deny"]


def approval(
    spec: ToolSpec,
    mode: ApproveMode | None,
    ask: AskFn | None,
    arguments: Mapping[str, Any],
) -> Decision:
    """Whether a model's call of `spec` runs. `mode` is the command's --approve (None,
    "auto": run "ask" tools without asking, "never": run nothing); `ask` asks on the
    terminal, None when there is none. A tool marked "deny" never runs. A "deny" decision
    is not an error: the loop gives the model DENIED as the call's result. Only an "ask"
    tool with nobody to ask (and no --approve auto) raises ApprovalNeeded (exit 9): it
    fails closed, the call left for a decision later."""
    if spec.approve == "deny" or mode == "never":
        return "deny"
    if spec.approve == "auto" or mode == "auto":
        return "run"
    if ask is None:
        raise ApprovalNeeded(spec.name, "there is no terminal to ask on")
    answer = ask(spec, dict(arguments), resolved_argv(spec, arguments))
    return "run" if answer in ("yes", "always") else "deny"


def approval_prompt(spec: ToolSpec, arguments: Mapping[str, Any], argv: list[str]) -> str:
    """The question put to the user for one call: the tool, its arguments and its argv,
    escaped (what the model wrote cannot act on the terminal), the argv as a shell reads
    it back."""
    from agctl.base.quoting import escaped, shell_words

    return (
        f"The model asks to run tool {escaped(spec.name)}:\n"
        f"  arguments: {escaped(arguments_json(arguments))}\n"
        f"  command:   {shell_words(argv)}\n"
        f"Run it? (always: run it, and {escaped(spec.name)} for the rest of this turn "
        "without asking)"
    )


def _given(answer: Answer) -> AskFn:
    """An AskFn that answers `answer` without asking: the answer given in advance."""
    return lambda spec, arguments, argv: answer


class ServedTools(Protocol):
    """Tools a server runs (agctl.turn.mcp.McpClient): the calls of those it serves go to
    it, and what it opened closes when the turn ends."""

    def call(self, spec: ToolSpec, arguments: Mapping[str, Any]) -> ToolRun: ...

    def close(self) -> None: ...


class LiveTools:
    """A ToolBox that runs the offered tools (agctl.turn.steps): each call checked against its
    tool's schema, put to the approval rules (`approve`: the --approve mode; `ask`: the
    terminal's question, None without one; `answers`: answers given in advance by call
    id, as --approve-call and --deny-call give them), then run. A call that cannot run
    gets an error text, a denied one DENIED; an "ask" with no one to ask raises
    ApprovalNeeded, exit 9. Questions are asked one at a time even when calls run at
    once; "always" runs the tool's later calls in the turn without asking.

    With `hooks`, PreToolUse hooks see each call first: they may allow it (as --approve
    auto would, never over a tool set to deny or --approve never), deny it (the model is
    told why), ask about it (even a tool set to auto), or rewrite its arguments, which
    are checked again; PostToolUse hooks may rewrite (redact) the result the model gets.
    A hook that blocks (exit 2) stops the turn, exit 9.

    With `mcp`, the specs named in `served` are an MCP server's tools (agctl.turn.mcp):
    their calls go to the server, through the same checks; its connections end with the
    turn (`end_turn`). Where a spec came from decides, never its name's shape."""

    def __init__(
        self,
        specs: Mapping[str, ToolSpec],
        *,
        approve: ApproveMode | None = None,
        ask: AskFn | None = None,
        data_dir: Path | None = None,
        cwd: Path | None = None,
        hooks: Hooks | None = None,
        answers: Mapping[str, Answer] | None = None,
        mcp: ServedTools | None = None,
        served: Collection[str] = (),
    ) -> None:
        import threading

        self.specs = dict(specs)
        self.mcp = mcp
        self.served = frozenset(served)
        self.approve = approve
        self.ask = ask
        self.data_dir = data_dir
        self.cwd = cwd
        self.hooks = hooks
        self.answers = dict(answers or {})
        self._always: set[str] = set()  # tools answered "always" in this turn
        self._asking = threading.Lock()
        self._definitions: list[dict[str, Any]] | None = None

    def begin_turn(self) -> None:
        self._always.clear()

    def end_turn(self) -> None:
        if self.mcp is not None:
            self.mcp.close()

    def _ask(self, spec: ToolSpec, arguments: dict[str, Any], argv: list[str]) -> Answer:
        assert self.ask is not None
        answer = self.ask(spec, arguments, argv)
        if answer == "always":
            self._always.add(spec.name)
        return answer

    def definitions(self) -> list[dict[str, Any]]:
        if self._definitions is None:
            self._definitions = definitions(self.specs.values())
        return self._definitions

    def run(self, call: ToolCall) -> tuple[str, CallRecord]:
        raise_if_interrupted()  # a call a worker thread takes up after the signal
        name, arguments = call.function.name, call.function.arguments
        spec = self.specs.get(name)
        checked = check_call(spec, name, arguments)
        if isinstance(checked, str) or spec is None:
            text = checked if isinstance(checked, str) else f"error: no tool named {name!r}"
            return text, CallRecord(call.id, name, arguments, outcome="error")
        given_answer = self.answers.get(call.id)
        if given_answer == "no":
            return DENIED, CallRecord(call.id, name, arguments, outcome="denied")
        mode = self.approve
        given: str | None = None
        if self.hooks and self.hooks.has("PreToolUse"):
            changes = self.hooks.fire(
                "PreToolUse", tool=name, call_id=call.id, arguments=dict(checked)
            )
            if "arguments" in changes:
                problem = arguments_problem(spec, changes["arguments"])
                if problem is not None:
                    text = f"error: the arguments a hook gave are invalid: {problem}"
                    return text, CallRecord(call.id, name, arguments, outcome="error")
                checked = dict(changes["arguments"])
            given = changes.get("decision")
            if given == "deny":
                reason = changes.get("reason") or "no reason given"
                text = f"error: denied by a hook: {reason}"
                return text, CallRecord(call.id, name, arguments, outcome="denied")
            if given == "allow" and mode is None:
                mode = "auto"
            elif given == "ask" and spec.approve == "auto" and mode != "never":
                spec, mode = spec.model_copy(update={"approve": "ask"}), None
        ask: AskFn | None = self._ask if self.ask is not None else None
        if given_answer is not None:
            ask = _given(given_answer)
        with self._asking:
            raise_if_interrupted()  # a worker that waited for another call's question
            if mode is None and given != "ask" and spec.name in self._always:
                mode = "auto"  # answered "always" (a hook's own "ask" is still asked)
            decision = approval(spec, mode, ask, checked)
        if decision != "run":
            return DENIED, CallRecord(call.id, name, arguments, outcome="denied")
        if self.mcp is not None and spec.name in self.served:
            run = self.mcp.call(spec, checked)
        else:
            run = run_tool(spec, checked, data_dir=self.data_dir, cwd=self.cwd)
        record = CallRecord(
            call.id,
            name,
            arguments,
            outcome="ran" if run.started else "error",
            exit=run.exit_code,
            duration_ms=run.duration_ms,
            truncated=run.truncated,
            output_sha256=run.output_sha256,
            output=run.output,
            output_bytes=run.output_bytes,
        )
        text = run.result_text
        if self.hooks and self.hooks.has("PostToolUse"):
            changes = self.hooks.fire(
                "PostToolUse", tool=name, call_id=call.id, arguments=dict(checked), output=text
            )
            if "output" in changes:
                text = changes["output"]
                # The whole output is not kept beside a redacted one.
                record = record._replace(output=None)
        return text, record
