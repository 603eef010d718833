"""agctl.setup: what a command line chose, resolved into one model setup."""

from __future__ import annotations

from pathlib import Path

from agctl.setup import ModelChoice, ModelSetup
from agctl.store import Store


def test_a_choice_resolves_as_its_keywords_do(store: Store) -> None:
    sid = store.create_session(model="session-model").id
    choice = ModelChoice(model="flag-model", provider="offline")
    chosen = ModelSetup.chosen(store, sid, choice)
    assert chosen.settings.model == "flag-model"
    assert chosen.settings.provider == "offline"
    assert (
        chosen.settings
        == ModelSetup.resolve(store, sid, model="flag-model", provider="offline").settings
    )


def test_nothing_chosen_leaves_the_session_settings(store: Store) -> None:
    sid = store.create_session(model="session-model").id
    assert ModelSetup.chosen(store, sid, ModelChoice()).settings.model == "session-model"


def test_a_cassette_or_a_script_chooses_the_provider(store: Store, tmp_path: Path) -> None:
    sid = store.create_session().id
    cassette = ModelSetup.chosen(store, sid, ModelChoice(cassette=tmp_path / "c.cassette"))
    assert (cassette.settings.provider, cassette.cassette) == ("replay", tmp_path / "c.cassette")
    script = ModelSetup.chosen(store, sid, ModelChoice(script=tmp_path / "s.txt"))
    assert (script.settings.provider, script.script) == ("offline", tmp_path / "s.txt")
