"""`agctl demo`: the branching legal-aid consultation, end to end, offline, self-checking."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

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


def _texts(store: Store, slot: str) -> list[str]:
    return [m.text() for m in store.load_slot(SID, slot).messages]


def _steps() -> list[Step]:
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
    if app.data_dir is not None and app.data_dir_given:
        yield app.data_dir
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
    branches stay apart. Every step is a real agctl command; every claim printed is
    checked. Runs in a temporary data dir unless --data-dir is given.

    \b
    Examples:
      agctl demo
      agctl --data-dir /tmp/agctl-tour demo && agctl --data-dir /tmp/agctl-tour slot list
    """
    import contextlib
    import io
    import shlex
    from unittest import mock

    from agctl.cli import cli
    from agctl.store import Store

    failures = 0
    report: list[dict[str, object]] = []
    with _data_dir(app) as data_dir:
        store = Store(data_dir)
        if SID in store.session_ids():
            raise click.UsageError(f"{data_dir} already holds a session {SID!r}")
        # Offline whatever the user's config and environment say: no key, no network.
        offline = {name: "" for name in DEMO_CLEARED_ENV}
        offline.update(AGCTL_SESSION=SID, AGCTL_CONFIG=str(data_dir / "demo-config.json"))
        with mock.patch.dict("os.environ", offline):
            for step in _steps():
                if step.say:
                    if not app.json:
                        output.secho(f"\n# {step.say}", bold=True)
                    continue
                if not app.json:
                    output.secho(f"$ agctl {step.command}", fg="cyan")
                args = ["--data-dir", str(data_dir), *shlex.split(step.command)]
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
