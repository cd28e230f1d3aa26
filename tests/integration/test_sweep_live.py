"""`stormlab sweep` end to end, small: a 400-node grid in the model, its 2015 point live (the other
branches of the map live: the fidelity guard, tests/integration/test_fidelity_guard.py)."""

import csv
import json

import pytest

from stormlab import cli

pytestmark = pytest.mark.storm


@pytest.mark.timeout(600)
def test_a_small_sweep_runs_its_2015_point_live_and_it_agrees_with_the_model(tmp_path, monkeypatch):
    monkeypatch.setenv("STORMLAB_STATE_DIR", str(tmp_path / "state"))  # its labs, apart from any other
    out = tmp_path / "sweep"
    argv = ["sweep", "--quick", "--out", str(out), "--panels", "2015,allowance 2s", "--blip-racks", "1,3", "--blip", "5s",
            "--gsis", "2", "--live", "1", "--live-phases", "0", "--speed", "2", "--watch", "9", "--live-retries", "2"]  # fmt: skip
    assert cli.main(argv) == 0  # exit 1 would mean live and model agree on under 90%
    summary = json.loads((out / "summary.json").read_text())
    print(json.dumps(summary, indent=1))
    assert summary["panels"]["2015"]["point_2015"] == "stuck"
    assert summary["panels"]["allowance 2s"]["point_2015"] == "recovered"
    a = summary["agreement"]
    assert a["points"] == 1 and a["agree"] == 1, a
    live = {s["panel"]: s for s in summary["live_sample"]}
    assert live["2015"]["blip_racks"] == 3 and live["2015"]["live"]["stuck"] is True  # the 2015 point, live
    assert 0.35 <= live["2015"]["live"]["end_error"] <= 0.75
    with (out / "model.csv").open() as f:
        assert len(list(csv.DictReader(f))) == 4 + 2 * 7  # the grid, and each panel's 2015 point at 7 more moments
    assert (out / "map.png").stat().st_size > 10_000
    assert "| 2015 | stuck |" in (out / "summary.md").read_text()
    # run again: everything is on disk, nothing runs
    assert cli.main(argv) == 0
    with (out / "live.csv").open() as f:
        assert len(list(csv.DictReader(f))) == 1
