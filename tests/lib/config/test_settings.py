"""agctl.config.settings: text typed on a command line turned into a setting's value."""

from __future__ import annotations

import pytest

from agctl.config.settings import session_setting_from_text, setting_from_text


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("true", True),
        ("0.1", 0.1),
        ('{"reserve": 0.1}', {"reserve": 0.1}),
        ("null", None),
        ("default", None),
        ("auto", None),
        ("none", None),
        ("plain words", "plain words"),
    ],
)
def test_setting_from_text(text: str, value: object) -> None:
    assert setting_from_text(text) == value


@pytest.mark.parametrize(
    ("key", "text", "value"),
    [
        ("title", "42", "42"),
        ("title", "true", "true"),
        ("model", "auto", "auto"),  # a model may be called that
        ("profile", "default", None),
        ("model", "none", None),
        ("system_prompt", "null", None),
        ("auto_compress", "false", False),
        ("auto_compress", "auto", None),
        ("memory_in_context", "true", True),
    ],
)
def test_session_setting_from_text(key: str, text: str, value: object) -> None:
    assert session_setting_from_text(key, text) == value
