"""agctl.base.schema: a document's version, read and upgraded in order; a newer major
version refused naming both."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from agctl.base import schema
from agctl.base.errors import SchemaTooNew
from agctl.context.models import Session, Slot


def test_newer_major_version_is_refused_naming_both_versions() -> None:
    with pytest.raises(SchemaTooNew) as caught:
        Slot.model_validate({"id": "s", "schema_version": "2.0"})
    assert "2.0" in str(caught.value) and "1.0" in str(caught.value)


def test_newer_minor_version_is_read_and_its_version_kept() -> None:
    slot = Slot.model_validate({"id": "s", "schema_version": "1.7", "new_field": True})
    assert slot.model_dump(mode="json")["schema_version"] == "1.7"


def test_upgrade_chain_runs_each_step_in_order(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []

    def to_1_1(data: dict[str, Any]) -> dict[str, Any]:
        calls.append("1.1")
        return {**data, "title": data.pop("name", None)}

    def to_1_2(data: dict[str, Any]) -> dict[str, Any]:
        calls.append("1.2")
        return {**data, "turn_count": int(data.get("turns", 0))}

    monkeypatch.setitem(schema.CURRENT, "session", (1, 2))
    monkeypatch.setitem(schema.MIGRATIONS, "session", [((1, 1), to_1_1), ((1, 2), to_1_2)])
    session = Session.model_validate(
        {"id": "old", "schema_version": "1.0", "name": "legacy", "turns": "3"}
    )
    assert calls == ["1.1", "1.2"]
    assert session.title == "legacy" and session.turn_count == 3
    assert session.schema_version == "1.2"
    calls.clear()
    Session.model_validate({"id": "mid", "schema_version": "1.1"})
    assert calls == ["1.2"]


def test_malformed_schema_version_is_refused() -> None:
    with pytest.raises(ValidationError):
        Slot.model_validate({"id": "s", "schema_version": "one"})
