"""The fault catalog: each fault declared once, and everything that speaks of faults reads it."""

import pytest

from chaos import catalog
from chaos.catalog import ChaosError
from chaos.cli import add_arguments
from stormlab.cli import build_parser
from stormlab.responder.moves import ACTIONS


def test_racks_are_a_count_or_a_list_and_are_checked_against_the_lab():
    racks = catalog.RACKS_ARG
    assert racks.parse("3", 10) == [0, 1, 2]
    assert racks.parse("2,5,7", 10) == [2, 5, 7]
    assert racks.parse("5,", 10) == [5]
    for bad in ("0", "11", "1,1", "a", "3,12", "-1,2"):
        with pytest.raises(ChaosError):
            racks.parse(bad, 10)


def test_a_request_is_built_from_plain_values_in_base_units():
    req = catalog.request("latency", {"racks": "2,5", "delay": "200ms", "duration": "1m"}, racks_total=10)
    assert req.fault.holder == "linkproxy"
    assert req.body == {"fault": "latency", "racks": [2, 5], "delay_s": 0.2, "jitter_s": 0.0, "duration_s": 60.0}
    capacity = catalog.request("capacity", {"cores": "80", "break_glass": "on", "duration": 30})
    assert capacity.body == {"fault": "capacity", "cores": 80.0, "break_glass": True, "duration_s": 30.0}
    assert capacity.client == {"timeout_s": 2.0}  # the asking command's own wait, never sent


def test_a_staged_resume_derives_its_lease_from_its_steps():
    assert catalog.request("resume-metadata", {"staged": "5", "every": "10s"}).body["duration_s"] == 40.0
    assert catalog.request("resume-metadata", {}).body == {"fault": "resume-metadata", "staged": 1, "every_s": 0.0, "duration_s": 0.001}
    with pytest.raises(ChaosError, match="within the fault limit"):
        catalog.request("resume-metadata", {"staged": 1000, "every": "1h"})


@pytest.mark.parametrize(
    "fault, values, says",
    [
        ("blip", {"racks": "3"}, "--duration is required"),
        ("blip", {"racks": "3", "duration": "0s"}, "more than 0s"),
        ("blip", {"racks": "3", "duration": "1s", "cores": "2"}, "blip takes no cores"),
        ("loss", {"probability": "1.5", "duration": "1s"}, "probability must be at least 0 and at most 1"),
        ("capacity", {"cores": "lots", "duration": "1s"}, "cores: not a number"),
        ("capacity", {"cores": "0", "duration": "1s"}, "cores must be at least 0.1"),
        ("partition", {"direction": "sideways", "duration": "1s"}, "direction must be one of both"),
        ("gsi-growth", {"ramp": "2m", "duration": "1m"}, "ramp must not be longer than duration"),
        ("freeze", {"target": "prometheus", "duration": "1s"}, "target must name a process"),
        ("meteor", {}, "unknown fault 'meteor'"),
    ],
)
def test_bad_values_name_what_is_wrong(fault, values, says):
    with pytest.raises(ChaosError, match=says):
        catalog.request(fault, values, racks_total=10)


@pytest.mark.parametrize(
    "body, says",
    [
        ({"fault": "blip", "racks": "0,1", "duration_s": 5}, "racks must be a list"),
        ({"fault": "blip", "racks": [0, True], "duration_s": 5}, "racks must be a list"),
        ({"fault": "capacity", "cores": "80", "duration_s": 5}, "cores must be a number"),
        ({"fault": "capacity", "cores": 80, "break_glass": "yes", "duration_s": 5}, "break_glass must be true or false"),
        ({"fault": "blip", "racks": [0], "duration_s": 5, "extra": 1}, "blip takes no extra"),
        # a fault whose lease follows from its steps still checks a duration it is given (the fuzzer
        # found null and strings reaching the steps' check as a 500)
        ({"fault": "resume-metadata", "staged": 2, "duration_s": None}, "duration_s must be a number"),
        ({"fault": "resume-metadata", "duration_s": "10"}, "duration_s must be a number"),
        ({"fault": "resume-metadata", "duration_s": True}, "duration_s must be a number"),
    ],
)
def test_holders_check_json_strictly(body, says):
    with pytest.raises(ChaosError, match=says):
        catalog.check(body["fault"], body)


def test_holders_get_every_default_filled_in():
    assert catalog.check("partition", {"fault": "partition", "racks": [1], "duration_s": 2}) == {
        "fault": "partition",
        "racks": [1],
        "direction": "both",
        "duration_s": 2.0,
    }


def test_the_chaos_cli_is_built_from_the_catalog(capsys):
    parser = build_parser()
    chaos = parser._subparsers._group_actions[0].choices["chaos"]
    faults = chaos._subparsers._group_actions[0].choices
    assert {f.name for f in catalog.FAULTS.values() if not f.move} | {"list", "halt"} == set(faults)
    for fault in (f for f in catalog.FAULTS.values() if not f.move):
        flags = {o for action in faults[fault.name]._actions for o in action.option_strings}
        assert {a.flag for a in fault.args} <= flags
        usage = faults[fault.name].format_usage()
        for arg in fault.args:  # a required flag shows as required (no brackets) in the usage line
            assert (f"[{arg.flag}" not in usage) == arg.required, (fault.name, arg.flag, usage)
    help_text = faults["blip"].format_help()
    assert "When the lease ends: the link heals, resetting nothing" in help_text


def test_every_move_of_the_catalog_is_an_ops_command_and_no_chaos_one():
    takes = {fault for a in ACTIONS.values() for fault in ((a.fault,) if a.fault else a.fixes)}
    assert takes == {f.name for f in catalog.FAULTS.values() if f.move}


def test_python_m_chaos_is_the_chaos_tool(capsys):
    import argparse

    parser = argparse.ArgumentParser(prog="chaos")
    add_arguments(parser)
    assert parser.parse_args(["blip", "--rack-set", "2", "--duration", "5s"]).fault == "blip"


def test_every_fault_has_a_holder_and_every_holder_holds_some():
    assert {f.holder for f in catalog.FAULTS.values()} == set(catalog.HOLDERS)
    assert (
        "pause-metadata",
        "resume-metadata",
        "capacity",
        "deploy",
        *catalog.FIXES[:1],
        "scale-workers",
        *catalog.FIXES[1:],
        "throttle-work",
        "restart-host",
        "queue-limit",
    ) == catalog.MOVES
    assert catalog.FIXES == ("stale-cache", "prune-activities", "write-through", "short-timeout")


def test_the_fault_docs_show_the_catalog_as_it_is():
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[2] / "docs" / "chaos.md").read_text()
    table = doc.split("<!-- catalog -->\n", 1)[1].split("\n<!-- /catalog -->", 1)[0]
    assert table == catalog.markdown()
