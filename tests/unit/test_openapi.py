"""Every process describes every route it serves, in an OpenAPI 3.1 document a validator loads."""

import dataclasses
from pathlib import Path

import pytest
import schemathesis
from aiohttp import web

from chaos import catalog
from storage_node import contract
from stormcore import openapi, roster
from stormcore.openapi import schema_of
from stormcore.wire import MetadataStatus, RackStatus
from stormlab.artefacts import apidoc
from stormlab.rooms import standalone

TOKEN = "a-test-token-long-enough"


@pytest.fixture(autouse=True)
def lab_token(monkeypatch):
    monkeypatch.setenv("STORMLAB_TOKEN", TOKEN)


APPS = apidoc.APPS | standalone.APPS  # the lab's processes, and the game's consoles


@pytest.mark.parametrize("name", sorted(APPS))
def test_every_route_is_described_and_the_description_loads(name, tmp_path):
    app = apidoc.build(name, tmp_path, APPS)
    assert openapi.undocumented(app) == []
    doc = openapi.document(app)
    common = {"/openapi.json"} if name in standalone.APPS else {"/openapi.json", "/metrics", "/healthz", "/status"}
    assert common <= set(doc["paths"])
    loaded = schemathesis.openapi.from_dict(doc)
    operations = [result.ok() for result in loaded.get_all_operations()]  # raises on a description it cannot read
    assert len(operations) == sum(len(methods) for methods in doc["paths"].values())
    for path, methods in doc["paths"].items():
        for method, op in methods.items():
            assert op["responses"], f"{method} {path} lists no answer"
            if op.get("security"):
                assert "401" in op["responses"]


def test_a_route_added_without_a_description_is_found(tmp_path):
    app = apidoc.build("console", tmp_path)

    async def secret(request: web.Request) -> web.Response:
        return web.Response()

    app.router.add_get("/secret", secret)
    assert openapi.undocumented(app) == ["GET /secret"]


def test_status_schemas_are_the_wire_types():
    meta = schema_of(MetadataStatus)
    assert meta["properties"]["component"] == {"const": "metadata"}
    assert set(meta["required"]) == {"component", *(f.name for f in dataclasses.fields(MetadataStatus))}
    assert meta["properties"]["processing_p99_s"] == {"anyOf": [{"type": "number"}, {"type": "null"}]}
    rack = schema_of(RackStatus)
    assert rack["properties"]["renewal_attempts_total"] == {"type": "object", "additionalProperties": {"type": "number"}}


def test_fault_bodies_follow_the_catalog():
    schema = catalog.body_schema(("blip", "capacity"), racks_total=4)
    blip, capacity = schema["oneOf"]
    assert blip["required"] == ["fault", "duration_s"] and blip["additionalProperties"] is False
    assert blip["properties"]["racks"]["items"] == {"type": "integer", "minimum": 0, "maximum": 3}
    assert blip["properties"]["duration_s"]["exclusiveMinimum"] == 0
    assert capacity["required"] == ["fault", "cores", "duration_s"]
    assert "timeout_s" not in capacity["properties"]  # the client's own argument is never sent


def test_docs_list_every_operation():
    doc = (Path(__file__).parents[2] / "docs" / "api.md").read_text()
    assert apidoc.markdown() in doc, "docs/api.md is out of date: python -m stormlab.artefacts.apidoc prints the table"
    assert standalone.markdown() in doc, "docs/api.md is out of date: python -m stormlab.rooms.standalone prints the consoles' table"


def test_every_process_of_the_roster_has_its_description_in_the_api_doc():
    expected = {p.name if p.kind != roster.RACK else "rack-NN" for p in roster.ROSTER} | {"supervisor"}
    assert set(apidoc.APPS) == expected


def test_the_rack_contract_is_a_description_the_fuzzer_loads_and_the_labs_racks_keep(tmp_path):
    """docs/contract.md as OpenAPI: the supervisor serves it at /contract.json, `stormlab fuzz`
    judges an external rack by it, and the lab's own racks serve its item operations as declared."""
    nodes = ["r00n000", "r00n001"]
    doc = contract.description(nodes)
    loaded = schemathesis.openapi.from_dict(doc)
    ops = {f"{r.ok().method.upper()} {r.ok().path}" for r in loaded.get_all_operations()}
    assert ops == {"GET /healthz", "GET /status", f"GET {contract.ITEM}", f"PUT {contract.ITEM}"}
    ours = openapi.document(apidoc.build("rack-NN", tmp_path))
    for method in ("get", "put"):
        mine = ours["paths"][contract.ITEM][method]
        theirs = doc["paths"][contract.ITEM][method]
        assert (
            mine["responses"] == theirs["responses"]
            and mine["requestBody" if method == "put" else "summary"] == theirs["requestBody" if method == "put" else "summary"]
        )
    status = doc["paths"]["/status"]["get"]["responses"]["200"]["content"]["application/json"]["schema"]
    assert set(status["required"]) <= set(schema_of(RackStatus)["properties"]) | {"component", "loop_lag_p99_s"}
    assert "/contract.json" in openapi.document(apidoc.build("supervisor", tmp_path))["paths"]
