"""Fixtures of the trainer tests: headless Chromium for the run report (its helpers: :mod:`tests.helpers.browser`).
The warm-started tiny policies are fixtures of tests/conftest.py, shared with tests/learning."""

from __future__ import annotations

import pytest

from tests.helpers.browser import CHROMEDRIVER, CHROMIUM


@pytest.fixture(scope="module")
def browser():
    """Headless Chromium driven by selenium, logging the page's console."""
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (the [dev] extra)")
    if not (CHROMIUM and CHROMEDRIVER):
        pytest.skip("no chromium/chromedriver on PATH (Debian: apt-get install chromium chromium-driver)")
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"):
        options.add_argument(argument)
    options.add_argument("--window-size=1400,1800")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))
    yield driver
    driver.quit()
