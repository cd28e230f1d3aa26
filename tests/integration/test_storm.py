"""The storm with real processes on loopback: 400 nodes in 10 racks, time running 2x faster.

The 2015 profile scaled to 400 nodes (capacity scaled along, 4 cores per 100 nodes) and sped
up 2x (every duration and cost halved, every rate doubled). The demo's times are profile
seconds. Bands are generous: these machines are noisy.
"""

import asyncio
import io
import os
import signal
import threading
import time

import pytest

from stormcore.settings import LabSettings
from stormlab.engine import observe
from stormlab.model.reference import ReferenceModel, replay
from stormlab.runs.demo import Demo

pytestmark = pytest.mark.storm
SPEED = 2.0


def scaled(**changes) -> LabSettings:
    return LabSettings(racks=10, nodes_per_rack=40, capacity_cores=16, **changes).sped_up(SPEED)


def run_story(lab, settings: LabSettings, during=None, watch_s: float = 90) -> dict:
    """The demo's story on a lab of ``settings`` (no cascade: the storm alone); ``during(state)``
    runs beside it in a thread; ``watch_s`` profile seconds after the blip (the plateau is the
    last 60)."""
    started = lab(settings=settings, serving=False)
    beside = threading.Thread(target=during, args=(started.state,), daemon=True) if during else None
    demo = Demo(started.state, io.StringIO(), settle_s=10, blip_s=5, watch_s=watch_s, blip_racks="3")
    if beside:
        beside.start()
    result = asyncio.run(demo.run())
    if beside:
        beside.join(timeout=30)
    print({k: v for k, v in result.items() if k != "settings"})
    return result


def assert_host_stayed_out_of_the_way(r: dict) -> None:
    # The demo calls a run valid under 5% of the allowance; a shared CI machine gets 20% here,
    # enough to tell the modelled storm from an overloaded host.
    assert r["loop_lag_p99_s"] < 0.2 * 1.0 / SPEED, f"event-loop lag {r['loop_lag_p99_s']}s: the host shaped this run"


@pytest.mark.timeout(300)
def test_storm_forms_spreads_and_holds_after_the_blip_as_the_model_predicts(lab):
    """Through the links a user without root gets (link_cut=namespace: the kernel's rules in the
    lab's own user and network namespace). The same storm through the other links, each against
    the same model: the kernel's in the host's namespace (the fidelity guard's live points, root),
    the link proxy's (four cells, below)."""
    r = run_story(lab, scaled(link_cut="namespace"))
    assert r["settings"]["link_cut"] == "namespace"
    assert_host_stayed_out_of_the_way(r)
    assert r["baseline_error_ratio"] < 0.01
    assert 0.35 <= r["plateau_error_ratio"] <= 0.75
    assert r["storm_holds"] is True and r["recovery_s"] is None
    assert r["disqualified_outside_blip"] > 0
    # The reference model runs the same cores on the same settings and story, in virtual time.
    model = replay(scaled(), settle_s=10 / SPEED, blip_s=5 / SPEED, watch_s=90 / SPEED)  # wall seconds
    print({"model": model})
    assert abs(model["plateau"] - r["plateau_error_ratio"]) <= 0.05
    for predicted in (model["disqualified_at_end"], r["disqualified_at_end"]):  # every big node, no small one
        assert predicted["big"] >= 0.9 and predicted["small"] <= 0.02, predicted


def stall_a_rack_at_the_herd(state: dict, rack: str = "rack-05", stall_s: float = 1.0) -> None:
    """Wait for the demo's blip (the link proxy holds it), then stop a rack for ``stall_s``."""
    assert observe.wait_for_link_fault(state, 120), "the demo never blipped"
    pid = state["components"][rack]["pid"]
    os.kill(pid, signal.SIGSTOP)
    try:
        time.sleep(stall_s)
    finally:
        os.kill(pid, signal.SIGCONT)


@pytest.mark.timeout(300)
def test_a_rack_stalled_for_a_second_at_the_herd_makes_the_run_invalid(lab):
    # One second of a stopped rack is under 1% of the run's lag samples: the whole-run p99 does
    # not see it. The herd's window does, and says which process and when. The herd is over in
    # three renewal periods (30 profile seconds): the storm's plateau is the other tests'.
    r = run_story(lab, scaled(), during=stall_a_rack_at_the_herd, watch_s=40)
    assert r["valid"] is False
    (herd,) = [reason for reason in r["invalid_reasons"] if reason.startswith("at the herd")]
    assert "rack-05" in herd, r["invalid_reasons"]


@pytest.mark.timeout(300)
def test_four_cells_keep_the_2015_storm_inside_the_blipped_cell(lab):
    """10 racks in 4 cells (racks 0-2, 3-4, 5-7, 8-9), each with its share of the cores: the 2015
    blip of racks 0-2 is cell 0's whole fleet. Cell 0 is stuck; the customers of the other cells
    never see 1% errors (the one-cell storm of the same blip is the test above: ~55%).
    The link proxy carries the links here and the blip is its own, as on any host without root
    (the first test cuts them in the kernel where the lab may): both carriers meet the 2015 blip."""
    r = run_story(lab, scaled(cells=4, link_cut="proxy"))
    assert_host_stayed_out_of_the_way(r)
    assert r["blipped_cells"] == [0]
    assert r["storm_holds"] is True  # the fleet's customers: cell 0's share of them fail
    assert r["cell_plateau"]["0"] >= 0.45, r["cell_plateau"]
    assert r["outside_worst_error_ratio"] < 0.01, r["cell_plateau"]
    assert max(r["cell_plateau"][c] for c in ("1", "2", "3")) < 0.01
    model = _blip_model(scaled(cells=4))
    print({"model": {c: model.error_ratio({c}) for c in range(4)}})
    assert abs(model.error_ratio({0}) - r["cell_plateau"]["0"]) <= 0.1


def _blip_model(settings: LabSettings) -> ReferenceModel:
    """The demo's story in the reference model (wall seconds: settle 10, blip 5, watch 90 profile s)."""
    model = ReferenceModel(settings)
    blip_at = 1.5 * settings.renewal_period_s + 10 / SPEED
    model.run_until(blip_at)
    model.blip({0, 1, 2}, blip_at, 5 / SPEED)
    model.run_until(blip_at + 95 / SPEED)
    return model
