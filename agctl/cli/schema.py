"""`agctl schema`: the JSON Schema of every document agctl reads or writes."""

from __future__ import annotations

from typing import Any

import click

from agctl.base.vocab import SCHEMA_NAMES
from agctl.cli.options import json_option
from agctl.cli.output import echo_json


def schema_of(name: str) -> dict[str, Any]:
    from pydantic import BaseModel

    model: type[BaseModel]
    if name == "session":
        from agctl.context.models import Session as model
    elif name == "slot":
        from agctl.context.models import Slot as model
    elif name == "message":
        from agctl.context.models import Message as model
    elif name == "checkpoint":
        from agctl.store.checkpoints import Checkpoint as model
    elif name == "cassette":
        from agctl.providers.cassette import CassetteEntry as model
    elif name == "transcript":
        from agctl.turn.transcripts import TranscriptTurn as model
    elif name == "export":
        from agctl.interchange.formats import SessionExport as model
    elif name == "graph":
        from agctl.graph.document import GraphDocument as model
    else:
        from agctl.config.file import Config as model
    return model.model_json_schema()


@click.command("schema")
@click.argument("name", metavar="NAME", type=click.Choice(SCHEMA_NAMES))
@json_option
def command(name: str) -> None:
    """Print the JSON Schema of a stored document or input format.

    session, slot, message: the live documents; checkpoint: a checkpoint record of the
    log; cassette: one line of a cassette; transcript: one line of a replay transcript;
    export: a session export; graph: what 'session graph --format json' prints;
    config: the config file.

    \b
    Examples:
      agctl schema slot
      agctl schema transcript > transcript.schema.json
    """
    echo_json(schema_of(name))
