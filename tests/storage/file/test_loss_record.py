"""The record of a compression's checkpoint as the file backend's log holds it: the schema
`agctl schema checkpoint` gives names every key of it, its loss report's too."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from click.testing import Result
from helpers import as_json, ok

from agctl.context.models import Message
from agctl.store import Store

Run = Callable[..., Result]


def test_the_checkpoint_schema_names_the_keys_of_a_record_with_a_report(
    run: Run, isolated_env: Path, store: Store
) -> None:
    """The record as the log holds it (the file backend's line: JSON, a tab, a checksum)."""
    store.create_session("s")
    store.set_current_session("s")
    texts = ["Never push to main. See src/app/settings.py.", "Done.", "Next?", "Tests."]
    messages = [Message(role=("user", "assistant")[i % 2], content=t) for i, t in enumerate(texts)]
    store.update_slot("s", None, lambda slot: slot.messages.extend(messages))
    compress = ("ctx", "compress", "--keep-recent", "2", "--min-tokens", "0")
    ok(run(*compress, "--strategy", "truncate"))
    lines = (isolated_env / "sessions" / "s" / "checkpoints" / "log").read_text().splitlines()
    records = [json.loads(line.rsplit("\t", 1)[0]) for line in lines]
    before, after = [record["c"] for record in records if "c" in record]
    assert "loss" not in before
    schema = as_json(run("schema", "checkpoint"))
    assert set(after) <= set(schema["properties"]) and set(schema["required"]) <= set(after)
    loss_schema = schema["properties"]["loss"]  # inline: the field is built when used
    assert set(after["loss"]) == set(loss_schema["properties"])
    assert set(loss_schema["required"]) <= set(after["loss"])
