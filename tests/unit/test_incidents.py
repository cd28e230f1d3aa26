"""Incidents as units: each declared once (stormcore/incidents/), every command reaching it through
the registry, no code naming an incident outside its declaration and its own packages, and every
part of a declaration found where it says (its page, its game days, its dashboards, its alerts, its
moves in the catalog, its roles on the roster, its unit for the commands)."""

import ast
import json
import re
from pathlib import Path

import pytest

from chaos import catalog
from stormcore import incidents, roster, settings
from stormlab.incidents import registry
from stormlab.responder import alerts
from tests.unit.test_layers import GRAPH

ROOT = Path(__file__).resolve().parents[2]
CODE = ("stormcore", "metadata_service", "storage_node", "services", "chaos", "stormlab", "benchmarks")


def docstrings(tree: ast.AST) -> set[int]:
    """The ids of the string constants that are docstrings (a module's, a class's, a function's)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
                found.add(id(first.value))
    return found


def named_outside(incident: incidents.Incident) -> list[str]:
    """Where code outside the incident's declaration and own packages names it in a string (a
    docstring explains and may)."""
    name = re.compile(rf"(?<![\w-]){re.escape(incident.name)}(?![\w-])")
    declaration = f"stormcore/incidents/{incident.name.replace('-', '_')}.py"
    found = []
    for package in CODE:
        for path in sorted((ROOT / package).rglob("*.py")):
            where = path.relative_to(ROOT).as_posix()
            if where == declaration or any(where.startswith(own + "/") for own in incident.packages):
                continue
            tree = ast.parse(path.read_text())
            skip = docstrings(tree)
            for node in ast.walk(tree):
                if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip and name.search(node.value):
                    found.append(f"{where}:{node.lineno}")
    return found


@pytest.mark.parametrize("incident", incidents.REGISTERED, ids=lambda i: i.name)
def test_no_code_names_an_incident_outside_its_declaration_and_its_own_packages(incident):
    assert named_outside(incident) == []


def test_the_name_test_finds_a_name_where_it_should_not_be(tmp_path, monkeypatch):
    """The walk is not blind: a module of the lab that compares a setting to an incident's name is found."""
    planted = ROOT / "stormlab" / "runs" / "_planted_name.py"
    planted.write_text(f'"""Docstrings may say {incidents.FIRST.name}."""\n\nSTORY = "{incidents.FIRST.name}"\n')
    try:
        assert named_outside(incidents.FIRST) == ["stormlab/runs/_planted_name.py:3"]
    finally:
        planted.unlink()


def test_every_declared_incident_is_a_unit_the_commands_reach():
    assert set(registry.UNITS) == set(incidents.NAMES)
    assert all(registry.unit(n).incident is incidents.find(n) for n in incidents.NAMES)
    with pytest.raises(incidents.UnknownIncident, match="known: " + ", ".join(incidents.NAMES)):
        registry.unit("gcp-1999")


@pytest.mark.parametrize("incident", incidents.REGISTERED, ids=lambda i: i.name)
def test_every_part_of_a_declaration_is_where_it_says(incident):
    assert (ROOT / incident.page).is_file()
    assert settings.profile(incident.name).incident == incident.name
    assert incident.trigger in catalog.FAULTS and all(m in catalog.FAULTS for m in incident.moves)
    assert set(incident.roles) <= set(roster.ROLES) and roster.game_roles(incident.name) == incident.roles
    assert all(roster.BY_NAME[p.name].incident == incident.name for p in incident.processes)
    for scenario in incident.scenarios:
        text = (ROOT / "scenarios" / scenario).read_text()
        assert re.search(rf"^profile: {re.escape(incident.name)}$", text, re.M) or incident is incidents.FIRST, scenario
    for board in incident.dashboards:
        assert json.loads((ROOT / "grafana" / "dashboards" / board).read_text())["title"]
    assert set(incident.alerts) <= {a.name for a in alerts.ALERTS}
    assert incident.headline is not None and incident.guard
    assert all(p.startswith(("services/", "stormlab/incidents/")) and (ROOT / p).is_dir() for p in incident.packages)


def own_modules(incident: incidents.Incident) -> set[str]:
    return {m for m in GRAPH if any(m == f.replace("/", ".") or m.startswith(f.replace("/", ".") + ".") for f in incident.packages)}


@pytest.mark.parametrize("incident", incidents.REGISTERED, ids=lambda i: i.name)
def test_no_incident_imports_another_incidents_rooms(incident):
    """What two incidents share lives below both (stormcore/, the engine's rooms); an incident's own
    packages never import another's."""
    mine = own_modules(incident)
    others = set().union(*(own_modules(i) for i in incidents.REGISTERED if i is not incident))
    assert mine, incident.packages
    assert sorted(f"{m} -> {d}" for m in mine for d in GRAPH[m] if d in others) == []


def test_the_default_profile_is_the_first_incident():
    assert settings.DEFAULT_PROFILE == incidents.FIRST.name == settings.LabSettings().incident
