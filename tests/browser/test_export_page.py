"""The conversation page in a real browser (headless Chromium): the messages show, a hostile
message stays text and runs nothing, the folds open, search filters, a screenshot is drawn."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from helpers import HOSTILE_TEXT, SID, conversation_with_tools

from agctl.pages.conversation import conversation_page
from agctl.store import Store


def screenshot_is_a_picture(driver: Any, path: Path) -> None:
    """A PNG of the page, large enough to hold more than a blank window."""
    assert driver.save_screenshot(str(path))
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(data) > 10_000


def test_the_conversation_page_in_chromium(chromium: Any, store: Store, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By

    conversation_with_tools(store)
    target = tmp_path / "chat.html"
    target.write_text(conversation_page(store, SID, None, redact=False), encoding="utf-8")
    chromium.get(target.as_uri())

    articles = chromium.find_elements(By.CSS_SELECTOR, "article.message")
    assert len(articles) == 5
    said = articles[1].find_element(By.CSS_SELECTOR, ".user-text")
    assert said.get_property("textContent") == HOSTILE_TEXT.replace("\0", "\ufffd")
    assert chromium.title == f"agctl · {SID} · default"
    assert chromium.execute_script("return window.pwned === undefined")
    assert chromium.find_elements(By.TAG_NAME, "img") == []
    assert len(chromium.find_elements(By.TAG_NAME, "script")) == 2
    assert "forty-two." in articles[4].text

    result = articles[3].find_element(By.TAG_NAME, "details")
    assert not result.get_property("open")
    chromium.find_element(By.ID, "unfold").click()
    assert result.get_property("open")
    assert "lookup said: forty-two" in articles[3].text

    chromium.find_element(By.ID, "search").send_keys("forty")
    shown = [a for a in articles if a.is_displayed()]
    assert shown == [articles[3], articles[4]]
    assert chromium.find_element(By.ID, "match-count").text == "2 of 5 messages"
    screenshot_is_a_picture(chromium, tmp_path / "chat.png")
