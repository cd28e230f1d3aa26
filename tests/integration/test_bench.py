"""`stormlab bench` end to end at its smallest: every section measured and written (the figures
themselves are the bench's to report, not this test's to judge: the machines are shared)."""

import json

import pytest

from chaos.kernel_link import available
from stormlab.cli import main

pytestmark = pytest.mark.storm


@pytest.mark.timeout(240)
def test_the_bench_measures_each_section_and_writes_the_page(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("STORMLAB_STATE_DIR", str(tmp_path / "state"))
    out = tmp_path / "benchmarks.md"
    # one membership size, 20 entries (138: the same path at a large node's size, 35 s more of CI; the documented run measures it)
    argv = ["bench", "--seconds", "1", "--rounds", "1", "--faults", "5", "--fleets", "100", "--out", str(out), "--json",
            "--renewal-nodes", "40", "--herd-nodes", "40", "--no-both-clients", "--fleet-speed", "4", "--renewal-sizes", "20"]  # fmt: skip
    assert main(argv) == 0
    figures = json.loads(capsys.readouterr().out)  # --json: the one document on stdout, progress on stderr
    assert figures["membership_path"]["membership_req_per_s"] > 0 and figures["membership_path"]["bare_req_per_s"] > 0
    assert figures["faults"]["count"] == 5 and figures["faults"]["apply_p99_ms"] > 0
    (fleet,) = figures["fleets"]
    assert fleet["nodes"] == 100 and fleet["speed"] == 4.0 and fleet["to_every_node_serving_s"] > 0  # 4x: its baseline in 5 s
    assert fleet["rack_scrape_bytes"] > 0
    assert fleet["gsi_faults"]["faults"] == 3 and fleet["gsi_faults"]["samples"] > 0  # read live, from every process
    rows = {(r["entries"], r["client"], r.get("links")): r for r in figures["renewal_paths"]["rows"]}
    paths = {("protocol", "proxy"), ("session", "proxy"), ("bare", None)} | ({("protocol", "kernel")} if available() is None else set())
    assert set(rows) == {(20, *p) for p in paths}
    assert all(r["us_total"] > 0 for r in rows.values()) and set(rows[20, "protocol", "proxy"]["us_per_request"]) == {
        "rack",
        "linkproxy",
        "metadata",
    }
    assert {c: h["ok"] for c, h in figures["herd"].items()} == {"protocol": 40, "session": 40}  # every node of the herd renewed
    assert figures["rebuild_stall"]["nodes"] == 10_000
    page = out.read_text()
    for section in (
        "## The membership path",
        "## The renewal end to end",
        "## The herd",
        "## A GSI-growth fault",
        "## Fault apply",
        "## Fleets",
    ):
        assert section in page
