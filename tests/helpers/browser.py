"""Headless Chromium for the run report's pages (the ``browser`` fixture starts it): where it is, and what the
tests do with a page."""

from __future__ import annotations

import shutil
from pathlib import Path

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")


def open_page(driver, path: Path) -> None:
    """Opens a local page and clears the browser's log of earlier pages."""
    driver.get(path.resolve().as_uri())
    driver.get_log("browser")


def console_errors(driver) -> list[str]:
    """The page's console errors since it was opened."""
    return [entry["message"] for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]


def select(driver, element_id: str, value: str) -> None:
    """Picks ``value`` in the page's ``<select id=element_id>``."""
    from selenium.webdriver.support.ui import Select

    Select(driver.find_element("id", element_id)).select_by_value(value)
