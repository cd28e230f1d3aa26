"""End to end: cells on docker compose (AWS's long-term fix). STORMLAB_CELLS=4 runs four metadata
services: `metadata` (cell 0) and three replicas of `metadata-cell`, all behind the DNS name
`cells`; each of the 10 racks asks them which cell they serve and renews with its own (racks 0-2,
3-4, 5-7, 8-9, each cell with its share of the 40 cores). The 2015 blip of racks 0-2, cell 0's
whole fleet, storms cell 0 while the other cells' customers stay under 1%. A move on one cell's
metadata service (`ops pause-metadata --cell 2`) goes to that cell alone, from the ops container
(the other cells' admin APIs are not published on the host, which says so), and the chaos
container's `halt` finds and ends it. Prometheus reads the storm by cell (the per-cell rules) and
CellRetryStorm holds for cell 0 alone.
"""

from __future__ import annotations

import json
import subprocess
import time
import urllib.request

import pytest

from stormcore import roster
from tests.e2e.compose_stack import CASCADE, Stack, one, wait_for

CELLS, RACKS = 4, 10
SERVICES = [*roster.ENGINE_SERVICES, "metadata-cell", "prometheus", "alertmanager"]  # the whole lab but Grafana
OTHERS = ("1", "2", "3")  # the cells the blip of racks 0-2 leaves alone

pytestmark = pytest.mark.timeout(900)


def get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=10) as resp:
        return json.loads(resp.read())


@pytest.fixture(scope="module")
def cells():
    s = Stack("stormlabcells", STORMLAB_CELLS=str(CELLS), STORMLAB_MORE_CELLS=str(CELLS - 1))
    s.compose("build", "metadata", timeout=1200)
    try:
        started = time.monotonic()
        s.compose("up", "-d", *SERVICES, timeout=600)
        print(f"the four-cell stack up in {time.monotonic() - started:.1f} s")
        yield s
    finally:
        s.compose("down", "-v", "--remove-orphans", timeout=300, check=False)


def test_the_2015_blip_inside_one_cell_on_compose_leaves_the_other_cells_under_1_percent(cells):
    health = wait_for("every container healthy", lambda: (h := cells.health()) and all(v == "healthy" for v in h.values()) and h, 240)
    assert len(health) == CELLS + RACKS + len(CASCADE) + 3, health  # and loadgen, Prometheus, Alertmanager

    def every_cell_scraped():
        up = [t for t in cells.api("/api/v1/targets")["activeTargets"] if t["labels"]["job"] == "metadata" and t["health"] == "up"]
        return len(up) == CELLS

    wait_for("Prometheus scrapes the four cells' metadata services behind `cells`", every_cell_scraped, 120)
    loadgen = f"http://127.0.0.1:{cells.env['LOADGEN_PORT']}/status"

    def per_cell() -> dict[str, float]:
        return {c: r if r is not None else 1.0 for c, r in get(loadgen)["cell_error_ratio"].items()}

    # every rack renews with its own cell (another cell's service answers 404: its nodes would be refused)
    settled = wait_for("every cell's customers served", lambda: (seen := per_cell()) and max(seen.values()) < 0.01 and seen, 120, 2)
    assert sorted(settled) == ["0", "1", "2", "3"], settled

    cells.here("chaos", "--backend", "docker", "blip", "--cell", "0", "--duration", "5s")  # racks 0-2, the 2015 blip
    wait_for("cell 0 storms", lambda: per_cell()["0"] > 0.3, 120, 2)
    readings = []
    for _ in range(5):  # 20 s of the storm, from 8 s after the blip
        readings.append(per_cell())
        time.sleep(5)
    print(f"customers' error by cell through cell 0's storm: {readings}")
    assert all(r["0"] > 0.3 for r in readings), readings  # cell 0 storms on, long after the 5 s blip
    assert all(r[c] < 0.01 for r in readings for c in OTHERS), readings  # the blast radius: one cell

    # Prometheus sees it by cell: each service and rack names its cell, the per-cell rules join on it
    def by_cell(rule: str) -> dict[str, float]:
        return {r["metric"]["cell"]: float(r["value"][1]) for r in cells.query(rule)}

    disqualified = by_cell("cell:stormlab_nodes_disqualified:ratio")
    busy = by_cell("cell:stormlab_metadata_cpu_busy:ratio_rate1m")
    margin = by_cell("cell:stormlab_metadata_margin:ratio")
    inflight = by_cell("cell:stormlab_metadata_inflight:sum")
    print(f"by cell: disqualified {disqualified}, metadata CPU busy {busy}, margin {margin}, in flight {inflight}")
    assert sorted(disqualified) == sorted(busy) == sorted(inflight) == ["0", "1", "2", "3"], (disqualified, busy, inflight)
    assert disqualified["0"] > 0.1 and all(disqualified[c] == 0 for c in OTHERS), disqualified
    assert busy["0"] > max(busy[c] for c in OTHERS), busy  # the storm's retries fill cell 0's CPU alone
    assert inflight["0"] > max(inflight[c] for c in OTHERS), inflight  # and pile up in its queue alone
    assert "0" in margin, margin
    # CellRetryStorm holds for cell 0 alone (pending, or firing after its minute: promtool tests the
    # minute, prometheus/tests/rules_test.yml; waiting it out here would cost CI a minute)
    alerts = cells.api("/api/v1/alerts")["alerts"]
    storming = {a["labels"]["cell"]: a["state"] for a in alerts if a["labels"]["alertname"] == "CellRetryStorm"}
    print(f"CellRetryStorm by cell: {storming}")
    assert list(storming) == ["0"] and storming["0"] in ("pending", "firing"), alerts

    # a fault of cell 2's metadata service, from inside the stack's network; the host cannot reach it and says so
    said = cells.here("ops", "--backend", "docker", "pause-metadata", "--cell", "2", "--duration", "2m", code=2)
    assert "cell 2's metadata service does not answer from here" in said, said
    paused = cells.compose("run", "--rm", "ops", "pause-metadata", "--cell", "2", "--duration", "2m", timeout=120).stdout
    assert "pause-metadata #" in paused, paused
    cell_2 = one(cells.container("metadata-cell", 2), "metadata-cell's second replica (cell 2)")
    inspect = ["docker", "inspect", "--format", "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}", cell_2]
    address = subprocess.run(inspect, capture_output=True, text=True).stdout.strip()  # the host reaches the bridge
    status = get(f"http://{address}:8700/status")
    assert status["cell"] == 2 and status["paused"], status  # that cell's service, and no other
    assert not get(f"http://127.0.0.1:{cells.env['METADATA_PORT']}/status")["paused"]
    seen = wait_for("Prometheus sees cell 2 paused", lambda: (p := by_cell("cell:stormlab_metadata_paused:max")).get("2") == 1 and p, 30, 2)
    assert all(seen[c] == 0 for c in ("0", "1", "3")), seen  # the Paused, by cell panel
    assert "halted 1 fault(s)" in cells.chaos("halt")
    assert not get(f"http://{address}:8700/status")["paused"]

    cells.compose("down", "-v", "--remove-orphans", timeout=300)
    assert cells.leftovers() == {"containers": [], "networks": [], "volumes": []}
