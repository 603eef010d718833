"""Hooks: argv commands run at the events of a turn, given the event as JSON on stdin.

A hook is data (`HookSpec`) kept in the user config, in a profile, or in a project's
`.agctl/hooks.json`; the project file runs only once `agctl hook trust` pinned its sha256
in the user config, so checking out a repository never makes agctl run its code. The pin
is keyed by the project directory and the file's place in it, and is for the bytes the
project holds there: a symbolic link in place of `.agctl` or of the file is refused (its
target may be a file trusted in another project), and a project's hooks run in the
project's directory, so a relative command means the project's own file.

A hook exits 0 to let the event go on (printing nothing, or one JSON object of the changes
its event allows: an unknown key is an error, since a typo must not mean "allow"), or 2
to block it (stderr is the reason). Anything else — another exit, a timeout, output that
is not what the event allows — is a failure: it blocks the event or only warns, as the
hook's `on_error` says (by default: blocks an event that can be blocked).
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import signal
import stat
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agctl.base.errors import (
    AgctlError,
    AlreadyExists,
    Blocked,
    Interrupted,
    InvalidInput,
    NotFound,
    UsageError,
)
from agctl.base.interrupts import interrupt_count, interrupted_since
from agctl.base.procs import WATCH_S, CallProcesses, call_exited
from agctl.base.quoting import shell_word
from agctl.base.validation import validation_summary
from agctl.base.vocab import (
    HOOK_DECISIONS,
    HookDecision,
    HookEvent,
    HookFileState,
    HookRunOutcome,
    HookSource,
)
from agctl.config.file import PROJECT_HOOKS_FILE
from agctl.config.specs import HookSpec

if TYPE_CHECKING:
    import subprocess

    from agctl.config.file import Config, ConfigFile

log = logging.getLogger("agctl.hooks")  # the name -v shows, kept from before the regroup

# The version of the payload a hook reads on stdin.
PAYLOAD_SCHEMA_VERSION = "1.0"
# After SIGTERM, how long a timed-out hook's processes have before SIGKILL.
KILL_GRACE_S = 2.0
# A hook prints at most a small JSON object; more than this is a failure.
MAX_STDOUT_BYTES = 1024 * 1024
# What is kept of a hook's stderr (its end): the reason of a block, or of a failure.
STDERR_TAIL_BYTES = 64 * 1024
REASON_CHARS = 2000
# The most a project's hooks file may hold.
MAX_PROJECT_FILE_BYTES = 1024 * 1024
# The fields every payload has, besides `hook_event` and `schema_version`.
CONTEXT_FIELDS = ("session", "slot", "turn", "model", "cwd")
# The variables a hook's process inherits (and every LC_*): none can hold a credential.
KEPT_VARIABLES = frozenset({"PATH", "HOME", "LANG", "TZ", "TMPDIR", "TERM"})
_SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL", re.IGNORECASE)


# ---- what a hook may print, per event ---------------------------------------------------


class HookOutput(BaseModel):
    """The changes a hook prints on stdout: strictly typed, and no key its event lacks."""

    model_config = ConfigDict(extra="forbid", strict=True, defer_build=True)


class TurnStartOutput(HookOutput):
    prompt: str = ""  # replaces the prompt
    scratch: list[str] = Field(default_factory=list)  # added to the turn's scratch text


class PreToolUseOutput(HookOutput):
    decision: HookDecision = "allow"
    reason: str = ""
    arguments: dict[str, Any] = Field(default_factory=dict)  # re-validated by the caller


class PostToolUseOutput(HookOutput):
    output: str = ""  # replaces what the model is shown (a redaction)


class PreCompressOutput(HookOutput):
    cancel: bool = False
    summary: str = ""  # used instead of asking the provider


class PostCompressOutput(HookOutput):
    summary: str = ""
    keep_recent: int = Field(default=0, ge=0)  # may only narrow the messages kept


class ObserveOutput(HookOutput):
    """An observing event takes no changes: stdout is empty or `{}`."""


class EventRule(NamedTuple):
    """What an event allows its hooks."""

    event: HookEvent
    may_block: bool
    output: type[HookOutput]
    # The event's own fields the caller puts in the payload (hooks read them; a hook's
    # changes are merged into them before the next hook runs).
    data: tuple[str, ...]


EVENTS: dict[HookEvent, EventRule] = {
    rule.event: rule
    for rule in (
        EventRule("TurnStart", True, TurnStartOutput, ("prompt", "scratch")),
        EventRule("PreToolUse", True, PreToolUseOutput, ("tool", "call_id", "arguments")),
        EventRule(
            "PostToolUse", True, PostToolUseOutput, ("tool", "call_id", "arguments", "output")
        ),
        EventRule("PreCompress", True, PreCompressOutput, ("strategy", "keep_recent")),
        EventRule("PostCompress", True, PostCompressOutput, ("strategy", "keep_recent", "summary")),
        EventRule("TurnEnd", False, ObserveOutput, ()),
        EventRule("TurnError", False, ObserveOutput, ("error",)),
        EventRule("PostRollback", False, ObserveOutput, ("checkpoint",)),
        EventRule("PostFork", False, ObserveOutput, ("checkpoint", "new_session")),
    )
}
# A stricter PreToolUse decision (vocab order: allow, ask, deny) is never loosened by a
# later hook.
_DECISION_RANK: dict[str, int] = {decision: rank for rank, decision in enumerate(HOOK_DECISIONS)}


def hook_spec(fields: Mapping[str, Any]) -> HookSpec:
    """A validated hook, or a UsageError saying which field is wrong."""
    try:
        return HookSpec.model_validate(dict(fields))
    except ValidationError as exc:
        raise UsageError(f"invalid hook: {validation_summary(exc, 'hook')}") from None


# ---- where hooks live --------------------------------------------------------------------


class ProjectHooks(NamedTuple):
    """A project's hooks file as found: its hooks run only when `state` is "trusted"."""

    project: Path  # the project directory, as the kernel names it (links resolved)
    state: HookFileState
    sha256: str | None = None
    hooks: tuple[HookSpec, ...] = ()  # parsed, even when not trusted
    problem: str | None = None  # why an "invalid" file cannot be read

    @property
    def path(self) -> Path:
        """The file as the project holds it, and the key of its pin: never a link's target."""
        return self.project / PROJECT_HOOKS_FILE

    @property
    def trusted(self) -> bool:
        return self.state == "trusted"

    def runnable(self) -> list[ProjectHookSpec]:
        """The hooks, each bound to the project directory it runs in."""
        return [
            ProjectHookSpec.model_validate({**hook.model_dump(), "project": self.project})
            for hook in self.hooks
        ]


class ProjectHookSpec(HookSpec):
    """A hook of a trusted project file. It runs in the project's directory, where the file
    was trusted, whatever the payload's cwd: a relative command (`sh .agctl/check.sh`)
    always means that project's own file."""

    project: Path = Field(exclude=True)


# Each (path, state) is warned about once a process: a loop asks for hooks many times.
_warned: set[tuple[str, str]] = set()


def project_directory(cwd: Path) -> Path:
    """The project in `cwd`: its directory as the kernel names it (so `cd` through a link
    is the same project)."""
    return Path(os.path.realpath(cwd))


def project_of(path: Path, relative: Path = PROJECT_HOOKS_FILE) -> Path:
    """The project whose file `path` names (PROJECT/.agctl/hooks.json, or the `relative`
    path of another project file); no other file is ever read for what it holds, so no
    other can be trusted (UsageError)."""
    named = Path.cwd() / path  # `..` kept: it is resolved on disk, not by its spelling
    if named.name != relative.name or named.parent.name != relative.parent.name:
        raise UsageError(
            f"{shell_word(str(path))} is not a project's {relative.stem} file: agctl reads "
            f"its {relative.stem} from PROJECT/{relative} only"
        )
    return project_directory(named.parent.parent)


def _parse_hooks_file(data: bytes) -> list[HookSpec]:
    """The hooks of a hooks file (a JSON array of hooks, names unique), or InvalidInput."""
    import orjson

    try:
        parsed = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise InvalidInput(f"not JSON ({exc})") from None
    if not isinstance(parsed, list):
        raise InvalidInput("not a JSON array of hooks")
    hooks = []
    for index, item in enumerate(parsed):
        try:
            hooks.append(HookSpec.model_validate(item))
        except ValidationError as exc:
            raise InvalidInput(f"hook {index}: {validation_summary(exc)}") from None
    names = [hook.name for hook in hooks]
    doubled = sorted({name for name in names if names.count(name) > 1})
    if doubled:
        raise InvalidInput(f"hook names used twice: {', '.join(doubled)}")
    return hooks


_DIRECTORY_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def _read_project_file(project: Path, relative: Path = PROJECT_HOOKS_FILE) -> bytes:
    """The bytes of the project's hooks file (or of its file at `relative`, in `.agctl`
    too) as the project holds them: `.agctl` a real directory in it and `hooks.json` a
    regular file in that, neither a symbolic link (whose target may be a file trusted in
    another project). Each step is opened from the one before, so nothing can become a
    link between a check and the read. NotFound when the project has no such file,
    InvalidInput when something else is in its place."""
    from agctl.base.fsio import not_regular

    path = project / relative
    opened: list[int] = []
    try:
        try:
            opened.append(os.open(project, _DIRECTORY_FLAGS))
            folder = relative.parent.name
            opened.append(os.open(folder, _DIRECTORY_FLAGS | os.O_NOFOLLOW, dir_fd=opened[-1]))
            opened.append(os.open(relative.name, _FILE_FLAGS, dir_fd=opened[-1]))
        except FileNotFoundError:
            raise NotFound(f"no {relative.stem} file: {shell_word(str(path))}") from None
        except OSError as exc:
            raise _unreadable(project, exc, relative) from None
        info = os.fstat(opened[-1])
        if not stat.S_ISREG(info.st_mode):
            reason = not_regular(path, info.st_mode).reason
            raise InvalidInput(f"{shell_word(str(path))} {reason}")
        chunks = [os.read(opened[-1], MAX_PROJECT_FILE_BYTES + 1)]
        while chunks[-1] and sum(map(len, chunks)) <= MAX_PROJECT_FILE_BYTES:
            chunks.append(os.read(opened[-1], 65536))
    except OSError as exc:
        raise InvalidInput(f"{shell_word(str(path))}: {exc.strerror}") from None
    finally:
        for fd in reversed(opened):
            os.close(fd)
    data = b"".join(chunks)
    if len(data) > MAX_PROJECT_FILE_BYTES:
        raise InvalidInput(
            f"{shell_word(str(path))}: more than the {MAX_PROJECT_FILE_BYTES} bytes a "
            f"{relative.stem} file can be"
        )
    return data


def _unreadable(project: Path, exc: OSError, relative: Path) -> InvalidInput:
    """Why the file `relative` of `project` could not be opened: the first step on its way
    that is a link (naming the target), else the system's reason."""
    where = project
    for part in relative.parts:
        where = where / part
        try:
            target = os.readlink(where)
        except OSError:
            continue
        return InvalidInput(
            f"{shell_word(str(where))} is a symbolic link (to {shell_word(target)}): a project's "
            f"{relative.stem} are read only from the file the project itself holds, never "
            "through a link, whose target may be a file trusted in another project",
            hint=f"put a copy of the file itself at {relative}, read it, then trust it",
        )
    return InvalidInput(f"{shell_word(str(project / relative))}: {exc.strerror}")


class PinnedFile(NamedTuple):
    """A project file as found (PROJECT/.agctl/NAME), and whether the config's pin trusts it
    as it is now: what it holds is used only when `state` is "trusted"."""

    project: Path
    state: HookFileState
    sha256: str | None = None
    parsed: Any = None  # what `parse` made of it, even when not trusted
    problem: str | None = None  # why an "invalid" file cannot be read


def read_pinned_file(
    config: Config, cwd: Path, relative: Path, parse: Callable[[bytes], Any]
) -> PinnedFile:
    """The project file `relative` of the project in `cwd`, parsed (InvalidInput: an
    invalid file) but not used, and whether the config trusts it as it is now (its pin
    is keyed by the file's place in the project): the project hooks' mechanism, shared by
    every project file that could run code (agctl.turn.mcp's servers)."""
    project = project_directory(cwd)
    key = str(project / relative)
    pinned = config.trusted_hook_files.get(key)
    try:
        data = _read_project_file(project, relative)
    except NotFound:
        return PinnedFile(project, "absent")
    except InvalidInput as exc:
        return PinnedFile(project, "invalid", problem=str(exc))
    digest = hashlib.sha256(data).hexdigest()
    try:
        parsed = parse(data)
    except InvalidInput as exc:
        if pinned == digest:  # trusted as it is, yet unreadable (written by a newer agctl)
            raise InvalidInput(f"trusted {relative.stem} file {shell_word(key)}: {exc}") from None
        return PinnedFile(project, "invalid", digest, problem=str(exc))
    state: HookFileState = (
        "untrusted" if pinned is None else "trusted" if pinned == digest else "changed"
    )
    return PinnedFile(project, state, digest, parsed)


def read_project_hooks(config: Config, cwd: Path) -> ProjectHooks:
    """The hooks file of the project in `cwd`, parsed but not run, and whether the config
    trusts it as it is now (its pin is keyed by the file's place in the project)."""
    found = read_pinned_file(config, cwd, PROJECT_HOOKS_FILE, _parse_hooks_file)
    return ProjectHooks(
        found.project, found.state, found.sha256, tuple(found.parsed or ()), found.problem
    )


def _warn_unused(project: ProjectHooks) -> None:
    key = (str(project.path), project.state)
    if project.state in ("absent", "trusted") or key in _warned:
        return
    _warned.add(key)
    shown = shell_word(str(project.path))
    if project.state == "untrusted":
        log.warning("%s is ignored: its hooks run once you trust it ('agctl hook trust')", shown)
    elif project.state == "changed":
        log.warning(
            "%s changed since 'agctl hook trust' pinned it: its trust is dropped and its "
            "hooks are ignored until you trust it again",
            shown,
        )
    else:
        log.warning("%s is ignored: %s", shown, project.problem)


def hooks_disabled(flag: bool = False, env: Mapping[str, str] | None = None) -> bool:
    """Whether every hook is bypassed: --no-hooks, or AGCTL_NO_HOOKS=1 (or true, yes, on)."""
    value = (os.environ if env is None else env).get("AGCTL_NO_HOOKS", "")
    return flag or value.strip().lower() in ("1", "true", "t", "yes", "y", "on")


class ListedHook(NamedTuple):
    """A hook with where it is configured, as `agctl hook list` shows it."""

    spec: HookSpec
    source: HookSource
    profile: str | None = None
    trust: HookFileState = "trusted"  # a project file's state, for its hooks

    def public(self) -> dict[str, Any]:
        return {
            **self.spec.model_dump(mode="json"),
            "source": self.source,
            "profile": self.profile,
            "trust": self.trust,
        }


def all_hooks(config: Config, cwd: Path) -> tuple[list[ListedHook], ProjectHooks]:
    """Every configured hook, run or not: the config's, each profile's, the project's."""
    listed = [ListedHook(spec, "config") for spec in config.hooks]
    for name, profile in sorted(config.profiles.items()):
        listed.extend(ListedHook(spec, "profile", name) for spec in profile.hooks)
    project = read_project_hooks(config, cwd)
    listed.extend(ListedHook(spec, "project", trust=project.state) for spec in project.hooks)
    return listed, project


def profile_in_use(
    config: Config, given: str | None = None, env: Mapping[str, str] | None = None
) -> str | None:
    """The profile whose hooks run outside a turn: the one given, else AGCTL_PROFILE, else
    the config's default (a turn knows its own: agctl.config.file.Resolved.profile)."""
    return (
        given
        or (os.environ if env is None else env).get("AGCTL_PROFILE")
        or (config.default_profile)
    )


def hooks_for(
    config: Config,
    profile_name: str | None,
    cwd: Path,
    event: HookEvent,
    *,
    no_hooks: bool = False,
) -> list[HookSpec]:
    """The hooks `event` runs, in order: the config's, the profile's, then the trusted
    project file's; none with --no-hooks or AGCTL_NO_HOOKS."""
    if hooks_disabled(no_hooks):
        return []
    return [hook for hook in _in_order(config, profile_name, cwd) if hook.event == event]


def _in_order(config: Config, profile_name: str | None, cwd: Path) -> list[HookSpec]:
    """Every hook, in the order they run: the config's, the profile's, then the trusted
    project file's (an untrusted or changed one is warned about, once)."""
    chosen = list(config.hooks)
    profile = config.profiles.get(profile_name) if profile_name else None
    if profile is not None:
        chosen.extend(profile.hooks)
    project = read_project_hooks(config, cwd)
    _warn_unused(project)
    if project.trusted:
        chosen.extend(project.runnable())
    return chosen


class Hooks:
    """The hooks one command runs, resolved once (the config's, the profile's, the
    trusted project file's), fired at their events with the command's context (session,
    slot, turn, model; set as the command learns them). Each run is kept for --json."""

    def __init__(
        self, config: Config, profile_name: str | None, cwd: Path, *, no_hooks: bool = False
    ) -> None:
        self.cwd = cwd
        self.context: dict[str, Any] = {"cwd": str(cwd)}
        self.runs: list[HookRun] = []
        self._by_event: dict[str, list[HookSpec]] = {}
        if hooks_disabled(no_hooks):
            return
        for hook in _in_order(config, profile_name, cwd):
            self._by_event.setdefault(hook.event, []).append(hook)

    def __bool__(self) -> bool:
        return bool(self._by_event)

    def has(self, event: HookEvent) -> bool:
        return event in self._by_event

    def fire(self, event: HookEvent, **data: Any) -> dict[str, Any]:
        """Run the event's hooks on the context and `data`; their combined changes ({}
        when there are none). A hook that blocks raises HookBlocked (exit 9)."""
        hooks = self._by_event.get(event)
        if not hooks:
            return {}
        try:
            outcome = run_hooks(event, {**self.context, **data}, hooks)
        except HookBlocked as blocked:
            self.runs.extend(blocked.runs)
            raise
        self.runs.extend(outcome.runs)
        return outcome.changes

    def observe(self, event: HookEvent, **data: Any) -> None:
        """Fire an event that cannot be stopped: a failure is a warning, never an error
        (the command's work is done)."""
        try:
            self.fire(event, **data)
        except AgctlError as exc:
            log.warning("%s hooks: %s", event, exc)


# ---- changing the config -----------------------------------------------------------------


def _names(hooks: Sequence[HookSpec]) -> set[str]:
    return {hook.name for hook in hooks}


def _hook_list(config: Config, profile: str | None) -> list[HookSpec]:
    if profile is None:
        return config.hooks
    if profile not in config.profiles:
        known = ", ".join(sorted(config.profiles)) or "none"
        raise NotFound(f"profile {profile!r} not found (profiles: {known})")
    return config.profiles[profile].hooks


def add_hook(
    store: ConfigFile, spec: HookSpec, *, profile: str | None = None, replace: bool = False
) -> None:
    """Add `spec` to the config's hooks (or a profile's), last; `replace` puts it in the
    place of the hook of that name."""
    config = store.load()
    hooks = _hook_list(config, profile)
    names = [hook.name for hook in hooks]
    if spec.name in names:
        if not replace:
            raise AlreadyExists(f"hook {spec.name!r} already exists (use --force to replace it)")
        hooks[names.index(spec.name)] = spec
    else:
        hooks.append(spec)
    store.save(config)


def remove_hook(store: ConfigFile, name: str, *, profile: str | None = None) -> HookSpec:
    config = store.load()
    hooks = _hook_list(config, profile)
    for index, hook in enumerate(hooks):
        if hook.name == name:
            del hooks[index]
            store.save(config)
            return hook
    owners = [p for p, prof in sorted(config.profiles.items()) if name in _names(prof.hooks)]
    hint = None
    if profile is None and owners:
        hint = f"it is a hook of profile {owners[0]}: add --profile {owners[0]}"
    where = f"profile {profile!r}" if profile else "the config"
    raise NotFound(f"hook {name!r} not found in {where}", hint=hint)


def trust_hooks_file(store: ConfigFile, path: Path) -> ProjectHooks:
    """Pin the sha256 of the project hooks file at `path` (PROJECT/.agctl/hooks.json), keyed
    by its place in the project, after checking that the project holds it itself (no link
    on its way) and that it is valid: its hooks run in that project from now on, until the
    file changes."""
    project, digest, hooks = pin_project_file(store, path, PROJECT_HOOKS_FILE, _parse_hooks_file)
    return ProjectHooks(project, "trusted", digest, tuple(hooks))


def untrust_hooks_file(store: ConfigFile, path: Path) -> ProjectHooks:
    """Drop the pin of the project hooks file at `path` (which need not exist any more):
    the project and the sha256 it pinned."""
    project, digest = unpin_project_file(store, path, PROJECT_HOOKS_FILE)
    return ProjectHooks(project, "untrusted", digest)


def pin_project_file(
    store: ConfigFile, path: Path, relative: Path, parse: Callable[[bytes], Any]
) -> tuple[Path, str, Any]:
    """Pin the sha256 of the project file at `path` (PROJECT/`relative`), keyed by its
    place in the project, once the project holds it itself (no link on its way) and
    `parse` takes it: the project, the sha256 and what `parse` made of it."""
    project = project_of(path, relative)
    found = project / relative
    config = store.load()
    data = _read_project_file(project, relative)
    try:
        parsed = parse(data)
    except InvalidInput as exc:
        raise InvalidInput(f"{shell_word(str(found))}: {exc}") from None
    digest = hashlib.sha256(data).hexdigest()
    config.trusted_hook_files[str(found)] = digest
    store.save(config)
    return project, digest, parsed


def unpin_project_file(store: ConfigFile, path: Path, relative: Path) -> tuple[Path, str]:
    """Drop the pin of the project file at `path` (PROJECT/`relative`, which need not exist
    any more): the project and the sha256 it pinned."""
    project = project_of(path, relative)
    found = project / relative
    config = store.load()
    if str(found) not in config.trusted_hook_files:
        raise NotFound(f"{shell_word(str(found))} is not trusted")
    digest = config.trusted_hook_files.pop(str(found))
    store.save(config)
    return project, digest


# ---- running hooks -----------------------------------------------------------------------


class HookRun(NamedTuple):
    """One hook's run, for --json output and -v."""

    name: str
    event: HookEvent
    exit: int | None  # None: it timed out, or could not be started
    duration_ms: int
    outcome: HookRunOutcome
    message: str | None = None  # why it blocked or failed

    def public(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "event": self.event,
            "exit": self.exit,
            "duration_ms": self.duration_ms,
            "outcome": self.outcome,
            "message": self.message,
        }


class HookOutcome(NamedTuple):
    """What the hooks of one event changed, combined in order, and each one's run."""

    event: HookEvent
    changes: dict[str, Any]
    runs: list[HookRun]
    # The payload after every change (what a next hook would have read).
    payload: dict[str, Any]

    def public(self) -> dict[str, Any]:
        return {
            "event": self.event,
            "changes": self.changes,
            "runs": [run.public() for run in self.runs],
        }


class HookBlocked(Blocked):
    """A hook blocked its event (exit 2), or failed on one its `on_error` blocks."""

    def __init__(
        self, event: HookEvent, hook: str, reason: str, runs: list[HookRun], *, failed: bool
    ) -> None:
        self.event = event
        self.hook = hook
        self.reason = reason
        self.runs = runs
        self.failed = failed
        message = (
            f"hook {hook!r} failed on {event} ({reason}), which blocks it (its on_error)"
            if failed
            else f"hook {hook!r} blocked {event}: {reason}"
        )
        super().__init__(
            message, hint="see it with 'agctl hook list'; try it with 'agctl hook test'"
        )


class _BadOutput(Exception):
    """What a hook printed is not what its event allows."""


def hook_environment(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The variables a hook inherits: the core set and LC_*, never one named like a
    credential (nor AGCTL_* or OPENAI_*, which are not in the set)."""
    source = os.environ if environ is None else environ
    return {
        name: value
        for name, value in source.items()
        if (name in KEPT_VARIABLES or name.startswith("LC_")) and not _SECRET_NAME.search(name)
    }


def hook_payload(event: HookEvent, payload: Mapping[str, Any]) -> dict[str, Any]:
    """The document a hook reads on stdin: the event's name and schema version, the
    context (None where unknown; `cwd` where agctl runs) and the event's fields."""
    rule = EVENTS[event]
    missing = [name for name in rule.data if name not in payload]
    if missing:
        raise InvalidInput(f"the payload of {event} needs {', '.join(missing)}")
    full: dict[str, Any] = {"hook_event": event, "schema_version": PAYLOAD_SCHEMA_VERSION}
    for name in CONTEXT_FIELDS:
        full[name] = payload.get(name)
    if full["cwd"] is None:
        full["cwd"] = os.getcwd()
    full.update(
        (name, value)
        for name, value in payload.items()
        if name not in full and name not in ("hook_event", "schema_version")
    )
    return full


def run_hooks(
    event: HookEvent,
    payload: Mapping[str, Any],
    hooks: Sequence[HookSpec],
    *,
    log: logging.Logger = log,
    environ: Mapping[str, str] | None = None,
) -> HookOutcome:
    """Run the hooks of `event` in order, each seeing the changes of those before it;
    raise HookBlocked when one blocks the event. `payload` holds the context fields
    (CONTEXT_FIELDS) and the event's (EVENTS[event].data)."""
    current = hook_payload(event, payload)
    outcome = HookOutcome(event, {}, [], current)
    rule = EVENTS[event]
    for hook in hooks:
        if hook.event != event:
            raise ValueError(f"hook {hook.name!r} is a {hook.event} hook, not {event}")
        started = time.monotonic()
        where = hook.project if isinstance(hook, ProjectHookSpec) else current["cwd"]
        finished = _run_process(hook, _json_bytes(current), str(where), environ)
        duration_ms = int((time.monotonic() - started) * 1000)
        failure = finished.failure
        changes: dict[str, Any] = {}
        if failure is None and finished.exit == 0:
            try:
                changes = _parsed_output(rule.output, finished.stdout)
            except _BadOutput as exc:
                failure = str(exc)
        elif failure is None and finished.exit == 2 and rule.may_block:
            reason = _reason(finished.stderr) or "no reason given"
            outcome.runs.append(HookRun(hook.name, event, 2, duration_ms, "blocked", reason))
            log.info("hook %s blocked %s (%d ms): %s", hook.name, event, duration_ms, reason)
            raise HookBlocked(event, hook.name, reason, outcome.runs, failed=False)
        elif failure is None:
            tail = _reason(finished.stderr)
            failure = f"exit {finished.exit}" + (f": {tail}" if tail else "")
            if finished.exit == 2:
                failure += f" ({event} cannot be blocked)"
        stop = False
        if failure is None:
            try:
                stop = _merge(event, current, changes, outcome.changes)
            except _BadOutput as exc:
                failure = str(exc)
        if failure is not None:
            if hook.on_error == "block":
                outcome.runs.append(
                    HookRun(hook.name, event, finished.exit, duration_ms, "failed", failure)
                )
                log.info("hook %s failed on %s (%d ms): %s", hook.name, event, duration_ms, failure)
                raise HookBlocked(event, hook.name, failure, outcome.runs, failed=True)
            outcome.runs.append(
                HookRun(hook.name, event, finished.exit, duration_ms, "warned", failure)
            )
            log.warning(
                "hook %r failed on %s (%s); going on (on_error: warn)", hook.name, event, failure
            )
            continue
        outcome.runs.append(HookRun(hook.name, event, finished.exit, duration_ms, "proceed"))
        log.info("hook %s on %s: exit 0 (%d ms)", hook.name, event, duration_ms)
        if stop:
            break
    return outcome


def _json_bytes(value: Any) -> bytes:
    import orjson

    return orjson.dumps(value)


def _reason(stderr: bytes) -> str:
    text = stderr.decode("utf-8", errors="replace").strip()
    return text if len(text) <= REASON_CHARS else "…" + text[-REASON_CHARS:]


def _parsed_output(model: type[HookOutput], stdout: bytes) -> dict[str, Any]:
    """The changes a hook printed: nothing, or one JSON object its event allows."""
    import orjson

    if not stdout.strip():
        return {}
    try:
        parsed = orjson.loads(stdout)
    except orjson.JSONDecodeError as exc:
        raise _BadOutput(f"its output is not JSON ({exc})") from None
    if not isinstance(parsed, dict):
        raise _BadOutput("its output is not a JSON object")
    try:
        return model.model_validate(parsed).model_dump(exclude_unset=True)
    except ValidationError as exc:
        raise _BadOutput(f"its output is invalid: {validation_summary(exc)}") from None


def _merge(
    event: HookEvent, payload: dict[str, Any], changes: dict[str, Any], combined: dict[str, Any]
) -> bool:
    """Fold one hook's changes into the payload the next hook reads and into the combined
    changes; True when the event is settled and no later hook needs to run (a deny, a
    cancel)."""
    if event == "TurnStart" and "scratch" in changes:
        payload["scratch"] = [*payload["scratch"], *changes["scratch"]]
        combined["scratch"] = [*combined.get("scratch", []), *changes.pop("scratch")]
    if event == "PostCompress" and changes.get("keep_recent", 0) > payload["keep_recent"]:
        raise _BadOutput(
            f"keep_recent {changes['keep_recent']} is more than the "
            f"{payload['keep_recent']} kept: a hook may only narrow it"
        )
    if event == "PreToolUse" and "decision" in changes:
        decision = changes["decision"]
        if _DECISION_RANK[decision] < _DECISION_RANK[combined.get("decision", "allow")]:
            changes.pop("decision")  # looser than an earlier hook's: kept as it was
            changes.pop("reason", None)
    payload.update(changes)
    combined.update(changes)
    return combined.get("decision") == "deny" or combined.get("cancel") is True


# ---- one hook process --------------------------------------------------------------------


class _Finished(NamedTuple):
    exit: int | None
    stdout: bytes = b""
    stderr: bytes = b""
    failure: str | None = None  # it timed out, could not start, or printed too much


def _run_process(
    hook: HookSpec, stdin: bytes, cwd: str, environ: Mapping[str, str] | None
) -> _Finished:
    """Run `hook` in `cwd`, in its own process group, with `stdin`, within its time limit."""
    import subprocess

    interrupts = interrupt_count()
    processes = CallProcesses()
    try:
        process = processes.start(
            lambda: subprocess.Popen(
                hook.command,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=hook_environment(environ),
                cwd=cwd,
                start_new_session=True,
                close_fds=True,
            )
        )
    except OSError as exc:
        processes.release()
        return _Finished(None, failure=f"cannot run {hook.command[0]!r}: {exc.strerror}")
    try:
        try:
            finished = _exchange(process, stdin, hook.timeout_s, interrupts, processes)
            processes.stop(KILL_GRACE_S)  # what it left running ends with it
        except BaseException:  # an interrupt: the hook dies with the command that started it
            processes.stop(0)
            process.wait()
            raise
        process.wait()
        return finished
    finally:
        processes.release()


def _exchange(
    process: subprocess.Popen[bytes],
    stdin: bytes,
    timeout_s: float,
    interrupts: int,
    processes: CallProcesses,
) -> _Finished:
    """Write stdin, read stdout and stderr (capped) until the process ends or time is up,
    keeping watch on the `processes` it starts; an interrupt of agctl since the count was
    `interrupts` is raised here too (a hook of a call that runs in a worker thread)."""
    import selectors
    import subprocess

    assert process.stdin and process.stdout and process.stderr
    deadline = time.monotonic() + timeout_s
    out = bytearray()
    err = bytearray()
    selector = selectors.DefaultSelector()
    os.set_blocking(process.stdin.fileno(), False)
    selector.register(process.stdin, selectors.EVENT_WRITE)
    selector.register(process.stdout, selectors.EVENT_READ)
    selector.register(process.stderr, selectors.EVENT_READ)
    written = 0
    failure = None
    if not stdin:
        selector.unregister(process.stdin)
        process.stdin.close()
    watched_at = exited_at = killed_at = None
    try:
        while selector.get_map() and failure is None:
            signum = interrupted_since(interrupts)
            if signum is not None:
                raise Interrupted(signum)
            now = time.monotonic()
            remaining = deadline - now
            if remaining <= 0:
                failure = f"timed out after {timeout_s:g}s"
                break
            if watched_at is None or now >= watched_at + WATCH_S:
                processes.watch()
                watched_at = now
            # What the hook left holding its pipes gets SIGTERM, then SIGKILL.
            if exited_at is None and call_exited(process.pid):
                processes.watch()
                processes.signal(signal.SIGTERM)
                exited_at = now
            elif exited_at is not None and killed_at is None and now >= exited_at + KILL_GRACE_S:
                processes.signal(signal.SIGKILL)
                killed_at = now
            for key, _ in selector.select(min(remaining, WATCH_S)):
                stream = key.fileobj
                if stream is process.stdin:
                    try:
                        written += os.write(process.stdin.fileno(), stdin[written:][:65536])
                    except BrokenPipeError:  # it did not read it all: its business
                        written = len(stdin)
                    if written >= len(stdin):
                        selector.unregister(process.stdin)
                        process.stdin.close()
                    continue
                assert stream is process.stdout or stream is process.stderr
                chunk = os.read(stream.fileno(), 65536)
                if not chunk:
                    selector.unregister(stream)
                    continue
                if stream is process.stdout:
                    out += chunk
                    if len(out) > MAX_STDOUT_BYTES:
                        failure = f"it printed more than {MAX_STDOUT_BYTES} bytes"
                        break
                else:
                    err += chunk
                    del err[:-STDERR_TAIL_BYTES]
        if failure is None:
            try:
                process.wait(max(deadline - time.monotonic(), 0))
            except subprocess.TimeoutExpired:
                failure = f"timed out after {timeout_s:g}s"
    finally:
        selector.close()
        for stream in (process.stdin, process.stdout, process.stderr):
            if not stream.closed:
                stream.close()
    if failure is not None:
        processes.stop(KILL_GRACE_S)
        return _Finished(None, bytes(out), bytes(err), failure)
    return _Finished(process.returncode, bytes(out), bytes(err))
