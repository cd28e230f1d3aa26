"""The CI version of `make fuzz`: every operation of every process of a live lab, generated
requests good and bad, judged by each process's /openapi.json."""

import json

import pytest

from stormcore import roster
from stormlab.cli import main
from stormlab.runs.fuzz import TARGETS

CHEAP = {"cost_base_s": 0.0001, "cost_per_entry_s": 0.00001, "admin_cost_s": 0.001}  # it tests the API, not the storm


@pytest.mark.lab
@pytest.mark.timeout(600)
def test_no_process_answers_outside_its_description(lab, capsys):
    lab(cascade=roster.CASCADE, customer_rate=200, **CHEAP)  # every process of the roster
    code = main(["fuzz", "--requests", "40", "--seed", "3", "--json"])
    out, err = capsys.readouterr()
    assert out.startswith("{"), f"no figures printed (exit {code}): {err[-3000:]}"
    result = json.loads(out)  # --json: the one document on stdout, progress on stderr
    findings = {f"{r['target']} {r['operation']}": r["findings"] for r in result["results"] if r["findings"]}
    assert code == 0 and result["ok"], findings or result["health"]
    assert {r["target"] for r in result["results"]} == set(TARGETS)
    held = [r for r in result["results"] if r["operation"].endswith(("(rack-00 frozen)", "(rack-00 killed)"))]
    assert [r["operation"] for r in held] == ["POST /faults (rack-00 frozen)", "POST /faults (rack-00 killed)"]
    assert all(r["target"] == "supervisor" and r["requests"] >= 10 for r in held)  # deploys meet a rack held down: a quarter each
    door = {r["operation"]: r for r in result["results"] if r["target"] == "door"}
    fewest = min(r["requests"] for r in result["results"] if r not in held and r["target"] != "door")
    assert result["operations"] >= 45 and fewest >= 40
    # the door: raw bytes carried and answered or closed, every slow and half-open request answered, a frozen inside given up
    assert door["raw bytes (to metadata)"]["requests"] == 40 and door["half-open (to metadata)"]["statuses"] == {"200": 20}
    assert door["slow writers (to metadata)"]["statuses"] == {"200": 4} and door["a frozen inside"]["statuses"] == {"0": 4}
    assert result["server_errors"] == 0 and result["healthy_afterwards"]
    statuses = {f"{r['target']} {r['operation']}": r["statuses"] for r in result["results"]}
    # the generated requests reach past the refusals: a fault applied, an item stored, a login served
    assert statuses["linkproxy POST /faults"].get("201", 0) > 0, statuses["linkproxy POST /faults"]
    assert statuses["rack-00 PUT /nodes/{node}/tables/{table}/partitions/{partition}/items/{key}"].get("200", 0) > 0
    assert statuses["console POST /login"].get("200", 0) > 0
    assert statuses["supervisor POST /faults (rack-00 frozen)"].get("201", 0) > 0  # a deploy or freeze applied with the rack away
    # the lease manager's API, and the room's seats past "no such seat" (their codes read off the join page)
    assert statuses["leases POST /faults"].get("201", 0) > 0 and statuses["leases GET /status"].get("200", 0) > 0
    assert statuses["room GET /seat/{code}"].get("200", 0) > 0 and statuses["room POST /seat/{code}"].get("303", 0) > 0
