"""`stormlab bench`'s storm table and page, from demo files (the measuring parts run in the bench)."""

import argparse
import json

import pytest

from stormcore.errors import UsageError
from stormlab.runs.bench import Bench, parse_renewal_sizes, with_section


def demo_file(tmp_path, name, nodes, speed, requested, plateau, valid, holds=True, reasons=(), tried=()):
    summary = {
        "settings": {"racks": "10", "nodes_per_rack": str(nodes // 10)},
        "speed": speed,
        "speed_requested": requested,
        "plateau_error_ratio": plateau,
        "storm_holds": holds,
        "valid": valid,
        "invalid_reasons": list(reasons),
        "speeds_tried": list(tried),
    }
    path = tmp_path / name
    path.write_text(json.dumps({"summary": summary}))
    return path


def test_the_largest_valid_fleet_at_speed_1_and_auto(tmp_path):
    demos = [
        demo_file(tmp_path, "a.json", 1000, 1.0, "1", 0.547, True),
        demo_file(tmp_path, "b.json", 5000, 1.0, "1", 0.554, True),
        demo_file(tmp_path, "c.json", 7000, 1.0, "1", 0.986, False, reasons=["at the herd (t=+29s) rack-07 …"]),
        demo_file(tmp_path, "d.json", 7000, 0.25, "auto", 0.55, True, tried=[{"speed": 0.5, "why": "INVALID: lag"}]),
        demo_file(tmp_path, "e.json", 10000, 0.25, "auto", 0.80, True),  # valid but off the plateau: not counted
    ]
    out = tmp_path / "benchmarks.md"
    out.write_text("# old\n\n## Profiles\n\nkept as it was\n")
    bench = Bench(argparse.Namespace(demos=demos, out=out, json=False))
    bench.demos()
    assert bench.figures["largest_valid_fleet"] == {"speed_1": 5000, "auto": 7000}
    bench.write()
    page = out.read_text()
    assert "at speed 1 **5,000** nodes; with `--speed auto` **7,000** nodes" in page
    assert "| c.json | 7,000 | 1 | 1 | 98.6% | yes | INVALID: at the herd (t=+29s) rack-07 … |" in page
    assert "(left 0.5: INVALID: lag)" in page
    assert page.endswith("## Profiles\n\nkept as it was\n")  # the profiles are the profiler's to write


def test_the_renewal_sizes_are_the_ones_the_bench_knows_with_the_herd_s_20_among_them():
    assert parse_renewal_sizes("20,138") == [20, 138] and parse_renewal_sizes("20") == [20]
    refused = {"138": "must include 20", "20,20": "at most once", "20,99": "at most once", "x": "separated by commas", "": "at most once"}
    for bad, said in refused.items():
        with pytest.raises(UsageError, match=said):
            parse_renewal_sizes(bad)


def test_a_measurement_writes_its_own_section_of_the_page_and_keeps_the_others():
    page = "# stormlab benchmarks\n\n## Fleets\n\nrows\n\n## Profiles\n\n### rack-00\n\nlines\n"
    added = with_section(page, "## A class at once", "## A class at once\n\nfirst\n")
    assert added.endswith("lines\n\n## A class at once\n\nfirst\n") and "## Fleets\n\nrows" in added
    again = with_section(added, "## A class at once", "## A class at once\n\nsecond\n")
    assert "first" not in again and again.count("## A class at once") == 1 and again.endswith("second\n")
    profiles = with_section(again, "## Profiles", "## Profiles\n\n### metadata\n\nnew\n")
    assert "### rack-00" not in profiles and "### metadata\n\nnew\n\n## A class at once\n\nsecond\n" in profiles
