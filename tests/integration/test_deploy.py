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


def supervisor_deploys(state: dict) -> dict:
    with urllib.request.urlopen(f"{state['supervisor_url']}/status", timeout=5) as resp:
        return json.loads(resp.read())["deploys"]


@pytest.mark.lab
@pytest.mark.timeout(150)
def test_deploys_are_held_values_through_overlaps_a_frozen_rack_and_a_killed_one(lab):
    """Two overlapping deploys ended oldest first leave every rack on its start-up allowance (the
    fuzzer found the older one put back for good); a rack frozen through a deploy takes it when
    it wakes; a rack killed and restarted runs what holds from its start."""
    state = lab(racks=4, nodes_per_rack=10, serving=False).state
    assert main(["ops", "deploy", "--allowance", "2s", "--duration", "4s"]) == 0
    assert main(["ops", "deploy", "--allowance", "5s", "--duration", "9s"]) == 0
    assert rack_allowances(state) == [5.0] * 4  # the newest decides
    until(lambda: len(supervisor_deploys(state)["live"]) == 1, limit_s=8, what="the older deploy's lease to end")
    assert rack_allowances(state) == [5.0] * 4  # the older one's end does not put anything back
    until(lambda: rack_allowances(state) == [1.0] * 4, limit_s=10, what="every rack back on its start-up allowance")

    assert main(["chaos", "freeze", "--target", "rack-01", "--duration", "6s"]) == 0
    assert main(["ops", "deploy", "--allowance", "2s", "--duration", "60s"]) == 0  # a frozen rack does not fail it
    racks = rack_allowances({**state, "components": {n: c for n, c in state["components"].items() if n != "rack-01"}})
    assert racks == [2.0] * 3
    assert "rack-01" in supervisor_deploys(state)["behind"]
    until(lambda: rack_allowances(state) == [2.0] * 4, limit_s=10, what="the frozen rack to take the deploy when it wakes")

    assert main(["chaos", "kill", "--target", "rack-02", "--duration", "1s"]) == 0
    until(lambda: rack_allowances(state) == [2.0] * 4, limit_s=30, what="rack-02 restarted, on 2 s from its start")
    assert supervisor_deploys(state)["behind"] == []
    assert main(["chaos", "halt"]) == 0
    until(lambda: rack_allowances(state) == [1.0] * 4, limit_s=10, what="every rack back on its start-up allowance")
