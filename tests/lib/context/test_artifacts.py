"""agctl.context.artifacts: the facts a compression must not lose, found in text."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agctl.context.artifacts import Artifacts, find, gather, sentences
from agctl.context.models import Message

TEXT = """Please always run the tests with pytest -q before committing! The config is at
~/.config/agctl/config.json; the entry point is src/main.py. See https://example.com/docs?x=1.
Ticket ABC-1234 and #42 were fixed in 3f9a2b7c; the tool id was toolu_01AbCd. It costs 12.5
dollars, 3 apples, 1,024 tokens, 85% done. Use the staging server."""


def test_each_kind_is_found_in_the_order_first_seen() -> None:
    found = find(TEXT)
    assert found.urls == ("https://example.com/docs?x=1",)
    assert found.paths == ("~/.config/agctl/config.json", "src/main.py")
    assert found.ids == ("ABC-1234", "#42", "3f9a2b7c", "toolu_01AbCd")
    # A single digit is not worth a report; a decimal, a thousands group, a share are.
    assert found.numbers == ("12.5", "1,024", "85%")
    assert found.instructions == (
        "Please always run the tests with pytest -q before committing!",
        "Use the staging server.",
    )


def test_only_a_users_sentences_are_instructions() -> None:
    assert find("You must use port 8080.", role="assistant").instructions == ()
    assert find("You must use port 8080.", role="assistant").numbers == ("8080",)
    assert find("Never push to main.").instructions == ("Never push to main.",)
    assert find("The sky is blue.").instructions == ()


def test_what_a_replacement_does_not_hold_is_missing() -> None:
    found = find(TEXT)
    summary = (
        "User: Please always run the tests with pytest   -q before committing! Config in "
        "~/.config/agctl/config.json, ticket ABC-1234, cost 12.5."
    )
    missing = found.missing_from(summary)
    assert missing.instructions == ("Use the staging server.",)
    assert missing.paths == ("src/main.py",)
    assert "ABC-1234" not in missing.ids and "toolu_01AbCd" in missing.ids
    assert missing.numbers == ("1,024", "85%")
    assert missing.counts() == {"instructions": 1, "urls": 1, "paths": 1, "ids": 3, "numbers": 2}
    assert not Artifacts() and not found.missing_from(TEXT)


def test_many_messages_are_gathered_with_their_tool_calls() -> None:
    messages = [
        Message(role="user", content="Always answer in French. Open notes/today.md"),
        Message(
            role="assistant",
            tool_calls=[
                {"id": "c1", "function": {"name": "read", "arguments": '{"path": "a/b.txt"}'}}
            ],
        ),
        Message(role="tool", content="line 1\nline 2 of a/b.txt", tool_call_id="c1"),
    ]
    found = gather(messages)
    assert found.paths == ("notes/today.md", "a/b.txt")
    assert found.instructions == ("Always answer in French.",)


def test_sentences_are_cut_at_their_ends_and_line_ends() -> None:
    assert sentences("One.  Two!\nthree\n\nfour?") == ["One.", "Two!", "three", "four?"]


def test_a_sentence_is_not_cut_inside_a_path_a_url_or_a_version() -> None:
    """An extract keeps sentences verbatim: one cut at the dot of config.toml would keep
    half a path."""
    text = "Edit src/app/config.toml. See https://x.io/a.b?c=1 now! v2.1 ships... Done?!"
    assert sentences(text) == [
        "Edit src/app/config.toml.",
        "See https://x.io/a.b?c=1 now!",
        "v2.1 ships...",
        "Done?!",
    ]


def test_a_version_or_an_address_is_one_fact_whatever_its_parts() -> None:
    """A summary keeping 2.0.9 must not pass for one keeping 2.0.31 (both were '2.0')."""
    found = find("Pin 2.0.31 on 10.0.0.1, then v2.0.31 and toolu_01Ab.x9.", role="assistant")
    assert found.numbers == ("2.0.31", "10.0.0.1")
    assert found.ids == ("v2.0.31", "toolu_01Ab.x9")
    assert found.missing_from("Pinned 2.0.9 on 10.0.0.1, v2.0.9.").counts() == {
        "instructions": 0,
        "urls": 0,
        "paths": 0,
        "ids": 2,
        "numbers": 1,
    }


@pytest.mark.parametrize(
    "shape", ["ab1-", "ab-", "1,", "1.", "a1.", "a/", "a.", "x_1", "#1", "~/a", "c:\\a"]
)
def test_hostile_text_is_read_in_one_pass(shape: str) -> None:
    """Each pattern starts only at a token's start and never backtracks into it: before
    that, 'ab1-' * 50,000 took 394 s. A quadratic pattern would not finish here."""
    text = shape * 20_000
    found = find(text)
    assert isinstance(found, Artifacts)


WORDS = st.sampled_from(["the", "plan", "is", "fine", "we", "agreed", "on", "it", "later"])
PLANTED_NUMBERS = st.integers(min_value=10, max_value=10**9).map(str)
PLANTED_PATHS = st.lists(
    st.text(alphabet="abcdefghij_", min_size=1, max_size=8), min_size=2, max_size=4
).map("/".join)


@given(
    st.lists(WORDS, min_size=1, max_size=30),
    st.lists(PLANTED_NUMBERS, min_size=1, max_size=4, unique=True),
    st.lists(PLANTED_PATHS, min_size=1, max_size=3, unique=True),
    st.data(),
)
def test_every_planted_number_and_path_a_replacement_drops_is_found_missing(
    words: list[str], numbers: list[str], paths: list[str], data: st.DataObject
) -> None:
    text = " ".join(words + [f"value {n}." for n in numbers] + [f"see {p} now." for p in paths])
    found = find(text, role="assistant")
    assert set(numbers) <= set(found.numbers) and set(paths) <= set(found.paths)
    kept_numbers = data.draw(st.lists(st.sampled_from(numbers), unique=True))
    kept_paths = data.draw(st.lists(st.sampled_from(paths), unique=True))
    replacement = " ".join(["summary:", *kept_numbers, *kept_paths])
    missing = found.missing_from(replacement)
    dropped_numbers = {n for n in numbers if n not in replacement}
    dropped_paths = {p for p in paths if p not in replacement}
    assert dropped_numbers <= set(missing.numbers)
    assert dropped_paths <= set(missing.paths)
    assert not set(kept_numbers) & set(missing.numbers)
