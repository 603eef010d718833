"""The loss report of a compression (agctl.turn.loss): what a truncation and a summary lose,
what a dry run can say, the checkpoint that keeps it, and the threshold that refuses it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from helpers import data_dir_files, draft_file, file_only, msg
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from agctl.base.errors import EXIT_CONTEXT_FULL, ContextFull
from agctl.config.file import Config
from agctl.context.artifacts import Artifacts, gather, kinds_of
from agctl.context.models import Message
from agctl.providers.base import ChatRequest, Event, Finish, TextDelta
from agctl.providers.offline import OfflineProvider
from agctl.storage.memory import MemoryBackend
from agctl.store import Store
from agctl.store.checkpointer import Checkpointer
from agctl.turn.compress import compress, preview_compression
from agctl.turn.loss import SHOWN_ITEMS, FactsWouldBeLost, LossReport, loss_report
from agctl.turn.send import TurnOptions, send_turn

INSTRUCTION = "Never push to main without a review."
FOLDED = [
    msg("user", f"{INSTRUCTION} The config is in src/app/settings.py, see ABC-123."),
    msg("assistant", "Read https://example.org/guide and set the limit to 4096."),
    msg("user", "And the log goes to var/log/app.log."),
    msg("assistant", "Done."),
]
KEPT = [msg("user", "What next?"), msg("assistant", "Tests.")]
EARLIER = "Earlier: the deploy script is scripts/deploy.sh."


def files_of(store: Store) -> dict[str, bytes]:
    """Every file of a file store's data dir (the tests that call it are file_only)."""
    assert store.root is not None
    return data_dir_files(store.root)


def conversation(store: Store, *, earlier: bool = False) -> None:
    store.create_session("s")
    store.update_slot("s", None, lambda s: s.messages.extend([*FOLDED, *KEPT]))
    if earlier:
        store.update_slot("s", None, lambda s: s.compressed.append(msg("system", EARLIER)))


class Summarizer(OfflineProvider):
    """The offline provider, whose summaries say `text` (a model's summary, chosen)."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text

    def stream(self, request: ChatRequest) -> Iterator[Event]:
        if request.context.purpose != "summary":
            return super().stream(request)
        return iter([TextDelta(self.text), Finish("stop")])


def summarizer(text: str) -> Summarizer:
    return Summarizer(text)


def test_a_truncation_reports_everything_it_folded_as_lost(store: Store) -> None:
    conversation(store, earlier=True)
    result = compress(store, "s", None, strategy="truncate", keep_recent=2)
    assert result.loss is not None
    # The compressed zone stays (a truncation replaces nothing of it): not folded.
    assert result.loss.found == result.loss.lost == gather(FOLDED)
    assert result.loss.lost == Artifacts(
        instructions=(INSTRUCTION,),
        urls=("https://example.org/guide",),
        paths=("src/app/settings.py", "var/log/app.log"),
        ids=("ABC-123",),
        numbers=("4096",),
    )
    assert (result.loss.exact, result.loss.replaced) == (True, False)
    assert result.loss.text().startswith(
        "lost: 1 instruction, 1 URL, 2 paths, 1 id, 1 number (all 6 facts of what was "
        "folded: a truncation keeps no summary)\n"
    )


def test_a_summary_that_keeps_a_fact_does_not_report_it(store: Store) -> None:
    conversation(store, earlier=True)
    summary = f"{INSTRUCTION} Settings: src/app/settings.py (ABC-123); limit 4096."
    result = compress(store, "s", None, keep_recent=2, provider=summarizer(summary))
    assert result.summary == summary and result.loss is not None
    # The previous summary is folded into the new one: its path counts, and is lost.
    assert result.loss.found == gather([msg("system", EARLIER), *FOLDED])
    assert result.loss.lost == Artifacts(
        urls=("https://example.org/guide",), paths=("scripts/deploy.sh", "var/log/app.log")
    )
    assert result.loss.text() == (
        "lost: 1 URL, 2 paths (of 7 facts found in what was folded)\n"
        "  urls: https://example.org/guide\n"
        "  paths: scripts/deploy.sh, var/log/app.log"
    )


def test_a_summary_that_keeps_everything_loses_nothing(store: Store) -> None:
    conversation(store)
    whole = " ".join(m.text() for m in FOLDED)
    result = compress(store, "s", None, keep_recent=2, provider=summarizer(whole))
    assert result.loss is not None and not result.loss.lost
    assert (
        result.loss.text()
        == "lost: nothing (the summary holds all 6 facts found in what was folded)"
    )


def test_the_checkpoint_after_the_compression_keeps_the_report(store: Store) -> None:
    conversation(store)
    result = compress(store, "s", None, strategy="truncate", keep_recent=2)
    assert result.loss is not None and result.before and result.after
    checkpointer = Checkpointer(store)
    after = checkpointer.load("s", result.after)
    assert after.loss is not None
    assert after.loss.model_dump(mode="json") == {
        "slot": "default",
        "strategy": "truncate",
        **result.loss.to_dict(),
    }
    assert after.loss.items["paths"] == ["src/app/settings.py", "var/log/app.log"]
    assert after.loss.lost["paths"] == 2 and after.loss.found["numbers"] == 1
    # The checkpoint before it holds the originals, and no report: its record has no key.
    before = checkpointer.load("s", result.before)
    assert before.loss is None and "loss" not in before.model_dump()


@file_only
def test_a_dry_run_reports_a_truncation_exactly_and_a_summary_at_risk(store: Store) -> None:
    conversation(store, earlier=True)
    files = files_of(store)
    truncation = preview_compression(store, "s", None, strategy="truncate", keep_recent=2)
    assert truncation.loss == loss_report(FOLDED, None)
    summary = preview_compression(store, "s", None, keep_recent=2)
    assert summary.loss is not None
    assert summary.loss.exact is False and summary.loss.replaced is True
    assert summary.loss.lost == gather([msg("system", EARLIER), *FOLDED])
    assert summary.loss.text().startswith("at risk: 1 instruction, 1 URL, 3 paths")
    assert summary.to_dict()["loss"]["exact"] is False
    assert summary.refused is None
    refusing = preview_compression(store, "s", None, keep_recent=2, fail_on_loss=["urls"])
    assert refusing.refused == {"instructions": 0, "urls": 1, "paths": 0, "ids": 0, "numbers": 0}
    assert preview_compression(store, "s", None, keep_recent=10).loss is None
    assert files_of(store) == files


@file_only
@pytest.mark.parametrize(
    ("kinds", "named"),
    [(("paths",), "2 paths"), (("instructions", "urls"), "1 instruction, 1 URL")],
)
def test_the_threshold_refuses_a_loss_before_anything_is_written(
    store: Store, kinds: tuple[str, ...], named: str
) -> None:
    conversation(store)
    files = files_of(store)
    with pytest.raises(FactsWouldBeLost) as caught:
        compress(store, "s", None, strategy="truncate", keep_recent=2, fail_on_loss=kinds)
    assert isinstance(caught.value, ContextFull)
    assert caught.value.exit_code == EXIT_CONTEXT_FULL
    assert str(caught.value).startswith(f"compressing slot default would lose {named} ")
    assert "nothing was written" in str(caught.value)
    assert files_of(store) == files
    assert Checkpointer(store).summaries("s") == []


def test_the_threshold_lets_a_loss_of_other_kinds_through(store: Store) -> None:
    conversation(store)
    summary = f"{INSTRUCTION} src/app/settings.py var/log/app.log"
    result = compress(
        store,
        "s",
        None,
        keep_recent=2,
        provider=summarizer(summary),
        fail_on_loss=("instructions", "paths"),
    )
    assert result.folded == 4 and result.loss is not None
    assert result.loss.lost.counts() == {
        "instructions": 0,
        "urls": 1,
        "paths": 0,
        "ids": 1,
        "numbers": 1,
    }


@file_only
def test_an_automatic_compression_in_a_turn_follows_the_threshold(store: Store) -> None:
    """Over the window, the turn compresses; a summary that would lose a path is refused,
    and the turn fails with exit 7: the slot unchanged, no checkpoint, the prompt kept."""
    conversation(store)
    files = files_of(store)
    options = TurnOptions(model="offline", window=120, keep_recent=2, fail_on_loss=("paths",))
    with pytest.raises(FactsWouldBeLost) as caught:
        send_turn(store, "s", "next " * 40, summarizer("They talked."), options)
    assert "would lose 2 paths" in str(caught.value)
    assert "nothing was written" in " ".join(caught.value.__notes__)
    after = files_of(store)
    assert set(after) - set(files) == {draft_file("s")}
    assert {k: v for k, v in after.items() if k in files} == files
    assert Checkpointer(store).summaries("s") == []


def test_an_extracts_header_is_no_fact_to_keep_or_lose(store: Store) -> None:
    """Folding an extract again: its header's counts ('Extract of 12 earlier messages (34
    of 56 sentences') are not the conversation's numbers."""
    store.create_session("s")
    notes = [msg("user", f"Note {letter}: nothing here.") for letter in "abcdefghijkl"]
    store.update_slot("s", None, lambda s: s.messages.extend(notes))
    compress(store, "s", None, strategy="extractive", keep_recent=2)
    (extract,) = store.load_slot("s").compressed
    assert extract.text().startswith("Extract of 10 earlier messages (")
    more = [msg("user", "More of nothing.") for _ in range(4)]
    store.update_slot("s", None, lambda s: s.messages.extend(more))

    again = compress(store, "s", None, strategy="extractive", keep_recent=2)
    previewed = preview_compression(store, "s", None, strategy="rolling", keep_recent=0)

    assert again.loss is not None and previewed.loss is not None
    assert again.loss.found.numbers == previewed.loss.found.numbers == ()


def test_the_text_shows_a_few_items_of_each_kind_each_cut_short() -> None:
    paths = tuple(f"src/m{i}.py" for i in range(SHOWN_ITEMS + 3))
    instruction = "Always " + "keep it short " * 10 + "."
    lost = Artifacts(instructions=(instruction,), paths=paths)
    lines = LossReport(found=lost, lost=lost).text().splitlines()
    assert lines[0] == "lost: 1 instruction, 8 paths (of 9 facts found in what was folded)"
    assert lines[1:3] == ["  instructions:", f'    "{instruction[:79]}…"']
    assert lines[3] == "  paths: " + ", ".join(paths[:SHOWN_ITEMS]) + ", and 3 more"
    assert len(lines) == 4


@pytest.mark.parametrize(
    ("spec", "kinds"),
    [
        ("instructions,paths", ("instructions", "paths")),
        (" Paths , ids ", ("paths", "ids")),
        ("any", ("instructions", "urls", "paths", "ids", "numbers")),
        ("none", ()),
        ("", ()),
    ],
)
def test_kinds_of_a_threshold(spec: str, kinds: tuple[str, ...]) -> None:
    assert kinds_of(spec) == kinds
    assert Config(compress_fail_on_loss=spec).fail_on_loss() == kinds


def test_the_config_takes_the_kinds_as_a_json_list_too() -> None:
    """'config set compress_fail_on_loss ["paths"]' reads its value as JSON: a list."""
    assert Config(compress_fail_on_loss=["ids", "paths"]).compress_fail_on_loss == "paths,ids"
    assert Config(compress_fail_on_loss=[]).fail_on_loss() == ()
    assert Config().compress_fail_on_loss is None and Config().fail_on_loss() == ()


def test_an_unknown_kind_names_the_known_ones() -> None:
    with pytest.raises(ValueError, match=r"unknown kind\(s\) of fact: path \(known: instr"):
        kinds_of("instructions,path")
    with pytest.raises(ValueError, match="unknown kind"):
        Config(compress_fail_on_loss="files")


def test_a_tool_calls_arguments_are_folded_too() -> None:
    call = Message.model_validate(
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "cat", "arguments": '{"path": "docs/notes.md"}'},
                }
            ],
        }
    )
    assert loss_report([call], "Read the notes.").lost.paths == ("docs/notes.md",)


NUMBERS = st.integers(min_value=10, max_value=10**9).map(str)
PATHS = st.lists(
    st.text(alphabet="abcdefghij_", min_size=1, max_size=8), min_size=2, max_size=4
).map("/".join)


@settings(max_examples=30, derandomize=True, database=None, deadline=None)
@given(
    st.lists(NUMBERS, min_size=1, max_size=5, unique=True),
    st.lists(PATHS, min_size=1, max_size=4, unique=True),
    st.integers(min_value=0, max_value=3),
    st.booleans(),
    st.data(),
)
def test_every_planted_fact_a_compression_drops_is_in_its_checkpoints_report(
    numbers: list[str],
    paths: list[str],
    keep_recent: int,
    truncate: bool,
    data: st.DataObject,
) -> None:
    """Numbers and paths planted across a conversation: whatever the cut and whatever the
    summary keeps, the report kept with the checkpoint lists exactly those of the folded
    messages the summary left out (a truncation: all of the folded ones)."""
    planted = [*numbers, *paths]
    # A fact inside another ('10' in '310000') is held by it, as the report reads text.
    assume(not any(a != b and a in b for a in planted for b in planted))
    order = data.draw(st.permutations(planted))
    sentence = {fact: f"see {fact} now." if "/" in fact else f"value {fact}." for fact in order}
    messages = [msg("user" if i % 2 else "assistant", sentence[f]) for i, f in enumerate(order)]
    store = Store(backend=MemoryBackend())
    store.create_session("s")
    store.update_slot("s", None, lambda s: s.messages.extend(messages))
    kept = data.draw(st.lists(st.sampled_from([*numbers, *paths]), unique=True))
    summary = "Summary: " + " ; ".join(kept)
    result = compress(
        store,
        "s",
        None,
        strategy="truncate" if truncate else "summarize",
        keep_recent=keep_recent,
        provider=None if truncate else Summarizer(summary),
    )
    in_folded = order[: max(0, len(order) - keep_recent)]
    dropped = {f for f in in_folded if truncate or f not in summary}
    if result.folded == 0:
        assert result.loss is None and not in_folded
        return
    assert result.after is not None
    stored = Checkpointer(store).load("s", result.after).loss
    assert stored is not None
    assert set(stored.items["numbers"]) | set(stored.items["paths"]) == dropped


def test_a_pinned_messages_facts_are_kept_and_never_reported_lost(store: Store) -> None:
    conversation(store)
    store.update_slot("s", None, lambda slot: slot.pin([2]))  # the log's path, pinned
    result = compress(store, "s", None, strategy="truncate", keep_recent=2)
    assert result.loss is not None
    assert result.loss.lost.paths == ("src/app/settings.py",)
    assert "var/log/app.log" in store.load_slot("s", None).messages[0].text()
    preview = preview_compression(store, "s", None, strategy="truncate", keep_recent=1)
    assert preview.loss is not None and "var/log/app.log" not in preview.loss.lost.paths
