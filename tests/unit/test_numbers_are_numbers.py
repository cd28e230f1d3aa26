"""Numbers are numbers: NaN and the infinities pass every range check (``lo <= nan <= hi`` is
false, and so is ``nan < lo``), so each reader of outside input refuses them at the door: the fault
catalog (a person's text and a holder's JSON), the settings, scenario files, policy files and JSON
bodies. Once NaN was inside, ``/status`` answered JSON no client could read."""

import json
import math

import pytest

from chaos import catalog
from chaos.catalog import ChaosError
from metadata_service.app import create_app
from stormcore import documents, policies
from stormcore.policies.errors import PolicyError
from stormcore.settings import LabSettings, SettingsError, parse_duration
from stormcore.wire import WireError, parse_object
from stormlab.scenarios import reader
from stormlab.scenarios.scenario import ScenarioError

TOKEN = "n" * 32
NOT_NUMBERS = ("nan", "NaN", "inf", "-inf", "Infinity", "1e999")


@pytest.mark.parametrize("text", NOT_NUMBERS)
def test_a_fault_typed_with_a_number_that_is_not_one_is_refused(text):
    with pytest.raises(ChaosError, match="cores"):
        catalog.request("capacity", {"cores": text, "duration": "5s"}, racks_total=10)
    with pytest.raises(ChaosError, match="factor"):
        catalog.request("gsi-growth", {"factor": text, "duration": "5s"}, racks_total=10)


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_a_holder_refuses_nan_and_infinities_in_json(value):
    with pytest.raises(ChaosError, match="cores must be a number"):
        catalog.check("capacity", {"fault": "capacity", "cores": value, "duration_s": 5})
    with pytest.raises(ChaosError, match="duration must be a duration"):
        catalog.check("blip", {"fault": "blip", "racks": [0], "duration_s": value})


@pytest.mark.parametrize("raw", ['{"cores": NaN}', '{"cores": Infinity}', '{"cores": -Infinity}', '{"cores": 1e999}'])
def test_a_json_body_with_nan_or_an_infinity_is_not_json(raw):
    with pytest.raises(WireError, match="not JSON"):
        parse_object(raw)
    with pytest.raises(ValueError):
        documents.loads(raw)
    assert documents.loads('{"cores": 1e300}') == {"cores": 1e300}


@pytest.mark.parametrize("pair", ["customer_rate=nan", "capacity_cores=inf", "allowance_s=1e999s", "budget_ratio=NaN"])
def test_a_setting_given_nan_or_an_infinity_is_refused(pair):
    with pytest.raises(SettingsError):
        LabSettings().with_text([pair])


def test_a_setting_made_in_code_with_nan_is_refused_too():
    with pytest.raises(SettingsError):
        LabSettings(capacity_cores=math.nan)
    with pytest.raises(SettingsError):
        parse_duration("1" + "0" * 400 + "s")


SCENARIO = """\
title: nan
steps:
  - at: 0s
    fault: capacity
    args: {cores: %s}
    duration: 5s
"""


@pytest.mark.parametrize("value", [".nan", "nan", ".inf", "1e999"])
def test_a_scenario_with_a_number_that_is_not_one_is_refused(value):
    with pytest.raises(ScenarioError):
        reader.load(SCENARIO % value, "nan.yaml")


@pytest.mark.parametrize("value", [".nan", ".inf", "-.inf"])
def test_a_policy_file_with_nan_or_an_infinity_is_refused(tmp_path, value):
    (tmp_path / "p.yaml").write_text(f"backoff: {{base: {value}, cap: 10s}}\njitter: full\n")
    with pytest.raises(PolicyError, match="backoff.base is not a number the lab takes"):
        policies.resolve("p.yaml", cwd=tmp_path)


def test_a_deeply_nested_policy_file_is_refused_not_a_traceback(tmp_path):
    (tmp_path / "deep.yaml").write_text("a: " + "[" * 5000 + "]" * 5000 + "\n")
    with pytest.raises(PolicyError, match="nested"):
        policies.resolve("deep.yaml", cwd=tmp_path)
    (tmp_path / "laughs.yaml").write_text('a: &a ["x","x","x","x","x","x","x","x","x"]\n' + "".join(
        f"{c}: &{c} [*{p},*{p},*{p},*{p},*{p},*{p},*{p},*{p},*{p}]\n" for p, c in zip("abcdefg", "bcdefgh", strict=True)
    ))  # fmt: skip
    with pytest.raises(PolicyError, match="YAML nodes"):
        policies.resolve("laughs.yaml", cwd=tmp_path)


async def test_the_metadata_service_refuses_nan_cores_and_its_status_stays_json(aiohttp_client):
    client = await aiohttp_client(create_app(LabSettings(), token=TOKEN))
    auth = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    for body in ('{"fault": "capacity", "cores": NaN, "duration_s": 5}', '{"fault": "gsi-growth", "factor": NaN, "duration_s": 5}'):
        answer = await client.post("/faults", data=body, headers=auth)
        assert answer.status == 400, await answer.text()
    status = await client.get("/status")
    json.loads(await status.text(), parse_constant=lambda name: pytest.fail(f"/status holds {name}"))


def test_an_integer_written_with_a_point_is_the_integer_the_schema_says_it_is():
    """JSON Schema's ``integer`` takes ``1.0`` (a number with no fraction); the fuzzer sends it, and
    a holder that refused it answered 400 to a request its own description calls valid."""
    blip = catalog.check("blip", {"fault": "blip", "racks": [1.0, 0], "duration_s": 5}, racks_total=2)
    assert blip["racks"] == [1, 0] and all(type(r) is int for r in blip["racks"])
    workers = catalog.check("scale-workers", {"fault": "scale-workers", "workers": 8.0, "duration_s": 5})
    assert workers["workers"] == 8 and type(workers["workers"]) is int
    with pytest.raises(ChaosError, match="distinct rack numbers"):
        catalog.check("blip", {"fault": "blip", "racks": [1.0, 1], "duration_s": 5}, racks_total=2)  # the same rack twice
    for not_whole in (1.5, True, "1", math.nan):
        with pytest.raises(ChaosError):
            catalog.check("blip", {"fault": "blip", "racks": [not_whole], "duration_s": 5}, racks_total=2)
        with pytest.raises(ChaosError):
            catalog.check("scale-workers", {"fault": "scale-workers", "workers": not_whole, "duration_s": 5})
    assert [documents.whole(v) for v in (3, 3.0, -2.0, 2.5, True, math.inf, "3", None)] == [3, 3, -2, None, None, None, None, None]
