"""The fidelity guard on every landing: a small matrix of live points spanning every branch of the
map (no storm, the 4-rack branch that once moved unseen, the collapse, AWS's longer allowance;
the 2015 plateau is the storm test's), each beside the reference model's
prediction for the same settings and seed, at the 400-node fleet at speed 2 (the sweep's --quick; a run
the host shaped, INVALID, runs once more). A point that leaves its band, or parts from the
model, fails with both figures (stormlab/runs/guard.py)."""

import pytest

from stormcore.settings import LabSettings
from stormlab.runs import guard
from stormlab.runs.live import QUICK, judge_live

pytestmark = pytest.mark.storm


@pytest.mark.timeout(1200)
def test_every_branch_of_the_map_holds_live_as_it_does_in_the_model(tmp_path, monkeypatch):
    monkeypatch.setenv("STORMLAB_STATE_DIR", str(tmp_path / "state"))  # its labs, apart from any other
    found = guard.run(LabSettings(**QUICK), 2.0, judge_live)
    assert found == [], "\n".join(found)
