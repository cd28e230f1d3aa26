"""The gRPC adapter against a real gRPC client: grpc-js (npm, pinned in tests/grpc_js) runs its
own retry code against a loopback server that answers with scripted statuses, its jitter drawn
from the numbers the lab's seeded generator gives the adapter (tests/grpc_js/retries.js). The
backoff it asks for before each retry, and the attempts each call makes, are the adapter's.

grpc-js rather than grpcio: grpcio's C core draws its jitter where no test can seed it. Node and
npm come from Debian (.ci/debian-tools installs them where they are missing)."""

import json
import random
import shutil
import subprocess
from pathlib import Path

import pytest

from storage_node.refusal import Refusal
from storage_node.renewal import Attempt, Renewal
from stormcore import retry
from stormcore.policies import from_grpc

HERE = Path(__file__).resolve().parent.parent / "grpc_js"
SEED = 11
# A status the server answers with, and the lab's outcome that the adapter reads as that status.
OUTCOME = {"UNAVAILABLE": "unreachable", "DEADLINE_EXCEEDED": "timeout", "INTERNAL": "error", "OK": "ok"}

pytestmark = pytest.mark.skipif(
    not (shutil.which("node") and shutil.which("npm")), reason="node and npm not installed (CI installs Debian's nodejs)"
)


@pytest.fixture(scope="module")
def grpc_js():
    """grpc-js installed from the lock file (once), and a function that runs retries.js."""
    installed = HERE / "node_modules" / "@grpc" / "grpc-js" / "package.json"
    lock = json.loads((HERE / "package-lock.json").read_text())
    wanted = lock["packages"]["node_modules/@grpc/grpc-js"]["version"]
    if not installed.exists() or json.loads(installed.read_text())["version"] != wanted:
        done = subprocess.run(
            ["npm", "ci", "--ignore-scripts", "--no-audit", "--no-fund"], cwd=HERE, capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, f"npm ci in {HERE} failed:\n{done.stdout}{done.stderr}"

    def run(doc):
        done = subprocess.run(["node", "retries.js"], cwd=HERE, input=json.dumps(doc), capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        result = json.loads(done.stdout)
        assert result["version"] == wanted
        return result

    return run


def config(throttling=None, **policy):
    retry_policy = {
        "maxAttempts": 5,
        "initialBackoff": "0.01s",
        "maxBackoff": "0.15s",
        "backoffMultiplier": 1.7,
        "retryableStatusCodes": ["UNAVAILABLE"],
    } | policy
    doc = {"methodConfig": [{"name": [{"service": "metadata.Membership"}], "retryPolicy": retry_policy}]}
    return doc | ({"retryThrottling": throttling} if throttling else {})


def draws(count, seed=SEED):
    """What the adapter's generator gives its jitter, one number a retry (uniform(0.8, 1.2) draws once)."""
    rng = random.Random(seed)
    return [rng.random() for _ in range(count)]


def lab_calls(policy, scripts, seed=SEED):
    """The adapter run as a rack runs it (Renewal.after after every attempt), one call a script:
    per call the attempts made, the status the caller is left with, and the delays before retries."""
    rng, out, now = random.Random(seed), [], 0.0
    for script in scripts:
        renewal = Renewal(Refusal(now))
        renewal.start()
        attempts, delays = 0, []
        while True:
            status = script[min(attempts, len(script) - 1)]
            attempts += 1
            decision = renewal.after(Attempt(now, now, OUTCOME[status]), policy, rng, 0.0)
            if decision.retry_at is None:
                break
            delays.append(decision.retry_at - now)
            now = decision.retry_at
        out.append({"attempts": attempts, "status": status, "delays_ms": [d * 1000 for d in delays]})
        now += 1.0
    return out


def test_ten_retries_wait_what_grpc_js_waits(grpc_js):
    """maxAttempts 11 with grpc-js's cap lifted to 11 (its channel option): ten backoffs, through the
    cap, each grpc-js's own for the same draws; the server saw each wait."""
    js = grpc_js({"serviceConfig": config(maxAttempts=11), "randoms": draws(10), "calls": [["UNAVAILABLE"]], "attemptsLimit": 11})
    (call,) = js["calls"]
    assert (call["attempts"], call["status"], js["draws"]) == (11, "UNAVAILABLE", 10)
    policy = from_grpc.GrpcRetry(11, 0.01, 0.15, 1.7, frozenset({"UNAVAILABLE"}), None)
    (lab,) = lab_calls(policy, [["UNAVAILABLE"]])
    assert lab["attempts"] == 11
    assert lab["delays_ms"] == pytest.approx(call["delays_ms"], rel=1e-12)
    assert max(call["delays_ms"]) > 0.15 * 1000  # the cap, jittered above it as A6 says
    assert all(gap >= delay - 1.0 for gap, delay in zip(call["gaps_ms"], call["delays_ms"], strict=True))


def test_attempts_1_to_10_as_grpc_js_with_its_default_cap(grpc_js):
    """maxAttempts 9 read as 5 by both; for misses 1..10 the adapter retries after what grpc-js
    waited and gives up where grpc-js did."""
    doc = config(maxAttempts=9)
    js = grpc_js({"serviceConfig": doc, "randoms": draws(10), "calls": [["UNAVAILABLE"]]})
    (call,) = js["calls"]
    assert call["attempts"] == 5
    make, _, _ = from_grpc.adapt(doc)
    rng, policy, outcomes, lab = random.Random(SEED), make(), (), []
    for n in range(1, 11):
        outcomes += ("unreachable",)
        delay = policy.next_delay(retry.Miss(n, "unreachable", 0.0, 0.0, outcomes), rng)
        lab.append(None if delay is None else delay * 1000)
    assert lab[:4] == pytest.approx(call["delays_ms"], rel=1e-12)
    assert lab[4:] == [None] * 6


def test_which_statuses_are_retried_and_the_throttling_bucket_as_grpc_js(grpc_js):
    """Calls through one channel with retryThrottling (6 tokens, 0.5 back a success): which are
    retried, how often, and what the caller gets, call by call, as grpc-js decides. The bucket is
    drained (a call retried to the end, one throttled at once), refilled by successes, and
    DEADLINE_EXCEEDED and INTERNAL, not retryable here, take no token: had they, the call after
    them would have been throttled."""
    U, D, E, OK = "UNAVAILABLE", "DEADLINE_EXCEEDED", "INTERNAL", "OK"
    scripts = [[U, OK], [U], [U, OK]] + [[OK]] * 6 + [[D], [U, OK], [E], [U, E]] + [[OK]] * 6 + [[U, U, OK], [D, OK]]
    doc = config(throttling={"maxTokens": 6, "tokenRatio": 0.5}, maxAttempts=3)
    js = grpc_js({"serviceConfig": doc, "randoms": draws(40), "calls": scripts})
    make, _, _ = from_grpc.adapt(doc)
    lab = [(c["attempts"], c["status"]) for c in lab_calls(make(), scripts)]
    assert lab == [(c["attempts"], c["status"]) for c in js["calls"]]
    assert lab[:3] == [(2, OK), (3, U), (1, U)]  # retried, retried to the end, throttled
    assert lab[9:13] == [(1, D), (2, OK), (1, E), (1, U)]  # six successes later, retried again (once)
    assert lab[-2:] == [(3, OK), (1, D)]
