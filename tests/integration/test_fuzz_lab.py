"""The CI version of `make fuzz`: every operation of every process of a live lab, generated
requests good and bad, judged by each process's /openapi.json."""

import json

import pytest

from stormlab.cli import main
from stormlab.runs.fuzz import TARGETS

CHEAP = ["--set", "cost_base_s=0.0001", "--set", "cost_per_entry_s=0.00001", "--set", "admin_cost_s=0.001"]


@pytest.fixture
def fuzz_lab(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("STORMLAB_STATE_DIR", str(tmp_path / "state"))
    assert main(["up", "--racks", "2", "--nodes-per-rack", "20", "--renewal-period", "1s", "--base-port", "0", *CHEAP]) == 0
    capsys.readouterr()
    yield
    assert main(["down"]) == 0


@pytest.mark.timeout(600)
def test_no_process_answers_outside_its_description(fuzz_lab, capsys):
    code = main(["fuzz", "--requests", "40", "--seed", "3", "--json"])
    out = capsys.readouterr().out
    result = json.loads(out[out.index("\n{") :])
    findings = {f"{r['target']} {r['operation']}": r["findings"] for r in result["results"] if r["findings"]}
    assert code == 0 and result["ok"], findings or result["health"]
    assert {r["target"] for r in result["results"]} == set(TARGETS)
    assert result["operations"] >= 45 and result["fewest_requests_per_operation"] >= 40
    assert result["server_errors"] == 0 and result["healthy_afterwards"]
    statuses = {f"{r['target']} {r['operation']}": r["statuses"] for r in result["results"]}
    # the generated requests reach past the refusals: a fault applied, an item stored, a login served
    assert statuses["linkproxy POST /faults"].get("201", 0) > 0
    assert statuses["rack-00 PUT /nodes/{node}/tables/{table}/partitions/{partition}/items/{key}"].get("200", 0) > 0
    assert statuses["console POST /login"].get("200", 0) > 0
