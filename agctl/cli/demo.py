"""`agctl demo`: the branching legal-aid consultation, end to end, offline, self-checking,
with a branch whose turn is a tool loop."""

from __future__ import annotations

import contextlib
import json
import shlex
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from agctl.cli import output
from agctl.cli.app import App, pass_app
from agctl.cli.options import json_option

if TYPE_CHECKING:
    from agctl.store import Store

SID = "legal-aid"
DEMO_CLEARED_ENV = (
    "AGCTL_PROFILE",
    "AGCTL_PROVIDER",
    "AGCTL_MODEL",
    "AGCTL_BASE_URL",
    "AGCTL_API_KEY",
    "OPENAI_BASE_URL",
)
Check = Callable[["Store"], bool]


@dataclass
class Step:
    say: str
    command: str = ""
    claim: str = ""
    check: Check | None = None


@dataclass(frozen=True)
class TourFiles:
    """Where the tour keeps its config (in the data dir, with the tool it defines) and,
    for the tool branch, the offline model's script and the tool's log of its runs."""

    config: Path
    script: Path
    tool_runs: Path

    @classmethod
    def of(cls, data_dir: Path, side_dir: Path) -> TourFiles:
        return cls(data_dir / "demo-config.json", side_dir / "script.json", side_dir / "runs.log")


TOOL = "count-words"
TOOL_PARAMETERS = {
    "type": "object",
    "properties": {"text": {"type": "string"}},
    "required": ["text"],
}
# The tool: log the run (so the tour can count its runs), print the words of `text`.
TOOL_PROGRAM = (
    'import json, sys; open(sys.argv[1], "a").write("ran\\n"); '
    'print(len(json.load(sys.stdin)["text"].split()))'
)
LETTER = "I ask you to return my full deposit of 1200 dollars within 14 days."
ANSWER = "The draft has 14 words: short enough for a demand letter."
# The offline model's replies, one entry a turn the command sends: the tool turn (the
# session's fourth), a list of its steps (first a call of the tool, then the answer).
SCRIPT: list[Any] = [
    [
        {"tool_calls": [{"id": "call_1", "name": TOOL, "arguments": {"text": LETTER}}]},
        ANSWER,
    ],
]


def _texts(store: Store, slot: str) -> list[str]:
    return [m.text() for m in store.load_slot(SID, slot).messages]


def _roles(store: Store, slot: str) -> list[str]:
    return [m.role for m in store.load_slot(SID, slot).messages]


def _runs(files: TourFiles) -> int:
    return len(files.tool_runs.read_text().splitlines()) if files.tool_runs.exists() else 0


def _tool_defined(files: TourFiles) -> bool:
    if not files.config.exists():
        return False
    tool = json.loads(files.config.read_text()).get("tools", {}).get(TOOL, {})
    return bool(tool.get("approve") == "auto" and tool.get("command", [None])[0] == sys.executable)


def _loop_committed(store: Store, files: TourFiles) -> bool:
    messages = store.load_slot(SID, "option-a").messages
    return (
        _runs(files) == 1
        and [m.role for m in messages[5:]] == ["user", "assistant", "tool", "assistant"]
        and messages[-2].text().split() == [str(len(LETTER.split()))]
        and messages[-1].text() == ANSWER
        and store.load_session(SID).turn_count == 4
        and len(_texts(store, "option-b")) == 5
    )


def _loop_undone(store: Store, files: TourFiles) -> bool:
    return (
        len(_texts(store, "option-a")) == 5
        and "tool" not in _roles(store, "option-a")
        and store.load_session(SID).turn_count == 3
        and _runs(files) == 1
    )


def _tool_add(files: TourFiles) -> str:
    """`tool add` of the word counter, which logs its runs in this run's side dir."""
    return shlex.join(
        [
            "tool",
            "add",
            TOOL,
            "--description",
            "Count the words of a text",
            "--parameters",
            output.json_text(TOOL_PARAMETERS),
            "--approve",
            "auto",
            "--",
            sys.executable,
            "-c",
            TOOL_PROGRAM,
            str(files.tool_runs),
        ]
    )


def _tool_send(files: TourFiles) -> str:
    """The tool turn, its replies scripted by this run's script."""
    prompt = "Is my letter short enough?"
    return shlex.join(
        ["turn", "send", prompt, "-T", TOOL, "--script", str(files.script), "--slot", "option-a"]
    )


@dataclass(frozen=True)
class Scene:
    """A step of the tour as written, before a run's files are known: its command may be
    made from them, and its check reads them."""

    say: str = ""
    command: str | Callable[[TourFiles], str] = ""
    claim: str = ""
    check: Callable[[Store, TourFiles], bool] | None = None

    def bound(self, files: TourFiles) -> Step:
        command = self.command if isinstance(self.command, str) else self.command(files)
        check = self.check
        return Step(
            self.say, command, self.claim, None if check is None else lambda s: check(s, files)
        )


# The tool branch: a tool defined, a turn whose loop calls it, and the undo of it all.
TOOL_SCENES = (
    Scene(
        "Option A's letter must be short: a tool counts its words (an argv command "
        "given its arguments as JSON on stdin; 'auto': it runs without asking)."
    ),
    Scene(
        command=_tool_add,
        claim=f"{TOOL} is defined in the demo's own config, set to run unasked",
        check=lambda s, files: _tool_defined(files),
    ),
    Scene(
        "The turn is a loop: the model (offline, following a script) calls the tool, "
        "gets its result, then answers. All of it is one turn."
    ),
    Scene(
        command=_tool_send,
        claim=f"{TOOL} ran once; option-a gained user, assistant (the call), tool (its "
        "result) and assistant (the answer) as turn 4",
        check=_loop_committed,
    ),
    Scene(command="msg list -n 4 --full --slot option-a"),
    Scene("One undo takes the whole loop away."),
    Scene(
        command="turn undo",
        claim=f"option-a is back to its 5 messages at turn 3, all four gone; {TOOL} did not "
        "run again",
        check=_loop_undone,
    ),
)
# The tour, step by step: what it says, the commands it runs, what each must have done.
TOUR = (
    Scene("A legal-aid consultation starts in the session's 'default' slot."),
    Scene(
        command="session new legal-aid --system 'You are a careful legal-aid assistant.'",
        claim="the session exists with one slot, 'default'",
        check=lambda s, _: s.slot_ids(SID) == ["default"],
    ),
    Scene(
        command="msg append user 'My landlord kept my whole deposit after I moved out.'",
        claim="the question is in 'default'",
        check=lambda s, _: len(_texts(s, "default")) == 1,
    ),
    Scene(
        command="turn send 'What can I do about it?'",
        claim="the prompt and the reply were committed to 'default' (3 messages, turn 1)",
        check=lambda s, _: len(_texts(s, "default")) == 3 and s.load_session(SID).turn_count == 1,
    ),
    Scene("Two ways forward: derive a slot for each; 'default' stays as it was."),
    Scene(
        command="slot derive option-a --from default",
        claim="option-a starts as a copy of default and records it as its parent",
        check=lambda s, _: (
            _texts(s, "option-a") == _texts(s, "default")
            and s.load_slot(SID, "option-a").meta.parent_id == "default"
        ),
    ),
    Scene(
        command="slot derive option-b --from default",
        claim="option-b too",
        check=lambda s, _: _texts(s, "option-b") == _texts(s, "default"),
    ),
    Scene(
        command="turn send 'Option A: write a formal demand letter. What goes in it?' "
        "--slot option-a",
        claim="the turn went to option-a only",
        check=lambda s, _: len(_texts(s, "option-a")) == 5 and len(_texts(s, "option-b")) == 3,
    ),
    Scene(
        command="turn send 'Option B: file in small-claims court. How?' --slot option-b",
        claim="the turn went to option-b only",
        check=lambda s, _: (
            len(_texts(s, "option-b")) == 5
            and not any("Option B" in t for t in _texts(s, "option-a"))
        ),
    ),
    *TOOL_SCENES,
    Scene("Back in 'default', neither option's turns are there."),
    Scene(
        command="slot use default",
        claim="'default' is the current slot",
        check=lambda s, _: s.load_session(SID).current_slot == "default",
    ),
    Scene(
        command="msg list",
        claim="'default' holds only its own 3 messages",
        check=lambda s, _: (
            len(_texts(s, "default")) == 3 and not any("Option" in t for t in _texts(s, "default"))
        ),
    ),
    Scene(
        command="slot list",
        claim="three slots, both options derived from default",
        check=lambda s, _: s.slot_ids(SID) == ["default", "option-a", "option-b"],
    ),
    Scene("What a model would see next in option-a, through a focused view:"),
    Scene(
        command="slot mode focused option-a --recent 2 --summary 'Deposit withheld; tenant "
        "chose a demand letter.'",
        claim="option-a is focused; its messages are all kept",
        check=lambda s, _: (
            s.load_slot(SID, "option-a").config.mode == "focused"
            and len(_texts(s, "option-a")) == 5
        ),
    ),
    Scene(command="slot show option-a --view"),
    Scene("Option B is dropped."),
    Scene(
        command="slot rm option-b",
        claim="option-b is gone; default and option-a are untouched",
        check=lambda s, _: (
            s.slot_ids(SID) == ["default", "option-a"]
            and len(_texts(s, "option-a")) == 5
            and len(_texts(s, "default")) == 3
        ),
    ),
    Scene(command="session show"),
)


def _steps(files: TourFiles) -> list[Step]:
    """The tour's steps for this run, their commands and checks bound to its files."""
    return [scene.bound(files) for scene in TOUR]


@contextlib.contextmanager
def _data_dir(app: App) -> Iterator[Path]:
    """The file store named on the command line (--data-dir DIR, --store DIR), else a
    temporary one: the tour never runs in a shared store."""
    named = app.store_choice().spec.path if app.store_given else None
    if named is None and app.data_dir is not None and app.data_dir_given:
        named = app.data_dir
    if named is not None:
        yield named
        return
    import tempfile

    with tempfile.TemporaryDirectory(prefix="agctl-demo-") as tmp:
        yield Path(tmp)


@click.command("demo")
@json_option
@pass_app
def command(app: App) -> None:
    """Run a scripted tour of sessions, slots and messages.

    The branching scenario: a legal-aid consultation in 'default', two options derived
    from it, a turn in each (offline provider: no key, no network), and checks that the
    branches stay apart. In option A a tool is defined and a turn's loop calls it (the
    offline model follows a script: the call, then the answer), and one undo takes the
    whole loop away. Every step is a real agctl command; every claim printed is
    checked. Runs in a temporary data dir unless --data-dir (or --store DIR) is given.

    \b
    Examples:
      agctl demo
      agctl --data-dir /tmp/agctl-tour demo && agctl --data-dir /tmp/agctl-tour slot list
    """
    from agctl.store import Store

    report: list[dict[str, object]] = []
    with _data_dir(app) as data_dir:
        store = Store(data_dir)
        if SID in store.session_ids():
            raise click.UsageError(f"{data_dir} already holds a session {SID!r}")
        with _offline_tour(data_dir) as files:
            for step in _steps(files):
                if step.say:
                    _say(app, step.say)
                else:
                    report.append(_run(app, store, data_dir, step))
    failures = sum(bool(row["exit_code"]) or row["holds"] is False for row in report)
    if app.json:
        app.emit({"steps": report, "failures": failures})
    if failures:
        raise click.ClickException(f"the demo found {failures} problem(s)")
    if not app.json:
        output.secho("\nAll claims checked.", bold=True)


@contextlib.contextmanager
def _offline_tour(data_dir: Path) -> Iterator[TourFiles]:
    """The tour's files, its script written, in an environment that keeps every command
    offline whatever the user's config and environment say: no key, no network."""
    import tempfile
    from unittest import mock

    from agctl.base.fsio import write_atomic

    with tempfile.TemporaryDirectory(prefix="agctl-demo-tool-") as side_dir:
        files = TourFiles.of(data_dir, Path(side_dir))
        write_atomic(files.script, output.json_text(SCRIPT, indent=True).encode(), durable=False)
        offline = {name: "" for name in DEMO_CLEARED_ENV}
        offline.update(AGCTL_SESSION=SID, AGCTL_CONFIG=str(files.config))
        with mock.patch.dict("os.environ", offline):
            yield files


def _say(app: App, text: str) -> None:
    if not app.json:
        output.secho(f"\n# {text}", bold=True)


def _run(app: App, store: Store, data_dir: Path, step: Step) -> dict[str, object]:
    """Run a step's command as `agctl` would, check its claim, and say how it went; with
    --json its output is captured for the report instead."""
    import io

    from agctl.cli import cli

    if not app.json:
        output.secho(f"$ agctl {step.command}", fg="cyan")
    args = ["--store", str(data_dir), *shlex.split(step.command)]
    captured = io.StringIO()
    with contextlib.redirect_stdout(captured) if app.json else contextlib.nullcontext():
        status = cli.main(args, prog_name="agctl", standalone_mode=False)
    holds = step.check(store) if step.check is not None and not status else None
    if not app.json:
        _say_outcome(status, holds, step.claim)
    return {
        "command": f"agctl {step.command}",
        "exit_code": status or 0,
        "output": captured.getvalue(),
        "claim": step.claim or None,
        "holds": holds,
    }


def _say_outcome(status: int | None, holds: bool | None, claim: str) -> None:
    if status:
        output.secho(f"✗ the command failed (exit code {status})", fg="red")
    elif holds is True:
        output.secho(f"✓ {claim}", fg="green")
    elif holds is False:
        output.secho(f"✗ not so: {claim}", fg="red")
