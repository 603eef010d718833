"""The loss report of a compression: the facts (a user's instructions, URLs, file paths,
ids, numbers) in what a compression folds that what replaces it does not hold.

What is folded: the messages a compression takes out of the messages zone, and the
previous compressed zone when a summary replaces it. What replaces them: the new summary;
a truncation puts nothing in their place, so every fact they held is lost. A dry run of
a summary cannot know the summary without asking the model for it: its report is of the
facts at risk (all those folded), not of those lost.

A threshold (`--fail-on-loss`, `compress_fail_on_loss`) names the kinds a compression may
not lose: one that would lose any is refused with FactsWouldBeLost (exit 7) before
anything is written.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from agctl.base.errors import AgctlError, ContextFull
from agctl.context.artifacts import KINDS, Artifacts, gather

if TYPE_CHECKING:
    from agctl.context.models import Message, Slot

# How a report names one item of each kind, and many.
_NOUNS = {
    "instructions": ("instruction", "instructions"),
    "urls": ("URL", "URLs"),
    "paths": ("path", "paths"),
    "ids": ("id", "ids"),
    "numbers": ("number", "numbers"),
}
# What a text report shows of each kind, and of each item.
SHOWN_ITEMS = 5
SHOWN_CHARS = 80


@dataclass(frozen=True)
class LossReport:
    """The facts found in what a compression folded, and those of them it lost."""

    found: Artifacts
    lost: Artifacts
    # False for a dry run of a summary: `lost` is then every fact at risk.
    exact: bool = True
    # Whether a summary replaces what was folded (a truncation: nothing does).
    replaced: bool = True

    def breaches(self, kinds: Collection[str]) -> Artifacts:
        """The lost facts of the `kinds` a threshold forbids losing."""
        return Artifacts(
            **{kind: getattr(self.lost, kind) if kind in kinds else () for kind in KINDS}
        )

    def to_dict(self) -> dict[str, Any]:
        """Counts of what was found and lost, and every lost item, by kind."""
        return {
            "exact": self.exact,
            "replaced": self.replaced,
            "found": self.found.counts(),
            "lost": self.lost.counts(),
            "items": self.lost.to_dict(),
        }

    def text(self) -> str:
        """A short block for people: the counts lost, then a few items of each kind."""
        said = "at risk" if not self.exact else "lost"
        found = sum(self.found.counts().values())
        if not self.lost:
            if not found:
                return f"{said}: nothing (no instructions, URLs, paths, ids or numbers folded)"
            return f"{said}: nothing (the summary holds all {found} facts found in what was folded)"
        whole = f"of {found} facts found in what was folded"
        if not self.replaced:
            whole = f"all {found} facts of what was folded: a truncation keeps no summary"
        head = f"{said}: {counted(self.lost.counts())} ({whole})"
        return "\n".join([head, *items_lines(self.lost)])


def refusal_text(report: LossReport, kinds: Collection[str]) -> str | None:
    """What a dry run says of --fail-on-loss: that the compression would be refused, or,
    for a summary not yet written, what it must keep not to be; None when nothing is."""
    breached = report.breaches(kinds)
    if not breached:
        return None
    named = ",".join(kind for kind in KINDS if kind in kinds)
    if report.exact:
        return (
            f"--fail-on-loss {named}: refused (exit 7), it would lose {counted(breached.counts())}"
        )
    return (
        f"--fail-on-loss {named}: refused (exit 7) unless the summary keeps "
        f"{counted(breached.counts())}"
    )


def counted(counts: dict[str, int]) -> str:
    """'2 instructions, 1 path': the kinds counted, in the order given."""
    parts = []
    for kind, count in counts.items():
        if count:
            one, many = _NOUNS.get(kind, (kind, kind))
            parts.append(f"{count} {one if count == 1 else many}")
    return ", ".join(parts)


def items_lines(facts: Artifacts) -> list[str]:
    """A line per kind that has any: its first few items, each cut short, and how many more."""
    lines = []
    for kind in KINDS:
        items = getattr(facts, kind)
        if not items:
            continue
        shown = [_cut(item) for item in items[:SHOWN_ITEMS]]
        more = f"and {len(items) - SHOWN_ITEMS} more" if len(items) > SHOWN_ITEMS else ""
        if kind == "instructions":  # sentences: one a line
            lines.append(f"  {kind}:")
            lines += [f'    "{item}"' for item in shown] + ([f"    {more}"] if more else [])
        else:
            lines.append(f"  {kind}: {', '.join(shown)}{', ' + more if more else ''}")
    return lines


def _cut(item: str) -> str:
    return item if len(item) <= SHOWN_CHARS else item[: SHOWN_CHARS - 1] + "…"


def compression_loss(slot: Slot, folded: Sequence[Message], summary: str | None) -> LossReport:
    """The loss of folding `folded` (the slot's messages a compression removes; pinned ones
    stay and are not folded): with a summary, it replaces the compressed zone too (folded
    with them); without (a truncation), nothing replaces them."""
    if summary is None:
        return loss_report(folded, None)
    return loss_report([*replaced_zone(slot), *folded], summary)


def replaced_zone(slot: Slot) -> list[Message]:
    """The compressed zone a summary replaces, as its facts are read: an extract's header
    left out (its counts are no facts of the conversation)."""
    from agctl.context.extractive import without_headers

    return without_headers(slot.compressed)


def preview_loss(slot: Slot, folded: Sequence[Message], strategy: str) -> LossReport:
    """What a dry run can say: a truncation's loss exactly; for a summary not yet written,
    every fact of what it would fold (the compressed zone with the messages), at risk."""
    if strategy == "truncate":
        return compression_loss(slot, folded, None)
    return at_risk([*replaced_zone(slot), *folded])


def loss_report(folded: Sequence[Message], replacement: str | None) -> LossReport:
    """The facts of `folded` that `replacement` (None: nothing replaces them) does not hold."""
    found = gather(folded)
    if replacement is None:
        return LossReport(found=found, lost=found, replaced=False)
    return LossReport(found=found, lost=found.missing_from(replacement))


def at_risk(folded: Sequence[Message]) -> LossReport:
    """Every fact of `folded`, at risk: what a summary not yet written could lose."""
    found = gather(folded)
    return LossReport(found=found, lost=found, exact=False)


class FactsWouldBeLost(ContextFull):
    """A compression would lose facts of a kind it must keep (exit 7): nothing was written."""

    def __init__(self, slot: str, breached: Artifacts, kinds: Collection[str]) -> None:
        self.compressed_from = None
        self.breached = breached
        lines = items_lines(breached)
        AgctlError.__init__(
            self,
            f"compressing slot {slot} would lose {counted(breached.counts())} "
            f"(--fail-on-loss {','.join(k for k in KINDS if k in kinds)}); nothing was "
            "written:\n" + "\n".join(lines),
            hint="keep more messages (--keep-recent), ask the summary to keep them "
            "(--instructions), or allow the loss with --fail-on-loss none",
        )


def refuse_loss(slot: str, report: LossReport, kinds: Collection[str]) -> None:
    """Raise FactsWouldBeLost when `report` lost facts of the `kinds` it must keep."""
    breached = report.breaches(kinds)
    if breached:
        raise FactsWouldBeLost(slot, breached, kinds)
