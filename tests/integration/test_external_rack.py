"""An external rack (docs/contract.md) in the 2015 lab: a process the lab did not write, on
urllib3's own retries, as rack 0 of the 400-node fleet whose other racks run the same ``Retry``
through the lab's adapter. Its nodes renew, the 2015 blip disqualifies them, and they recover
after it as the lab's own racks do."""

import json
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from storage_node import contract
from stormcore import policies
from stormcore.settings import LabSettings
from stormlab.cli import main
from stormlab.runs.live import QUICK
from tests.conftest import until
from tests.integration.conftest import SMALL

CHEAP = {"cost_base_s": 0.0001, "cost_per_entry_s": 0.00001, "admin_cost_s": 0.001}  # the API, not the storm
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "external_rack" / "urllib3_rack.py"
BLIPPED = ("rack-00", "rack-01", "rack-02")


@pytest.mark.storm
def test_an_external_rack_renews_is_disqualified_by_the_blip_and_recovers_like_the_labs_own(lab, capsys):
    spec = policies.resolve(f"{EXAMPLE}:RETRY")
    running = lab(settings=LabSettings(**QUICK, retry_policy=spec), external={0: f"{sys.executable} {EXAMPLE}"})
    ours = running.status("rack-00")
    assert ours["loop_lag_p99_s"] == 0.0 and ours["pid"] == running.state["components"]["rack-00"]["pid"]  # the example's, not the lab's
    assert ours["nodes_serving"] == ours["nodes_total"] == QUICK["nodes_per_rack"] and ours["renewal_attempts_total"]["first"] > 0
    time.sleep(12)  # a whole period of renewals on the external rack, every node renewed once more
    assert main(["chaos", "blip", "--rack-set", "3", "--duration", "5s"]) == 0
    blipped_at, worst, back = time.monotonic(), dict.fromkeys(BLIPPED, 0), {}
    while time.monotonic() - blipped_at < 120 and len(back) < len(BLIPPED):
        for name in BLIPPED:
            s = running.status(name)
            worst[name] = max(worst[name], s["nodes_disqualified"])
            if worst[name] and s["nodes_serving"] == s["nodes_total"] and name not in back:
                back[name] = time.monotonic() - blipped_at
        time.sleep(0.5)
    print(f"disqualified at the worst {worst}, every node serving again after {back}")
    assert all(worst[n] >= 5 for n in BLIPPED), worst  # the blip took nodes of every blipped rack out, the external one's too
    assert set(back) == set(BLIPPED), f"not every blipped rack recovered within 120 s: {back}"
    lab_own = max(back["rack-01"], back["rack-02"])
    assert back["rack-00"] <= lab_own + 2 * QUICK.get("renewal_period_s", 10.0), back  # within two periods of the lab's own
    # the customers of the external rack are served again (the loadgen's window is the last 10 s)
    until(lambda: running.status("loadgen")["customer_error_ratio"] < 0.01, limit_s=30, what="customers' error under 1%")


@pytest.mark.lab
@pytest.mark.timeout(300)
def test_an_external_rack_is_fuzzed_against_the_contract_the_supervisor_serves(lab, capsys):
    """It serves no /openapi.json of its own: `stormlab fuzz` judges it by the rack contract
    (GET /contract.json on the supervisor), as it judges the lab's racks by theirs."""
    running = lab(external={0: f"{sys.executable} {EXAMPLE}"}, **CHEAP)
    served = json.loads(urllib.request.urlopen(f"{running.state['supervisor_url']}/contract.json", timeout=5).read())
    assert served == contract.description([f"r00n{i:03d}" for i in range(SMALL["nodes_per_rack"])])
    code = main(["fuzz", "--requests", "40", "--seed", "5", "--only", "rack-00", "--json"])
    out, err = capsys.readouterr()
    result = json.loads(out)
    findings = {r["operation"]: r["findings"] for r in result["results"] if r["findings"]}
    assert code == 0 and result["ok"], findings or err[-2000:]
    assert {r["operation"] for r in result["results"]} == {"GET /healthz", "GET /status", f"GET {contract.ITEM}", f"PUT {contract.ITEM}"}
    stored = next(r for r in result["results"] if r["operation"] == f"PUT {contract.ITEM}")["statuses"]
    assert stored.get("200", 0) > 0  # the generated requests reached its store, past "no such node" and "wrong owner"
