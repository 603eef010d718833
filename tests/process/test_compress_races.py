"""A compression races another agctl process: while `ctx compress` (or a turn's automatic
compression) waits on the model for its summary (the fake server holds the request and
runs the second process meanwhile, its before_reply hook), the second switches, derives,
rolls back, deletes, edits or compresses. The summary lands on the slot and the state it
was computed from, or nowhere: a refusal exits 4 and leaves the session byte for byte as
the second process left it (its export with the checkpoint history)."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fake_openai import FakeOpenAI
from helpers import agctl_process, files

SID = "s"
SUMMARY = "SUMMARY computed by the model"
# Long enough that a small window holds the recent messages and a summary, not all eight.
FILLER = " ".join(f"word{n}" for n in range(60))
EIGHT = [
    {"role": "user" if i % 2 == 0 else "assistant", "content": f"message {i}: {FILLER}"}
    for i in range(8)
]
COMPRESS = ("ctx", "compress", "--strategy", "rolling", "--keep-recent", "2", "--min-tokens", "0")


class Agctl:
    """Real agctl processes on one store: the offline model, or the fake server's."""

    def __init__(self, env: dict[str, str], server: FakeOpenAI, backend: str) -> None:
        self.offline = {**env, "PYTHONIOENCODING": "utf-8"}
        self.online = {
            **self.offline,
            "AGCTL_PROVIDER": "openai",
            "AGCTL_BASE_URL": server.base_url,
            "AGCTL_MODEL": "fake-model",
        }
        self.server = server
        self.backend = backend
        self.data_dir = Path(env["AGCTL_DATA_DIR"])
        self.meanwhile: list[Any] = []  # what the second process printed, and the state it left

    def __call__(self, *args: str, online: bool = False, input: str = "") -> Any:
        """Run `agctl -s s --json ARGS` (offline) and give its JSON; it must succeed."""
        done = self.run(*args, online=online, input=input)
        assert done.returncode == 0, (args, done.stderr)
        return json.loads(done.stdout) if done.stdout.strip() else None

    def run(self, *args: str, online: bool = False, input: str = "") -> Any:
        env = self.online if online else self.offline
        return agctl_process(env, "-s", SID, "--json", *args, input=input, timeout=120)

    def state(self) -> tuple[str, dict[str, bytes]]:
        """The whole session with its checkpoint history, and (file store) every file."""
        exported = self.run("session", "export", "--checkpoints")
        assert exported.returncode == 0, exported.stderr
        stored = files(self.data_dir / "sessions") if self.backend == "file" else {}
        return exported.stdout, stored

    def while_summarising(self, *commands: tuple[str, ...]) -> None:
        """When the summary request arrives, run `commands` (offline, each must succeed)
        before the server answers it; then keep the state they left."""

        def second_process() -> None:
            for command in commands:
                self.meanwhile.append(self(*command))
            self.meanwhile.append(self.state())

        self.server.before_reply(second_process)
        self.server.reply(SUMMARY)

    def messages(self, slot: str = "default") -> list[str]:
        listed = self("msg", "list", "--slot", slot)
        return [m["content"].split(":")[0] for m in listed]

    def compressed(self, slot: str = "default") -> list[str]:
        shown = self("slot", "show", slot)
        return [m["content"] for m in shown["compressed"]]


@pytest.fixture(params=["file"])
def agctl(
    request: pytest.FixtureRequest, env: dict[str, str], server: FakeOpenAI
) -> Iterator[Agctl]:
    """A session `s` with eight messages on its default slot, in the file store (and in
    PostgreSQL where a test asks for both, BOTH)."""
    if request.param == "postgres":
        pg = request.getfixturevalue("pg_store")
        env = {**env, "AGCTL_STORE": pg.dsn, "AGCTL_STORE_SCHEMA": pg.schema}
    runner = Agctl(env, server, request.param)
    runner("session", "new", SID)
    runner("msg", "import", "-", input=json.dumps(EIGHT))
    yield runner
    assert server.errors == []


BOTH = pytest.mark.parametrize("agctl", ["file", "postgres"], indirect=True)


def refused(
    agctl: Agctl, done: Any, says: str, doing: tuple[str, str] = ("compressed", "compression")
) -> None:
    """Exit 4, a Conflict saying `says`, and the session as the second process left it."""
    assert (done.returncode, done.stdout) == (4, ""), done.stderr
    error = json.loads(done.stderr)["error"]
    assert (error["type"], error["exit"]) == ("Conflict", 4)
    assert error["message"] == (
        f"slot 'default' changed while it was being {doing[0]} ({says}): the {doing[1]}, "
        "computed from the old state, was not written; try again"
    )
    assert agctl.state() == agctl.meanwhile[-1]


@BOTH
def test_a_rollback_to_other_compressed_zone_meanwhile_is_refused(agctl: Agctl) -> None:
    """The same messages under another compressed zone: the old hash check (the folded
    messages only) let the summary of a zone the rollback removed replace it."""
    plain = agctl("ckpt", "create", "--label", "plain")["id"]
    agctl("ctx", "compress", "--strategy", "extractive", "--keep-recent", "2", "--min-tokens", "0")
    agctl("msg", "import", "-", "--replace", input=json.dumps(EIGHT))
    assert agctl.compressed() != []  # the earlier summary, over the same eight messages
    agctl.while_summarising(("ckpt", "rollback", plain))

    done = agctl.run(*COMPRESS, online=True)

    refused(agctl, done, "its compressed zone changed")
    assert agctl.compressed() == []


@BOTH
def test_a_slot_deleted_and_made_again_meanwhile_is_refused(agctl: Agctl) -> None:
    """Same name, same messages, same settings, but another slot: not the one summarised."""
    agctl("slot", "derive", "x", "--use")
    agctl.while_summarising(("slot", "rm", "x"), ("slot", "derive", "x", "--use"))

    done = agctl.run(*COMPRESS, online=True)

    assert (done.returncode, done.stdout) == (4, ""), done.stderr
    error = json.loads(done.stderr)["error"]
    assert error["message"].startswith(
        "slot 'x' changed while it was being compressed (it was deleted and made again)"
    )
    assert agctl.state() == agctl.meanwhile[-1]
    assert agctl.compressed("x") == [] and len(agctl.messages("x")) == 8


def test_a_slot_deleted_meanwhile_is_not_found(agctl: Agctl) -> None:
    agctl("slot", "derive", "x", "--use")
    agctl.while_summarising(("slot", "rm", "x"))

    done = agctl.run(*COMPRESS, online=True)

    assert done.returncode == 3, done.stderr
    assert json.loads(done.stderr)["error"]["type"] == "NotFound"
    assert agctl.state() == agctl.meanwhile[-1]


def test_an_edit_of_a_kept_message_meanwhile_is_refused(agctl: Agctl) -> None:
    """Only appends are let through, as for a turn: an edit anywhere may move the cut (a
    tool result kept without its call) and is not what was planned."""
    agctl.while_summarising(("msg", "edit", "7", "message 7: edited"))

    done = agctl.run(*COMPRESS, online=True)

    refused(agctl, done, "messages were edited or replaced")


def test_another_compression_meanwhile_is_refused_and_its_summary_stays(agctl: Agctl) -> None:
    """The older summary never replaces the newer one."""
    agctl.while_summarising(
        ("ctx", "compress", "--strategy", "extractive", "--keep-recent", "4", "--min-tokens", "0")
    )

    done = agctl.run(*COMPRESS, online=True)

    refused(agctl, done, "its compressed zone changed")
    assert agctl.messages() == [f"message {i}" for i in range(4, 8)]
    assert SUMMARY not in agctl.compressed()


def test_a_switch_meanwhile_leaves_the_summary_on_the_slot_it_was_computed_from(
    agctl: Agctl,
) -> None:
    """`ctx compress` without --slot compresses the slot current when it started."""
    agctl.while_summarising(("slot", "derive", "b", "--use"))

    done = agctl.run(*COMPRESS, online=True)

    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert (result["slot"], result["folded"], result["summary"]) == ("default", 6, SUMMARY)
    assert agctl.compressed() == [SUMMARY]
    assert agctl.messages() == ["message 6", "message 7"]
    assert agctl.compressed("b") == [] and len(agctl.messages("b")) == 8
    after = agctl("ckpt", "show", result["checkpoint_after"])
    assert after["loss"]["slot"] == "default"


def test_an_append_meanwhile_is_kept_and_in_the_checkpoint_before(agctl: Agctl) -> None:
    """Another turn's append is let through (it goes after the kept messages), and the
    checkpoint before the compression, taken under the lock, holds it."""
    agctl.while_summarising(("msg", "append", "user", "message 8: late"))

    done = agctl.run(*COMPRESS, online=True)

    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert agctl.messages() == ["message 6", "message 7", "message 8"]
    before = agctl("ckpt", "show", result["checkpoint_before"])
    states = {state["id"]: state for state in before["slot_states"]}
    assert states["default"]["messages"] == 9


def test_a_focused_summary_of_a_slot_edited_meanwhile_is_refused(agctl: Agctl) -> None:
    """`slot summarize` keeps the summary of the slot's messages as its focused summary:
    never over messages it did not read."""
    agctl.while_summarising(("msg", "edit", "3", "message 3: edited"))

    done = agctl.run("slot", "summarize", online=True)

    refused(agctl, done, "messages were edited or replaced", ("summarised", "summary"))
    assert agctl("slot", "show")["config"]["focused"]["summary_override"] is None


# ---- the automatic compression of a turn ----------------------------------------------------


def over_the_window(agctl: Agctl) -> None:
    """A window the eight messages overflow and the summary and two recent ones fit."""
    agctl("config", "set", "context_windows.fake-model", "800")
    agctl("config", "set", "compress_keep_recent", "2")


@BOTH
def test_a_turn_compressing_while_the_slot_is_switched_stays_on_its_slot(agctl: Agctl) -> None:
    """The turn prepares its request again after compressing: on its slot, not on the
    one current by then (which got the turn, and a compression of its own, before)."""
    over_the_window(agctl)
    agctl.while_summarising(("slot", "derive", "b", "--use"))

    done = agctl.run("turn", "send", "question", online=True)

    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["slot"] == "default"
    assert agctl.compressed() == [SUMMARY]
    assert agctl.messages() == ["message 6", "message 7", "question", "echo"]
    assert agctl.compressed("b") == [] and len(agctl.messages("b")) == 8


def test_a_turn_compressing_while_the_slot_is_rolled_back_is_refused(agctl: Agctl) -> None:
    """Exit 4, the prompt kept as a draft, and the rolled-back slot as the rollback left it."""
    over_the_window(agctl)
    plain = agctl("ckpt", "create", "--label", "plain")["id"]
    agctl("msg", "append", "user", "message 8: after the checkpoint")
    agctl.while_summarising(("ckpt", "rollback", plain))

    done = agctl.run("turn", "send", "question", online=True)

    assert done.returncode == 4, done.stderr
    error = json.loads(done.stderr)["error"]
    assert error["message"].startswith("slot 'default' changed while it was being compressed")
    assert any("your prompt was kept as a draft" in note for note in error["notes"])
    assert agctl.messages() == [f"message {i}" for i in range(8)]
    assert agctl("draft", "show")["prompt"] == "question"


def test_a_turn_whose_start_hook_switches_the_slot_stays_on_its_slot(
    agctl: Agctl, tmp_path: Path
) -> None:
    """A TurnStart hook that adds scratch text has the request prepared again: on the
    turn's slot, though the hook (a real process) made another current meanwhile."""
    # A hook inherits no AGCTL_* variable: it is given the store's in a file.
    (tmp_path / "env.json").write_text(json.dumps(agctl.offline))
    switch = (
        "import json, subprocess, sys\n"
        f"env = json.loads(open({str(tmp_path / 'env.json')!r}).read())\n"
        "subprocess.run([sys.executable, '-m', 'agctl', '-s', 's', 'slot', 'derive', 'b',"
        " '--use'], env=env, check=True, capture_output=True)\n"
        "print(json.dumps({'scratch': ['from the hook']}))\n"
    )
    (tmp_path / "switch.py").write_text(switch)
    agctl("hook", "add", "TurnStart", "switch", "--", sys.executable, str(tmp_path / "switch.py"))

    turned = agctl("turn", "send", "question")

    assert turned["slot"] == "default"
    assert agctl.messages()[-2:] == ["question", 'Offline reply to turn 1 in slot "default"']
    assert len(agctl.messages("b")) == 8
