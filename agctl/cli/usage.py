"""`agctl usage`: tokens, cost and cache use across sessions, by model."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from agctl.cli.app import App, pass_app
from agctl.cli.options import json_option

if TYPE_CHECKING:
    from agctl.reports.usage import UsageReport


@click.command("usage")
@click.option(
    "--since",
    metavar="DATE",
    help="Count only replies made at or after DATE: YYYY-MM-DD or an ISO timestamp (UTC).",
)
@json_option
@pass_app
def command(app: App, since: str | None) -> None:
    """Total tokens, cost and cache use across all sessions, by model.

    Without --since, the sessions' own accounts are summed (the numbers 'agctl session
    show' prints). Sessions keep no time per turn, so --since counts the replies still in
    the slots made at or after DATE (each reply once, however many slots or forked
    sessions hold a copy), priced at today's prices; replies removed, compressed or
    rolled back since are not counted. A model with no price makes its cost, and the
    total, "unpriced" (null in JSON). Requests answered by the offline provider or from
    a cassette cost nothing, whatever their model's price: a row of only those reads
    "free" (cost 0 in JSON), and free_requests counts them. Turns sent before agctl
    told them apart were priced as their model.

    CACHED is the share of the input the provider served from its cache, and SAVED
    what that saved (the cost with all the input at the input price, less the
    cost): both "not reported" where no provider said (null in JSON), never 0; "85% of
    12000" when only that much of the input was reported on. A cost counts cached input
    at the model's cache-read price and cache writes at its write price, those kept an
    hour (Anthropic's 1-hour cache) at its 1-hour write price: 1H WRITES counts them,
    a column shown when a provider reported some.

    \b
    Examples:
      agctl usage
      agctl usage --since 2026-01-01
      agctl usage --since 2026-01-31T09:00:00Z --json | jq '.total.cost'
    """
    from agctl.reports.usage import parse_since, usage_report

    start = parse_since(since) if since is not None else None
    report = usage_report(app.store, app.prices, start)
    if app.json:
        app.emit(report.to_dict())
        return
    counted = (
        f"replies made since {since}, in {report.sessions} session(s)"
        if start is not None
        else f"the accounts of {report.sessions} session(s)"
    )
    app.emit(None, text=f"{_usage_table(report)}\n\ncounted: {counted}")


def _usage_table(report: UsageReport) -> str:
    """A row a model, by name, then the total; costs and cache use as people read them."""
    from agctl.cli.output import table
    from agctl.reports.usage import NOT_REPORTED

    rows = [
        {
            **row.to_dict(),
            "cost": row.cost_text(),
            "cache_share": row.cache_text(),
            "cache_saved": row.saved_text(),
        }
        for row in [*(report.models[name] for name in sorted(report.models)), report.total]
    ]
    columns = [
        ("model", "MODEL"),
        ("requests", "REQUESTS"),
        ("prompt_tokens", "INPUT"),
        ("cache_share", "CACHED"),
        ("completion_tokens", "OUTPUT"),
        ("cost", "COST"),
        ("cache_saved", "SAVED"),
    ]
    hour = "cache_write_1h_tokens"
    if any(row[hour] is not None for row in rows):  # said only where a provider said it
        for row in rows:
            row[hour] = NOT_REPORTED if row[hour] is None else row[hour]
        columns.insert(4, (hour, "1H WRITES"))
    return table(rows, columns)
