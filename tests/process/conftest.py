"""What the tests of real processes share: a real agctl's environment over the test's data dir."""

from __future__ import annotations

from helpers import env  # noqa: F401  (the fixture)
