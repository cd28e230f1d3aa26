"""A user's retry policy cannot stop a service: a call into it that raises is named, counted and
answered by the protocol's default (live), or stops the model with a PolicyError naming the call
(certify: exit 2). Once, a policy whose record() raised passed the lab's probe and then silently
killed the lease manager's workers: launches stood still while /status answered 200."""

from __future__ import annotations

import asyncio
import json
import random
from pathlib import Path

import pytest

from services.leases.app import LeaseService
from services.leases.endpoint import Endpoint
from stormcore import policies, retry
from stormcore.metrics import MetricFactory
from stormcore.policies.errors import PolicyError
from stormcore.settings import profile
from stormlab import cli
from stormlab.incidents.aws_2025_10 import certificate as lc

RAISING = """
class Raising:
    attempt_timeout_s = 20.0
    after = 200  # calls of each kind before it breaks: past the probe's (which it passes)

    def __init__(self):
        self.seen = {"record": 0, "admits": 0}

    def next_delay(self, miss, rng):
        return 0.0

    def record(self, ok, now=0.0):
        if self.counted("record"):
            raise RuntimeError("record: a bug in the author's bookkeeping")

    def admits(self, now):
        if self.counted("admits"):
            raise KeyError("admits")
        return True

    def counted(self, call):
        self.seen[call] += 1
        return self.seen[call] > self.after
"""


@pytest.fixture
def raising(tmp_path: Path) -> str:
    (tmp_path / "raising.py").write_text(RAISING)
    return f"python:{tmp_path / 'raising.py'}:Raising"


def test_a_live_policy_that_raises_is_answered_by_the_protocols_default_counted_by_call(raising):
    heard: list[str] = []
    live = policies.build(raising, strict=False, told=heard.append)
    for _ in range(204):
        live.record(True, 1.0)
        assert live.admits(1.0) is True  # its own answer, then the protocol's default: admitted
    assert live.next_delay(retry.Miss(1, "timeout", 1.0), random.Random(1)) == 0.0  # its own answers still count
    assert policies.broken_calls(live) == {"record": 4, "admits": 4} and heard == ["record", "admits"] * 4


def test_the_model_stops_on_a_policy_that_raises_naming_the_call(raising):
    strict = policies.build(raising, strict=True)
    with pytest.raises(PolicyError, match=r"raising.py:Raising: record raised RuntimeError: record: a bug"):
        for _ in range(204):
            strict.record(True, 1.0)


class Table:
    """The lease manager's database, always answering (the test is of the policy, not the endpoint)."""

    endpoint = Endpoint()

    async def get(self, table: str, key: str) -> dict:
        return {}

    async def put(self, table: str, key: str, value: dict) -> None:
        return None

    async def recycle(self) -> None:
        await asyncio.Event().wait()


async def test_the_lease_manager_goes_on_past_a_policy_whose_record_and_admits_raise(tmp_path):
    (tmp_path / "raising.py").write_text(RAISING.replace("after = 200", "after = 3"))  # breaks within the first asks
    raising = f"python:{tmp_path / 'raising.py'}:Raising"
    s = profile("aws-2025-10").replace(
        lease_droplets=200, lease_hosts=2, lease_workers=4, lease_check_period_s=0.2, lease_ttl_s=0.1,  # every lease lapses: new work
        lease_establish_cost_s=0.001, launch_rate=200, lease_retry_policy=raising,
    )  # fmt: skip
    f = MetricFactory()
    service = LeaseService(s, Table(), f)  # type: ignore[arg-type]
    tasks = [asyncio.create_task(loop) for loop in service.loops()]
    try:
        await asyncio.sleep(1.0)
        established_at_1s = [h.counts.established for h in service.hosts]
        await asyncio.sleep(1.0)
        assert not [t for t in tasks if t.done()] and all(len(crew) == s.lease_workers for crew in service.crews)
        assert all(h.counts.established > then + 50 for h, then in zip(service.hosts, established_at_1s, strict=True))
        broken = {c: f.registry.get_sample_value("stormlab_retry_policy_broken_total", {"call": c}) for c in retry.CALLS}
        assert broken["record"] > 0 and broken["admits"] > 0 and broken["next_delay"] == 0
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        service.close()


def test_certify_of_a_policy_that_raises_is_exit_2_naming_the_call_with_a_json_document(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(lc, "suite", lambda: [lc.LeasePoint(*lc.ACCOUNT)])
    (tmp_path / "raising.py").write_text(RAISING)
    argv = ["certify", "--profile", "aws-2025-10", "--live", "0", "--jobs", "1", "--json", "--no-references"]
    code = cli.main([*argv, "--out", str(tmp_path / "cert"), f"{tmp_path / 'raising.py'}:Raising"])
    out, err = capsys.readouterr()
    assert code == 2, err
    doc = json.loads(out)
    assert doc["exit_code"] == 2 and "Raising: record raised RuntimeError" in doc["error"] and "Traceback" not in err


def test_the_probe_names_the_call_that_raised(tmp_path):
    (tmp_path / "early.py").write_text(RAISING.replace("after = 200", "after = 3"))
    with pytest.raises(PolicyError, match=r"early.py:Raising: before miss \d+ \(\w+\), admits raised KeyError"):
        policies.checked(f"{tmp_path / 'early.py'}:Raising")
