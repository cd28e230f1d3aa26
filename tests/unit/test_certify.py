"""`stormlab certify` in one command each, in the model (the 400-node fleet; the live sample is
the storm tier's and the documented command's): a class outside the repository, a policy file
and a tenacity configuration; the references' verdicts; the same seed, the same verdicts."""

import json
import shutil
from pathlib import Path

import pytest

from stormlab import cli
from stormlab.model import certificate as cert
from stormlab.model.grid import Verdict

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "policies"


def certify(tmp_path: Path, *argv: str, out: str = "cert") -> tuple[int, dict]:
    where = tmp_path / out
    code = cli.main(["certify", *argv, "--live", "0", "--quick", "--jobs", "2", "--out", str(where)])
    return code, json.loads((where / "certificate.json").read_text())


def by_policy(doc: dict) -> dict[str, dict]:
    return {c["policy"]: c for c in doc["certificates"]}


@pytest.fixture(scope="module")
def outside(tmp_path_factory) -> Path:
    """The example policy class, copied out of the repository."""
    home = tmp_path_factory.mktemp("elsewhere")
    shutil.copy(EXAMPLES / "my_policy.py", home / "my_policy.py")
    return home


@pytest.mark.parametrize(
    ("given", "label", "kind", "references"),
    [
        ("outside:my_policy.py:CappedJitter", "my_policy.py:CappedJitter", "python class", True),
        # the references are the same whatever the policy: certified beside one kind, not each (20 s each)
        ("policy.yaml", "policy.yaml", "policy file", False),
        ("tenacity_retrying.py:renew", "tenacity_retrying.py:renew", "tenacity", False),
    ],
)
def test_a_certificate_in_one_command(tmp_path, capsys, outside, given, label, kind, references):
    text = str(outside / given.removeprefix("outside:")) if given.startswith("outside:") else str(EXAMPLES / given)
    code, doc = certify(tmp_path, text, *(() if references else ("--no-references",)))
    certs = by_policy(doc)
    mine = certs[label]
    assert (mine["kind"], mine["reference"], mine["verdict"]) == (kind, False, "holds") and code == 0
    assert mine["largest_trigger_survived"] == {"racks": 6, "blip_s": 10.0}
    if references:
        # 2015's immediate retries: stuck at the 2015 trigger, with what made it so (a policy of the
        # user's that is stuck exits 1: the Envoy test below)
        immediate = certs["2015's immediate retries"]
        assert immediate["verdict"] == "stuck" and immediate["at_2015"]["verdict"] == "stuck" and "2015|3|5|2" in immediate["stuck_at"]
        assert immediate["at_2015"]["amplification"] > 1.5 and immediate["at_2015"]["wasted_work"] > 0.5
        assert not immediate["at_2015"]["admin_path"]
        assert certs["full jitter"]["verdict"] == "holds"
    else:
        assert set(certs) == {label}
    assert len(mine["points"]) == len(cert.suite()) == 31
    out = capsys.readouterr().out
    assert f"{label}: HOLDS at the 2015 trigger and below" in out and "largest trigger survived: 6 racks x 10 s" in out
    assert ("2015's immediate retries: STUCK" in out) is references
    page = (tmp_path / "cert" / "certificate.html").read_text()
    assert label in page and "largest trigger survived" in page and page.count("<h3>") == (3 if references else 1)


def test_the_same_seed_gives_the_same_verdicts(tmp_path):
    runs = [certify(tmp_path, str(EXAMPLES / "policy.yaml"), "--no-references", "--seed", "11", out=f"run{i}")[1] for i in range(2)]
    first, second = (by_policy(d)["policy.yaml"]["points"] for d in runs)
    assert {k: (v["stuck"], v["end_error"]) for k, v in first.items()} == {k: (v["stuck"], v["end_error"]) for k, v in second.items()}


def test_a_policy_that_cannot_run_exits_2_and_nothing_is_written(tmp_path, capsys):
    (tmp_path / "bad.py").write_text("class P:\n    def next_delay(self, miss, rng):\n        return -1\n")
    code = cli.main(["certify", str(tmp_path / "bad.py") + ":P", "--live", "0", "--out", str(tmp_path / "cert")])
    assert code == 2 and not (tmp_path / "cert").exists()
    assert "returned -1" in capsys.readouterr().err


def test_the_verdict_needs_every_smaller_trigger_and_every_moment():
    points = cert.suite()
    must = {p.key for p in points if cert.smaller_or_2015(p)}
    assert "2015|3|5|2" in must and "2015|1|1|2" in must and "2015|3|5|2|p7" in must
    assert "2015|4|5|2" not in must and "2015|3|10|2" not in must and "2015|3|5|3" not in must


def test_a_verdict_on_the_edge_says_how_often_the_2015_trigger_sticks():
    """Stuck at the 2015 trigger at one of its eight moments only: stuck (a storm that may stick
    does), and the summary says the model goes both ways there."""
    points = cert.suite()

    def reading(p, stuck):
        return cert.Reading(Verdict(p.key, stuck, 0.55 if stuck else 0.0, 0.55, None if stuck else 20.0), 2.0, 0.5, True)

    readings = {p.key: reading(p, p.key == "2015|3|5|2") for p in points}
    c = cert.certificate("edgy", "edgy", 10.0, points, readings)
    assert c["verdict"] == "stuck" and c["at_2015"]["moments"] == {"stuck": 1, "of": 8}
    assert "2015: STUCK at 55% (stuck at 1 of its 8 moments: on the edge)" in cert.summary_line(c)
    readings = {p.key: reading(p, p.at_2015()) for p in points}
    assert "moments" not in cert.summary_line(cert.certificate("stuck", "stuck", 10.0, points, readings))


ENVOY_EAGER = "timeout: 15s\nretry_policy: {retry_on: '5xx,connect-failure,reset', num_retries: 100, per_try_timeout: 1s}\n"


def test_envoys_retry_circuit_breaker_is_what_holds_an_eager_route(tmp_path, capsys):
    """A hundred retries 25 ms apart, within the route's 15 s: with Envoy's default circuit breaker (3 retries open across a
    rack's proxy) the route holds; with the breaker's limit raised out of the way it is stuck at the
    2015 trigger, as 2015's immediate retries were."""
    (tmp_path / "defaults.yaml").write_text(ENVOY_EAGER)
    (tmp_path / "unlimited.yaml").write_text(ENVOY_EAGER + "circuit_breakers: {thresholds: [{max_retries: 100000}]}\n")
    code, doc = certify(tmp_path, str(tmp_path / "defaults.yaml"), str(tmp_path / "unlimited.yaml"), "--no-references")
    certs = by_policy(doc)
    assert code == 1
    assert certs["defaults.yaml"]["verdict"] == "holds" and certs["unlimited.yaml"]["verdict"] == "stuck"
    assert certs["unlimited.yaml"]["at_2015"]["amplification"] > 1.3 * certs["defaults.yaml"]["at_2015"]["amplification"]
    assert "at most 3 retries open at once" in " ".join(certs["defaults.yaml"]["maps"])


def test_a_certificate_s_live_points_are_kept_per_link_mechanism(tmp_path, monkeypatch):
    """The same policy's live sample through the link proxy, then the kernel's links: each mechanism
    runs its own points into its own file (none is reused for the other), and each says which it is;
    run again, nothing runs."""
    from stormcore.settings import LabSettings
    from stormlab.runs import certify as certify_run

    ran = []

    def judge(base, point, watch, speed):
        ran.append((base.link_cut, point.key))
        return Verdict(point.key, point.is_2015(), 0.5 if point.is_2015() else 0.0, 0.6, None, True)

    monkeypatch.setattr(certify_run, "judge_live", judge)
    points = cert.suite()
    readings = {p.key: cert.Reading(Verdict(p.key, p.is_2015(), 0.55 if p.is_2015() else 0.0, 0.6, None), 1.0, 0.0, True) for p in points}
    got = {}
    for link in ("proxy", "kernel", "kernel"):
        c = certify_run.candidate("full-jitter", LabSettings(link_cut=link, **certify_run.QUICK))
        got[link] = certify_run.live_of(c, points, readings, 3, 2015, 1.0, tmp_path)
    assert [link for link, _ in ran] == ["proxy"] * 3 + ["kernel"] * 3  # the third call read its file
    assert [key for _, key in ran[:3]] == [key for _, key in ran[3:]]
    assert got["proxy"]["link"] == "proxy" and got["kernel"]["link"] == "kernel"
    assert got["kernel"]["agreement"]["agree"] == 3
    assert sorted(p.name for p in tmp_path.rglob("live-*.csv")) == ["live-kernel.csv", "live-proxy.csv"]
