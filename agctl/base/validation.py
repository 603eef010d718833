"""One line saying what pydantic refused, for the message of an AgctlError."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pydantic import ValidationError


def validation_summary(exc: ValidationError, root: str = "") -> str:
    """'where: why' of the first error, plus how many more there are. `where` is the dotted
    path of the field, else `root` (what the whole input is); with neither, just 'why'."""
    first = exc.errors()[0]
    where = ".".join(str(part) for part in first["loc"]) or root
    why = first["msg"].removeprefix("Value error, ")
    more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    return f"{where}: {why}{more}" if where else f"{why}{more}"
