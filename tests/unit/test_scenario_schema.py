"""The published JSON Schema of scenario files: written from the reader's knowledge, every
shipped scenario valid against it, and what it refuses the reader refuses too (exit 2, naming
the line and the field)."""

import json
from pathlib import Path

import jsonschema_rs
import pytest
import yaml

from stormlab.cli import main
from stormlab.scenarios import schema
from stormlab.scenarios.reader import load
from tests.unit.test_scenario import GOOD, SCENARIOS

ROOT = Path(__file__).resolve().parents[2]
VALIDATOR = jsonschema_rs.validator_for(json.loads((ROOT / "scenarios/scenario.schema.json").read_text()))


def test_the_published_schema_is_the_one_the_reader_knows():
    assert (ROOT / "scenarios/scenario.schema.json").read_text() == schema.text(), (
        "run: python -m stormlab.scenarios.schema > scenarios/scenario.schema.json"
    )


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.name)
def test_every_shipped_scenario_is_valid_against_the_schema(path):
    errors = [f"{list(e.instance_path)}: {e.message}" for e in VALIDATOR.iter_errors(yaml.safe_load(path.read_text()))]
    assert errors == []
    assert path.read_text().startswith("# yaml-language-server: $schema=scenario.schema.json")  # editors find it


@pytest.mark.parametrize(
    "text, message",
    [
        (GOOD.replace("fault: blip", "fault: meteor"), ":6: steps[0].fault: unknown fault 'meteor'"),
        (GOOD.replace("title: t\n", ""), ":1: scenario: missing field 'title'"),
        (GOOD.replace("at: 10s", "at: soon"), ":4: steps[0].at: not a duration: 'soon'"),
        (GOOD.replace("above: 0.3, ", ""), ":9: steps[1].expect: needs above, below or both"),
        (GOOD.replace(", within: 60s", ""), ":9: steps[1].expect: missing field 'within'"),
        (GOOD.replace("probe: customer_error_ratio", "probe: vibes"), ":9: steps[1].expect.probe: unknown probe 'vibes'"),
        (GOOD + "colour: red\n", ":10: scenario.colour: unknown field"),
        (GOOD + "settings: {allowance_s: -1s}\n", ":10: settings.allowance_s: not a duration: '-1s'"),
        (GOOD + "settings: {retry_policy: hope}\n", ":10: settings: retry_policy must be one of"),
        (GOOD + "settings: {racks: 500}\n", ":10: settings: racks must be between 1 and 128"),
        (GOOD + "stop_when: [{probe: promql, above: 1}]\n", ":10: stop_when[0]: expr (a PromQL expression) goes with the promql probe"),
        (GOOD + "stop_when: [{probe: margin, expr: up, above: 1}]\n", ":10: stop_when[0]: expr (a PromQL expression) goes with"),
        (GOOD + "steady_state_within: later\n", ":10: steady_state_within: not a duration: 'later'"),
        (
            GOOD.replace("args: {pick: 3, duration: 5s}", "args: {pick: 3, duration: 5s, mood: grim}"),
            ":7: steps[0].args.mood: unknown field",
        ),
    ],
)
def test_what_the_schema_refuses_the_reader_refuses_with_line_and_field(tmp_path, capsys, text, message):
    assert not VALIDATOR.is_valid(yaml.safe_load(text))
    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    assert main(["scenario", "validate", str(bad)]) == 2
    assert f"bad.yaml{message}" in capsys.readouterr().err


def test_a_good_file_is_valid_for_both():
    assert VALIDATOR.is_valid(yaml.safe_load(GOOD))
    text = GOOD + "stop_when: [{probe: customer_error_ratio, above: 0.9, for: 1m}]\nsteady_state_within: 30s\n"
    assert VALIDATOR.is_valid(yaml.safe_load(text))


@pytest.mark.parametrize("setting", ["retry_policy", "lease_retry_policy"])
@pytest.mark.parametrize("form", ["python:{file}:Evil", "{file}:Evil", "file:{yaml}", "entry:evil"])
def test_a_scenario_names_the_labs_own_policies_never_code_to_load(tmp_path, capsys, setting, form):
    """A scenario is handed to every team's lab (room up --scenario, scenario run): a policy file
    named in its settings would run its writer's code in every lab, without the check and the
    limits of --retry-policy. The schema and the reader both refuse it, and the file is never loaded."""
    evil = tmp_path / "evil.py"
    marker = tmp_path / "imported"
    evil.write_text(f"open({str(marker)!r}, 'w').close()\nclass Evil:\n    pass\n")
    (tmp_path / "evil.yaml").write_text("max_attempts: 3\n")
    spec = form.format(file=evil, yaml=tmp_path / "evil.yaml")
    text = GOOD + f"settings: {{{setting}: '{spec}'}}\n"
    assert not VALIDATOR.is_valid(yaml.safe_load(text))
    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    assert main(["scenario", "validate", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "bad.yaml:10: settings" in err and setting in err and ("the lab's own retry policies" in err or "must be one of" in err)
    assert not marker.exists()


@pytest.mark.parametrize("setting, value", [("retry_policy", "full-jitter+breaker"), ("lease_retry_policy", "exponential")])
def test_a_scenario_may_name_the_labs_own_policies(setting, value):
    assert VALIDATOR.is_valid(yaml.safe_load(GOOD + f"settings: {{{setting}: {value}}}\n"))
    assert getattr(load(GOOD + f"settings: {{{setting}: {value}}}\n").settings, setting) == value
