"""A real headless Chromium (Debian's chromium + chromedriver) driven by selenium, for the console.

`make test` installs both packages when they are missing (scripts/test-tools.sh); here a missing
browser is an error that says so, never a skip.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support.ui import WebDriverWait

CHROMIUM = os.environ.get("SOKOVAN_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("SOKOVAN_CHROMEDRIVER", "/usr/bin/chromedriver")
# Where the screenshots of a test run go (looked at by people; not committed).
SCREENSHOTS = Path(os.environ.get("SOKOVAN_SCREENSHOTS", "build/screenshots"))


def find_browser() -> tuple[str, str]:
    chromium = shutil.which(CHROMIUM) or shutil.which("chromium")
    driver = shutil.which(CHROMEDRIVER) or shutil.which("chromedriver")
    if not chromium or not driver:
        raise RuntimeError(
            "the console tests need Debian's chromium and chromium-driver: "
            "run scripts/test-tools.sh (make test does) or apt-get install chromium chromium-driver"
        )
    return chromium, driver


def start_browser() -> webdriver.Chrome:
    chromium, driver = find_browser()
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for arg in (
        "--headless=new",
        "--no-sandbox",  # tests run as root
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--window-size=1440,960",
        "--force-device-scale-factor=1",
    ):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(options=options, service=Service(executable_path=driver))


class Page:
    """The console in one browser tab, with waits that say what they waited for."""

    def __init__(self, driver: webdriver.Chrome, base: str) -> None:
        self.driver = driver
        self.base = base

    def open(self, hash_route: str = "") -> None:
        self.driver.get("about:blank")  # a fresh document even when only the hash would differ
        self.driver.get(f"{self.base}/ui/{hash_route}")

    def go(self, hash_route: str) -> None:
        """Navigate inside the page (a hash change, no reload)."""
        self.driver.execute_script("location.hash = arguments[0]", hash_route)

    def sign_in(self, token: str, *, accepted: bool = True) -> None:
        field = self.wait_for(lambda: self.visible("#token"), "the sign-in form")
        field.clear()
        field.send_keys(token)
        self.one("#signin button[type=submit]").click()
        if accepted:
            self.wait_for(lambda: self.visible("#app"), "the console after sign-in")

    def sign_out(self) -> None:
        self.one("#signout").click()
        self.wait_for(lambda: self.visible("#token"), "the sign-in form after sign-out")

    def one(self, css: str) -> WebElement:
        return self.driver.find_element(By.CSS_SELECTOR, css)

    def all(self, css: str) -> list[WebElement]:
        return self.driver.find_elements(By.CSS_SELECTOR, css)

    def visible(self, css: str) -> WebElement | None:
        found = self.all(css)
        return found[0] if found and found[0].is_displayed() else None

    def status_of(self, css: str) -> str | None:
        found = self.all(css)
        return found[0].get_attribute("data-status") if found else None

    def wait_for(self, check: Callable[[], Any], what: str, within: float = 30) -> Any:
        try:
            return WebDriverWait(self.driver, within, poll_frequency=0.1).until(lambda _d: check())
        except Exception as exc:  # a timeout: say what never came, with the page's console log
            self.screenshot(f"failed-{what.replace(' ', '-')[:40]}")
            raise AssertionError(f"timed out waiting for {what}; browser log: {self.browser_log()}") from exc

    def browser_log(self) -> list[str]:
        try:
            return [entry["message"] for entry in self.driver.get_log("browser")]
        except Exception:
            return []

    def screenshot(self, name: str) -> Path:
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        path = SCREENSHOTS / f"{name}.png"
        self.driver.save_screenshot(str(path))
        return path
