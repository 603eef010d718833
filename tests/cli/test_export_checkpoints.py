"""`session export --checkpoints` carries the checkpoint history; `session import` restores
it; export versions; the `developer` role on import."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import Result
from helpers import data_dir_files, exited_zero, session_with_history

from agctl.base.errors import InvalidInput, SchemaTooNew
from agctl.interchange.formats import export_session, import_session, parse_messages
from agctl.store import Store
from agctl.store.checkpointer import Checkpointer

Run = Callable[..., Result]
EXIT_DATA = 5


def texts(store: Store, session: str) -> list[str]:
    return [m.text() for m in store.load_slot(session, "default").messages]


def test_an_export_with_checkpoints_imports_with_its_history(
    run: Run, store: Store, tmp_path: Path
) -> None:
    session_with_history(run)
    listed = json.loads(exited_zero(run("ckpt", "list", "--json")).stdout)
    export = tmp_path / "s.json"
    exited_zero(run("session", "export", "--checkpoints", "-o", str(export)))
    document = json.loads(export.read_text())
    assert document["schema_version"] == "2.0"
    assert len(document["checkpoint_log"]["records"]) > len(listed)
    elsewhere = Store(tmp_path / "elsewhere")
    imported = import_session(elsewhere, export.read_bytes())
    assert imported.id == "s"
    copied = Checkpointer(elsewhere)
    assert [(s.id, s.turn_index, s.label) for s in copied.summaries("s")] == [
        (c["id"], c["turn"], c["label"]) for c in listed
    ]
    assert copied.verify("s").ok
    # a rollback restores each checkpoint exactly as the original's does
    original = Checkpointer(store)
    for entry in listed:
        want = original.state("s", original.load("s", entry["id"]))
        got = copied.state("s", copied.load("s", entry["id"]))
        assert got.session.model_dump() == want.session.model_dump()
        assert {k: v.model_dump() for k, v in got.slots.items()} == {
            k: v.model_dump() for k, v in want.slots.items()
        }
    assert texts(elsewhere, "s")[-1] == "after the checkpoints"
    copied.undo("s", 1)
    assert texts(elsewhere, "s") == texts(store, "s")[:4]


def test_the_cli_round_trip_under_another_id(run: Run, store: Store, tmp_path: Path) -> None:
    session_with_history(run)
    data = exited_zero(run("session", "export", "--checkpoints")).stdout
    exited_zero(run("session", "import", "-", "--as", "copy", "--use", input=data))
    first = json.loads(exited_zero(run("ckpt", "list", "--json")).stdout)[-1]["id"]
    exited_zero(run("ckpt", "rollback", first))
    assert texts(store, "copy") == []
    assert store.load_session("copy").turn_count == 0
    # the rollback wrote the copy, never the session it was exported from
    assert texts(store, "s")[-1] == "after the checkpoints"
    assert store.load_session("s").turn_count == 3
    exited_zero(run("turn", "send", "more"))
    assert Checkpointer(store).verify("copy").ok


def test_removed_checkpoints_stay_removed(run: Run, store: Store, tmp_path: Path) -> None:
    session_with_history(run)
    listed = [c["id"] for c in json.loads(exited_zero(run("ckpt", "list", "--json")).stdout)]
    exited_zero(run("ckpt", "rm", listed[1]))
    data = export_session(store, "s", checkpoints=True).model_dump_json().encode()
    import_session(store, data, as_id="copy")
    assert Checkpointer(store).ids("copy") == [listed[0], *listed[2:]]


def test_a_plain_export_stays_version_1_without_history(run: Run, tmp_path: Path) -> None:
    session_with_history(run)
    document = json.loads(exited_zero(run("session", "export")).stdout)
    assert document["schema_version"] == "1.0"
    assert "checkpoint_log" not in document
    assert len(document["checkpoints"]) == 5


def test_a_session_without_checkpoints_exports_an_empty_history(
    run: Run, store: Store, tmp_path: Path
) -> None:
    exited_zero(run("session", "new", "bare"))
    data = exited_zero(run("session", "export", "--checkpoints")).stdout
    assert json.loads(data)["checkpoint_log"]["records"] == []
    import_session(store, data.encode(), as_id="copy")
    assert Checkpointer(store).summaries("copy") == []
    exited_zero(run("ckpt", "create", "-s", "copy"))
    assert len(Checkpointer(store).summaries("copy")) == 1


def exported(run: Run) -> dict[str, Any]:
    session_with_history(run)
    return json.loads(exited_zero(run("session", "export", "--checkpoints")).stdout)  # type: ignore[no-any-return]


def test_a_changed_record_is_refused_and_nothing_is_written(
    run: Run, store: Store, tmp_path: Path
) -> None:
    document = exported(run)
    records = document["checkpoint_log"]["records"]
    records[2] = records[2].replace('"', "'", 1)
    with pytest.raises(InvalidInput, match="does not match its digest"):
        import_session(store, json.dumps(document).encode(), as_id="copy")
    assert store.session_ids() == ["s"]


def test_export_versions(run: Run, store: Store) -> None:
    session_with_history(run)
    plain = export_session(store, "s").model_dump(mode="json")
    older = {**plain, "schema_version": "1.0"}
    import_session(store, json.dumps(older).encode(), as_id="from-1-0")
    newer_minor = {**plain, "schema_version": "2.3", "from_the_future": True}
    import_session(store, json.dumps(newer_minor).encode(), as_id="from-2-3")
    newer = {**plain, "schema_version": "3.0"}
    with pytest.raises(SchemaTooNew) as raised:
        import_session(store, json.dumps(newer).encode(), as_id="from-3-0")
    assert "schema version 3.0" in str(raised.value) and "version 2.0" in str(raised.value)
    assert "from-3-0" not in store.session_ids()


def test_schema_export_describes_the_history(run: Run) -> None:
    schema = json.loads(exited_zero(run("schema", "export")).stdout)
    assert "checkpoint_log" in schema["properties"]
    assert "2.0" in schema["properties"]["schema_version"]["description"]
    assert schema["$defs"]["CheckpointHistory"]["required"] == ["records", "digest"]


def test_schema_too_new_names_both_versions() -> None:
    from agctl.interchange.formats import SessionExport

    with pytest.raises(SchemaTooNew) as raised:
        SessionExport._not_newer("3.1")
    assert (raised.value.found, raised.value.supported) == ("3.1", "2.0")


# ---- the developer role ----------------------------------------------------------------


def test_the_developer_role_is_imported_as_system(run: Run, store: Store) -> None:
    exited_zero(run("session", "new", "s"))
    exited_zero(run("msg", "append", "user", "hi"))
    document = export_session(store, "s").model_dump(mode="json")
    document["slots"][0]["messages"].insert(0, {"role": "developer", "content": "Be brief."})
    document["slots"][0]["immutable"] = [{"role": "developer", "content": "Rules."}]
    import_session(store, json.dumps(document).encode(), as_id="copy")
    slot = store.load_slot("copy", "default")
    assert [(m.role, m.text()) for m in slot.immutable] == [("system", "Rules.")]
    assert [(m.role, m.text()) for m in slot.messages] == [("system", "Be brief."), ("user", "hi")]


def test_the_developer_role_in_messages_and_msg_import(
    run: Run, store: Store, tmp_path: Path
) -> None:
    messages = parse_messages(b'[{"role": "developer", "content": "Be brief."}]')
    assert [(m.role, m.text()) for m in messages] == [("system", "Be brief.")]
    exited_zero(run("session", "new", "s"))
    source = tmp_path / "m.jsonl"
    source.write_text('{"role": "developer", "content": "Rules."}\n')
    exited_zero(run("msg", "import", str(source)))
    assert [m.role for m in store.load_slot("s").messages] == ["system"]
    assert not [data for data in data_dir_files(store.root, "s").values() if b'"developer"' in data]
