"""A real browser for the tests: Debian's headless Chromium, driven by Selenium through Debian's
chromedriver (both installed by .ci/debian-tools; Selenium by the project's test extras). Where
they are missing the tests that need them skip and say what to install.

A browser can also run on a second machine: :func:`laptop` makes one out of a network namespace of
the test's own (a veth pair, a /30 of its own), and ``chromium(laptop=…)`` runs chromedriver and its
Chromium inside it, driven from the test over the veth: the browser reaches the host only at the
host's end of the pair, as a student's laptop reaches the teacher's."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service

CHROMIUM, DRIVER = shutil.which("chromium"), shutil.which("chromedriver")
DRIVER_PORT = 9515  # chromedriver's, inside the laptop's namespace (nothing else listens there)


@dataclass(frozen=True)
class Laptop:
    """A second machine: a network namespace, the host's address on their link, and its own."""

    namespace: str
    host_ip: str
    ip: str


def can_make_a_laptop() -> str | None:
    """None where :func:`laptop` can make one (root, iproute2), else why not."""
    if os.geteuid() != 0:
        return "a second machine is a network namespace: root only"
    if shutil.which("ip") is None:
        return "a second machine needs iproute2's ip"
    return None


@contextmanager
def laptop() -> Iterator[Laptop]:
    """A network namespace joined to the host by a veth pair (the host at .1, it at .2 of
    10.231.N.0/30, N from this process's pid); the pair and the namespace are gone after."""
    why_not = can_make_a_laptop()
    if why_not:
        pytest.skip(why_not)
    pid = os.getpid()
    n = pid % 250 + 1
    name, host_end, its_end = f"stormlab-laptop-{pid}", f"slh{pid % 10**6}", f"slp{pid % 10**6}"
    host_ip, its_ip = f"10.231.{n}.1", f"10.231.{n}.2"

    def ip(*argv: str, inside: bool = False) -> None:
        done = subprocess.run([*(["ip", "netns", "exec", name] if inside else []), "ip", *argv], capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"ip {' '.join(argv)}: {done.stderr.strip()}")

    if subprocess.run(["ip", "netns", "add", name], capture_output=True).returncode != 0:
        pytest.skip("cannot make a network namespace here")
    try:
        ip("link", "add", host_end, "type", "veth", "peer", "name", its_end)
        ip("link", "set", its_end, "netns", name)
        ip("addr", "add", f"{host_ip}/30", "dev", host_end)
        ip("link", "set", host_end, "up")
        ip("addr", "add", f"{its_ip}/30", "dev", its_end, inside=True)
        ip("link", "set", its_end, "up", inside=True)
        ip("link", "set", "lo", "up", inside=True)
        yield Laptop(name, host_ip, its_ip)
    finally:
        subprocess.run(["ip", "link", "del", host_end], capture_output=True)  # its peer goes with it
        subprocess.run(["ip", "netns", "del", name], capture_output=True)


@contextmanager
def _driver_on(where: Laptop) -> Iterator[str]:
    """chromedriver running inside ``where``, answering the host only; its URL."""
    assert DRIVER is not None
    argv = ["ip", "netns", "exec", where.namespace, DRIVER, f"--port={DRIVER_PORT}", f"--allowed-ips={where.host_ip}", "--silent"]
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://{where.ip}:{DRIVER_PORT}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"{url}/status", timeout=2):
                    break
            except (urllib.error.URLError, OSError):
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"chromedriver in {where.namespace} did not answer at {url} (exit {proc.poll()})") from None
                time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextmanager
def chromium(width: int = 1400, height: int = 1000, extra: Sequence[str] = (), on: Laptop | None = None) -> Iterator[webdriver.Remote]:
    """A headless Chromium (``extra``: more of its flags), on this host or ``on`` a laptop."""
    if CHROMIUM is None or DRIVER is None:
        pytest.skip("no headless Chromium here: apt-get install chromium chromium-driver (.ci/debian-tools does)")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", f"--window-size={width},{height}", *extra):
        options.add_argument(arg)
    with _driver_on(on) if on is not None else nullcontext(None) as url:
        if url is None:
            driver: webdriver.Remote = webdriver.Chrome(
                service=Service(DRIVER), options=options
            )  # the driver given: Selenium downloads nothing
        else:
            driver = webdriver.Remote(command_executor=url, options=options)
        driver.set_script_timeout(30)
        try:
            yield driver
        finally:
            driver.quit()
