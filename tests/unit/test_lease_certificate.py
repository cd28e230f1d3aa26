"""A retry policy as the lease manager's (aws-2025-10): what a host does with work that timed out
(services/leases/host.py), the certificate's suite and verdicts (stormlab/incidents/aws_2025_10/certificate.py)
and `stormlab certify --profile aws-2025-10` in one command, all in virtual time."""

import json
import random

import pytest

from services.leases.host import DROPPED, ESTABLISH, QUEUED, THROTTLED, TIMED_OUT, LeaseHost, Rules, hosts_of
from stormcore.settings import SettingsError, profile
from stormlab import cli
from stormlab.incidents.aws_2025_10 import certificate as lc
from stormlab.incidents.aws_2025_10 import model as leases
from stormlab.model.grid import Verdict

PROFILE = profile("aws-2025-10")
ACCOUNT = lc.LeasePoint(*lc.ACCOUNT)


def rules(**kw) -> Rules:
    base = dict(check_period_s=10, ttl_s=60, timeout_s=20, check_cost_s=0.002, establish_cost_s=0.1)
    return Rules(**(base | kw))


class Told:
    """A policy that answers from a list and keeps what it was told."""

    def __init__(self, *delays, admits=True):
        self.delays, self.admitting = list(delays), admits
        self.misses, self.records = [], []

    def next_delay(self, miss, rng):
        self.misses.append(miss)
        return self.delays.pop(0)

    def record(self, ok, now=0.0):
        self.records.append(ok)

    def admits(self, now):
        return self.admitting


def timed_out(host: LeaseHost, at: float) -> str:
    item = host.take()
    return host.finish(item, at, True, host.generation)


def test_a_policys_delay_holds_timed_out_work_back_and_its_none_drops_it():
    policy = Told(5.0, None)
    host = LeaseHost(0, [0, 1], rules(), retry=policy, rng=random.Random(1))
    assert host.ask(0, 0.0) == QUEUED
    assert timed_out(host, 25.0) == TIMED_OUT  # held back 5 s: out of the queue, still the droplet's one item
    assert not host.queue and host.ask(0, 26.0) != QUEUED
    miss = policy.misses[0]
    assert (miss.attempt, miss.outcome, miss.elapsed_s, miss.last_delay_s) == (1, "timeout", 25.0, 0.0)
    assert host.release(29.9) == 0 and host.release(30.0) == 1
    again = host.queue[0]
    assert (again.droplet, again.kind, again.queued_at, again.tries, again.last_delay_s) == (0, ESTABLISH, 30.0, 2, 5.0)
    assert timed_out(host, 51.0) == DROPPED  # None: given up, the droplet asks again at its next moment
    assert policy.misses[1].attempt == 2 and policy.misses[1].elapsed_s == 51.0
    assert host.counts.dropped == 1 and host.ask(0, 52.0) == QUEUED
    item = host.take()
    host.finish(item, 53.0, True, host.generation)
    assert policy.records == [False, False, True] and host.leased(0, 53.0)


def test_an_open_breaker_keeps_new_lease_work_out_but_not_the_checks_of_leases_held():
    policy = Told(admits=False)
    host = LeaseHost(0, [0, 1], rules(), leased_until=100.0, retry=policy)
    assert host.ask(0, 1.0) == QUEUED  # a check: the lease is kept
    host.expiry.pop(1)
    assert host.ask(1, 1.0) == THROTTLED and host.counts.throttled == 1
    policy.admitting = True
    assert host.ask(1, 2.0) == QUEUED


def test_a_restart_drops_what_the_policy_held_back():
    host = LeaseHost(0, [0], rules(), retry=Told(30.0))
    host.ask(0, 0.0)
    timed_out(host, 25.0)
    host.restart(in_flight=0)
    assert not host.held and not host.pending and host.counts.restarted == 1 and host.release(60.0) == 0


def test_immediate_is_dwfm_and_each_host_has_a_policy_of_its_own():
    small = PROFILE.replace(lease_droplets=800)
    runs = [leases.simulate(small.replace(lease_retry_policy=p), leases.outage(120.0), 400.0) for p in ("", "immediate")]
    assert [vars(w) for w in runs[0].windows] == [vars(w) for w in runs[1].windows]
    hosts = hosts_of(PROFILE.replace(lease_retry_policy="full-jitter+budget"), 0.0, None)
    assert len({id(h.retry) for h in hosts}) == PROFILE.lease_hosts and hosts_of(PROFILE, 0.0, None)[0].retry is None
    with pytest.raises(SettingsError, match="lease_retry_policy must be one of"):
        PROFILE.replace(lease_retry_policy="sometimes")


def test_dwfm_sticks_at_the_accounts_trigger_a_smaller_fleet_recovers_and_a_breaker_gets_the_leases_back():
    dwfm = lc.judge(PROFILE, ACCOUNT)
    assert dwfm.verdict.stuck and dwfm.verdict.end_error > 0.9 and dwfm.leases_back < 0.1 and dwfm.thrown_away > 3
    small = lc.judge(PROFILE, lc.LeasePoint(2000, 300.0))
    assert not small.verdict.stuck and small.verdict.recovered_after_s is not None and small.leases_back == 1.0
    breaker = lc.judge(PROFILE.replace(lease_retry_policy="full-jitter+breaker"), ACCOUNT)
    assert not breaker.verdict.stuck and breaker.verdict.recovered_after_s < lc.WATCH_S and breaker.thrown_away < dwfm.thrown_away
    short = lc.judge(PROFILE, lc.LeasePoint(5000, 30.0))  # shorter than a lease's life: nothing lapses
    assert short.verdict.peak_error < 0.01 and short.peak_queue == 0


def reading(key: str, stuck: bool) -> lc.Reading:
    return lc.Reading(Verdict(key, stuck, 1.0 if stuck else 0.0, 1.0, None if stuck else 30.0), 0.0, 0, 0.0 if stuck else 1.0)


def test_holding_needs_every_smaller_trigger_and_the_largest_survived_is_below_every_stuck_one():
    points = lc.suite()
    assert ACCOUNT in points and all(lc.smaller_or_account(p) for p in points) and len(points) == 20
    stuck = {"2000 droplets x 60s"}  # one smaller point sticks: the account's recovering does not make it hold
    readings = {p.key: reading(p.key, p.key in stuck) for p in points}
    one = lc.certificate("mine", "mine", points, readings)
    assert one["verdict"] == "stuck" and one["stuck_at"] == ["2000 droplets x 60s"]
    assert one["largest_trigger_survived"] == {"droplets": 1000, "outage_s": 300.0}  # droplets x seconds: the most lease-time lost
    assert "STUCK at the account's trigger and below" in lc.summary_line(one)
    every = lc.certificate("mine", "mine", points, {p.key: reading(p.key, False) for p in points})
    assert every["verdict"] == "holds" and every["largest_trigger_survived"] == {"droplets": 5000, "outage_s": 300.0}
    sample = lc.live_sample(points, 3, 2015, "mine")
    assert sample[0] == ACCOUNT and len(set(sample)) == 3 and sample == lc.live_sample(points, 3, 2015, "mine")


LONG_WAIT = """
class LongWait:
    attempt_timeout_s = 60.0  # the item timeout: long enough for the re-establishment to finish

    def next_delay(self, miss, rng):
        return 0.0
"""


@pytest.fixture
def two_points(monkeypatch):
    monkeypatch.setattr(lc, "suite", lambda: [lc.LeasePoint(2000, 300.0), ACCOUNT])


def certify(tmp_path, *argv):
    out = tmp_path / "cert"
    code = cli.main(["certify", "--profile", "aws-2025-10", "--live", "0", "--jobs", "2", "--out", str(out), *argv])
    return code, out


def test_certify_takes_the_profile_a_breaker_holds_and_dwfm_is_stuck(tmp_path, capsys, two_points):
    (tmp_path / "long_wait.py").write_text(LONG_WAIT)
    code, out = certify(tmp_path, "full-jitter+breaker", f"{tmp_path / 'long_wait.py'}:LongWait")
    assert code == 0
    doc = json.loads((out / "certificate.json").read_text())
    certs = {c["policy"]: c for c in doc["certificates"]}
    assert doc["profile"] == "aws-2025-10" and set(certs) == {"full-jitter+breaker", "long_wait.py:LongWait", *lc.REFERENCES.values()}
    assert certs["full-jitter+breaker"]["verdict"] == "holds" and certs["full-jitter+breaker"]["at_account"]["leases_back"] == 1.0
    wait = certs["long_wait.py:LongWait"]
    assert wait["verdict"] == "holds" and wait["timeout_s"] == 60.0  # a timeout long enough: its own
    dwfm = certs[lc.REFERENCES["immediate"]]
    assert dwfm["reference"] and dwfm["verdict"] == "stuck" and dwfm["stuck_at"] == [ACCOUNT.key]
    said = capsys.readouterr().out
    assert "full-jitter+breaker: HOLDS at the account's trigger and below" in said
    assert "(reference) DWFM's: queued again at once: STUCK" in said
    page = (out / "certificate.html").read_text()
    assert "the lease manager's collapse" in page and page.count("<h3>") == 4 and "record empty 300 s" in page


def test_certify_exits_1_for_a_stuck_policy_and_2_for_the_2015_fleets_quick(tmp_path, capsys, two_points):
    code, out = certify(tmp_path, "immediate", "--no-references")
    assert code == 1 and "immediate: STUCK" in capsys.readouterr().out
    code = cli.main(["certify", "--profile", "aws-2025-10", "--quick", "--live", "0", "--out", str(tmp_path / "q"), "immediate"])
    assert code == 2 and "--quick is the 2015 fleet's" in capsys.readouterr().err and not (tmp_path / "q").exists()
    code = cli.main(["certify", "--profile", "aws-2015-10", "--live", "0", "--out", str(tmp_path / "p"), "immediate"])
    assert code == 2 and "unknown incident 'aws-2015-10'; known: dynamodb-2015, aws-2025-10" in capsys.readouterr().err
    assert not (tmp_path / "p").exists()


def test_a_lab_takes_a_lease_managers_policy_of_ones_own_probed_with_its_timeout(tmp_path):
    (tmp_path / "long_wait.py").write_text(LONG_WAIT)
    given = f"{tmp_path / 'long_wait.py'}:LongWait"
    for argv in (["--lease-retry-policy", given], ["--set", f"lease_retry_policy={given}"]):
        got = cli.settings_from(cli.build_parser().parse_args(["up", "--profile", "aws-2025-10", *argv]))
        assert got.lease_retry_policy.startswith("python:") and got.lease_timeout_s == 60.0 and got.retry_policy == "immediate"
    both = ["up", "--profile", "aws-2025-10", "--lease-retry-policy", "full-jitter+breaker", "--lease-timeout", "30s"]
    got = cli.settings_from(cli.build_parser().parse_args(both))
    assert (got.lease_retry_policy, got.lease_timeout_s) == ("full-jitter+breaker", 30.0)
    assert cli.main(["up", "--profile", "aws-2025-10", "--lease-retry-policy", "sometimes"]) == 2  # refused before a lab starts
