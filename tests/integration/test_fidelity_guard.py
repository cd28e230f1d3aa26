"""The fidelity guard on every landing, every incident's points read from its declaration
(stormcore/incidents/), each run live and beside the reference model's prediction for the same
settings and seed; a run the host shaped (INVALID) runs once more. A point that leaves its band, or
parts from the model, fails with both figures.

- 2015 (stormlab/runs/guard.py): the map's branches (no storm, the 4-rack branch that once moved
  unseen, the collapse, AWS's longer allowance; the 2015 plateau is the storm test's) at the
  400-node fleet at speed 2.
- October 2025 (stormlab/incidents/aws_2025_10/guard.py): the lease manager's branches (an outage
  shorter than a lease, the profile's outage, a fleet below the threshold, throttle then restarts)
  at the profile's fleet at speed 4.
"""

import pytest

from stormcore import incidents
from stormlab.incidents import registry

pytestmark = pytest.mark.storm


@pytest.mark.timeout(1500)
@pytest.mark.parametrize("name", incidents.NAMES)
def test_every_branch_of_the_incidents_map_holds_live_as_it_does_in_the_model(name, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("STORMLAB_STATE_DIR", str(tmp_path / "state"))  # its labs, apart from any other

    def say(line: str) -> None:  # each point's line in CI's output as it is judged, every incident's beside the others'
        with capsys.disabled():
            print(line, flush=True)

    found = registry.guard(name, say)
    assert found == [], "\n".join(found)
