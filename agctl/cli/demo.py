"""`agctl demo`: a scripted tour of sessions, slots and messages in a throw-away data dir."""

from __future__ import annotations

from pathlib import Path

import click

TOUR: list[tuple[str, str]] = [
    ("A session holds slots; it starts with one named 'default'.", ""),
    ("", "session new tour --system 'You are a concise legal assistant.' --title 'Lease dispute'"),
    ("", "msg append user 'My landlord kept my deposit. What can I do?'"),
    ("", "msg append assistant 'First, ask in writing for an itemised list of deductions.'"),
    ("", "msg append user 'They did not answer within 30 days.'"),
    ("", "msg list"),
    ("Branch the conversation: two slots derived from the same point.", ""),
    ("", "slot derive small-claims --use"),
    ("", "msg append user 'How do I file in small-claims court?'"),
    ("", "slot derive mediation --from default"),
    ("", "msg append user 'Is mediation cheaper?' --slot mediation"),
    ("", "slot list"),
    ("The branches stay apart; the parent is untouched.", ""),
    ("", "msg list --slot default"),
    ("", "msg get -1 --slot mediation"),
    ("A focused slot shows the model only the recent messages and a summary.", ""),
    ("", "slot mode focused --recent 2 --summary 'Deposit withheld; no answer in 30 days.'"),
    ("", "slot show --view"),
    ("A readonly slot refuses every write (exit code 4) but can still be read and derived.", ""),
    ("", "slot mode readonly default"),
    ("", "msg append user 'this is refused' --slot default"),
    ("Session memory and machine-readable output.", ""),
    ("", "memory set jurisdiction 'England and Wales'"),
    ("", "slot list --json"),
    ("Export a branch in the OpenAI chat format.", ""),
    ("", "msg export --slot mediation"),
]


@click.command("demo")
@click.option(
    "--keep",
    metavar="DIR",
    type=click.Path(file_okay=False, path_type=Path),
    help="Run in DIR and keep the data (default: a temporary dir, removed afterwards).",
)
def command(keep: Path | None) -> None:
    """Run a scripted tour of sessions, slots and messages.

    Offline: no model, no key, no network.

    Every step is a real agctl command run against a throw-away data dir.

    \b
    Examples:
      agctl demo
      agctl demo --keep /tmp/agctl-tour && agctl --data-dir /tmp/agctl-tour session list
    """
    import tempfile

    if keep is not None:
        keep.mkdir(parents=True, exist_ok=True)
        _tour(keep)
        return
    with tempfile.TemporaryDirectory(prefix="agctl-demo-") as tmp:
        _tour(Path(tmp))


def _tour(data_dir: Path) -> None:
    import shlex

    from agctl.cli import cli

    for note, line in TOUR:
        if note:
            click.secho(f"\n# {note}", bold=True)
            continue
        click.secho(f"$ agctl {line}", fg="cyan")
        args = ["--data-dir", str(data_dir), *shlex.split(line)]
        status = cli.main(args, prog_name="agctl", standalone_mode=False)
        if status:
            click.echo(f"(exit code {status})")
