"""One rule, one generator: the backend a command acts on, and the fault catalog's flags on
`stormlab chaos` and `stormlab ops`."""

import argparse

import pytest

from chaos import catalog
from chaos.flags import add_fault_args
from stormcore.errors import UsageError
from stormcore.labstate import backend
from stormlab.cli import build_parser


@pytest.mark.parametrize(
    "flag, env, expected",
    [
        (None, {}, "local"),
        (None, {"STORMLAB_COMPOSE_PROJECT": "stormlab"}, "docker"),
        (None, {"STORMLAB_K8S_NAMESPACE": "lab", "STORMLAB_COMPOSE_PROJECT": "x"}, "k8s"),
        (None, {"STORMLAB_BACKEND": "local", "STORMLAB_COMPOSE_PROJECT": "x"}, "local"),
        ("docker", {"STORMLAB_BACKEND": "local"}, "docker"),
        ("auto", {"STORMLAB_COMPOSE_PROJECT": "x"}, "docker"),
    ],
)
def test_the_backend_is_the_flag_then_the_environment_then_what_is_detected(monkeypatch, flag, env, expected):
    for name in ("STORMLAB_BACKEND", "STORMLAB_COMPOSE_PROJECT", "STORMLAB_K8S_NAMESPACE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert backend(flag) == expected


def test_a_backend_a_command_cannot_act_on_is_refused(monkeypatch):
    monkeypatch.setenv("STORMLAB_K8S_NAMESPACE", "lab")
    with pytest.raises(UsageError, match="local or docker"):
        backend(None, ("local", "docker"))
    with pytest.raises(UsageError, match="'cloud'"):
        backend("cloud")


def options(parser: argparse.ArgumentParser) -> dict[str, str | None]:
    return {a.dest: a.help for a in parser._actions if a.dest != "help"}


def subparser(*path: str) -> argparse.ArgumentParser:
    parser = build_parser()
    for name in path:
        parser = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[name]
    return parser


@pytest.mark.parametrize("fault, move", [("capacity", "set-capacity"), ("resume-metadata", "resume"), ("deploy", "deploy")])
def test_a_move_takes_its_lease_s_arguments_with_the_same_names_and_help_as_the_fault(fault, move):
    chaos, ops = options(subparser("chaos", fault)), options(subparser("ops", move))
    shared = set(chaos) & set(ops)
    assert shared >= {a.key for a in catalog.FAULTS[fault].args} - {"duration"}  # every argument the move takes
    assert {k: chaos[k] for k in shared} == {k: ops[k] for k in shared}


def test_the_generator_makes_a_metadata_fault_s_cell_flag_refuse_a_negative_cell():
    parser = argparse.ArgumentParser()
    add_fault_args(parser, catalog.FAULTS["pause-metadata"])
    assert parser.parse_args(["--duration", "5s", "--cell", "2"]).cell == 2
    with pytest.raises(SystemExit):
        parser.parse_args(["--duration", "5s", "--cell", "-1"])
