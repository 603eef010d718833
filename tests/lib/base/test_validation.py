"""validation_summary: the one line every AgctlError gives for what pydantic refused."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import BaseModel, ValidationError, model_validator

from agctl.base.errors import CorruptDocument, InvalidInput, UsageError
from agctl.base.validation import validation_summary
from agctl.config.file import ConfigFile, profile_from
from agctl.context.budget import updated_budget
from agctl.interchange.formats import parse_messages
from agctl.store import Store


class Inner(BaseModel):
    size: int


class Outer(BaseModel):
    inner: Inner
    name: str = "x"

    @model_validator(mode="after")
    def _not_empty(self) -> Outer:
        if self.name == "":
            raise ValueError("a name must not be empty")
        return self


def refusal(data: object) -> ValidationError:
    with pytest.raises(ValidationError) as caught:
        Outer.model_validate(data)
    return caught.value


def test_a_field_error_names_its_dotted_path() -> None:
    summary = validation_summary(refusal({"inner": {"size": "big"}}), "document")
    assert (
        summary
        == "inner.size: Input should be a valid integer, unable to parse string as an integer"
    )


def test_an_error_of_the_whole_input_is_named_by_root_or_told_alone_without_pydantic_prefix() -> (
    None
):
    exc = refusal({"inner": {"size": 1}, "name": ""})
    assert validation_summary(exc, "profile") == "profile: a name must not be empty"
    assert validation_summary(exc) == "a name must not be empty"


def test_further_errors_are_counted() -> None:
    exc = refusal({"inner": {"size": "big"}, "name": 3})
    assert validation_summary(exc).endswith(" (and 1 more)")


def test_each_site_words_its_error_around_the_summary(store: Store, tmp_path: Path) -> None:
    store.create_session("s")
    with pytest.raises(UsageError, match=r"^invalid session setting: memory_in_context: Input"):
        store.configure_session("s", {"memory_in_context": "maybe"})
    with pytest.raises(UsageError, match=r"^budget part system: must be .* \(and 1 more\)$"):
        updated_budget(None, {"system": "x", "reserve": -3})
    with pytest.raises(InvalidInput) as refused:
        parse_messages(b'[{"role": "tool", "content": "x"}]')
    assert str(refused.value) == "input: message 0 is invalid: a tool message needs tool_call_id"
    with pytest.raises(
        UsageError, match=r"^invalid profile: model: Input should be a valid string"
    ):
        profile_from({"model": 3})
    config = tmp_path / "config.json"
    with pytest.raises(UsageError, match=r"^config key 'max_retries': max_retries: Input should"):
        ConfigFile(config).set("max_retries", "many")
    config.write_text('{"max_retries": "many"}')
    with pytest.raises(CorruptDocument, match=r"invalid config: max_retries: Input should"):
        ConfigFile(config).load()
