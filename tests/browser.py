"""A real browser for the tests: Debian's headless Chromium, driven by Selenium through Debian's
chromedriver (both installed by .ci/debian-tools; Selenium by the project's test extras). Where
they are missing the tests that need them skip and say what to install."""

from __future__ import annotations

import shutil
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service

CHROMIUM, DRIVER = shutil.which("chromium"), shutil.which("chromedriver")


@contextmanager
def chromium(width: int = 1400, height: int = 1000, extra: Sequence[str] = ()) -> Iterator[webdriver.Chrome]:
    if CHROMIUM is None or DRIVER is None:
        pytest.skip("no headless Chromium here: apt-get install chromium chromium-driver (.ci/debian-tools does)")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", f"--window-size={width},{height}", *extra):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(DRIVER), options=options)  # the driver given: Selenium downloads nothing
    driver.set_script_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()
