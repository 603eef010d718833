"""Exporting a session whose checkpoint log is damaged: refused, nothing written."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import Result
from helpers import checkpoints_dir, exited_zero, session_with_history

from agctl.base.errors import CorruptDocument
from agctl.interchange.formats import export_session
from agctl.store import Store

Run = Callable[..., Result]
EXIT_DATA = 5


def exported(run: Run) -> dict[str, Any]:
    session_with_history(run)
    return json.loads(exited_zero(run("session", "export", "--checkpoints")).stdout)  # type: ignore[no-any-return]


def test_a_log_that_does_not_verify_is_refused_and_nothing_is_written(
    run: Run, store: Store, tmp_path: Path
) -> None:
    from agctl.base.hashing import data_hash

    document = exported(run)
    history = document["checkpoint_log"]
    history["records"] = history["records"][:1] + history["records"][2:]  # one record lost
    data = "".join(r + "\n" for r in history["records"]).encode()
    history["digest"] = data_hash(data)  # a consistent digest: the log itself must verify
    source = tmp_path / "edited.json"
    source.write_text(json.dumps(document))
    result = run("session", "import", str(source), "--as", "copy")
    assert result.exit_code == EXIT_DATA, (result.stdout, result.stderr)
    assert f"{source}: the exported checkpoint log does not verify" in result.stderr
    assert store.session_ids() == ["s"]
    assert [p.name for p in store.sessions_dir.iterdir()] == ["s"]


def test_a_damaged_log_is_not_exported(run: Run, store: Store) -> None:
    session_with_history(run)
    log = checkpoints_dir(store, "s") / "log"
    data = bytearray(log.read_bytes())
    data[len(data) // 2] ^= 0x01
    log.write_bytes(bytes(data))
    result = run("session", "export", "--checkpoints")
    assert result.exit_code == EXIT_DATA
    assert "the checkpoint log is damaged" in result.stderr
    assert result.stdout == ""
    with pytest.raises(CorruptDocument):
        export_session(store, "s", checkpoints=True)
    exited_zero(run("session", "export"))  # without the history it still exports
