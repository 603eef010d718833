"""`agctl search`: find messages by their text across every session and slot."""

from __future__ import annotations

import click
from click.core import ParameterSource

from agctl.base.errors import EXIT_ERROR
from agctl.base.vocab import ROLES
from agctl.cli.app import App, Count, pass_app
from agctl.cli.options import command_options, regex_options, slot_option
from agctl.cli.output import echo


def explicit_session(app: App) -> str | None:
    """The session named with -s/--session on the command line, if any: AGCTL_SESSION and
    `session use` choose a session to work in, not one to search in."""
    ctx = click.get_current_context()
    given = ctx.get_parameter_source("session") == ParameterSource.COMMANDLINE
    root = ctx.find_root().get_parameter_source("session") == ParameterSource.COMMANDLINE
    return app.session_id() if given or root else None


# The command's help, kept beside it: its words on the regex dialect make it long.
HELP = """Find messages whose text contains TEXT, in every session and slot.

TEXT matches case-insensitively as a plain substring (Unicode case folding: "strasse"
finds "Straße"); with --regex it is a regular expression, matched as written
(case-sensitive unless it starts with (?i)). Every zone of a slot is searched: the
messages, and the immutable and compressed zones, which a hit then names.

A regular expression is read by the regex module, which reads what Python's re reads
the same way, and can stop a pattern that backtracks without end, such as (a|aa)+$:
one that has spent --regex-timeout seconds (default 2) matching, over the whole
search, stops it with exit 2, as an invalid pattern does; each says which it was.
It also reads what re refuses: \\p{L} (Unicode properties), \\G, (?|...), \\h, and
with (?V1) set operations ([\\w--\\d]); and one thing differently: a{e<=1} is a fuzzy
match (a with at most one error) where re reads those characters literally (write
a\\{e<=1\\} for them).

-s/--session on the command line limits the search to one session (AGCTL_SESSION and
'session use' do not: the search looks everywhere); --slot to the slots of that name.

Hits are printed as they are found, sessions in id order, one a line:
SESSION/SLOT:INDEX ROLE: SNIPPET (INDEX is what 'msg get' takes; a hit in another
zone reads SESSION/SLOT:ZONE:INDEX). With --json, one JSON object a line (JSON
lines, so a script can read hits as they come): session, slot, zone, index, role,
start and end (the first match, as character offsets in the message's text) and
snippet. No hit prints nothing (with --json too: no line) and exits 1, as grep
does; a session or slot that cannot be read is named on stderr and skipped.

\b
Examples:
  agctl search "connection refused"
  agctl search --regex 'error [0-9]+' --role assistant -n 5
  agctl -s 1q2w search TODO --slot plan-b
  agctl search deploy --json | jq -r '"\\(.session) \\(.index)"'
"""


@click.command("search", help=HELP)
@click.argument("text")
@regex_options
@click.option("--role", "roles", multiple=True, type=click.Choice(ROLES), help="Only these roles.")
@click.option(
    "--limit", "-n", type=Count(min=1), metavar="N", help="Stop after N hits (as grep -m does)."
)
@slot_option
@command_options
@pass_app
def command(
    app: App,
    text: str,
    regex: bool,
    regex_timeout: float,
    roles: tuple[str, ...],
    limit: int | None,
    slot: str | None,
) -> None:
    from agctl.reports.search import Matcher, search

    matcher = Matcher(text, regex=regex, timeout=regex_timeout)
    hits = search(
        app.store,
        matcher,
        session_id=explicit_session(app),
        slot_id=slot,
        roles=set(roles) or None,
        limit=limit,
    )
    found = False
    for hit in hits:
        found = True
        if app.json:
            app.emit_line(hit.to_dict())
        else:
            echo(f"{hit.where} {hit.role}: {hit.snippet}")
    if not found:
        click.get_current_context().exit(EXIT_ERROR)
