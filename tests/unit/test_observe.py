"""What `status` reads from the processes' statuses about the host, and how it judges the last 10 s."""

from stormcore.settings import LabSettings
from stormcore.wire import RackStatus
from stormlab.engine import observe
from stormlab.engine.observe import host_readings, now_invalid, summarize
from stormlab.engine.reading import JOURNALED, Reading
from stormlab.responder import alerts


def test_the_worst_of_each_reading_and_whose_it_is():
    raw = {
        "metadata": {"loop_lag_p99_s": 0.004, "cpu_ratio": 0.42, "cpu_wait_s": 0.001, "host_cores": 2, "host_steal_ratio": 0.0},
        "rack-03": {"loop_lag_p99_s": 0.030, "cpu_ratio": 0.10, "cpu_wait_s": 0.004, "host_cores": 2.0, "host_cpu_ratio": 0.6},
        "loadgen": None,  # did not answer
        "rack-04": {"loop_lag_p99_s": "n/a", "cpu_ratio": None},  # a reading of the wrong type is not a reading
    }
    host = host_readings(raw)
    assert host["loop_lag_p99_s"] == 0.030 and host["loop_lag_by"] == "rack-03"
    assert host["cpu_ratio"] == 0.42 and host["cpu_by"] == "metadata"
    assert host["cpu_wait_s"] == 0.004 and host["wait_by"] == "rack-03"
    assert host["lab_cpu_cores"] == 0.52 and host["host_cores"] == 2  # Prometheus gives the cores as a float
    assert host["host_cpu_ratio"] == 0.6 and host["host_steal_ratio"] == 0.0
    assert host_readings({"metadata": None})["lab_cpu_cores"] is None


def test_status_judges_the_last_10_s_on_the_same_budgets():
    quiet = Reading(allowance_s=1.0, loop_lag_p99_s=0.004, cpu_ratio=0.3, lab_cpu_cores=0.8, host_cores=2)
    assert now_invalid(quiet) == []
    busy = quiet.but(cpu_ratio=0.95, cpu_by="metadata", loop_lag_p99_s=0.3, loop_lag_by="rack-01")
    reasons = now_invalid(busy)
    assert any("metadata used 95% of a core" in r for r in reasons) and any("rack-01" in r and "300 ms" in r for r in reasons)
    assert now_invalid(quiet.but(allowance_s=None, cpu_ratio=1.0)) == []  # no lab settings: nothing to judge against


def test_status_shows_the_speed_the_lab_s_times_in_profile_time_and_the_verdict():
    from stormlab.engine.observe import render

    snap = summarize(
        endpoints={"metadata": "http://127.0.0.1:8700"},
        unreachable=[],
        statuses={},
        racks=[],
        allowance_s=4.0,  # the 2015 allowance at speed 0.25
        host=host_readings({"rack-00": {"loop_lag_p99_s": 0.9, "cpu_ratio": 0.2, "host_cores": 2}}),
        faults=[],
    ).but(speed=0.25)
    text = render(snap)
    assert "against an allowance of 1.000s" in text  # profile time
    assert "event-loop lag p99 900.0ms (rack-00)" in text  # the host's, wall clock
    assert "speed:      0.25x" in text
    assert "validity:   INVALID: " in text and "over 800 ms (20% of the allowance)" in text


def _rack(rack: int, disqualified: int, total: int = 100) -> RackStatus:
    return RackStatus(
        loop_lag_p99_s=0.0, rack=rack, pid=None, link_up=True, nodes_total=total, nodes_serving=total - disqualified,
        nodes_disqualified=disqualified, nodes_starting=0, renewal_p99_s=None, renewal_attempts_total={}, allowance_s=1.0,
    )  # fmt: skip


def test_each_cell_s_share_disqualified_is_the_local_form_of_the_cell_alert():
    racks = [_rack(r, d) for r, d in enumerate([0, 0, 0, 30])]  # 4 racks in 4 cells: cell 3 storms
    snap = summarize(
        endpoints={}, unreachable=[], statuses={}, racks=racks, allowance_s=1.0, host={}, faults=[], settings=LabSettings(racks=4, cells=4)
    )
    assert snap.cell_disqualified_fraction == {"0": 0.0, "1": 0.0, "2": 0.0, "3": 0.3}
    sample = Reading.from_json(snap.to_json(JOURNALED))  # as a game day's journal keeps it
    storm, cell_storm = alerts.BY_NAME["RetryStorm"], alerts.BY_NAME["CellRetryStorm"]
    assert storm.holds(sample) == (False, 0.075)  # the fleet's 7.5%: under RetryStorm's line
    assert cell_storm.holds(sample) == (True, 0.3)  # cell 3's 30%
    assert (
        cell_storm.promql() == "cell:stormlab_nodes_disqualified:ratio > 0.1 and on () (count(cell:stormlab_nodes_disqualified:ratio) > 1)"
    )
    # two cells of two racks: the racks dealt out in runs, as the lab deals them
    assert observe.by_cell(racks, LabSettings(racks=4, cells=2)) == {"0": 0.0, "1": 0.15}
    # one cell: the fleet's share under "0", and the cell alert silent however the cell storms
    alone = summarize(endpoints={}, unreachable=[], statuses={}, racks=racks, allowance_s=1.0, host={}, faults=[])
    assert alone.cell_disqualified_fraction == {"0": 0.075}
    one_cell = Reading(cell_disqualified_fraction={"0": 0.9}, nodes_total=100, nodes_disqualified=90)
    assert cell_storm.holds(one_cell)[0] is False and storm.holds(one_cell)[0] is True
    assert observe.by_cell([], None) == {} and cell_storm.holds(Reading(cell_disqualified_fraction={})) == (False, None)
