"""The command line as a user meets it: every subcommand's --help works and says its defaults,
the top-level help says the exit codes, every reporting command takes --json and prints one JSON
document, and a demo whose run was INVALID exits 3."""

import argparse
import json
from pathlib import Path

import pytest

from stormlab import cli
from stormlab.runs import demo

ROOT = Path(__file__).resolve().parents[2]
REPORTING = [
    ("status",),
    ("demo",),
    ("chaos", "list"),
    ("ops", "status"),
    ("scenario", "validate"),
    ("scenario", "run"),
    ("writecheck",),
    ("soak",),
    ("fuzz",),
    ("bench",),
    ("sweep",),
    ("mitigations",),
    ("sizing",),
]


def commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    found = [(path, parser)]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                found += commands(child, (*path, name))
    return found


ALL = commands(cli.build_parser())


def test_there_are_commands_to_walk():
    paths = {p for p, _ in ALL}
    expected = {(), ("up",), ("chaos", "blip"), ("chaos", "freeze"), ("ops", "pause-metadata"), ("ops", "set-capacity")}
    expected.add(("scenario", "run"))
    assert expected <= paths
    assert len(ALL) > 30  # the tools, chaos's faults, ops's moves, scenario's two


@pytest.mark.parametrize("path", [p for p, _ in ALL], ids=lambda p: " ".join(p) or "stormlab")
def test_every_command_s_help_works(path, capsys):
    with pytest.raises(SystemExit) as done:
        cli.main([*path, "--help"])
    out, err = capsys.readouterr()
    assert done.value.code == 0 and "usage: stormlab" in out and "Traceback" not in out + err


def test_the_help_says_the_exit_codes_and_the_defaults(capsys):
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    top = capsys.readouterr().out
    assert all(f"\n  {code} " in top for code in ("0", "1", "2", "3", "130"))
    with pytest.raises(SystemExit):
        cli.main(["demo", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "--speed SPEED" in help_text and "(default 1)" in help_text and "(default dynamodb-2015)" in help_text
    assert "--base-port BASE_PORT first port (0 = any free ports) (default 8700)" in help_text


@pytest.mark.parametrize("path", REPORTING, ids=" ".join)
def test_every_reporting_command_takes_json(path):
    parser = dict(ALL)[path]
    assert "--json" in {o for a in parser._actions for o in a.option_strings}


def test_scenario_validate_prints_one_json_document(capsys):
    assert cli.main(["scenario", "validate", str(ROOT / "scenarios/dynamodb-2015.yaml"), "--json"]) == 0
    checked = json.loads(capsys.readouterr().out)
    assert checked["ok"] is True and checked["steps"] > 5


def test_a_sweep_of_the_model_alone_prints_one_json_document(tmp_path, capsys):
    argv = ["sweep", "--quick", "--out", str(tmp_path), "--panels", "2015", "--blip-racks", "3", "--blip", "5s", "--gsis", "2",
            "--live", "0", "--jobs", "1", "--watch", "6", "--json"]  # fmt: skip
    assert cli.main(argv) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["panels"]["2015"]["point_2015"] == "stuck"


def test_a_demo_whose_run_was_invalid_exits_3(monkeypatch, tmp_path, capsys):
    """The lab is stood in for (no processes): the run's summary says INVALID, as a host too busy
    for the fleet makes it say; the command must not exit 0 on it."""
    started = {"components": {}, "links": "the link proxy carries the links"}
    monkeypatch.setattr(demo.launcher, "up", lambda settings, base_port, external=None: started)
    monkeypatch.setattr(demo.launcher, "down", lambda: True)

    class Invalid:
        samples: list = []
        allowance_s = 1.0

        def __init__(self, *args, **kwargs):
            pass

        async def run(self):
            return {"valid": False, "invalid_reasons": ["at the herd rack-05's event loop ran 1000 ms late"], "_times": {}}

    monkeypatch.setattr(demo, "Demo", Invalid)
    monkeypatch.setattr(demo, "write_chart", lambda samples, times, allowance, path, result: path)
    monkeypatch.setattr(demo, "render_summary", lambda result: "INVALID RUN")
    assert cli.main(["demo", "--json", "--out", str(tmp_path)]) == 3
    assert json.loads(capsys.readouterr().out)["valid"] is False
