"""Headless Chromium through Selenium and Debian's chromedriver, for the pages' real-browser
tests: the `chromium` fixture, or a skip whose reason starts with SKIP_PREFIX (a failure
under AGCTL_REQUIRE_BROWSER=1, which .ci/run sets)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

SKIP_PREFIX = "browser:"
CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
# As root on these machines Chromium needs the sandbox off; the rest keep it from opening
# connections of its own (which pile up on a closed network) and from a first-run setup;
# its shared memory goes to /tmp, as a container's /dev/shm may be 64 MB.
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--window-size=1280,900",
]


def _missing() -> str | None:
    for path in (CHROMIUM, CHROMEDRIVER):
        if shutil.which(path) is None:
            return f"{path} is not installed (Debian: apt-get install chromium chromium-driver)"
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install -e '.[test]')"
    return None


@pytest.fixture
def chromium(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A Selenium WebDriver on a fresh headless Chromium with an empty profile."""
    reason = _missing()
    if reason is not None:
        pytest.skip(f"{SKIP_PREFIX} {reason}")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in FLAGS:
        options.add_argument(flag)
    profile: Path = tmp_path_factory.mktemp("chromium-profile")
    options.add_argument(f"--user-data-dir={profile}")
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()
