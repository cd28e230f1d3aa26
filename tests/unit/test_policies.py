"""A policy the lab did not write: loaded from a file outside the repository, a policy file or an
entry point, put through the probe, refused with a clear error when it cannot run."""

import json
import math
import random
import shutil
import textwrap
from pathlib import Path

import jsonschema_rs
import pytest
import yaml

from storage_node.renewal import rack_policy
from stormcore import policies, retry
from stormcore.policies import PolicyError, declared
from stormcore.settings import LabSettings, SettingsError

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "policies"
SCHEMA = jsonschema_rs.validator_for(json.loads((ROOT / "scenarios/policy.schema.json").read_text()))


def write(tmp_path: Path, body: str, name: str = "mine.py") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return path


def delays(policy, outcome="timeout", attempts=8, seed=3):
    rng, out, last = random.Random(seed), [], 0.0
    for n in range(1, attempts + 1):
        d = policy.next_delay(retry.Miss(n, outcome, float(n), last, (outcome,) * n), rng)
        out.append(d)
        last = d or 0.0
    return out


def test_a_class_in_a_file_outside_the_repository_runs_in_the_model_and_the_racks(tmp_path):
    shutil.copy(EXAMPLES / "my_policy.py", tmp_path / "my_policy.py")
    spec = policies.resolve("my_policy.py:CappedJitter", cwd=tmp_path)
    assert spec == f"python:{tmp_path / 'my_policy.py'}:CappedJitter"
    s = LabSettings(retry_policy=spec)  # the setting takes it, and travels to the racks as it is
    assert LabSettings.from_env(s.to_env()).retry_policy == spec
    a, b = rack_policy(s), rack_policy(s)
    assert a is not b  # one per rack
    got = delays(a)
    assert got[4:] == [None] * 4 and all(0 <= d <= min(10, 0.5 * 2**i) for i, d in enumerate(got[:4]))


def test_a_user_policy_thinks_in_profile_seconds_at_any_speed(tmp_path):
    write(tmp_path, "class Fixed:\n    def next_delay(self, miss, rng):\n        return 2.0 if miss.elapsed_s < 4 else None\n")
    spec = policies.resolve("mine.py:Fixed", cwd=tmp_path)
    fast = rack_policy(LabSettings(retry_policy=spec).sped_up(4))
    rng = random.Random(1)
    assert fast.next_delay(retry.Miss(1, "timeout", 0.5), rng) == 0.5  # 2 profile seconds at speed 4
    assert fast.next_delay(retry.Miss(2, "timeout", 1.0), rng) is None  # 1 wall second is 4 profile seconds


@pytest.mark.parametrize(
    ("body", "refused"),
    [
        ("class P:\n    pass\n", "P is not a retry policy: it has no next_delay"),
        ("P = 3\n", "P is a int, not a retry policy"),
        ("class P:\n    def __init__(self, x):\n        pass\n    def next_delay(self, miss, rng):\n        return 0\n", r"P\(\) raised"),
        ("class P:\n    def next_delay(self, miss, rng):\n        return 1 / 0\n", "raised ZeroDivisionError"),
        ("class P:\n    def next_delay(self, miss, rng):\n        return -1.0\n", "returned -1.0: a delay is between 0 and 3600"),
        ("class P:\n    def next_delay(self, miss, rng):\n        return float('nan')\n", "returned nan"),
        ("class P:\n    def next_delay(self, miss, rng):\n        return 10.0 ** miss.attempt\n", "returned 10000.0"),
        ("class P:\n    def next_delay(self, miss, rng):\n        return '1s'\n", "returned '1s' \\(str\\)"),
        ("import random\nclass P:\n    def next_delay(self, miss, rng):\n        return random.random()\n", "draw jitter from the rng"),
        (
            "class P:\n    def next_delay(self, miss, rng):\n        return 0.0\n    def admits(self, now):\n        return 'yes'\n",
            "admits",
        ),
        ("raise RuntimeError('boom')\nclass P: pass\n", "raised on import: RuntimeError: boom"),
        ("class Q:\n    pass\n", "has no 'P' \\(it has: Q\\)"),
    ],
)
def test_a_policy_that_cannot_run_is_refused_with_what_is_wrong(tmp_path, body, refused):
    write(tmp_path, body)
    with pytest.raises(PolicyError, match=refused):
        policies.resolve("mine.py:P", cwd=tmp_path)


def test_a_spec_the_user_cannot_mean_is_refused():
    with pytest.raises(PolicyError, match="no retry policy 'forever'"):
        policies.resolve("forever")
    with pytest.raises(PolicyError, match="say which class"):
        policies.resolve(str(EXAMPLES / "my_policy.py"))
    with pytest.raises(PolicyError, match="no file"):
        policies.resolve("absent.yaml")
    with pytest.raises(SettingsError):
        LabSettings(retry_policy="python:")


def test_a_policy_that_breaks_its_promise_mid_storm_stops_the_model_and_gives_up_in_a_rack(tmp_path):
    write(tmp_path, "class Late:\n    def next_delay(self, miss, rng):\n        return 0.0 if miss.attempt < 40 else -5.0\n")
    spec = policies.resolve("mine.py:Late", cwd=tmp_path)  # the probe's 30 misses never see it
    model = rack_policy(LabSettings(retry_policy=spec))
    with pytest.raises(PolicyError, match="returned -5.0"):
        model.next_delay(retry.Miss(40, "timeout", 40.0), random.Random(1))
    rack = rack_policy(LabSettings(retry_policy=spec), strict=False)
    assert rack.next_delay(retry.Miss(40, "timeout", 40.0), random.Random(1)) is None and rack.broken == {"next_delay": 1}


def register(tmp_path, monkeypatch, source: str) -> None:
    """A package installed on the path that registers ``team-jitter`` under stormlab.policies (its
    dist-info as pip writes it): this process and the probe's child both find it."""
    (tmp_path / "team_policies.py").write_text(source)
    info = tmp_path / "team_policies-1.0.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: team-policies\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[stormlab.policies]\nteam-jitter = team_policies:Fixed\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    policies.load.cache_clear()


def test_an_entry_point_names_a_packaged_policy(tmp_path, monkeypatch):
    needs = "class Fixed:\n    def __init__(self, base):\n        self.base = base\n"
    needs += "    def next_delay(self, miss, rng):\n        return 1.0\n"
    register(tmp_path, monkeypatch, needs)
    with pytest.raises(PolicyError, match=r"team_policies:Fixed\(\) raised: TypeError"):  # a class that needs arguments
        policies.resolve("team-jitter")
    register(tmp_path, monkeypatch, "class Fixed:\n    def next_delay(self, miss, rng):\n        return 1.0\n")
    assert policies.resolve("team-jitter") == "entry:team-jitter"
    assert delays(policies.build("entry:team-jitter"), attempts=2) == [1.0, 1.0]


# -- the policy file -----------------------------------------------------------------------------


def policy_file(**fields):
    make, timeout, _ = declared.adapt(fields)
    return make(), timeout


def test_a_policy_file_computes_its_backoff_and_jitter():
    p, _ = policy_file(backoff={"base": "0.5s", "cap": "4s", "multiplier": 2})
    assert delays(p) == [0.5, 1.0, 2.0, 4.0, 4.0, 4.0, 4.0, 4.0]
    full, _ = policy_file(backoff={"base": 0.5, "cap": 4}, jitter="full")
    assert all(0 <= d <= c for d, c in zip(delays(full), [0.5, 1, 2, 4, 4, 4, 4, 4], strict=True))
    equal, _ = policy_file(backoff={"base": 0.5, "cap": 4}, jitter="equal")
    assert all(c / 2 <= d <= c for d, c in zip(delays(equal), [0.5, 1, 2, 4, 4, 4, 4, 4], strict=True))
    deco, _ = policy_file(backoff={"base": 0.5, "cap": 4}, jitter="decorrelated")
    assert all(0.5 <= d <= 4 for d in delays(deco))


def test_a_policy_file_gives_up_at_its_attempts_and_deadline_and_sets_the_attempt_timeout():
    p, timeout = policy_file(max_attempts=3, backoff={"base": "1s"}, attempt_timeout="2s")
    assert timeout == 2.0 and delays(p)[:3] == [1.0, 2.0, None]
    p, _ = policy_file(deadline="4.5s", backoff={"base": "1s", "cap": "1s"})
    assert delays(p)[:5] == [1.0, 1.0, 1.0, None, None]  # elapsed n s + 1 s must stay under 4.5 s


def test_a_policy_files_budget_throttle_and_breaker_are_the_labs_own():
    p, _ = policy_file(
        retry_budget={"tokens": 4, "ratio": 1},
        adaptive_throttling={"k": 2},
        circuit_breaker={"threshold": 3, "open": "5s", "half_open_probes": 1},
    )
    assert (
        isinstance(p, retry.CircuitBreaker) and isinstance(p.inner, retry.AdaptiveThrottle) and isinstance(p.inner.inner, retry.RetryBudget)
    )
    for t in (1.0, 1.1, 1.2):
        p.record(False, t)
    assert not p.admits(3.0)  # open for 5 s
    assert p.admits(6.3) and not p.admits(6.3)  # half-open: one probe, the rest wait
    p.record(False, 6.3)  # the node held back counts its miss, which does not reopen it
    p.record(True, 6.5)  # the probe's success closes it
    assert p.admits(6.6) and p.admits(6.6)


def test_the_half_open_breaker_reopens_when_its_probe_misses():
    p, _ = policy_file(circuit_breaker={"threshold": 1, "open": "1s", "half_open_probes": 2})
    p.record(False, 0.0)
    assert p.admits(1.5) and p.admits(1.5) and not p.admits(1.5)
    p.record(False, 1.5)  # the held-back node's miss
    p.record(False, 1.6)  # a probe missed: open again
    assert not p.admits(2.0) and p.admits(2.7)


@pytest.mark.parametrize("name", ["policy.yaml"])
def test_the_example_policy_file_meets_the_schema(name):
    assert SCHEMA.is_valid(yaml.safe_load((EXAMPLES / name).read_text()))


BAD = [
    ({"jitter": "some"}, "jitter is one of"),
    ({"backoff": {"base": "fast"}}, "backoff.base is a duration"),
    ({"backoff": {"base": -1}}, "backoff.base must be between"),
    ({"backoff": {"grow": 2}}, "backoff has no 'grow'"),
    ({"max_attempts": 0}, "max_attempts is a whole number"),
    ({"max_attempts": 2.5}, "max_attempts is a whole number"),
    ({"retry_budget": {"tokens": 0}}, "retry_budget.tokens"),
    ({"circuit_breaker": {"threshold": "ten"}}, "circuit_breaker.threshold"),
    ({"adaptive_throttling": {"k": 0.5}}, "adaptive_throttling.k"),
    ({"retries": 3}, "a policy file has no 'retries'"),
    ({"attempt_timeout": True}, "attempt_timeout is a duration"),
]


@pytest.mark.parametrize(("doc", "refused"), BAD)
def test_a_bad_policy_file_is_refused_by_the_lab_and_its_schema(doc, refused):
    with pytest.raises(PolicyError, match=refused):
        declared.adapt(doc)
    assert not SCHEMA.is_valid(doc)


def test_a_policy_file_that_is_not_a_mapping_or_not_yaml_is_refused(tmp_path):
    write(tmp_path, "- 1\n- 2\n", "list.yaml")
    write(tmp_path, "a: [1,\n", "broken.yaml")
    with pytest.raises(PolicyError, match="must hold a mapping"):
        policies.resolve("list.yaml", cwd=tmp_path)
    with pytest.raises(PolicyError, match="not YAML"):
        policies.resolve("broken.yaml", cwd=tmp_path)


@pytest.mark.parametrize("name", sorted(p.name for p in EXAMPLES.iterdir() if p.suffix in (".py", ".yaml", ".json")))
def test_every_example_loads_and_passes_the_probe(name):
    objects = {"my_policy.py": "CappedJitter", "tenacity_retrying.py": "renew", "urllib3_retry.py": "retries"}
    text = str(EXAMPLES / name) + (f":{objects[name]}" if name.endswith(".py") else "")
    loaded = policies.load(policies.resolve(text))
    policy = loaded.make()
    assert all(d is None or (0 <= d <= 10.5 and not math.isnan(d)) for d in delays(policy, "unreachable"))
