"""The sizing page's arithmetic (pure): readings by kind, series, and what a target fleet needs."""

import argparse

import pytest

from stormcore.errors import UsageError
from stormcore.fleet import FLEETS_HELP, parse_fleets
from stormlab.artefacts import sizing_page
from stormlab.cli import build_parser
from stormlab.runs import sizing
from stormlab.runs.sizing import Reading

FLEET = {
    "nodes": 10_000,
    "nodes_per_rack": 1_000,
    "speed": 0.25,
    "empty_rack_mib": 40.0,
    "kinds": {
        "rack": {"processes": 10, "cpu_cores": 0.01, "rss_mib": 90.0},
        "metadata": {"processes": 1, "cpu_cores": 0.02, "rss_mib": 120.0},
        "loadgen": {"processes": 1, "cpu_cores": 0.05, "rss_mib": 60.0},
    },
    "series": {"rack": 150, "metadata": 300, "loadgen": 500, "linkproxy": 50},
}


def test_the_lab_processes_are_known_by_their_modules():
    assert sizing.kind_of(["/v/bin/python", "-m", "storage_node"]) == "rack"
    assert sizing.kind_of(["python", "-m", "metadata_service"]) == "metadata"
    assert sizing.kind_of(["python", "-m"]) is None
    assert sizing.kind_of(["sleep", "5"]) is None


def test_cpu_is_the_difference_over_the_window_and_memory_the_mean_of_one_process():
    before = [Reading(1, "rack", 10.0, 0), Reading(2, "rack", 20.0, 0), Reading(3, "metadata", 5.0, 0)]
    after = [Reading(1, "rack", 11.0, 100 * 2**20), Reading(2, "rack", 23.0, 50 * 2**20), Reading(3, "metadata", 5.5, 2**20)]
    after.append(Reading(4, "rack", 99.0, 2**30))  # started during the window: not measured
    kinds = sizing.per_kind(before, after, wall_s=10.0)
    assert kinds == {
        "metadata": {"processes": 1, "cpu_cores": 0.05, "rss_mib": 1.0},
        "rack": {"processes": 2, "cpu_cores": 0.2, "rss_mib": 75.0},
    }


def test_series_are_the_sample_lines():
    assert sizing.series_in('# HELP a x\n# TYPE a counter\na_total{rack="0"} 1\na_created 2\n\n') == 2


def test_the_target_is_sized_per_node_at_the_speed_one_metadata_core_allows():
    plan = sizing.plan_for(FLEET, target_nodes=100_000, nodes_per_rack=1_000)
    assert plan["racks"] == 100
    assert plan["metadata_cpu_cores_speed_1"] == pytest.approx(0.8)  # 0.02 cores at speed 0.25 for 10,000 nodes: 0.08, times 10
    assert plan["speed"] == 0.5 and plan["metadata_cpu_cores"] == pytest.approx(0.4)  # at most half its one core
    assert plan["rack_cpu_cores"] == pytest.approx(0.02)  # 0.04 at speed 1 (0.01 at 0.25), halved
    assert plan["rack_mib"] == 90  # 40 empty + 50 for 1,000 nodes
    assert plan["racks_cpu_cores"] == pytest.approx(2.0) and plan["racks_gib"] == pytest.approx(8.8)
    assert plan["series"] == 150 * 100 + 300 + 500  # the link proxy is the local lab's alone
    # or in cells at speed 1: 0.8 cores of metadata baseline, each cell's service at most half of its core
    assert plan["cells_speed_1"] == 2 and plan["cell_cpu_cores_speed_1"] == pytest.approx(0.4)
    assert plan["racks_cpu_cores_speed_1"] == pytest.approx(4.0)  # 0.04 cores at speed 1, 100 racks
    smaller = sizing.plan_for(FLEET, target_nodes=100_000, nodes_per_rack=250)
    assert smaller["racks"] == 400 and smaller["rack_mib"] == round(40 + 50 / 4)
    assert sizing.plan_for(FLEET, target_nodes=10_000, nodes_per_rack=1_000)["speed"] == 1.0


def test_the_page_gives_every_measured_figure_and_the_plan():
    figures = {
        "date": "2026-12-01",
        "machine": {"cores": 2, "python": "3.11.7"},
        "fleets": [FLEET],
        "plan_from": 10_000,
        "plan": sizing.plan_for(FLEET, 100_000, 1_000),
    }
    page = sizing_page.markdown(figures)
    assert "| 10,000 | 1,000 | 0.25 | rack | 10 | 0.040 | 90 MiB | 150 |" in page
    assert "## What 100,000 nodes need on a cluster" in page and "| rack pods (StatefulSet replicas, `racks` setting) | 100 |" in page
    assert "| cells at speed 1 (`STORMLAB_CELLS`) | 2: the metadata service's baseline at speed 1 is 0.8 cores" in page
    assert "| or one cell, in slow motion (`STORMLAB_SPEED`) | 0.5: the one metadata service takes 0.4 cores" in page
    assert "not a run of that many nodes" in page  # the extrapolation says what it is


@pytest.mark.parametrize("text", ["1005", "1000:0", "1000:300", "x:1", "200000:1000", "1000:2000", "", "1:2:3", "-10"])
def test_bad_fleets_are_refused(text):
    with pytest.raises(UsageError):
        parse_fleets(text)


def test_fleets_have_one_format_wherever_they_are_taken():
    assert parse_fleets("1000:100, 10000:1000") == [(1000, 100), (10000, 1000)]
    assert parse_fleets("1000,10000:1000") == [(1000, 100), (10000, 1000)]  # NODES alone: ten racks
    (commands,) = [a.choices for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    for command in ("bench", "sizing"):
        (fleets,) = [a for a in commands[command]._actions if a.dest == "fleets"]
        assert fleets.help == FLEETS_HELP
        assert parse_fleets(fleets.default)
