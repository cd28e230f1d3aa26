"""A live deploy on a rack: the next decisions use the new policy and allowance; a new renewal
period starts from each node's next slot, in profile time whatever the lab's speed."""

import pytest

from storage_node.metrics import RackMetrics
from storage_node.rack import Rack, StaleDeploy
from stormcore.settings import LabSettings, SettingsError, deployable_policy


@pytest.fixture
async def rack():
    settings = LabSettings(racks=1, nodes_per_rack=5).sped_up(2.0)  # renewals every 5 s, an allowance of 0.5 s
    rack = Rack(settings, 0, "http://127.0.0.1:9", RackMetrics.create(0))
    yield rack
    await rack.session.close()


async def test_a_deploy_changes_the_policy_allowance_and_period_in_profile_time(rack):
    nexts = {n.id: n.schedule.next_after(rack.now()) for n in rack.nodes.values()}
    immediate = type(rack.policy)
    before = rack.deploy({"retry_policy": "full-jitter", "allowance_s": 2.0, "renewal_period_s": 20.0})
    assert before == {"retry_policy": "immediate", "allowance_s": 1.0, "renewal_period_s": 10.0}
    assert rack.deployed() == {"retry_policy": "full-jitter", "allowance_s": 2.0, "renewal_period_s": 20.0}
    assert rack.settings.allowance_s == 1.0 and rack.renewal_timeout.total == 1.0  # 2 s of profile time at speed 2
    assert type(rack.policy) is not immediate  # the next retry decisions back off
    for node in rack.nodes.values():
        assert node.schedule.period == 10.0  # 20 s of profile time at speed 2
        now = rack.now()
        first = node.schedule.next_after(now)
        # the next slot kept, its jitter redrawn (a slot the redraw put in the past is skipped)
        assert first > now and any(abs(first - (nexts[node.id] + k * 10.0)) <= 0.5 for k in (0, 1))
    rack.deploy(before)
    assert rack.deployed() == before


async def test_a_value_out_of_range_changes_nothing(rack):
    with pytest.raises(SettingsError):
        rack.deploy({"allowance_s": 10_000.0})
    with pytest.raises(SettingsError):
        rack.deploy({"retry_policy": "hope"})
    assert rack.deployed() == {"retry_policy": "immediate", "allowance_s": 1.0, "renewal_period_s": 10.0}


async def test_a_rack_runs_its_start_up_settings_with_what_the_deploys_hold_over_them(rack):
    assert rack.hold({"allowance_s": 2.0}, generation=1) == {"allowance_s": 2.0}
    assert rack.hold({"retry_policy": "full-jitter"}, generation=2) == {"retry_policy": "full-jitter"}
    assert rack.deployed() == {"retry_policy": "full-jitter", "allowance_s": 1.0, "renewal_period_s": 10.0}  # the allowance no longer held
    assert rack.hold({}, generation=3) == {}
    assert rack.deployed() == {"retry_policy": "immediate", "allowance_s": 1.0, "renewal_period_s": 10.0}
    assert rack.settings.allowance_s == 0.5  # back on its start-up allowance, in this run's time


async def test_a_push_that_lands_late_cannot_undo_a_newer_one(rack):
    rack.hold({}, generation=7)
    with pytest.raises(StaleDeploy):
        rack.hold({"allowance_s": 5.0}, generation=6)  # sent before, timed out, landed after
    assert rack.deployed()["allowance_s"] == 1.0 and rack.generation == 7
    with pytest.raises(SettingsError):
        rack.hold({"allowance_s": 10_000.0}, generation=8)
    with pytest.raises(SettingsError):
        rack.hold({"cores": 4}, generation=8)
    assert rack.generation == 7  # a refused push changes nothing, its generation included


def test_a_shorter_period_deployed_wakes_the_nodes_asleep_until_a_slot_of_the_long_one(monkeypatch):
    """A deploy of a one-hour period, then its end: the nodes asleep until their hourly slot renew
    within the restored period (the fuzzer found a rack's disqualified nodes waiting an hour)."""
    import asyncio

    from storage_node.rack import Node
    from tests.virtual_loop import VirtualLoop

    loop = VirtualLoop()
    asyncio.set_event_loop(loop)
    renewed: list[tuple[str, float]] = []

    async def answered(self, attempt):  # the metadata service answers at once
        renewed.append((self.id, loop.time()))
        return "ok"

    monkeypatch.setattr(Node, "_attempt", answered)

    def step(seconds):
        for _ in range(int(seconds * 10)):
            loop.advance(0.1)

    rack = loop.run_until_complete(_make_rack())
    tasks = [loop.create_task(node.run()) for node in rack.nodes.values()]
    try:
        step(12)
        assert {n for n, _ in renewed} == set(rack.nodes)  # each renewed on its phase
        rack.deploy({"renewal_period_s": 3600.0})
        step(400)  # each renews on its next slot (jittered by 5% of the new period), then sleeps for the hour
        renewed.clear()
        step(60)
        assert renewed == []  # asleep until its hourly slot
        rack.deploy({"renewal_period_s": 10.0})  # the deploy ends: the start-up period again
        reverted = loop.time()
        step(12)
        first = {}
        for node, at in renewed:
            first.setdefault(node, at)
        assert set(first) == set(rack.nodes)  # every node renewed within one period (and its 5% jitter) of the end
        assert all(at - reverted <= 10.5 for at in first.values()), first
    finally:
        for task in tasks:
            task.cancel()
        loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
        loop.run_until_complete(rack.session.close())
        asyncio.set_event_loop(None)
        loop.close()


async def _make_rack():
    from storage_node.metrics import RackMetrics
    from storage_node.rack import Rack
    from stormcore.settings import LabSettings

    return Rack(LabSettings(racks=1, nodes_per_rack=5), 0, "http://127.0.0.1:9", RackMetrics.create(0))


EVIL = (  # a policy file that leaves a mark if it is ever imported
    "import pathlib; pathlib.Path(__file__).with_suffix('.ran').write_text('imported')\n"
    "class X:\n    def next_delay(self, miss, rng):\n        return 0.0\n"
)


async def test_a_deploy_never_loads_a_file_the_request_names(rack, tmp_path):
    """No code from the wire: the lab token is not the person whose file it is."""
    evil = tmp_path / "evil.py"
    evil.write_text(EVIL)
    (tmp_path / "policy.yaml").write_text("retry: {backoff: none}\n")
    for spec in (f"python:{evil}:X", f"file:{tmp_path / 'policy.yaml'}"):
        with pytest.raises(SettingsError, match="not a file"):
            rack.hold({"retry_policy": spec}, generation=1)
    assert not evil.with_suffix(".ran").exists()
    assert rack.deployed()["retry_policy"] == "immediate" and rack.generation == 0


async def test_the_racks_deploy_api_refuses_a_file_and_imports_nothing(aiohttp_client, tmp_path):
    from storage_node.app import create_app

    evil = tmp_path / "evil.py"
    evil.write_text(EVIL)
    token = "t" * 32
    app = create_app(LabSettings(racks=1, nodes_per_rack=2), 0, "http://127.0.0.1:9", tmp_path / "data", token=token)
    client = await aiohttp_client(app)
    auth = {"Authorization": f"Bearer {token}"}
    refused = await client.post("/admin/deploy", json={"generation": 1, "held": {"retry_policy": f"python:{evil}:X"}}, headers=auth)
    assert refused.status == 400 and "not a file" in (await refused.json())["message"]
    assert not evil.with_suffix(".ran").exists()
    taken = await client.post("/admin/deploy", json={"generation": 2, "held": {"retry_policy": "full-jitter"}}, headers=auth)
    assert taken.status == 200 and (await taken.json())["running"]["retry_policy"] == "full-jitter"


def test_a_deploy_may_name_the_labs_policies_and_registered_entry_points():
    assert deployable_policy("full-jitter+budget") == "full-jitter+budget"
    assert deployable_policy("entry:my-policy") == "entry:my-policy"


async def test_a_rack_started_with_its_owners_file_keeps_it_under_a_deploy_of_other_settings(tmp_path):
    own = tmp_path / "mine.py"
    own.write_text("class Mine:\n    def next_delay(self, miss, rng):\n        return 0.5\n")
    settings = LabSettings(racks=1, nodes_per_rack=2, retry_policy=f"python:{own}:Mine")
    rack = Rack(settings, 0, "http://127.0.0.1:9", RackMetrics.create(0))
    try:
        rack.hold({"allowance_s": 2.0}, generation=1)
        assert rack.deployed() == {"retry_policy": f"python:{own}:Mine", "allowance_s": 2.0, "renewal_period_s": 10.0}
    finally:
        await rack.session.close()
