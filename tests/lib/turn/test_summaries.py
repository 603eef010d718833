"""agctl.turn.summaries through `compress`: the rolling request, a slot's template, the old
plain prompt, and the extractive strategy (no model)."""

from __future__ import annotations

import pytest
from helpers import RecordingOffline, add, msg

from agctl.base.errors import UsageError
from agctl.context.tokens import estimate_text
from agctl.providers.offline import OfflineProvider
from agctl.store import Store
from agctl.turn.compress import SUMMARY_INSTRUCTIONS, compress, render_transcript

PREVIOUS = "## Goal\n- Ship 2.4 by Friday.\n## User instructions (verbatim)\n- Never push to main."
NEW = [
    msg("user", "Tag the release as v2.4.0 please."),
    msg("assistant", "Tagged it at 3f9a2b7c; notes in docs/release.md."),
]
RECENT = [msg("user", "Thanks. Next, bump the version."), msg("assistant", "Done.")]

ROLLING_SYSTEM = (
    "You keep a running summary of a conversation for your own later use. Update the "
    "previous summary (between <previous-summary> tags) with the new messages (between "
    "<new-messages> tags): keep what still holds, change what the new messages changed, add "
    "what is new; never drop an item only because it is old. Copy every item between "
    "<must-keep> tags into the summary verbatim. Answer with the updated summary only."
)
ROLLING_DOCUMENT = """<previous-summary>
## Goal
- Ship 2.4 by Friday.
## User instructions (verbatim)
- Never push to main.
</previous-summary>

<new-messages>
[user] Tag the release as v2.4.0 please.
[assistant] Tagged it at 3f9a2b7c; notes in docs/release.md.
</new-messages>

<must-keep>
instruction: Never push to main.
instruction: Tag the release as v2.4.0 please.
path: docs/release.md
id: v2.4.0
id: 3f9a2b7c
number: 2.4
</must-keep>"""
# The extract of PREVIOUS and NEW: what the extractive strategy keeps, and what the
# offline provider answers a rolling request with (the same choices).
ROLLED_EXTRACT = (
    "Extract of 3 earlier messages (6 of 6 sentences, verbatim):\n"
    "[summary] ## Goal - Ship 2.4 by Friday. ## User instructions (verbatim) - Never push "
    "to main.\n"
    "[user] Tag the release as v2.4.0 please.\n"
    "[assistant] Tagged it at 3f9a2b7c; notes in docs/release.md."
)


@pytest.fixture
def rolled(store: Store) -> Store:
    """A slot with a previous summary, two messages to fold and two to keep."""
    store.create_session("s")
    add(store, "s", None, *NEW, *RECENT)
    store.update_slot("s", None, lambda s: s.compressed.append(msg("system", PREVIOUS)))
    return store


def test_a_rolling_summary_updates_the_previous_one_and_lists_what_to_keep(
    rolled: Store,
) -> None:
    provider = RecordingOffline()

    result = compress(rolled, "s", None, strategy="rolling", keep_recent=2, provider=provider)

    (request,) = provider.requests
    assert request.context.purpose == "summary"
    assert request.messages == [
        {
            "role": "system",
            "content": ROLLING_SYSTEM + "\n\nWrite it in these sections, each a heading "
            "followed by short items (none: say so):\n## Goal\n## Decisions\n"
            "## User instructions (verbatim)\n## Artifacts (file paths, ids, numbers, URLs)\n"
            "## Open tasks",
        },
        {"role": "user", "content": ROLLING_DOCUMENT},
    ]
    # The offline provider's answer: the extract of the previous summary and the new
    # messages (the must-keep list is derived from them, not read again).
    assert result.summary == ROLLED_EXTRACT
    slot = rolled.load_slot("s")
    assert [m.text() for m in slot.compressed] == [result.summary]
    assert [m.text() for m in slot.messages] == [m.text() for m in RECENT]


def test_the_first_rolling_summary_says_there_was_none(store: Store) -> None:
    store.create_session("s")
    add(store, "s", None, msg("user", "Hi."), msg("assistant", "Hello."), *RECENT)
    provider = RecordingOffline()

    compress(store, "s", None, strategy="rolling", keep_recent=2, provider=provider)

    assert provider.requests[0].messages[1]["content"] == (
        "<previous-summary>\n(none: this is the first summary)\n</previous-summary>\n\n"
        "<new-messages>\n[user] Hi.\n[assistant] Hello.\n</new-messages>"
    )


def test_a_slots_template_gives_the_sections_and_plain_the_old_prompt(rolled: Store) -> None:
    rolled.configure_slot("s", None, {"summary_template": "## Risks\n## Next steps"})
    provider = RecordingOffline()
    compress(rolled, "s", None, strategy="rolling", keep_recent=3, provider=provider)
    assert provider.requests[-1].messages[0]["content"] == (
        ROLLING_SYSTEM + "\n\nWrite it in these sections, each a heading followed by short "
        "items (none: say so):\n## Risks\n## Next steps"
    )

    rolled.configure_slot("s", None, {"summary_template": "plain"})
    compress(rolled, "s", None, strategy="rolling", keep_recent=2, provider=provider)
    assert provider.requests[-1].messages[0]["content"] == (
        ROLLING_SYSTEM + "\n\nSummarise the conversation transcript below for your own later "
        "use. Keep facts, names, numbers, decisions and open questions; drop pleasantries. "
        "Be brief."
    )


def test_a_template_must_be_text(store: Store) -> None:
    store.create_session("s")
    for value in ("", 42):
        with pytest.raises(UsageError, match="summary_template"):
            store.configure_slot("s", None, {"summary_template": value})


def test_summarize_keeps_the_old_single_paragraph_request(rolled: Store) -> None:
    provider = RecordingOffline()

    compress(rolled, "s", None, strategy="summarize", keep_recent=2, provider=provider)

    assert provider.requests[0].messages == [
        {"role": "system", "content": SUMMARY_INSTRUCTIONS},
        {"role": "user", "content": render_transcript([msg("system", PREVIOUS), *NEW])},
    ]


def test_extractive_asks_no_model_and_keeps_instructions_verbatim(rolled: Store) -> None:
    result = compress(rolled, "s", None, strategy="extractive", keep_recent=2)

    assert result.summary == ROLLED_EXTRACT
    assert [m.text() for m in rolled.load_slot("s").compressed] == [result.summary]
    assert result.before is not None and result.after is not None


def test_extractive_rolls_an_extract_without_losing_its_roles(store: Store) -> None:
    """An earlier extract's `[user]` lines stay a user's: its instructions stay first when
    the budget shrinks, and its header is not kept as a sentence."""
    store.create_session("s")
    first = [
        msg("user", "Always answer in French."),
        msg("assistant", "D'accord, the file is at src/app/main.py and has 120 lines."),
    ]
    later = [msg("user", "What about tests?"), msg("assistant", f"See {'x' * 200}.")]
    add(store, "s", None, *first, *later, *RECENT)
    compress(store, "s", None, strategy="extractive", keep_recent=4)

    result = compress(store, "s", None, strategy="extractive", keep_recent=2, budget_tokens=40)

    assert result.summary == (
        "Extract of 4 earlier messages (2 of 4 sentences, verbatim):\n"
        "[user] Always answer in French.\n[user] What about tests?"
    )
    assert estimate_text(result.summary) <= 40


def test_the_offline_provider_summarises_by_extraction(store: Store) -> None:
    store.create_session("s")
    add(store, "s", None, *NEW, *RECENT)

    by_model = compress(store, "s", None, keep_recent=2, provider=OfflineProvider())

    assert by_model.summary == (
        "Extract of 2 earlier messages (2 of 2 sentences, verbatim):\n"
        "[user] Tag the release as v2.4.0 please.\n"
        "[assistant] Tagged it at 3f9a2b7c; notes in docs/release.md."
    )


@pytest.mark.parametrize("strategy", ["summarize", "rolling"])
def test_a_summarys_budget_is_asked_in_words_and_the_offline_extract_keeps_to_it(
    rolled: Store, strategy: str
) -> None:
    provider = RecordingOffline()

    result = compress(
        rolled, "s", None, strategy=strategy, keep_recent=2, provider=provider, budget_tokens=30
    )

    (request,) = provider.requests
    assert request.messages[0]["content"].endswith(
        "\n\nKeep the summary under 30 tokens: drop the least important items first."
    )
    assert request.context.budget == 30
    assert result.summary is not None
    assert 0 < estimate_text(result.summary) <= 30
    unbounded = RecordingOffline()
    compress(rolled, "s", None, strategy=strategy, keep_recent=0, provider=unbounded)
    assert unbounded.requests[0].context.budget is None
    assert "Keep the summary under" not in unbounded.requests[0].messages[0]["content"]


def test_what_a_strategy_would_ignore_is_refused_before_anything_changes(rolled: Store) -> None:
    with pytest.raises(UsageError, match="--budget-tokens bounds a summary; a truncation"):
        compress(rolled, "s", None, strategy="truncate", keep_recent=2, budget_tokens=9)
    with pytest.raises(UsageError, match="extractive asks none"):
        compress(
            rolled, "s", None, strategy="extractive", keep_recent=2, instructions="Keep dates."
        )
    assert [m.text() for m in rolled.load_slot("s").compressed] == [PREVIOUS]
