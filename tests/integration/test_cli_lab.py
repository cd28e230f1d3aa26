"""The CLI against a real (small) lab: up, status --json, chaos blip and its refusals, down."""

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from chaos.kernel_link import available
from stormcore import roster
from stormlab.cli import main
from stormlab.engine import launcher
from stormlab.runs import writecheck
from tests.conftest import ctrl_c_reaches_it, until


def status(capsys) -> dict:
    assert main(["status", "--json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.timeout(120)
def test_up_status_blip_down(lab, capsys):
    lab(cascade=roster.CASCADE, cli=True, serving=False)
    capsys.readouterr()
    snap = until(lambda: (s := status(capsys))["nodes_serving"] == 40 and s, what="every node serving")
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
        ["--rack-set", "5", "--duration", "1s"],
        ["--rack-set", "0,0", "--duration", "1s"],
    ):
        assert main(["chaos", "blip", *bad]) == 2, bad
        assert "stormlab:" in capsys.readouterr().err
    assert main(["chaos", "list"]) == 0
    assert "no active faults" in capsys.readouterr().out
    assert main(["chaos", "list", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["leases"] == []
    assert main(["ops", "status", "--json"]) == 0
    look = json.loads(capsys.readouterr().out)
    assert look["nodes_serving"] == 40 and look["first_look"][0].startswith("diagnosis:")

    for bad in (
        ["freeze", "--target", "loadgen", "--duration", "1s"],
        ["kill", "--target", "pid:1", "--duration", "1s"],
        ["freeze", "--target", "rack-07", "--duration", "1s"],
        ["gsi-growth", "--duration", "11m"],
    ):
        assert main(["chaos", *bad]) == 2, bad
        assert "stormlab:" in capsys.readouterr().err
    assert main(["chaos", "blip", "--rack-set", "1", "--duration", "2s", "--dry-run"]) == 0
    assert capsys.readouterr().out.startswith("POST http://127.0.0.1:")
    assert main(["chaos", "list"]) == 0
    assert "no active faults" in capsys.readouterr().out

    timeouts_before = [renewal_timeouts(snap["endpoints"][f"rack-0{r}"]) for r in (0, 1)]
    assert main(["chaos", "blip", "--rack-set", "1", "--duration", "2s"]) == 0
    assert "blip #1 on rack-0" in capsys.readouterr().out
    assert main(["chaos", "list"]) == 0
    assert "blip on rack-0" in capsys.readouterr().out
    until(lambda: status(capsys)["racks_link_down"] == [0], limit_s=2, interval_s=0.1, what="rack 0's probe seeing its link go down")
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


def test_up_twice_is_refused(lab, capsys):
    lab(cli=True, serving=False)
    assert main(["up", "--racks", "1", "--nodes-per-rack", "1", "--base-port", "0"]) == 1
    assert "already up" in capsys.readouterr().err


def processes_of(directory) -> list[int]:
    """Pids whose environment names this lab's state directory (the supervisor and its children)."""
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


@pytest.mark.lab
@pytest.mark.timeout(120)
@pytest.mark.parametrize("signum", ["SIGINT", "SIGTERM"])
def test_an_interrupted_start_leaves_nothing_running(tmp_path, signum):
    directory = tmp_path / "state"
    env = {**os.environ, "STORMLAB_STATE_DIR": str(directory)}
    argv = [sys.executable, "-m", "stormlab.cli", "up", "--base-port", "0"]
    cli = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, text=True, preexec_fn=ctrl_c_reaches_it)
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
        until(lambda: not processes_of(directory), limit_s=5, interval_s=0.1, what="every process of the interrupted start gone")
        assert not (directory / "state.json").exists()
    finally:
        if cli.poll() is None:
            cli.kill()
            cli.communicate()
        for pid in processes_of(directory):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.lab
@pytest.mark.timeout(120)
@pytest.mark.skipif(available() is not None, reason=str(available()))
def test_a_lab_killed_outright_leaves_no_rule_in_the_kernel_after_down(lab):
    """The link proxy's own shutdown removes its rules; killed with its supervisor it has none, and
    `down` (which finds the supervisor gone) removes what it left, from the lab's plan."""
    started = lab(link_cut="kernel")
    rules = launcher.kernel_links_of(started.directory)
    assert rules is not None and rules.present()
    for pid in processes_of(started.directory):
        os.kill(pid, signal.SIGKILL)
    until(lambda: not processes_of(started.directory), limit_s=10, interval_s=0.1, what="every process of the lab gone")
    assert rules.present(), "the killed proxy had no chance to remove its rules"
    assert launcher.down(started.directory) is False  # nothing was up to stop
    assert not rules.present()


@pytest.mark.lab
@pytest.mark.timeout(180)
def test_nothing_acknowledged_is_lost_while_racks_are_killed_and_a_blip_storms(lab, capsys):
    state = lab().state
    killer = writecheck.rack_killer(state, every_s=5.0, seed=3)

    async def faults():
        blip = asyncio.create_task(asyncio.to_thread(main, ["chaos", "blip", "--rack-set", "1", "--duration", "2s"]))
        await asyncio.gather(killer(), blip)

    result = asyncio.run(writecheck.check(state, duration_s=16.0, rate=30.0, faults=faults, tag="it"))
    print(result)
    assert result.acknowledged > 150 and result.refused > 0  # writes went in, and the kills refused some
    assert result.lost == 0 and result.refused_but_stored == 0 and result.unreadable == 0
    assert result.read_back == result.acknowledged


@pytest.mark.lab
@pytest.mark.alone
@pytest.mark.timeout(300)
def test_a_short_soak_leaves_no_fault_behind(lab, capsys):
    """The CI version of `make soak`: 80 random leases (the cascade's fixes among them), holders killed at random."""
    lab(cascade=roster.CASCADE)
    code = main(["soak", "--leases", "80", "--seed", "7", "--holder-kills", "0.04", "--json"])
    result = json.loads(capsys.readouterr().out)  # the one document on stdout, progress on stderr
    print(result)
    assert code == 0 and result["ok"], result
    assert result["applied"] >= 40 and result["ended_by_their_lease"] >= 30
    assert result["still_held"] == 0 and result["never_ended"] == 0


@pytest.mark.lab
@pytest.mark.timeout(240)
def test_every_acknowledged_send_is_received_while_the_queues_service_is_killed(lab, capsys):
    """`stormlab writecheck --queues`: Jepsen's total-queue through SIGKILLs of the queues service
    (a receive whose answer died with it leaves its messages to be received again, not lost)."""
    lab(cascade=("queues",), queue_cache_ttl_s=30.0)
    argv = ["writecheck", "--duration", "15s", "--rate", "20", "--kill-every", "0", "--queues", "--kill-queues-every", "4s", "--json"]
    code = main(argv)
    result = json.loads(capsys.readouterr().out)
    print(result)
    queues = result["queues"]
    assert queues["acknowledged"] > 100 and queues["refused"] + queues["indeterminate"] > 0  # the kills refused or cut some
    assert queues["lost"] == 0 and queues["unexpected"] == 0 and queues["drained"], queues
    assert code == 0 and result["ok"]
