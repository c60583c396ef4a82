"""A real headless Chromium (Debian's ``chromium`` and ``chromium-driver``) driven by
Selenium, for pages the services serve on loopback.

Selenium is given both binaries' paths, so Selenium Manager never runs (it would
download a browser). Chromium's own background traffic (component updates, safe
browsing, metrics) is switched off, and every non-loopback request goes to a proxy on
``127.0.0.1:9`` that does not exist: the browser reaches nothing but loopback.

Under ``CI=true`` a missing binary or a missing ``selenium`` fails the test; elsewhere it
skips with the install command.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .binaries import require_binary, running_in_ci

APT_HINT = "the status page tests need Debian's chromium and chromium-driver: apt-get install -y --no-install-recommends chromium chromium-driver"
PIP_HINT = ".venv/bin/pip install selenium"

_FLAGS = [
    "--headless=new",
    "--no-sandbox",  # runs as root in containers, where Chromium's sandbox cannot start
    "--disable-dev-shm-usage",
    "--disable-gpu",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-extensions",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-default-apps",
    "--disable-domain-reliability",
    "--disable-client-side-phishing-detection",
    "--metrics-recording-only",
    "--no-pings",
    "--proxy-server=http://127.0.0.1:9",  # loopback is never proxied; anything else fails
    "--window-size=1400,1800",
]


def selenium_webdriver() -> Any:
    """The ``selenium.webdriver`` module, or end the test: fail under CI, skip elsewhere."""
    try:
        from selenium import webdriver
    except ImportError:
        message = f"selenium is not installed: {PIP_HINT}"
        if running_in_ci():
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    return webdriver


@contextlib.contextmanager
def chromium(profile_dir: Path) -> Iterator[Any]:
    """A headless Chromium WebDriver with its own profile in ``profile_dir``; quit on exit."""
    browser = require_binary("chromium", APT_HINT)
    driver_binary = require_binary("chromedriver", APT_HINT)
    webdriver = selenium_webdriver()
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for flag in [*_FLAGS, f"--user-data-dir={profile_dir}"]:
        options.add_argument(flag)
    profile_dir.mkdir(parents=True, exist_ok=True)
    service = Service(executable_path=driver_binary, log_output=str(profile_dir / "chromedriver.log"))
    driver = webdriver.Chrome(service=service, options=options)
    try:
        yield driver
    finally:
        driver.quit()


@contextlib.contextmanager
def screenshot_on_failure(driver: Any, directory: Path, name: str = "failure") -> Iterator[None]:
    """On any failure inside the block, save ``<name>.png`` and ``<name>.html`` (the DOM as
    it was) to ``directory`` (the test's ``tmp_path``), then let the failure go on."""
    try:
        yield
    except BaseException:
        directory.mkdir(parents=True, exist_ok=True)
        shot, dom = directory / f"{name}.png", directory / f"{name}.html"
        with contextlib.suppress(Exception):  # the browser itself may be what failed
            driver.save_screenshot(str(shot))
            dom.write_text(driver.page_source)
        print(f"status page at failure: {shot} and {dom}", file=sys.stderr)
        raise
