"""`agctl template`: prompts kept under a name, with {{ parameters }}, for `turn send -t`
and `session new -t` (agctl.config.templates)."""

from __future__ import annotations

from typing import Any

import click

from agctl.cli.app import App, pass_app
from agctl.cli.complete import complete_templates, complete_tools
from agctl.cli.options import json_option, model_options


@click.group("template")
def command() -> None:
    """Templates: a system prompt, a prompt with {{ parameters }}, a model, options, tools.

    Each is a YAML file, templates/NAME.yaml beside the config file (0600), that
    'template edit' opens in $VISUAL or $EDITOR. 'turn send -t NAME -p KEY VALUE' sends
    its prompt with {{ KEY }} filled (plain text, in one pass; a template reads no file
    and no variable), the PROMPT filling {{ input }} or, where the template has none,
    following its prompt after a blank line; its model, options and tools apply where the
    command line does not say otherwise, its system prompt where neither --system nor the
    session has one. 'session new -t NAME' makes its system prompt and model the
    session's, and its slot mode the default slot's. A system prompt has no {{ input }}.

    \b
    Examples:
      agctl template add review --system "You review {{ lang }} code." \\
        --prompt "Review this:" --default lang Python -o top_p 0.9
      agctl turn send -t review -p lang Rust -f main.rs
      agctl session new -t review -p lang Go
      agctl template list
    """


def _document(name: str, template: Any) -> dict[str, Any]:
    return {"name": name, **template.to_dict(), "parameters": template.parameters}


@command.command("add")
@click.argument("name")
@click.option("--system", metavar="TEXT", help="The system prompt ({{ parameters }} allowed).")
@click.option(
    "--prompt", metavar="TEXT", help="The prompt ({{ parameters }}; {{ input }}: PROMPT)."
)
@click.option("--model", metavar="NAME", help="The model its turns use (unless --model).")
@model_options
@click.option(
    "--tool",
    "tools",
    multiple=True,
    metavar="NAME",
    shell_complete=complete_tools,
    help="Offer tool NAME in its turns ('agctl tool list'). Repeatable.",
)
@click.option(
    "--default",
    "defaults",
    nargs=2,
    multiple=True,
    metavar="KEY VALUE",
    help="The value of {{ KEY }} when -p does not give one. Repeatable.",
)
@click.option(
    "--slot-mode",
    type=click.Choice(("full", "focused")),
    help="The mode 'session new -t' gives the new session's default slot.",
)
@click.option("--replace", is_flag=True, help="Replace the template NAME if it exists.")
@json_option
@pass_app
def add(
    app: App,
    name: str,
    system: str | None,
    prompt: str | None,
    model: str | None,
    model_options: dict[str, Any],
    tools: tuple[str, ...],
    defaults: tuple[tuple[str, str], ...],
    slot_mode: str | None,
    replace: bool,
) -> None:
    """Save the template NAME (exit 4 if it exists, unless --replace).

    A model option is checked against every wire here, and against the wire of the
    turn when it is sent.

    \b
    Examples:
      agctl template add haiku --system "You write haiku." --prompt "A haiku about {{ input }}"
      agctl template add terse --model gpt-4o-mini -o top_p 0.5 --slot-mode focused
      agctl template add triage --prompt "Triage {{ ticket }} for {{ team }}" \\
        --default team core --tool grep-logs
    """
    from agctl.base.errors import UsageError
    from agctl.config.templates import Template, Templates

    fields = {
        "system": system,
        "prompt": prompt,
        "model": model,
        "options": model_options,
        "tools": list(tools),
        "defaults": dict(defaults),
        "slot_mode": slot_mode,
    }
    template = Template({k: v for k, v in fields.items() if v is not None}, UsageError, name)
    path = Templates().add(name, template, replace=replace)
    app.done({**_document(name, template), "path": str(path)}, text=f"saved template {name}")


@command.command("list")
@json_option
@pass_app
def list_(app: App) -> None:
    """List the templates: name, model and parameters (a damaged one is left out, with a
    warning saying why).

    \b
    Examples:
      agctl template list
      agctl template list --json | jq -r '.[].name'
    """
    from agctl.config.templates import Templates

    loaded, problems = Templates().load_all()
    for problem in problems.values():
        app.warn(problem)
    rows = [_document(name, template) for name, template in loaded.items()]
    display = [
        {**row, "model": row.get("model", ""), "parameters": ", ".join(row["parameters"])}
        for row in rows
    ]
    columns = [("name", "TEMPLATE"), ("model", "MODEL"), ("parameters", "PARAMETERS")]
    empty = "no templates (add one with 'agctl template add NAME')"
    app.emit_rows(rows, columns, empty=empty, display=display)


@command.command("show")
@click.argument("name", shell_complete=complete_templates)
@json_option
@pass_app
def show(app: App, name: str) -> None:
    """Print the template NAME as its file holds it (with --json: its fields, its
    parameters and its file's path).

    \b
    Examples:
      agctl template show review
      agctl template show review --json | jq .parameters
    """
    from agctl.config.templates import Templates

    templates = Templates()
    template = templates.load(name)
    payload = {**_document(name, template), "path": str(templates.path(name))}
    app.emit(payload, text=template.text().rstrip("\n"))


@command.command("rm")
@click.argument("name", shell_complete=complete_templates)
@json_option
@pass_app
def rm(app: App, name: str) -> None:
    """Delete the template NAME.

    \b
    Examples:
      agctl template rm review
    """
    from agctl.config.templates import Templates

    Templates().remove(name)
    app.done({"removed": name}, text=f"removed template {name}")


@command.command("edit")
@click.argument("name", shell_complete=complete_templates)
@click.option(
    "--editor",
    metavar="COMMAND",
    help="The editor to run, split as a shell splits words (default: $VISUAL, else "
    "$EDITOR, else vi).",
)
@json_option
@pass_app
def edit(app: App, name: str, editor: str | None) -> None:
    """Edit the template NAME's file in --editor, else $VISUAL, else $EDITOR, else vi.

    The edit is checked when the editor exits: a valid template replaces the file as
    written; an invalid one leaves the file as it was, says why (exit 5) and is kept
    in templates/NAME.yaml.rejected.

    \b
    Examples:
      agctl template edit review
      agctl template edit review --editor "code --wait"
    """
    from agctl.config.templates import Templates, run_editor

    template = Templates().edit(name, lambda path: run_editor(path, editor))
    app.done(_document(name, template), text=f"saved template {name}")
