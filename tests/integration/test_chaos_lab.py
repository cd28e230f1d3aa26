"""Chaos on a real small lab: process faults, crash safety, and a soak that leaves nothing behind."""

import asyncio
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
import pytest

from stormlab.cli import main
from stormlab.runs.soak_leases import host_rules
from tests.conftest import eventually

SOAK_FAULTS = int(os.environ.get("STORMLAB_SOAK_FAULTS", "40"))
# A live process's scheduler states: running, sleeping, or for a moment in the disk's wait (D: a write being
# flushed). A paused one would be T (stopped) or t (traced), a dead one Z or X.
RUNNING = "RSD"


async def json_get(session, url, **kw):
    async with session.get(url, timeout=aiohttp.ClientTimeout(total=kw.pop("timeout", 2)), **kw) as r:
        return r.status, await r.json()


def rack_serving(session, rack_url, n=20):
    async def check():
        _, status = await json_get(session, f"{rack_url}/status")
        return status["nodes_serving"] == n

    return check


@pytest.mark.timeout(120)
def test_pause_freezes_a_rack_then_it_answers_again(lab, capsys):
    rack = lab().url("rack-01")

    async def scenario():
        async with aiohttp.ClientSession() as s:
            assert main(["chaos", "freeze", "--target", "rack-01", "--duration", "1.5s"]) == 0
            with pytest.raises(asyncio.TimeoutError):
                await json_get(s, f"{rack}/healthz", timeout=0.5)
            await asyncio.sleep(1.5)
            assert (await json_get(s, f"{rack}/healthz"))[0] == 200

    asyncio.run(scenario())


@pytest.mark.timeout(180)
@pytest.mark.lab
def test_killed_rack_comes_back_with_every_acknowledged_write(lab):
    started = lab()
    auth, rack, meta, sup = started.auth, started.url("rack-00"), started.url("metadata"), started.url("supervisor")

    async def scenario():
        async with aiohttp.ClientSession() as s:
            _, pmap = await json_get(s, f"{meta}/partition-map")
            targets = [
                (t, p, owner) for t, spec in pmap["tables"].items() for p, owner in enumerate(spec["owners"]) if owner.startswith("r00")
            ]
            acked: dict[str, tuple] = {}
            killed = asyncio.Event()

            async def write(i):
                table, p, owner = targets[i % len(targets)]
                url = f"{rack}/nodes/{owner}/tables/{table}/partitions/{p}/items/k{i}"
                try:
                    async with s.put(url, json={"value": {"i": i}}, timeout=aiohttp.ClientTimeout(total=2)) as r:
                        if r.status == 200:
                            acked[f"k{i}"] = (url, {"i": i})
                except (TimeoutError, aiohttp.ClientError):
                    pass
                if len(acked) == 1500 and not killed.is_set():
                    killed.set()
                    async with s.post(f"{sup}/faults", headers=auth, json={"fault": "kill", "target": "rack-00", "duration_s": 1.0}) as r:
                        assert r.status == 201

            for start in range(0, 3000, 50):
                await asyncio.gather(*(write(i) for i in range(start, start + 50)))
            assert killed.is_set() and len(acked) >= 1500
            await eventually(rack_serving(s, rack), timeout_s=30, what="the killed rack serving again")
            lost = []
            for key, (url, value) in acked.items():
                status, body = await json_get(s, url)
                if status != 200 or body["value"] != value:
                    lost.append(key)
            assert lost == [], f"{len(lost)} acknowledged writes lost of {len(acked)}"
            _, sup_status = await json_get(s, f"{sup}/status")
            assert sup_status["components"]["rack-00"]["restarts"] == 1

    asyncio.run(scenario())


@pytest.mark.lab
@pytest.mark.timeout(60)
def test_killing_the_chaos_command_does_not_leave_the_fault_behind(lab, capsys):
    lab()
    cmd = [sys.executable, "-m", "stormlab.cli", "chaos", "blip", "--rack-set", "1", "--duration", "5s", "--wait"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    assert "reverts by itself" in proc.stdout.readline()
    applied = time.monotonic()
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    proc.stdout.close()
    assert main(["chaos", "list"]) == 0 and "blip on rack-0" in capsys.readouterr().out
    while time.monotonic() < applied + 5.0 + 1.0:
        time.sleep(0.1)
    assert main(["chaos", "list"]) == 0 and "no active faults" in capsys.readouterr().out


def random_move(rng: random.Random) -> list[str]:
    """An operator's move (`stormlab ops`): the metadata service's pause, readmission, capacity."""
    d = f"{rng.uniform(0.1, 0.6):.2f}s"
    return rng.choice(
        [
            ["pause-metadata", "--duration", d],
            ["resume", "--staged", "3", "--every", "0.1s"],
            ["set-capacity", "80", "--break-glass", "--duration", d],
        ]
    )


def random_fault(rng: random.Random) -> list[str]:
    d = f"{rng.uniform(0.1, 0.6):.2f}s"
    rack = str(rng.randrange(2))
    return rng.choice(
        [
            ["blip", "--rack-set", f"{rack},", "--duration", d],
            ["partition", "--between", f"racks:{rack}", "metadata", "--one-way", "--duration", d],
            ["latency", "--rack-set", "2", "--delay", "50ms", "--duration", d],
            ["loss", "--rack-set", "1", "--probability", "0.3", "--duration", d],
            ["freeze", "--target", f"rack-0{rack}", "--duration", d],
            ["kill", "--target", f"rack-0{rack}", "--duration", d],
            ["stuck-partition", "--duration", d],
            ["gsi-growth", "--factor", "1.5", "--duration", d],
        ]
    )


@pytest.mark.lab
@pytest.mark.alone
@pytest.mark.timeout(600)
def test_soak_of_random_faults_leaves_nothing_behind(lab, capsys):
    """STORMLAB_SOAK_FAULTS=200 for the full soak (CI runs a shorter one)."""
    state = lab().state
    rng = random.Random(2015)
    rules_before = host_rules()
    table_before = process_table(state["supervisor_pid"])
    applied = refused = 0
    for _ in range(SOAK_FAULTS):
        code = main(["ops", *random_move(rng)] if rng.random() < 0.25 else ["chaos", *random_fault(rng)])
        capsys.readouterr()
        applied += code == 0
        refused += code == 2  # e.g. a pause on a process that is already paused: refused, nothing changed
        assert code in (0, 2)
        if rng.random() < 0.05:
            assert main(["chaos", "halt"]) == 0
        time.sleep(rng.uniform(0.0, 0.2))
    time.sleep(0.6 + 1.5)  # every lease has ended; a killed rack has been restarted
    assert main(["chaos", "list"]) == 0 and "no active faults" in capsys.readouterr().out
    assert applied >= SOAK_FAULTS * 0.7, f"only {applied} of {SOAK_FAULTS} faults applied"

    async def check():
        async with aiohttp.ClientSession() as s:
            _, sup = await json_get(s, f"{state['supervisor_url']}/status")
            for name, comp in sup["components"].items():
                assert comp["running"] and not comp["paused"] and not comp["held_down"], (name, comp)
                stat = Path(f"/proc/{comp['pid']}/stat").read_text().rsplit(")", 1)[1].split()
                assert stat[0] in RUNNING, f"{name} is in state {stat[0]}"
            _, meta = await json_get(s, f"{state['components']['metadata']['url']}/status")
            assert meta["paused"] is False and meta["cores"] == 40.0 and meta["membership_version"] >= 1
            assert meta["membership_sizes"] == {"20": 34, "138": 6}

    asyncio.run(check())
    assert host_rules() == rules_before  # the links' cuts, where the kernel carries them, all gone
    table_after = process_table(state["supervisor_pid"])
    assert len(table_after) == len(table_before) == len(state["components"]), (table_before, table_after)
    assert all(stat in RUNNING for stat in table_after.values()), table_after  # none stopped (T) or dead (Z)


def process_table(supervisor_pid: int) -> dict[int, str]:
    """The supervisor's children: pid -> scheduler state (a paused one would be T)."""
    table = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == supervisor_pid:
            table[int(stat.parent.name)] = fields[0]
    return table
