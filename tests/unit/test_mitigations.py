"""The mitigation table's pure parts: rows, the table, resuming, bad input."""

import csv

import pytest

from stormlab import cli
from stormlab.model.grid import PANELS
from stormlab.runs.mitigations import COLUMNS, ROWS, markdown, read_rows


def test_every_panel_of_the_sweep_and_both_live_deploys_are_rows():
    names = [r.name for r in ROWS]
    assert names[: len(PANELS)] == list(PANELS)
    assert {"deploy full jitter live", "deploy allowance 2s live"} <= set(names)
    assert all("," not in n for n in names)  # --only takes a comma list


def test_the_table_says_held_for_a_storm_that_never_recovered(tmp_path):
    path = tmp_path / "mitigations.csv"
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, COLUMNS)
        w.writeheader()
        w.writerow({"name": "2015", "plateau": 0.539, "recovered_after_s": "", "wasted_core_s": 1535.2, "error_minutes": 1.04,
                    "blipped_cell_plateau": "", "blast_radius": "", "valid": True, "speed": 2.0, "seconds": 80})  # fmt: skip
        w.writerow({"name": "full jitter", "plateau": 0.0, "recovered_after_s": 9.1, "wasted_core_s": 8, "error_minutes": 0.01,
                    "blipped_cell_plateau": 1.0, "blast_radius": 0.004, "valid": False, "speed": 2.0, "seconds": 80})  # fmt: skip
        f.write("allowance 2s,0.0,")  # a row cut short: not a result
    rows = read_rows(path)
    assert set(rows) == {"2015", "full jitter"}
    table = markdown([rows["2015"], rows["full jitter"]])
    assert "| 2015 | 53.9% | never (held) | 1535 | 1.04 | – | valid |" in table
    assert "| full jitter | 0.0% | 9 s | 8 | 0.01 | 100.0% / 0.4% | INVALID |" in table


@pytest.mark.parametrize("argv", [["--only", "no-such-fix"], ["--watch", "5s"], ["--watch", "soon"]])
def test_bad_arguments_exit_2_before_a_lab_starts(argv, tmp_path, capsys):
    assert cli.main(["mitigations", "--out", str(tmp_path), *argv]) == 2
    assert "stormlab:" in capsys.readouterr().err
    assert not (tmp_path / "mitigations.csv").exists()
