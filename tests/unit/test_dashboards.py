"""The dashboards as Grafana reads them: decoded with Grafana's own schema library, importable
into another Grafana (inputs, requirements, a datasource variable), with variables for the cell,
rack and table, and no panel that puts two units on one axis."""

import json
from pathlib import Path

import pytest
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import dashboard as dashboard_schema

ROOT = Path(__file__).resolve().parents[2]
DASHBOARDS = {p.stem: json.loads(p.read_text()) for p in sorted((ROOT / "grafana/dashboards").glob("*.json"))}


@pytest.mark.parametrize("name", DASHBOARDS)
def test_each_dashboard_decodes_with_grafana_s_schema_and_round_trips(name):
    raw = DASHBOARDS[name]
    decoded = dashboard_schema.Dashboard.from_json(raw)
    assert decoded.uid == raw["uid"] and decoded.title == raw["title"]
    assert len(decoded.panels) == len(raw["panels"]) and all(p.title for p in decoded.panels)
    again = json.loads(json.dumps(decoded, cls=JSONEncoder))  # and back to Grafana's JSON
    assert again["uid"] == raw["uid"] and [p["title"] for p in again["panels"]] == [p["title"] for p in raw["panels"]]
    names = [v.name for v in decoded.templating.list_val]
    assert names[0] == "datasource"


@pytest.mark.parametrize("name", DASHBOARDS)
def test_each_dashboard_can_be_imported_into_another_grafana(name):
    raw = DASHBOARDS[name]
    assert [i["name"] for i in raw["__inputs"]] == ["DS_PROMETHEUS"] and raw["__inputs"][0]["pluginId"] == "prometheus"
    required = {(r["type"], r["id"]) for r in raw["__requires"]}
    assert {("grafana", "grafana"), ("datasource", "prometheus")} <= required
    assert {("panel", p["type"]) for p in raw["panels"]} <= required
    (source,) = [v for v in raw["templating"]["list"] if v["type"] == "datasource"]
    assert source["query"] == "prometheus" and source["current"]["value"] == "${DS_PROMETHEUS}"


def test_the_variables_pick_cells_racks_and_tables_and_the_panels_use_them():
    variables = {v["name"]: v for d in DASHBOARDS.values() for v in d["templating"]["list"]}
    assert {"datasource", "cell", "rack", "table"} <= set(variables)
    exprs = " ".join(t["expr"] for d in DASHBOARDS.values() for p in d["panels"] for t in p["targets"])
    for name in ("cell", "rack", "table"):
        assert variables[name]["includeAll"] and f'=~"${name}"' in exprs, name


def test_the_validity_panel_has_its_own_scale_and_the_lab_s_cpu_its_own_axis():
    (panel,) = [p for p in DASHBOARDS["storm-overview"]["panels"] if p["title"].startswith("Validity")]
    defaults = panel["fieldConfig"]["defaults"]
    assert "max" not in defaults and defaults["unit"] == "none"  # not clipped at 1, not a ratio
    (cpu,) = panel["fieldConfig"]["overrides"]
    properties = {p["id"]: p["value"] for p in cpu["properties"]}
    assert cpu["matcher"]["options"] == "the lab's CPU (cores)" and properties["custom.axisPlacement"] == "right"
    assert properties["custom.thresholdsStyle"] == {"mode": "off"}  # a healthy lab at 0.5 cores is not red


@pytest.mark.parametrize("name", DASHBOARDS)
def test_no_panel_draws_two_units_on_one_axis(name):
    """A panel whose targets' legends say different things (a count and seconds, a count and a
    share) moves all but the first to an override of their own."""
    for panel in DASHBOARDS[name]["panels"]:
        if panel["type"] != "timeseries" or len(panel["targets"]) < 2:
            continue
        units = {panel["fieldConfig"]["defaults"].get("unit")}
        for override in panel["fieldConfig"].get("overrides", []):
            units |= {p["value"] for p in override["properties"] if p["id"] == "unit"}
        mixed = panel["title"] in (
            "Metadata service: in flight and CPU busy",
            "scaling: activity backlog",
            "Validity: is this run the model's?",
        )
        assert len(units) == (2 if mixed else 1), (panel["title"], units)


def test_the_pngs_draw_a_right_axis_series_on_its_own_axis_with_its_unit_in_words():
    from stormlab.artefacts.dashboard_png import _label, right_axis

    panels = {p["title"]: p for p in DASHBOARDS["storm-overview"]["panels"]}
    validity = next(p for t, p in panels.items() if t.startswith("Validity"))
    right = right_axis(validity)
    assert list(right) == ["the lab's CPU (cores)"] and _label(right["the lab's CPU (cores)"]) == "the lab's CPU (cores)"
    metadata = next(p for t, p in panels.items() if t.startswith("Metadata service"))
    assert _label(right_axis(metadata)["CPU busy"]) == "share of its virtual cores (%)"
