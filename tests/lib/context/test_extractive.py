"""agctl.context.extractive: the sentences kept verbatim, by priority, within a budget."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from agctl.context import artifacts
from agctl.context.extractive import Entry, default_budget, extract, transcript_entries
from agctl.context.tokens import estimate_text

ENTRIES = [
    Entry("user", "Hello there. The config lives in src/app/config.toml."),
    Entry("assistant", "Sure thing. Port 8080, timeout 30s, see https://example.com/runbook."),
    Entry("user", "That looks fine. Always write dates as ISO 8601."),
    Entry("assistant", "Understood, I will do so."),
]


def test_instructions_come_first_then_what_was_said_with_artifacts_then_the_rest() -> None:
    full = extract(ENTRIES, budget=1_000).splitlines()
    assert full == [
        "Extract of 4 earlier messages (7 of 7 sentences, verbatim):",
        "[user] Hello there. The config lives in src/app/config.toml.",
        "[assistant] Sure thing. Port 8080, timeout 30s, see https://example.com/runbook.",
        "[user] That looks fine. Always write dates as ISO 8601.",
        "[assistant] Understood, I will do so.",
    ]
    # 31 tokens: the header and the user's instruction only, though it came last.
    assert extract(ENTRIES, budget=31).splitlines() == [
        "Extract of 4 earlier messages (1 of 7 sentences, verbatim):",
        "[user] Always write dates as ISO 8601.",
    ]
    # A sentence that does not fit is passed over for a shorter one, of any rank (of
    # those without artifacts, the latest).
    assert extract(ENTRIES, budget=25).splitlines()[1:] == ["[user] That looks fine."]
    # Then the sentences with artifacts, the latest first, each in its message's place.
    assert extract(ENTRIES, budget=46).splitlines() == [
        "Extract of 4 earlier messages (2 of 7 sentences, verbatim):",
        "[assistant] Port 8080, timeout 30s, see https://example.com/runbook.",
        "[user] Always write dates as ISO 8601.",
    ]
    assert extract(ENTRIES, budget=61).splitlines()[1:] == [
        "[user] The config lives in src/app/config.toml.",
        "[assistant] Port 8080, timeout 30s, see https://example.com/runbook.",
        "[user] Always write dates as ISO 8601.",
    ]


def test_the_default_budget_is_a_quarter_of_the_input_and_at_least_128() -> None:
    assert (default_budget(100), default_budget(512), default_budget(4_000)) == (128, 128, 1_000)
    long = [Entry("user", f"Step {n} wrote out/part{n}.bin and {n * 37} rows.") for n in range(200)]
    size = sum(estimate_text(entry.text) for entry in long)
    text = extract(long)
    assert estimate_text(text) <= size // 4 < size
    # Every step holds a path (and steps 10 on, a number): the latest first.
    assert text.splitlines()[-1] == "[user] Step 199 wrote out/part199.bin and 7363 rows."
    assert "[user] Step 0 wrote out/part0.bin and 0 rows." not in text.splitlines()


def test_a_sentence_said_twice_is_kept_once_where_it_ranks_highest() -> None:
    twice = [Entry("user", "Never push to main."), Entry("summary", "Never push to main.")]
    assert extract(twice).splitlines()[1:] == ["[summary] Never push to main."]
    # Said first by the assistant, it is still the user's instruction: kept as the user's,
    # before the longer sentence with an artifact, when only one of them fits.
    echoed = [
        Entry("assistant", "Never touch prod. The logs are in /var/log/agctl/run.log today."),
        Entry("user", "Never touch prod."),
    ]
    assert extract(echoed, budget=26).splitlines()[1:] == ["[user] Never touch prod."]


def test_what_the_conversation_said_comes_before_tool_output_and_the_latest_first() -> None:
    entries = [
        Entry("user", "The staging port is 5433."),
        Entry("tool", "port=9000 host=db-1.internal pool=32"),
        Entry("assistant", "Checked src/db.py: it reads the port from the config."),
        Entry("user", "Change of plan: the staging port is now 6543."),
    ]
    # Room for one sentence: the latest, the value that supersedes the earlier one.
    assert extract(entries, budget=33).splitlines()[1:] == [
        "[user] Change of plan: the staging port is now 6543."
    ]
    # For two, then three: the latest said first; tool output, which a tool can be asked
    # for again, only once everything said with artifacts is in.
    assert extract(entries, budget=51).splitlines()[1:] == [
        "[assistant] Checked src/db.py: it reads the port from the config.",
        "[user] Change of plan: the staging port is now 6543.",
    ]
    assert extract(entries, budget=60).splitlines()[1:] == [
        "[user] The staging port is 5433.",
        "[assistant] Checked src/db.py: it reads the port from the config.",
        "[user] Change of plan: the staging port is now 6543.",
    ]
    assert "[tool] port=9000" in extract(entries, budget=72)


def test_a_rendered_transcript_reads_back_as_its_entries() -> None:
    """The offline provider extracts from a request's text what `ctx compress --strategy
    extractive` extracts from the messages: the same choices."""
    transcript = "\n".join(f"[{entry.role}] {entry.text}" for entry in ENTRIES)
    assert transcript_entries(transcript) == ENTRIES
    assert extract(transcript_entries(transcript), 50) == extract(ENTRIES, 50)


def test_a_rolling_request_reads_as_the_previous_summary_and_the_new_messages() -> None:
    request = "\n".join(
        [
            "<previous-summary>",
            "Extract of 3 earlier messages (2 of 10 sentences, verbatim):",
            "[user] Never push to main.",
            "## Goal",
            "- ship 2.4 by Friday.",
            "</previous-summary>",
            "",
            "<new-messages>",
            "[assistant] Tagged v2.4.0 at 3f9a2b7c.",
            "</new-messages>",
            "",
            "<must-keep>",
            "instruction: Never push to main.",
            "id: 3f9a2b7c",
            "</must-keep>",
        ]
    )
    assert transcript_entries(request) == [
        Entry("user", "Never push to main."),
        Entry("summary", "## Goal\n- ship 2.4 by Friday."),
        Entry("assistant", "Tagged v2.4.0 at 3f9a2b7c."),
    ]


SENTENCES = st.sampled_from(
    [
        "Please always run pytest -q first.",
        "Never touch prod.",
        "It lives in src/agctl/turn/compress.py.",
        "See https://example.com/a.b?c=1 for the log.",
        "Ticket ABC-123 costs 12.5 hours and 1,024 tokens.",
        "We talked for a while.",
        "Fine.",
        "The weather was pleasant and nobody was in a hurry to decide anything at all.",
    ]
)
MESSAGES = st.lists(
    st.tuples(
        st.sampled_from(["user", "assistant", "tool"]), st.lists(SENTENCES, min_size=1, max_size=4)
    ),
    min_size=1,
    max_size=12,
)


@given(MESSAGES, st.integers(min_value=30, max_value=400))
def test_an_extract_is_verbatim_in_order_within_budget_and_deterministic(
    messages: list[tuple[str, list[str]]], budget: int
) -> None:
    entries = [Entry(role, " ".join(said)) for role, said in messages]
    text = extract(entries, budget)
    assert text == extract(list(entries), budget)
    assert estimate_text(text) <= budget
    lines = text.splitlines()[1:]
    # Each line is one message's sentences, verbatim, with its role, in the original order.
    place = 0
    kept: list[str] = []
    for line in lines:
        role, _, said = line[1:].partition("] ")
        while not (entries[place].role == role and _in_order(said, entries[place].text)):
            place += 1
        place += 1
        kept += artifacts.sentences(said)
    # A user's instruction is passed over only for lack of room: anything kept instead of
    # it is shorter (give or take the role label, at most 3 tokens).
    instructions = {
        sentence
        for entry in entries
        if entry.role == "user"
        for sentence in artifacts.sentences(entry.text)
        if artifacts.is_instruction(sentence)
    }
    for sentence in instructions.difference(kept):
        assert all(
            estimate_text(other) < estimate_text(sentence) + 4
            for other in kept
            if other not in instructions
        )


def _in_order(said: str, text: str) -> bool:
    """Whether the sentences of `said` are sentences of `text`, in its order."""
    pool = artifacts.sentences(text)
    position = 0
    for sentence in artifacts.sentences(said):
        if sentence not in pool[position:]:
            return False
        position = pool.index(sentence, position) + 1
    return True
