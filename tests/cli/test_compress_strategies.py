"""`ctx compress --strategy extractive|rolling`, `slot set summary_template`, and the offline
provider's extractive summary in a turn's automatic compression, on the CLI.

A rolling summary goes to the fake OpenAI server on loopback, so the bytes it sends are
the ones checked; the extractive strategy must send nothing at all.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from click.testing import Result
from fake_openai import FakeOpenAI
from helpers import add, msg

from agctl.context.models import ContextBudget
from agctl.context.tokens import MESSAGE_OVERHEAD, estimate_text
from agctl.store import Store

Run = Callable[..., Result]

FILLER = (
    "We went over the whole plan once more, slowly and from the beginning, and agreed that "
    "nothing in it needs to change for the moment, since the earlier discussion had already "
    "covered every one of the open points in quite enough detail for everybody involved, and "
    "nobody saw a reason to reopen any of them before the end of the week."
)
CONVERSATION = [
    ("user", f"Never deploy on a Friday. {FILLER}"),
    ("assistant", f"Noted. The manifest is deploy/prod.yaml, revision 4f2c9a1b. {FILLER}"),
    ("user", f"How many replicas run today? Asking again: {FILLER}"),
    ("assistant", f"Twelve replicas, at 35% CPU. Once more: {FILLER}"),
    ("user", "Good. What is next?"),
    ("assistant", "The release notes."),
]
EXTRACT = (
    "Extract of 4 earlier messages (5 of 9 sentences, verbatim):\n"
    "[user] Never deploy on a Friday.\n"
    "[assistant] Noted. The manifest is deploy/prod.yaml, revision 4f2c9a1b.\n"
    "[user] How many replicas run today?\n"
    "[assistant] Twelve replicas, at 35% CPU."
)


def ok(result: Result) -> Result:
    assert result.exit_code == 0, result.output
    return result


@pytest.fixture
def sid(store: Store) -> str:
    store.create_session("s1")
    store.set_current_session("s1")
    add(store, "s1", None, *[msg(role, text) for role, text in CONVERSATION])
    return "s1"


def test_ctx_compress_extractive_calls_no_model(
    run: Run, store: Store, sid: str, wired: FakeOpenAI
) -> None:
    compress = ("ctx", "compress", "--strategy", "extractive", "--keep-recent", "2")

    payload = json.loads(ok(run("--json", *compress, "--min-tokens", "0")).stdout)

    assert wired.requests == []
    assert {k: payload[k] for k in ("slot", "strategy", "folded", "kept", "summary")} == {
        "slot": "default",
        "strategy": "extractive",
        "folded": 4,
        "kept": 2,
        "summary": EXTRACT,
    }
    slot = store.load_slot(sid)
    assert [m.text() for m in slot.compressed] == [EXTRACT]
    assert [m.text() for m in slot.messages] == [text for _, text in CONVERSATION[-2:]]


def test_ctx_compress_extractive_within_a_budget_says_so_in_text(
    run: Run, store: Store, sid: str
) -> None:
    compress = ("ctx", "compress", "--strategy", "extractive", "--keep-recent", "2")

    said = ok(run(*compress, "--min-tokens", "0", "--budget-tokens", "45")).stdout

    assert said.startswith("compressed slot default: 4 messages folded (extractive), 2 kept;")
    (summary,) = store.load_slot(sid).compressed
    # The user's instruction first, then the latest sentence with artifacts; the earlier
    # one (the manifest) does not fit, a short one does. Verbatim, in their order.
    assert summary.text() == (
        "Extract of 4 earlier messages (3 of 9 sentences, verbatim):\n"
        "[user] Never deploy on a Friday.\n"
        "[assistant] Noted.\n"
        "[assistant] Twelve replicas, at 35% CPU."
    )
    assert estimate_text(summary.text()) <= 45


@pytest.mark.parametrize(
    ("given", "said"),
    [
        (
            ("--strategy", "truncate", "--budget-tokens", "40"),
            "--budget-tokens bounds a summary; a truncation writes none",
        ),
        (
            ("--strategy", "extractive", "--instructions", "Keep dates."),
            "--instructions tell a model how to summarise; extractive asks none",
        ),
        (
            ("--strategy", "truncate", "--instructions", "Keep dates."),
            "--instructions tell a model how to summarise; truncate asks none",
        ),
    ],
)
def test_options_a_strategy_cannot_use_are_refused(
    run: Run, store: Store, sid: str, given: tuple[str, ...], said: str
) -> None:
    result = run("ctx", "compress", "--min-tokens", "0", *given)
    assert result.exit_code == 2
    assert said in result.stderr
    assert store.load_slot(sid).compressed == []


def test_a_rolling_summary_in_the_slots_template(
    run: Run, store: Store, sid: str, wired: FakeOpenAI
) -> None:
    template = "## Risks\n## Next steps"
    shown = json.loads(ok(run("--json", "slot", "set", "summary_template", template)).stdout)
    assert shown == {"slot": "default", "summary_template": template}
    assert "summary template  ## Risks ## Next steps" in ok(run("slot", "show")).stdout
    wired.reply(text="## Risks\n- Friday deploys.\n## Next steps\n- Release notes.")

    ok(run("ctx", "compress", "--strategy", "rolling", "--keep-recent", "2", "--min-tokens", "0"))

    (body,) = [r.body for r in wired.requests if r.path == "/v1/chat/completions"]
    system, document = (m["content"] for m in body["messages"])
    assert system.endswith("(none: say so):\n## Risks\n## Next steps")
    assert document.startswith(
        "<previous-summary>\n(none: this is the first summary)\n</previous-summary>\n\n"
        "<new-messages>\n[user] Never deploy on a Friday. "
    )
    assert document.endswith(
        "<must-keep>\ninstruction: Never deploy on a Friday.\npath: deploy/prod.yaml\n"
        "id: 4f2c9a1b\nnumber: 35%\n</must-keep>"
    )
    assert [m.text() for m in store.load_slot(sid).compressed] == [
        "## Risks\n- Friday deploys.\n## Next steps\n- Release notes."
    ]
    ok(run("slot", "set", "summary_template", "default"))
    assert store.load_slot(sid).config.summary_template is None


def test_a_turns_automatic_compression_keeps_the_facts_offline(
    run: Run, store: Store, sid: str
) -> None:
    """The offline provider summarises by extraction: the turn's compression keeps the
    user's instruction and the artifacts verbatim and drops the filler."""
    prompt = "Write the release notes."
    view = sum(MESSAGE_OVERHEAD + estimate_text(text) for _, text in CONVERSATION)
    request = view + MESSAGE_OVERHEAD + estimate_text(prompt)
    window = next(
        w for w in range(request, 2 * request) if w - ContextBudget.auto(w).reserve == request - 1
    )
    ok(run("config", "set", "context_windows.offline", str(window)))
    ok(run("config", "set", "compress_keep_recent", "2"))

    ok(run("turn", "send", prompt))

    slot = store.load_slot(sid)
    assert [m.text() for m in slot.compressed] == [EXTRACT]
    assert FILLER not in EXTRACT
    assert [m.text() for m in slot.messages[:3]] == [
        *(text for _, text in CONVERSATION[-2:]),
        prompt,
    ]
