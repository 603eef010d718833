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


def _tool_steps(files: TourFiles) -> list[Step]:
    """The tool branch: a tool defined, a turn whose loop calls it, and the undo of it all."""
    add = shlex.join(
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
    prompt = "Is my letter short enough?"
    send = shlex.join(
        ["turn", "send", prompt, "-T", TOOL, "--script", str(files.script), "--slot", "option-a"]
    )
    return [
        Step(
            "Option A's letter must be short: a tool counts its words (an argv command "
            "given its arguments as JSON on stdin; 'auto': it runs without asking)."
        ),
        Step(
            "",
            add,
            f"{TOOL} is defined in the demo's own config, set to run unasked",
            lambda s: _tool_defined(files),
        ),
        Step(
            "The turn is a loop: the model (offline, following a script) calls the tool, "
            "gets its result, then answers. All of it is one turn."
        ),
        Step(
            "",
            send,
            f"{TOOL} ran once; option-a gained user, assistant (the call), tool (its result) "
            "and assistant (the answer) as turn 4",
            lambda s: _loop_committed(s, files),
        ),
        Step("", "msg list -n 4 --full --slot option-a"),
        Step("One undo takes the whole loop away."),
        Step(
            "",
            "turn undo",
            f"option-a is back to its 5 messages at turn 3, all four gone; {TOOL} did not "
            "run again",
            lambda s: _loop_undone(s, files),
        ),
    ]


def _steps(files: TourFiles) -> list[Step]:
    return [
        Step("A legal-aid consultation starts in the session's 'default' slot."),
        Step(
            "",
            "session new legal-aid --system 'You are a careful legal-aid assistant.'",
            "the session exists with one slot, 'default'",
            lambda s: s.slot_ids(SID) == ["default"],
        ),
        Step(
            "",
            "msg append user 'My landlord kept my whole deposit after I moved out.'",
            "the question is in 'default'",
            lambda s: len(_texts(s, "default")) == 1,
        ),
        Step(
            "",
            "turn send 'What can I do about it?'",
            "the prompt and the reply were committed to 'default' (3 messages, turn 1)",
            lambda s: len(_texts(s, "default")) == 3 and s.load_session(SID).turn_count == 1,
        ),
        Step("Two ways forward: derive a slot for each; 'default' stays as it was."),
        Step(
            "",
            "slot derive option-a --from default",
            "option-a starts as a copy of default and records it as its parent",
            lambda s: (
                _texts(s, "option-a") == _texts(s, "default")
                and s.load_slot(SID, "option-a").meta.parent_id == "default"
            ),
        ),
        Step(
            "",
            "slot derive option-b --from default",
            "option-b too",
            lambda s: _texts(s, "option-b") == _texts(s, "default"),
        ),
        Step(
            "",
            "turn send 'Option A: write a formal demand letter. What goes in it?' --slot option-a",
            "the turn went to option-a only",
            lambda s: len(_texts(s, "option-a")) == 5 and len(_texts(s, "option-b")) == 3,
        ),
        Step(
            "",
            "turn send 'Option B: file in small-claims court. How?' --slot option-b",
            "the turn went to option-b only",
            lambda s: (
                len(_texts(s, "option-b")) == 5
                and not any("Option B" in t for t in _texts(s, "option-a"))
            ),
        ),
        *_tool_steps(files),
        Step("Back in 'default', neither option's turns are there."),
        Step(
            "",
            "slot use default",
            "'default' is the current slot",
            lambda s: s.load_session(SID).current_slot == "default",
        ),
        Step(
            "",
            "msg list",
            "'default' holds only its own 3 messages",
            lambda s: (
                len(_texts(s, "default")) == 3
                and not any("Option" in t for t in _texts(s, "default"))
            ),
        ),
        Step(
            "",
            "slot list",
            "three slots, both options derived from default",
            lambda s: s.slot_ids(SID) == ["default", "option-a", "option-b"],
        ),
        Step("What a model would see next in option-a, through a focused view:"),
        Step(
            "",
            "slot mode focused option-a --recent 2 --summary 'Deposit withheld; tenant chose a "
            "demand letter.'",
            "option-a is focused; its messages are all kept",
            lambda s: (
                s.load_slot(SID, "option-a").config.mode == "focused"
                and len(_texts(s, "option-a")) == 5
            ),
        ),
        Step("", "slot show option-a --view"),
        Step("Option B is dropped."),
        Step(
            "",
            "slot rm option-b",
            "option-b is gone; default and option-a are untouched",
            lambda s: (
                s.slot_ids(SID) == ["default", "option-a"]
                and len(_texts(s, "option-a")) == 5
                and len(_texts(s, "default")) == 3
            ),
        ),
        Step("", "session show"),
    ]


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
    import contextlib
    import io
    import tempfile
    from unittest import mock

    from agctl.cli import cli
    from agctl.fsio import write_atomic
    from agctl.store import Store

    failures = 0
    report: list[dict[str, object]] = []
    with (
        _data_dir(app) as data_dir,
        tempfile.TemporaryDirectory(prefix="agctl-demo-tool-") as side_dir,
    ):
        store = Store(data_dir)
        if SID in store.session_ids():
            raise click.UsageError(f"{data_dir} already holds a session {SID!r}")
        files = TourFiles.of(data_dir, Path(side_dir))
        write_atomic(files.script, output.json_text(SCRIPT, indent=True).encode(), durable=False)
        # Offline whatever the user's config and environment say: no key, no network.
        offline = {name: "" for name in DEMO_CLEARED_ENV}
        offline.update(AGCTL_SESSION=SID, AGCTL_CONFIG=str(files.config))
        with mock.patch.dict("os.environ", offline):
            for step in _steps(files):
                if step.say:
                    if not app.json:
                        output.secho(f"\n# {step.say}", bold=True)
                    continue
                if not app.json:
                    output.secho(f"$ agctl {step.command}", fg="cyan")
                args = ["--store", str(data_dir), *shlex.split(step.command)]
                captured = io.StringIO()
                with contextlib.redirect_stdout(captured) if app.json else contextlib.nullcontext():
                    status = cli.main(args, prog_name="agctl", standalone_mode=False)
                holds = step.check(store) if step.check is not None and not status else None
                failures += bool(status) or holds is False
                report.append(
                    {
                        "command": f"agctl {step.command}",
                        "exit_code": status or 0,
                        "output": captured.getvalue(),
                        "claim": step.claim or None,
                        "holds": holds,
                    }
                )
                if app.json:
                    continue
                if status:
                    output.secho(f"✗ the command failed (exit code {status})", fg="red")
                elif holds is True:
                    output.secho(f"✓ {step.claim}", fg="green")
                elif holds is False:
                    output.secho(f"✗ not so: {step.claim}", fg="red")
    if app.json:
        app.emit({"steps": report, "failures": failures})
    if failures:
        raise click.ClickException(f"the demo found {failures} problem(s)")
    if not app.json:
        output.secho("\nAll claims checked.", bold=True)
