"""`agctl hook`: commands agctl runs at the events of a turn, kept in the config."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import click

from agctl.base.vocab import HOOK_EVENTS, HOOK_ON_ERRORS, HookEvent
from agctl.cli.app import App, PathType, pass_app, read_input_file, warnings_to_stderr
from agctl.cli.complete import complete_profiles
from agctl.cli.options import json_option
from agctl.cli.output import plain

PROJECT_FILE = ".agctl/hooks.json"


@click.group("hook")
def command() -> None:
    """Hooks: commands run at the events of a turn, given the event as JSON on stdin.

    A hook is an argv command (never a shell string) attached to one event: TurnStart
    (may block, replace the prompt, add scratch text), PreToolUse (allow, deny, ask, or
    rewrite the arguments), PostToolUse (redact the output), PreCompress (cancel, or give
    the summary), PostCompress (rewrite the summary, keep fewer messages), and TurnEnd,
    TurnError, PostRollback, PostFork (observe only). Hooks of one event run in order
    (the config's, the profile's, the project's), each seeing the previous one's changes.

    On stdin a hook reads {"hook_event", "schema_version", "session", "slot", "turn",
    "model", "cwd", ...the event's fields}. Exit 0 goes on: stdout is empty or one JSON
    object of the changes the event allows (an unknown key is an error). Exit 2 blocks
    the event (exit 9), stderr being the reason. Any other exit, a timeout or bad output
    is a failure: it blocks an event that can be blocked, and only warns on the others,
    unless the hook's --on-error says otherwise. A hook gets PATH, HOME, LANG, LC_*, TZ,
    TMPDIR and TERM from the environment, never a key.

    A project's .agctl/hooks.json (a JSON array of hooks) runs only once 'agctl hook
    trust' pinned its sha256; any change drops the trust. Its hooks run in the project's
    directory. A symbolic link in place of the file or of .agctl is never followed.
    --no-hooks (or AGCTL_NO_HOOKS=1) runs no hook at all.

    \b
    Examples:
      agctl hook add TurnStart stamp -- ./hooks/add-date.py
      agctl hook add PreToolUse guard --timeout 5 -- python3 guard.py
      agctl hook list
      echo '{"prompt": "hi", "scratch": []}' | agctl hook test TurnStart --payload -
    """


@command.command("add")
@click.argument("event", metavar="EVENT", type=click.Choice(HOOK_EVENTS))
@click.argument("name")
@click.argument("argv", nargs=-1, required=True, metavar="-- COMMAND [ARG]...")
@click.option(
    "--timeout", "timeout_s", type=float, metavar="S", help="Seconds it may run (default 10)."
)
@click.option(
    "--on-error",
    type=click.Choice(HOOK_ON_ERRORS),
    help="What its failure does (default: block on an event that can be blocked, else warn).",
)
@click.option(
    "--profile",
    metavar="NAME",
    shell_complete=complete_profiles,
    help="Add it to this profile's hooks, run when the profile is in use.",
)
@click.option("--force", is_flag=True, help="Replace a hook of that name.")
@json_option
@pass_app
def add(
    app: App,
    event: str,
    name: str,
    argv: tuple[str, ...],
    timeout_s: float | None,
    on_error: str | None,
    profile: str | None,
    force: bool,
) -> None:
    """Add a hook, run after those already there. Nothing is run to check it.

    Put the command after '--', so that its own options are not read as agctl's.

    \b
    Examples:
      agctl hook add TurnEnd notify -- notify-send agctl "turn done"
      agctl hook add PostToolUse redact --on-error block -- ./redact.py
      agctl hook add TurnStart ctx --profile work --force -- ./work-context.sh
    """
    from agctl.config.file import ConfigFile
    from agctl.turn.hooks import add_hook, hook_spec

    fields: dict[str, Any] = {"name": name, "event": event, "command": list(argv)}
    if timeout_s is not None:
        fields["timeout_s"] = timeout_s
    if on_error is not None:
        fields["on_error"] = on_error
    spec = hook_spec(fields)
    add_hook(ConfigFile(), spec, profile=profile, replace=force)
    where = f" to profile {profile}" if profile else ""
    app.done(
        {**spec.model_dump(mode="json"), "profile": profile},
        text=f"added {spec.event} hook {spec.name}{where}",
    )


@command.command("list")
@json_option
@pass_app
def list_(app: App) -> None:
    """List every hook: the config's, each profile's and the project's, with its trust.

    A project's hooks are listed (not run) even when the file is not trusted, so that
    they can be read before 'agctl hook trust'.

    \b
    Examples:
      agctl hook list
      agctl hook list --json | jq -r '.[] | select(.trust != "trusted") | .name'
    """
    from agctl.base.quoting import shell_words
    from agctl.config.file import ConfigFile
    from agctl.turn.hooks import all_hooks

    warnings_to_stderr(json=app.json)
    listed, project = all_hooks(ConfigFile().load(), Path.cwd())
    if project.state == "invalid":
        warn_ignored(app, project.path, project.problem or "it cannot be read")
    rows = [hook.public() for hook in listed]
    display = [
        {
            **row,
            "source": f"profile {row['profile']}" if row["profile"] else row["source"],
            "command": shell_words(row["command"]),
        }
        for row in rows
    ]
    columns = [
        ("name", "NAME"),
        ("event", "EVENT"),
        ("source", "SOURCE"),
        ("trust", "TRUST"),
        ("on_error", "ON ERROR"),
        ("timeout_s", "TIMEOUT"),
        ("command", "COMMAND"),
    ]
    app.emit_rows(rows, columns, empty="no hooks (add one with 'agctl hook add')", display=display)


@command.command("rm")
@click.argument("name")
@click.option(
    "--profile",
    metavar="NAME",
    shell_complete=complete_profiles,
    help="Remove it from this profile's hooks.",
)
@json_option
@pass_app
def rm(app: App, name: str, profile: str | None) -> None:
    """Remove a hook from the config (or a profile). A project's hooks live in its file.

    \b
    Examples:
      agctl hook rm notify
      agctl hook rm ctx --profile work
    """
    from agctl.config.file import ConfigFile
    from agctl.turn.hooks import remove_hook

    removed = remove_hook(ConfigFile(), name, profile=profile)
    app.done(
        {"removed": removed.name, "event": removed.event, "profile": profile},
        text=f"removed {removed.event} hook {removed.name}",
    )


@command.command("test")
@click.argument("event_name", metavar="EVENT", type=click.Choice(HOOK_EVENTS))
@click.option(
    "--payload",
    "payload_file",
    required=True,
    metavar="FILE",
    help="The event's fields as a JSON object ('-' reads standard input).",
)
@click.option(
    "--profile",
    metavar="NAME",
    shell_complete=complete_profiles,
    help="Run this profile's hooks too (default: AGCTL_PROFILE, else the default profile).",
)
@json_option
@pass_app
def test(app: App, event_name: str, payload_file: str, profile: str | None) -> None:
    """Run the hooks of EVENT on a payload, with no turn, and print what they did.

    The payload holds the event's fields (TurnStart: prompt, scratch; PreToolUse: tool,
    call_id, arguments; PostToolUse: those and output; PreCompress: strategy,
    keep_recent; PostCompress: those and summary; TurnError: error; PostRollback:
    checkpoint; PostFork: checkpoint, new_session) and may give session, slot, turn and
    model. Exits as the event would: 0 when it goes on, 9 when a hook blocks it.

    \b
    Examples:
      agctl hook test TurnStart --payload start.json
      agctl hook test PreToolUse --payload - < call.json
    """
    import orjson

    from agctl.base.errors import InvalidInput
    from agctl.config.file import ConfigFile
    from agctl.turn.hooks import HookBlocked, hooks_for, profile_in_use, run_hooks

    event = cast(HookEvent, event_name)
    warnings_to_stderr(json=app.json)
    data, where = read_input_file(payload_file)
    try:
        payload = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise InvalidInput(f"{where}: not JSON ({exc})") from None
    if not isinstance(payload, dict):
        raise InvalidInput(f"{where}: the payload must be a JSON object")
    config = ConfigFile().load()
    chosen = profile_in_use(config, profile)
    hooks = hooks_for(config, chosen, Path.cwd(), event, no_hooks=app.no_hooks)
    try:
        outcome = run_hooks(event, payload, hooks)
    except HookBlocked as blocked:
        runs = [run.public() for run in blocked.runs]
        report = {
            "event": event,
            "outcome": "blocked",
            "hook": blocked.hook,
            "reason": blocked.reason,
            "runs": runs,
        }
        app.emit(report, text=_runs_text(runs))
        raise
    result = {"outcome": "proceed", **outcome.public()}
    lines = _runs_text(result["runs"]) or f"no {event} hook ran"
    if outcome.changes:
        lines += f"\nchanges: {plain(outcome.changes)}"
    app.emit(result, text=lines)


def _runs_text(runs: list[dict[str, Any]]) -> str:
    lines = []
    for run in runs:
        exit_text = "no exit" if run["exit"] is None else f"exit {run['exit']}"
        line = f"{run['name']}: {run['outcome']} ({exit_text}, {run['duration_ms']} ms)"
        if run["message"]:
            line += f": {run['message']}"
        lines.append(line)
    return "\n".join(lines)


@command.command("trust")
@click.argument("file", required=False, type=PathType(dir_okay=False, path_type=Path))
@json_option
@pass_app
def trust(app: App, file: Path | None) -> None:
    """Trust a project's hooks file: pin its sha256, so its hooks run until it changes.

    FILE defaults to ./.agctl/hooks.json, and must be a project's .agctl/hooks.json. The
    pin is for that project and the bytes it holds there: a symbolic link in place of the
    file or of .agctl is refused, since its target may be a file trusted elsewhere. Read
    its hooks (agctl hook list) first: once trusted, they run with your rights at their
    events, in the project's directory (a relative command means the project's file).
    The output names the project, the file, its sha256 and each command.

    \b
    Examples:
      agctl hook trust
      agctl hook trust ../other-project/.agctl/hooks.json
    """
    from agctl.base.quoting import shell_word, shell_words
    from agctl.config.file import ConfigFile
    from agctl.turn.hooks import trust_hooks_file

    pinned = trust_hooks_file(ConfigFile(), file or Path.cwd() / PROJECT_FILE)
    project = shell_word(str(pinned.project))
    lines = [
        f"trusted the hooks file of project {project}",
        f"  file    {shell_word(str(pinned.path))}",
        f"  sha256  {pinned.sha256}",
    ]
    if pinned.hooks:
        lines.append(f"its hooks run in {project}, with your rights, until the file changes:")
        lines += [f"  {h.name} ({h.event}): {shell_words(h.command)}" for h in pinned.hooks]
    else:
        lines.append("it has no hooks")
    report = {
        "project": str(pinned.project),
        "file": str(pinned.path),
        "sha256": pinned.sha256,
        "hooks": [hook.model_dump(mode="json") for hook in pinned.hooks],
    }
    app.done(report, text="\n".join(lines))


@command.command("untrust")
@click.argument("file", required=False, type=PathType(dir_okay=False, path_type=Path))
@json_option
@pass_app
def untrust(app: App, file: Path | None) -> None:
    """Drop the trust of a project's hooks file: its hooks no longer run.

    FILE defaults to ./.agctl/hooks.json; it need not exist any more.

    \b
    Examples:
      agctl hook untrust
    """
    from agctl.base.quoting import shell_word
    from agctl.config.file import ConfigFile
    from agctl.turn.hooks import untrust_hooks_file

    dropped = untrust_hooks_file(ConfigFile(), file or Path.cwd() / PROJECT_FILE)
    report = {"project": str(dropped.project), "file": str(dropped.path), "sha256": dropped.sha256}
    app.done(report, text=f"untrusted {shell_word(str(dropped.path))}")


def warn_ignored(app: App, path: Path, problem: str) -> None:
    """Say that a project's file (hooks, MCP servers) that cannot be read is left out."""
    from agctl.base.quoting import shell_word

    app.warn(f"{shell_word(str(path))} is ignored: {problem}")
