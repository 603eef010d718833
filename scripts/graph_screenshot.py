"""Make docs/graph.png, the README's picture of the HTML graph page: the issue-15 scenario
(tests/graph_scenario.py) in a throwaway store, drawn by agctl.graph.html, opened in headless
Chromium (tests/chromium.py's flags) in a 1400x800 viewport with the `draft` slot clicked,
and screenshotted.

    python scripts/graph_screenshot.py [OUT.png]
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from chromium import CHROMEDRIVER, CHROMIUM, FLAGS  # noqa: E402
from graph_scenario import build_scenario  # noqa: E402
from selenium import webdriver  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402

from agctl.graph.html import details, render  # noqa: E402
from agctl.graph.model import build_graph  # noqa: E402
from agctl.store import Store  # noqa: E402


def main() -> None:
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "docs" / "graph.png"
    with tempfile.TemporaryDirectory() as scratch:
        store = Store(Path(scratch) / "data")
        build_scenario(store)
        graph = build_graph(store, None, all_sessions=True, checkpoints=True).to_json()
        page = Path(scratch) / "graph.html"
        page.write_text(render(graph, redact=False, details=details(store, graph, redact=False)))
        options = webdriver.ChromeOptions()
        options.binary_location = CHROMIUM
        for flag in [*FLAGS, f"--user-data-dir={Path(scratch) / 'profile'}"]:
            options.add_argument(flag)
        driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
        try:
            driver.execute_cdp_cmd(
                "Emulation.setDeviceMetricsOverride",
                {"width": 1400, "height": 800, "deviceScaleFactor": 1, "mobile": False},
            )
            driver.get(page.as_uri())
            draft = next(n["id"] for n in graph["nodes"] if n.get("slot") == "draft")
            driver.find_element(By.CSS_SELECTOR, f'g[data-node="{draft}"]').click()
            driver.save_screenshot(str(target))
        finally:
            driver.quit()
    print(f"wrote {target} ({target.stat().st_size:,} bytes)")


if __name__ == "__main__":
    main()
