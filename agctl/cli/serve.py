"""`agctl serve`: an OpenAI-compatible endpoint over agctl's sessions."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from agctl.cli.app import App, Count, pass_app
from agctl.cli.options import json_option, provider_options, recording_options
from agctl.cli.output import echo, json_text

if TYPE_CHECKING:
    from pathlib import Path

    from agctl.serve import Stopped
    from agctl.turn.setup import ModelChoice

SERVE_HELP = """Serve OpenAI's chat completions and Responses APIs over agctl sessions.

Any OpenAI client pointed at the URL printed on stderr talks to the profile chosen
(any agctl profile: OpenAI-compatible, Claude, Gemini, offline; the model a request
names is not used), and every request is an agctl turn: checkpointed, costed, a draft
kept on failure. A request finds its session and slot by path
(/s/SESSION[/SLOT]/v1/...), by the X-Agctl-Session and X-Agctl-Slot headers, or else
by a fingerprint of its system prompt and first message, so a client that resends the
whole history lands in the same session each time. A client that sends only its new
message gets the slot's context added; one whose history differs from the slot's (an
edited or regenerated message) gets a new slot derived where they part, the old branch
kept. POST /v1/responses chains by previous_response_id (without one, and no session
named, a request starts a new session): a response id names the checkpoint after its
turn, and naming an older one forks a derived slot there; store false writes nothing.
Responses carry X-Agctl-Session, X-Agctl-Slot and X-Agctl-Checkpoint. Listens on
this machine only unless --host says otherwise, and then a token is required. Each
request answered is logged on stderr: a JSON line with --json (method, path, status,
latency_ms, and of its turn the session, slot, turn, checkpoint, tokens and the share
of the prompt read from the provider's cache), a line with -v.

Limits: request bodies over --max-body-bytes get 413, and requests of more than
100,000 messages (or input items) 400; beyond --max-concurrent turns at once a request
gets 429 with Retry-After, before its body is read; a reply from the provider is
bounded by the profile's max_reply_bytes (and its timeouts). Turns on one session take
its lock in turn: one that waits longer than AGCTL_LOCK_TIMEOUT seconds (or the config's
lock_timeout, default 30) gets 409 and writes nothing. A client that disconnects
mid-turn cancels it: nothing is written to the slot and the prompt (with any reply
so far) is kept as the slot's draft ('agctl draft show --all'). SIGINT or SIGTERM
stop accepting, give the turns in flight --grace seconds to finish, then draft those
still running (each stops at its provider's next piece, or at the profile's
read_timeout; a second signal drafts them at once), and exit 0 saying how many
finished and how many were drafted.

For CI: --record appends every request and reply to a cassette, and --cassette answers
from one with no network, so a client's conversation recorded once replays through
the same server (a request the cassette lacks gets 502, exit 6 in the body). Needs
the serve extra: pip install 'agctl[serve]'.

\b
Examples:
  agctl serve
  agctl serve --profile claude --port 8080
  agctl serve --check --json
  agctl serve --record ci.cassette --profile openai     # then: --cassette ci.cassette
  OPENAI_BASE_URL=http://127.0.0.1:8765/v1 OPENAI_API_KEY=unused some-openai-client
"""


@click.command("serve", help=SERVE_HELP)
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option(
    "--port", type=click.IntRange(0, 65535), default=8765, show_default=True, help="0: any free."
)
@click.option(
    "--token",
    envvar="AGCTL_SERVE_TOKEN",
    metavar="TOKEN",
    help="Require 'Authorization: Bearer TOKEN' (required with a --host beyond this machine).",
)
@click.option(
    "--max-body-bytes",
    type=Count(min=1),
    metavar="N",
    help="Refuse request bodies over N bytes (default 8 MiB).",
)
@click.option(
    "--max-concurrent",
    type=Count(min=1),
    default=16,
    show_default=True,
    metavar="N",
    help="Run at most N turns at once; a request beyond gets 429 at once.",
)
@click.option(
    "--grace",
    type=click.FloatRange(min=0, max=3600),
    default=30.0,
    show_default=True,
    metavar="SECONDS",
    help="On SIGINT/SIGTERM, wait this long for the turns in flight, then draft them.",
)
@click.option(
    "--check",
    is_flag=True,
    help="Check the setup (the extra, the model's settings and key, the port) and exit.",
)
@recording_options
@provider_options
@json_option
@pass_app
def command(
    app: App,
    host: str,
    port: int,
    token: str | None,
    max_body_bytes: int | None,
    max_concurrent: int,
    grace: float,
    check: bool,
    choice: ModelChoice,
    record: Path | None,
) -> None:
    """Start the server, say where, and how it stopped."""
    from agctl.serve import serve

    def ready(url: str, model: str) -> None:
        if check:
            app.emit({"url": url, "model": model}, text=f"ready to serve {url} ({model})")
        elif app.json:
            echo(json_text({"serving": url, "model": model}), err=True)
        else:
            echo(f"agctl: serving {url} ({model}; Ctrl-C stops)", err=True)

    stopped = serve(
        app.store,
        choice,
        host=host,
        port=port,
        token=token,
        max_body=max_body_bytes,
        on_ready=ready,
        check=check,
        log=(lambda line: echo(json_text(line), err=True)) if app.json else None,
        max_concurrent=max_concurrent,
        grace=grace,
        record=record,
    )
    if stopped is not None:
        said_stopped(app, stopped)


def said_stopped(app: App, stopped: Stopped) -> None:
    """The last line: the signal, and what became of the turns then in flight."""
    from dataclasses import asdict

    from agctl.base.errors import signal_name

    name = signal_name(stopped.signum)
    counts = {**asdict(stopped.tally), "abandoned": stopped.abandoned}
    if app.json:
        echo(json_text({"stopped": name, **counts}), err=True)
    else:
        shown = ", ".join(
            f"{n} {what}" for what, n in counts.items() if n or what in ("finished", "drafted")
        )
        echo(f"agctl: stopped by {name}; turns in flight: {shown}", err=True)
