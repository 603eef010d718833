"""The offline provider's scripts: what a script file may hold."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agctl.base.errors import InvalidInput
from agctl.providers.offline import load_script


@pytest.mark.parametrize(
    "reply", [{"content": 5}, {"content": "x", "reasoning": 5}, {"tool_calls": "lookup"}]
)
def test_a_script_of_the_wrong_types_is_refused(tmp_path: Path, reply: object) -> None:
    path = tmp_path / "script.json"
    path.write_text(json.dumps([reply]))
    with pytest.raises(InvalidInput):
        load_script(path)
