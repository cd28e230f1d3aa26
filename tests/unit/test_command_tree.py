"""The whole command tree, walked: every command a person can run has a description, examples that
parse, --json that answers with one JSON document (errors too), a default said for every value
option; a flag means one thing everywhere (docs/cli.md's table, from the parser); old names still
work, with a message."""

from __future__ import annotations

import argparse
import json
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from chaos import cli as chaos_cli
from chaos import client
from chaos.flags import HelpFormatter
from stormcore.commandline import Parser, leaves
from stormlab.artefacts import cli_page
from stormlab.cli import build_parser, main

ROOT = Path(__file__).resolve().parents[2]
TREE = build_parser()
LEAVES = {" ".join(path): leaf for path, leaf in leaves(TREE)}


@pytest.fixture
def no_lab(tmp_path, monkeypatch):
    monkeypatch.setenv("STORMLAB_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("STORMLAB_ROOM_DIR", str(tmp_path / "room"))
    for name in ("STORMLAB_BACKEND", "STORMLAB_K8S_NAMESPACE", "STORMLAB_COMPOSE_PROJECT", "STORMLAB_ROLE"):
        monkeypatch.delenv(name, raising=False)
    yield
    Parser.json_wanted = False


def one_document(out: str) -> dict:
    """stdout holds exactly one JSON document."""
    doc = json.loads(out)
    assert isinstance(doc, dict)
    return doc


def test_the_tree_is_whole():
    assert len(LEAVES) >= 49 and {"up", "chaos blip", "chaos halt", "ops resume", "room up", "room play", "replay"} <= set(LEAVES)


@pytest.mark.parametrize("words", sorted(LEAVES))
def test_every_command_has_a_description_examples_that_parse_and_json(words, capsys):
    leaf = LEAVES[words]
    assert leaf.description and len(leaf.description) > 40, f"stormlab {words}: no description"
    assert "--json" in {o for a in leaf._actions for o in a.option_strings}
    examples = re.findall(r"^  (stormlab .*)$", re.split(r"^examples?:$", leaf.epilog or "", flags=re.M)[-1], re.M)
    assert examples, f"stormlab {words}: no example"
    for line in examples:
        argv = shlex.split(line)[1:]
        assert argv[: len(words.split())] == words.split() or words.split()[0] in argv, line
        args = build_parser().parse_args(argv)  # SystemExit here: an example that does not parse
        assert args.command_words == words, line
        assert "is now" not in capsys.readouterr().err, f"{line}: an example uses an old name"


@pytest.mark.parametrize("words", sorted(LEAVES))
def test_every_value_option_says_its_default(words):
    formatter = HelpFormatter(prog="stormlab")
    silent = [
        a.option_strings[-1]
        for a in LEAVES[words]._actions
        if a.option_strings and a.help != argparse.SUPPRESS and a.nargs != 0 and not a.required
        if "default" not in (formatter._get_help_string(a) or "")
    ]
    assert silent == [], f"stormlab {words}: these do not say their default"


def test_a_flag_means_one_thing_everywhere():
    uses = cli_page.uses(TREE)
    assert sorted(set(uses) - set(cli_page.meanings())) == [], "a flag with no meaning written in stormlab/artefacts/cli_page.py"
    assert sorted(set(cli_page.MEANINGS) - set(uses)) == [], "a meaning for a flag no command has"
    two = {flag: sorted({str(cli_page.signature(a)) for _, a in where}) for flag, where in uses.items()}
    assert {flag: s for flag, s in two.items() if len(s) > 1} == {}, "a flag that takes different values on different commands"


def test_the_signature_check_can_fail():
    """The check above, on a tree where --racks is a count on one command and a list on another."""
    p = argparse.ArgumentParser()
    sub = p.add_subparsers()
    sub.add_parser("up").add_argument("--racks", type=int)
    sub.add_parser("blip").add_argument("--racks", nargs="+")
    assert len({cli_page.signature(a) for _, a in cli_page.uses(p)["--racks"]}) == 2


def test_docs_cli_has_the_table_of_the_parser():
    doc = (ROOT / "docs" / "cli.md").read_text()
    assert cli_page.markdown(TREE) in doc, "docs/cli.md is out of date: `make cli-table` writes it"
    assert "| `--racks` | a fleet's size" in doc and "| `--rack-set` | a selection of racks" in doc


@pytest.mark.parametrize("words", sorted(LEAVES))
def test_json_answers_a_command_line_error_with_one_document(words, no_lab, capsys):
    example = re.findall(r"^  (stormlab .*)$", LEAVES[words].epilog, re.M)[0]
    argv = [*shlex.split(example)[1:], "--json", "--no-such-flag"]
    Parser.json_wanted = True
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(argv)
    assert exited.value.code == 2
    doc = one_document(capsys.readouterr().out)
    assert doc["exit_code"] == 2 and doc["ok"] is False and "--no-such-flag" in doc["error"]


NO_LAB = [
    ["status"],
    ["chaos", "blip", "--rack-set", "3", "--duration", "5s"],
    ["chaos", "list"],
    ["chaos", "halt"],
    ["chaos", "halt", "--fault", "blip"],
    ["ops", "status"],
    ["ops", "set-capacity", "80"],
    ["ops", "pause-metadata"],
    ["ops", "note", "hello"],
]
NO_ROOM = [["room", "status"], ["room", "play"], ["room", "halt"], ["room", "console"], ["room", "env", "team-1"]]


@pytest.mark.parametrize("argv", NO_LAB + NO_ROOM)
def test_no_lab_is_one_exit_code_and_one_document(argv, no_lab, capsys):
    assert main(argv) == 1
    assert re.search(r"no (lab|room) is up", capsys.readouterr().err)
    assert main([*argv, "--json"]) == 1
    doc = one_document(capsys.readouterr().out)
    assert doc["exit_code"] == 1 and doc["ok"] is False and re.search(r"no (lab|room) is up", doc["error"])
    assert doc["command"] == "stormlab " + " ".join(argv[:2] if " ".join(argv[:2]) in LEAVES else argv[:1])


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["chaos", "blip", "--rack-set", "abc", "--duration", "5s"], "racks must be a count or a comma list"),
        (["chaos", "blip", "--rack-set", "3", "--duration", "0s"], "duration must be more than 0s"),
        (["chaos", "blip", "--rack-set", "3", "--duration", "soon"], "not a duration"),
        (["chaos", "blip", "--rack-set", "0", "--duration", "5s"], "a count of racks is at least 1"),
        (["chaos", "blip", "--fraction", "2", "--duration", "5s"], "--fraction must be more than 0"),
        (["chaos", "latency", "--delay", "1h", "--duration", "5s"], "delay must be at least 0s and at most 60s"),
        (["chaos", "freeze", "--target", "nobody", "--duration", "5s"], "target"),
        (["ops", "set-capacity", "abc"], "cores: not a number"),
        (["ops", "resume", "--staged", "0"], "staged must be at least 1"),
        (["ops", "deploy", "--allowance", "forever"], "not a duration"),
        (["room", "inject", "hello", "--to", "database", "--within", "soon"], "not a duration"),
        (["up", "--racks", "0"], "racks must be between 1 and 128"),
        (["up", "--cascade", "dns"], "no service dns"),
        (["scenario", "validate", "no-such-file.yaml"], "no-such-file.yaml"),
        (["replay", "no-such-journal.json"], "no-such-journal.json"),
    ],
)
def test_bad_input_is_its_own_message_and_exit_2_with_no_lab_up(argv, said, no_lab, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert said in err and "is up" not in err
    assert main([*argv, "--json"]) == 2
    doc = one_document(capsys.readouterr().out)
    assert doc["exit_code"] == 2 and said in doc["error"]


def test_json_on_a_command_that_did_something_tells_what(no_lab, capsys):
    assert main(["chaos", "blip", "--rack-set", "2,5", "--duration", "1m30s", "--dry-run", "--json"]) == 0
    out, err = capsys.readouterr()
    doc = one_document(out)
    assert doc["ok"] and doc["exit_code"] == 0
    assert doc["request"]["body"] == {"fault": "blip", "racks": [2, 5], "duration_s": 90.0} and doc["request"]["holder"] == "linkproxy"
    assert doc["said"] and "POST" in err  # the lines for a person went to stderr, and are in the document
    assert main(["down", "--json"]) == 0
    assert one_document(capsys.readouterr().out) == {
        "command": "stormlab down",
        "exit_code": 0,
        "ok": True,
        "stopped": False,
        "said": ["no lab was up"],
    }


def test_a_command_with_its_own_document_keeps_it(no_lab, capsys):
    assert main(["scenario", "validate", "scenarios/dynamodb-2015.yaml", "--json"]) == 0
    doc = one_document(capsys.readouterr().out)
    assert doc["ok"] is True and doc["profile"] == "dynamodb-2015" and "exit_code" not in doc


def test_json_and_global_flags_go_anywhere_on_the_line(no_lab, capsys):
    assert main(["--json", "status"]) == 1
    assert one_document(capsys.readouterr().out)["command"] == "stormlab status"
    assert main(["ops", "--json", "note", "x"]) == 1
    assert one_document(capsys.readouterr().out)["command"] == "stormlab ops note"
    for argv in (["chaos", "--backend", "local", "list"], ["chaos", "list", "--backend", "local"]):
        assert build_parser().parse_args(argv).backend == "local"
    for argv in (["ops", "--as", "queues", "status"], ["ops", "status", "--as", "queues"]):
        assert build_parser().parse_args(argv).role == "queues"
    assert build_parser().parse_args(["ops", "--as", "queues", "status"]).backend is None  # the leaf's copy does not reset it
    capsys.readouterr()


@pytest.mark.parametrize(
    ("argv", "old", "dest", "value"),
    [
        (["chaos", "blip", "--racks", "3", "--duration", "5s"], "--racks", "racks", "3"),
        (["sweep", "--blip-racks", "2,4"], "--blip-racks", "blip_racks", "2,4"),
        (["sweep", "--blip", "5s"], "--blip", "blip", "5s"),
        (["sweep", "--watch", "6"], "--watch", "watch", 6.0),
        (["sizing", "--target", "5000"], "--target", "target", 5000),
        (["bench", "--out", "-"], "--out", "out", Path("-")),
        (["room", "up", "--teams", "2", "--backend", "compose"], "compose", "backend", "docker"),
    ],
)
def test_old_names_still_work_with_a_message(argv, old, dest, value, capsys):
    args = build_parser().parse_args(argv)
    assert getattr(args, dest) == value
    err = capsys.readouterr().err
    assert f"{old} is now" in err or f"--backend {old} is now" in err


def test_old_name_and_new_name_are_one_setting(no_lab, capsys):
    old = build_parser().parse_args(["chaos", "blip", "--racks", "2,5", "--duration", "5s"])
    new = build_parser().parse_args(["chaos", "blip", "--rack-set", "2,5", "--duration", "5s"])
    assert chaos_cli.values_from(old, 10) == chaos_cli.values_from(new, 10) == {"racks": "2,5", "duration": "5s"}
    capsys.readouterr()


@pytest.mark.parametrize(
    ("argv", "suggested"),
    [(["stauts"], "did you mean status?"), (["chaos", "blpi"], "did you mean blip?"), (["chaos", "blip", "--rak-set", "3"], "--rack-set")],
)
def test_a_misspelt_name_gets_a_suggestion(argv, suggested, capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args([*argv, "--duration", "5s"] if argv[-1] == "3" else argv)
    assert suggested in capsys.readouterr().err


def test_halt_one_fault_asks_only_its_holder(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("STORMLAB_STATE_DIR", str(tmp_path))
    asked = []

    def call(method, url, token, body=None, timeout=5.0):
        asked.append((method, url))
        return {"halted": 1}

    monkeypatch.setattr(client, "call", call)
    state = {
        "settings": {"STORMLAB_RACKS": "10"},
        "supervisor_url": "http://sup",
        "components": {"linkproxy": {"url": "http://proxy"}, "metadata": {"url": "http://meta"}, "metadata-1": {"url": "http://meta1"}},
    }
    chaos_cli.manage("halt", state, None, None, only="capacity")
    assert sorted(asked) == [("DELETE", "http://meta/faults?fault=capacity"), ("DELETE", "http://meta1/faults?fault=capacity")]
    assert "halted 2 fault(s) (the capacity leases)" in capsys.readouterr().out
    asked.clear()
    chaos_cli.manage("halt", state, None, None, only="blip")
    assert asked == [("DELETE", "http://proxy/faults?fault=blip")]


def test_python_m_chaos_answers_json_too(no_lab, capsys):
    assert chaos_cli.main(["list", "--json"]) == 1
    doc = one_document(capsys.readouterr().out)
    assert doc["command"] == "chaos list" and doc["exit_code"] == 1


def test_every_help_page_says_the_exit_codes():
    for words, leaf in LEAVES.items():
        assert "exit codes" in leaf.epilog and "1    no lab (or room) is up" in leaf.epilog, words


@pytest.mark.skipif(not shutil.which("bash"), reason="no bash")
@pytest.mark.parametrize(
    ("line", "offered"),
    [
        ("stormlab sta", ["status"]),
        ("stormlab chaos b", ["blip"]),
        ("stormlab chaos blip --ra", ["--rack-set"]),  # the old --racks is not offered
        ("stormlab chaos blip --backend d", ["docker"]),
        ("stormlab --json ops --as q", ["queues"]),
        ("stormlab room up --backend ", ["auto", "local", "docker", "k8s"]),
    ],
)
def test_the_completion_script_completes_commands_flags_and_choices(line, offered, tmp_path, capsys):
    assert main(["completion", "bash"]) == 0
    script = tmp_path / "stormlab.bash"
    script.write_text(capsys.readouterr().out)
    words = line.split(" ")
    probe = (
        f"source {script}; COMP_WORDS=({' '.join(shlex.quote(w) for w in words)}); "
        'COMP_CWORD=$((${#COMP_WORDS[@]}-1)); _stormlab; printf "%s\\n" "${COMPREPLY[@]}"'
    )
    said = subprocess.run(["bash", "-c", probe], capture_output=True, text=True, check=True).stdout.split()
    assert said == offered


def test_a_misspelt_name_in_a_scenario_file_gets_a_suggestion(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("title: t\nsteps:\n  - {name: c, at: 1s, action: set-capacty, args: {cores: 80}}\n")
    assert main(["scenario", "validate", str(bad)]) == 2
    assert "unknown action 'set-capacty' (did you mean set-capacity?)" in capsys.readouterr().err


def test_every_setting_is_a_flag_by_its_own_name_and_reads_as_set_does(no_lab, capsys):
    from dataclasses import fields

    from stormcore.settings import LabSettings, flag_of
    from stormlab.cli import settings_from

    up = LEAVES["up"]
    flags = {o for a in up._actions for o in a.option_strings}
    assert {flag_of(f.name) for f in fields(LabSettings)} <= flags  # every setting (speed and the policy written by hand)
    args = build_parser().parse_args(
        ["up", "--allowance", "2s", "--capacity-cores", "60", "--fix-stale-cache", "on", "--probe-interval", "300ms", "--cells", "2"]
    )
    got = settings_from(args)
    assert (got.allowance_s, got.capacity_cores, got.fix_stale_cache, got.probe_interval_s, got.cells) == (2.0, 60.0, True, 0.3, 2)
    assert settings_from(build_parser().parse_args(["up", "--capacity", "60"])).capacity_cores == 60.0  # the old name, with a message
    assert "--capacity is now --capacity-cores" in capsys.readouterr().err
    assert main(["up", "--fix-stale-cache", "sometimes"]) == 2 and "not on/off" in capsys.readouterr().err
    assert main(["up", "--probe-interval", "0s"]) == 2 and "probe_interval_s" in capsys.readouterr().err
    assert main(["status"]) == 1  # nothing was started
    capsys.readouterr()
