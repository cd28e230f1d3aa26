"""The lab's reading is one typed structure: built where the lab is observed, its derived figures
properties, its probes read by one name, its JSON what `status --json` printed and a journal keeps."""

import ast
import json
from pathlib import Path

import pytest

from stormcore.wire import RackStatus
from stormlab.engine.observe import summarize
from stormlab.engine.reading import FIELDS, JOURNALED, PROBES, Journaled, Reading, readings
from stormlab.responder import alerts

ROOT = Path(__file__).resolve().parents[2]


def _rack(rack: int, disqualified: int) -> RackStatus:
    return RackStatus(
        loop_lag_p99_s=0.0, rack=rack, pid=None, link_up=rack != 1, nodes_total=100, nodes_serving=100 - disqualified,
        nodes_disqualified=disqualified, nodes_starting=0, renewal_p99_s=0.4, renewal_attempts_total={"first": 10, "retry": 5},
        allowance_s=1.0,
    )  # fmt: skip


def test_the_derived_figures_are_properties_of_the_reading():
    r = Reading(nodes_total=400, nodes_disqualified=60, metadata_processing_p99_s=0.7, allowance_s=1.0,
                table_error_ratio={"orders": 0.2, "catalog": None, "metric-groups": 0.9},
                cell_disqualified_fraction={"0": 0.3, "1": None, "2": 0.0})  # fmt: skip
    assert r.disqualified_fraction == 0.15 and r.margin == pytest.approx(0.7)
    assert r.worst_table_error_ratio == 0.9 and r.worst_cell_disqualified_fraction == 0.3 and r.cells == 3.0
    empty = Reading()
    assert (empty.disqualified_fraction, empty.margin, empty.worst_table_error_ratio, empty.cells) == (None, None, None, None)


def test_every_probe_is_read_by_its_name_and_an_unknown_one_is_refused():
    r = Reading(customer_error_ratio=0.55, table_error_ratio={"orders": 0.4}, metadata_paused=True, promql={"up": 1.0})
    for name in PROBES:
        r.probe(name, "orders", "up")  # each answers (a number or None)
    assert r.probe("table_error_ratio", "orders") == 0.4 and r.probe("promql", expr="up") == 1.0
    assert r.probe("metadata_paused") == 1.0 and Reading().probe("metadata_paused") == 0.0
    with pytest.raises(KeyError, match="no probe"):
        r.probe("customer_errors")


def test_every_alert_reads_a_probe_the_reading_has():
    assert {t.probe for a in alerts.ALERTS for t in a.terms} <= set(PROBES)


def test_its_json_is_the_shape_status_printed_and_a_journal_keeps_what_a_game_day_reads():
    snap = summarize(endpoints={"metadata": "http://127.0.0.1:1"}, unreachable=["queues"], statuses={},
                     racks=[_rack(0, 30), _rack(1, 0)], allowance_s=1.0, host={"loop_lag_p99_s": 0.01}, faults=[])  # fmt: skip
    doc = snap.to_json()
    assert "t" not in doc and "racks" not in doc and "promql" not in doc
    assert doc["nodes_disqualified"] == 30 and doc["racks_link_down"] == [1] and doc["renewal_attempts_total"] == {"first": 20, "retry": 10}
    assert Reading.from_json(json.loads(json.dumps(doc))) == snap  # what a script reads back is the reading
    kept = snap.but(t=12.5, promql={"up": 1.0}).to_json(JOURNALED)
    assert set(kept) == set(JOURNALED) | {"promql"} and kept["t"] == 12.5
    back = readings([kept])[0]
    assert back.t == 12.5 and back.disqualified_fraction == 0.15 and back.endpoints == {}  # what it did not keep: unknown
    # a journal written before a field was kept, or with a null where a count is: the empty value
    old = Reading.from_json({"t": 1.0, "customer_error_ratio": 0.5, "table_error_ratio": None, "unknown_key": 3})
    assert old.table_error_ratio == {} and old.customer_error_ratio == 0.5 and old.nodes_total == 0


def test_a_runner_s_journal_is_read_back_without_parsing_its_samples_again_and_nobody_edits_them():
    taken = Reading(t=3.0, customer_error_ratio=0.55, nodes_total=400, nodes_disqualified=60)
    kept = Journaled(taken)
    assert json.loads(json.dumps([kept]))[0] == dict(kept) == taken.to_json(JOURNALED)  # written as any journal is
    assert readings([kept])[0] is taken  # the reading itself, not parsed again (scored every second while consoles watch)
    assert readings([dict(kept)])[0] == taken  # a copy, or a file, is parsed
    with pytest.raises(TypeError, match="what was measured"):
        kept["customer_error_ratio"] = 0.0
    with pytest.raises(TypeError):
        kept |= {"t": 0.0}


READING_NAMES = {"snap", "sample", "reading"}


def test_no_module_reads_a_reading_by_string_key():
    """The names a reading goes by across stormlab/ (snap, sample, reading) are never subscripted or
    .get() with a string: every figure is an attribute, every probe Reading.probe."""
    found = []
    for path in sorted((ROOT / "stormlab").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            target, key = None, None
            if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, str):
                target, key = node.value, node.slice.value
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("get", "pop")
                and node.args
                and isinstance(node.args[0], ast.Constant)
            ):
                target, key = node.func.value, node.args[0].value
            if isinstance(target, ast.Name) and target.id in READING_NAMES and key in FIELDS:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} {target.id}[{key!r}]")
    assert found == []
