"""A game day stops the lab it started whenever SIGTERM or SIGHUP comes: also after its
timeline, while it scores and draws its report (the loop's close had put the default back,
which killed the runner on the spot and left the lab running)."""

import asyncio
import os
import signal
import time
from pathlib import Path

import pytest

from stormlab.cli import main
from stormlab.scenarios import cli as gameday_cli

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_a_stop_signal_while_the_report_is_drawn_still_stops_the_lab(monkeypatch, sig):
    stopped = []
    monkeypatch.setattr(gameday_cli, "running", lambda: None)
    monkeypatch.setattr(gameday_cli.launcher, "up", lambda settings, base_port: {"components": {}})
    monkeypatch.setattr(gameday_cli.launcher, "down", lambda *a: stopped.append(True))

    async def timeline():  # the runner's loop takes the stop signals, as settle_then does
        loop = asyncio.get_running_loop()
        for s in (signal.SIGTERM, signal.SIGHUP):
            loop.add_signal_handler(s, lambda: None)

    def play(*args):
        gameday_cli.run_loop(timeline())  # its loop closed: the default handler (kill at once) would be back
        assert signal.getsignal(sig) not in (signal.SIG_DFL, signal.SIG_IGN)  # else the signal below kills pytest
        os.kill(os.getpid(), sig)  # ... and then the signal comes, while the report is drawn
        time.sleep(5)
        raise AssertionError("the signal did not interrupt")

    monkeypatch.setattr(gameday_cli, "play", play)
    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGHUP)}
    assert main(["scenario", "run", str(ROOT / "scenarios/dynamodb-2015.yaml"), "--autopilot"]) == 130  # interrupted
    assert stopped == [True]
    assert {s: signal.getsignal(s) for s in before} == before  # the handlers the caller had come back
