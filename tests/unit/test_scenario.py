"""Scenario files: validation names the field and the line; the seed fixes the fault schedule."""

from pathlib import Path

import pytest

from stormlab.cli import main
from stormlab.scenarios.reader import load
from stormlab.scenarios.scenario import ScenarioError, schedule

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = sorted((ROOT / "scenarios").glob("*.yaml"))

GOOD = """\
title: t
steps:
  - name: blip
    at: 10s
    jitter: 5s
    fault: blip
    args: {pick: 3, duration: 5s}
  - name: storm
    expect: {probe: customer_error_ratio, above: 0.3, within: 60s}
"""


def test_every_shipped_scenario_validates(capsys):
    assert len(SCENARIOS) >= 3
    for path in SCENARIOS:
        assert main(["scenario", "validate", str(path)]) == 0, capsys.readouterr().err


@pytest.mark.parametrize(
    "text, message",
    [
        (GOOD.replace("fault: blip", "fault: meteor"), ":6: steps[0].fault: unknown fault 'meteor'"),
        (GOOD.replace("title: t\n", ""), ":1: scenario: missing field 'title'"),
        (GOOD.replace("at: 10s", "at: soon"), ":4: steps[0].at: not a duration: 'soon'"),
        (GOOD.replace("duration: 5s", "racks: 3"), ":3: steps[0].args: missing field 'duration'"),
        (GOOD.replace("above: 0.3, ", ""), ":9: steps[1].expect: needs above, below or both"),
        (GOOD.replace(", within: 60s", ""), ":9: steps[1].expect: missing field 'within'"),
        (GOOD.replace("probe: customer_error_ratio", "probe: vibes"), ":9: steps[1].expect.probe: unknown probe 'vibes'"),
        (GOOD.replace("name: storm", "name: blip"), ":8: steps[1].name: step names must be unique: blip"),
        (GOOD + "colour: red\n", ":10: scenario.colour: unknown field"),
        (GOOD + "settings: {allowance_s: -1s}\n", ":10: settings.allowance_s: not a duration: '-1s'"),
        (GOOD + "settings: {racks: 500}\n", ":10: settings: racks must be between 1 and 128"),
        (GOOD.replace("pick: 3", "pick: -1"), ":7: steps[0].args.pick: must not be negative"),
        ("title: [unclosed", "not YAML (line 1)"),
        (GOOD + 'compare: [{what: w, in_2015: x, measure: "window:blip..storm:table_error_ratio"}]\n', "table_error_ratio=TABLE"),
        (GOOD + 'compare: [{what: w, in_2015: x, measure: "window:blip..storm:vibes=orders"}]\n', "needs a probe of the lab"),
    ],
)
def test_broken_files_fail_with_the_field_and_line(text, message):
    with pytest.raises(ScenarioError) as err:
        load(text, "f.yaml")
    assert message in str(err.value)


def test_a_window_may_measure_one_table_s_customers():
    scenario = load(GOOD + 'compare: [{what: w, in_2015: x, measure: "window:blip..storm:table_error_ratio=orders"}]\n', "f.yaml")
    assert scenario.compare[0].probe == "table_error_ratio=orders"


def test_validate_exits_2_with_the_message(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text(GOOD.replace("fault: blip", "fault: meteor"))
    assert main(["scenario", "validate", str(bad)]) == 2
    assert "bad.yaml:6: steps[0].fault: unknown fault 'meteor'" in capsys.readouterr().err
    assert main(["scenario", "validate", str(tmp_path / "missing.yaml")]) == 2


def test_fault_arguments_are_checked_by_the_fault_catalog(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text(GOOD.replace("{pick: 3, duration: 5s}", "{racks: 3, duration: 5s, probability: 0.5}"))
    assert main(["scenario", "validate", str(bad)]) == 2
    assert "bad.yaml:3: steps[0] (blip): blip takes no probability; it takes racks, duration" in capsys.readouterr().err
    bad.write_text(GOOD.replace("{pick: 3, duration: 5s}", "{racks: 3, duration: 11m}"))
    assert main(["scenario", "validate", str(bad)]) == 2
    assert "bad.yaml:3: steps[0] (blip): duration must be more than 0s and at most 600s, got 660" in capsys.readouterr().err


def test_the_same_seed_gives_the_same_fault_schedule():
    scenario = load(GOOD)
    first, again, other = schedule(scenario, 7), schedule(scenario, 7), schedule(scenario, 8)
    assert [(p.at_s, p.args) for p in first] == [(p.at_s, p.args) for p in again]
    assert [(p.at_s, p.args) for p in first] != [(p.at_s, p.args) for p in other]
    assert 5 <= first[0].at_s <= 15 and len(first[0].args["racks"].split(",")) == 3
    assert schedule(scenario, 7, speed=2)[0].at_s == pytest.approx(first[0].at_s / 2)


def test_the_settings_a_scenario_needs_are_named_for_compose_and_a_running_lab():
    from stormlab.scenarios.cli import differences

    scenario = load((ROOT / "scenarios/dynamodb-2015.yaml").read_text())
    assert differences(scenario.settings, "dynamodb-2015") == {"STORMLAB_GSI_GROWTH": "off"}
    running = scenario.settings.to_env() | {"STORMLAB_SEED": "7"}
    assert differences(scenario.settings, running) == {"STORMLAB_SEED": "2015"}
    # a sped-up lab carries the profile's values and its speed: only the speed differs
    assert differences(scenario.settings.sped_up(2), running) == {"STORMLAB_SEED": "2015", "STORMLAB_SPEED": "2.0"}


LAUGHS = "\n".join(
    ['a: &a ["x", "x", "x", "x", "x", "x", "x", "x", "x", "x"]']
    + [f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}]" for i in range(8)]
    + ["title: laughs", "steps: []"]
)


@pytest.mark.parametrize(
    "text, says",
    [
        (LAUGHS, "YAML nodes once its aliases are expanded"),  # ~4 M nodes from 1 kB: refused before reading
        ("title: deep\nsteps: " + "[" * 40 + "]" * 40, "nested deeper than 32 levels"),
        ("title: deeper\nsteps: " + "[" * 2000 + "]" * 2000, "nested"),  # was a RecursionError
        ("title: big\ndescription: " + "x" * 300_000, "a scenario may have at most"),
    ],
)
def test_a_scenario_that_would_build_too_much_is_refused_with_the_reason(text, says):
    with pytest.raises(ScenarioError, match=says):
        load(text, "s.yaml")
