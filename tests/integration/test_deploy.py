"""A live deploy: `stormlab ops deploy` rolls a retry policy, an allowance or a renewal period
out to the running racks, step by step, and its lease puts every rack back."""

import json
import time
import urllib.request

import pytest

from chaos import journal
from stormlab.cli import main
from tests.conftest import until


def rack_allowances(state: dict) -> list[float]:
    out = []
    for name in sorted(n for n in state["components"] if n.startswith("rack-")):
        with urllib.request.urlopen(f"{state['components'][name]['url']}/status", timeout=5) as resp:
            out.append(json.loads(resp.read())["allowance_s"])
    return out


@pytest.mark.timeout(120)
def test_a_staged_deploy_reaches_the_racks_step_by_step_and_its_lease_puts_them_back(lab, capsys):
    started = lab(racks=4, nodes_per_rack=10, serving=False)
    state = started.state
    assert rack_allowances(state) == [1.0] * 4
    assert main(["ops", "--as", "queues", "deploy", "--allowance", "2s"]) == 2  # the database's move
    assert main(["ops", "deploy", "--staged", "2"]) == 2  # nothing to deploy
    assert main(["ops", "deploy", "--allowance", "0s"]) == 2
    assert (
        main(
            [
                "ops",
                "--as",
                "database",
                "deploy",
                "--allowance",
                "2s",
                "--retry-policy",
                "full-jitter",
                "--staged",
                "2",
                "--every",
                "2s",
            ]
        )
        == 0
    )
    assert rack_allowances(state) == [2.0, 2.0, 1.0, 1.0]  # the first step: racks 0 and 1
    time.sleep(2.5)
    assert rack_allowances(state) == [2.0] * 4
    capsys.readouterr()
    assert main(["chaos", "list"]) == 0
    assert "deploy" in capsys.readouterr().out
    assert main(["chaos", "halt"]) == 0
    until(lambda: rack_allowances(state) == [1.0] * 4, limit_s=5, what="every rack back on its start-up allowance")
    moves = [(e["action"], e["ok"], e.get("role")) for e in journal.read_journal(started.directory)]
    assert moves == [("deploy", False, None), ("deploy", False, None), ("deploy", True, "database")]
