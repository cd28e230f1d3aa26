"""The CLI against a real (small) lab: up, status --json, chaos blip and its refusals, down."""

import json
import time
import urllib.request

import pytest

from stormcore import roster
from stormlab.cli import main


@pytest.fixture
def small_lab(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("STORMLAB_STATE_DIR", str(tmp_path / "state"))
    assert main(["up", "--racks", "2", "--nodes-per-rack", "20", "--renewal-period", "1s", "--base-port", "0"]) == 0
    capsys.readouterr()
    yield
    assert main(["down"]) == 0


def status(capsys) -> dict:
    assert main(["status", "--json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.timeout(120)
def test_up_status_blip_down(small_lab, capsys):
    deadline = time.monotonic() + 20
    while (snap := status(capsys))["nodes_serving"] < 40 and time.monotonic() < deadline:
        time.sleep(0.5)
    for key in (
        "endpoints",
        "nodes_total",
        "nodes_disqualified",
        "customer_error_ratio",
        "metadata_inflight",
        "renewal_p99_s",
        "allowance_s",
        "loop_lag_p99_s",
    ):
        assert key in snap
    assert snap["nodes_total"] == 40 and snap["nodes_serving"] == 40
    assert set(snap["endpoints"]) == {"rack-00", "rack-01", *(p.name for p in roster.SINGLE)}

    for bad in (
        ["--duration", "0s"],
        ["--duration=-5s"],
        ["--duration", "2h"],
        ["--duration", "soon"],
        ["--racks", "5", "--duration", "1s"],
        ["--racks", "0,0", "--duration", "1s"],
    ):
        assert main(["chaos", "blip", *bad]) == 2, bad
        assert "stormlab:" in capsys.readouterr().err
    assert main(["chaos", "list"]) == 0
    assert "no active faults" in capsys.readouterr().out

    for bad in (
        ["pause", "--target", "loadgen", "--duration", "1s"],
        ["kill", "--target", "pid:1", "--duration", "1s"],
        ["pause", "--target", "rack-07", "--duration", "1s"],
        ["pause-metadata", "--duration", "11m"],
    ):
        assert main(["chaos", *bad]) == 2, bad
        assert "stormlab:" in capsys.readouterr().err
    assert main(["chaos", "blip", "--racks", "1", "--duration", "2s", "--dry-run"]) == 0
    assert capsys.readouterr().out.startswith("POST http://127.0.0.1:")
    assert main(["chaos", "list"]) == 0
    assert "no active faults" in capsys.readouterr().out

    timeouts_before = [renewal_timeouts(snap["endpoints"][f"rack-0{r}"]) for r in (0, 1)]
    assert main(["chaos", "blip", "--racks", "1", "--duration", "2s"]) == 0
    assert "blip #1 on rack-0" in capsys.readouterr().out
    assert main(["chaos", "list"]) == 0
    assert "blip on rack-0" in capsys.readouterr().out
    deadline = time.monotonic() + 2
    seen_down = False
    while time.monotonic() < deadline and not seen_down:
        seen_down = status(capsys)["racks_link_down"] == [0]
        time.sleep(0.1)
    assert seen_down, "rack 0's probe never saw its link go down"
    time.sleep(2.5)
    assert main(["chaos", "list"]) == 0
    assert "no active faults" in capsys.readouterr().out
    assert status(capsys)["racks_link_down"] == []
    timeouts_after = [renewal_timeouts(snap["endpoints"][f"rack-0{r}"]) for r in (0, 1)]
    assert timeouts_after[0] > timeouts_before[0], "the blipped rack's renewals should have timed out"
    assert timeouts_after[1] == timeouts_before[1], "only the blipped rack's renewals should fail"


def renewal_timeouts(rack_url: str) -> float:
    text = urllib.request.urlopen(f"{rack_url}/metrics", timeout=2).read().decode()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("stormlab_renewals_total{") and 'outcome="timeout"' in line
    )


def test_up_twice_is_refused(small_lab, capsys):
    assert main(["up", "--racks", "1", "--nodes-per-rack", "1", "--base-port", "0"]) == 1
    assert "already up" in capsys.readouterr().err


def processes_of(directory) -> list[int]:
    """Pids whose environment names this lab's state directory (the supervisor and its children)."""
    import os
    from pathlib import Path

    marker = str(directory).encode()
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                if marker in (entry / "environ").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                pass  # gone, or not ours to read
    return found


@pytest.mark.timeout(120)
@pytest.mark.parametrize("signum", ["SIGINT", "SIGTERM"])
def test_an_interrupted_start_leaves_nothing_running(tmp_path, signum):
    import os
    import signal
    import subprocess
    import sys

    directory = tmp_path / "state"
    env = {**os.environ, "STORMLAB_STATE_DIR": str(directory)}
    cli = subprocess.Popen([sys.executable, "-m", "stormlab.cli", "up", "--base-port", "0"], env=env, stdout=subprocess.PIPE, text=True)
    try:
        for _ in range(300):  # the supervisor has started its first children; the lab is not up yet
            if (directory / "state.json").exists():
                break
            time.sleep(0.05)
        assert processes_of(directory), "the start-up had not begun"
        cli.send_signal(getattr(signal, signum))
        out, _ = cli.communicate(timeout=60)
        assert cli.returncode == 130
        assert "pid" not in out  # it never said the lab was up
        for _ in range(50):
            if not processes_of(directory):
                break
            time.sleep(0.1)
        assert processes_of(directory) == []
        assert not (directory / "state.json").exists()
    finally:
        if cli.poll() is None:
            cli.kill()
            cli.communicate()
        for pid in processes_of(directory):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.timeout(180)
def test_nothing_acknowledged_is_lost_while_racks_are_killed_and_a_blip_storms(small_lab, capsys):
    import asyncio

    from stormcore.labstate import running
    from stormlab.runs import writecheck

    state = running()
    killer = writecheck.rack_killer(state, every_s=5.0, seed=3)

    async def faults():
        blip = asyncio.create_task(asyncio.to_thread(main, ["chaos", "blip", "--racks", "1", "--duration", "2s"]))
        await asyncio.gather(killer(), blip)

    result = asyncio.run(writecheck.check(state, duration_s=16.0, rate=30.0, faults=faults, tag="it"))
    print(result)
    assert result.acknowledged > 150 and result.refused > 0  # writes went in, and the kills refused some
    assert result.lost == 0 and result.refused_but_stored == 0 and result.unreadable == 0
    assert result.read_back == result.acknowledged


@pytest.mark.timeout(300)
def test_a_short_soak_leaves_no_fault_behind(small_lab, capsys):
    """The CI version of `make soak`: 80 random leases, holders killed at random."""
    code = main(["soak", "--leases", "80", "--seed", "7", "--holder-kills", "0.04"])
    out = capsys.readouterr().out
    result = json.loads(out[out.index("{") :])
    print(result)
    assert code == 0 and result["ok"], result
    assert result["applied"] >= 40 and result["ended_by_their_lease"] >= 30
    assert result["still_held"] == 0 and result["never_ended"] == 0
