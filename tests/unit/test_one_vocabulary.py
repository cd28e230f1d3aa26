"""One rule, one generator: the backend a command acts on, and the fault catalog's flags on
`stormlab chaos` and `stormlab ops`."""

import argparse

import pytest

from chaos import catalog
from chaos.flags import add_fault_args, help_text
from stormcore.errors import UsageError
from stormcore.labstate import backend
from stormlab.cli import build_parser
from stormlab.responder.runbook import ACTIONS


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


MOVES = [(a.name, a.fault or a.fixes[0]) for a in ACTIONS.values() if a.fault or a.fixes]


@pytest.mark.parametrize("move, lease", MOVES, ids=[m for m, _ in MOVES])
def test_a_move_takes_its_lease_s_arguments_by_the_catalog_s_names_and_words(move, lease):
    ops = options(subparser("ops", move))
    taken = [a for a in catalog.FAULTS[lease].args if a.key in ops]
    assert taken, f"ops {move} takes none of {lease}'s arguments"
    for arg in taken:
        assert ops[arg.key].startswith(help_text(arg.describe()))  # the one generator's words (a move may say its default after)


def test_chaos_breaks_the_world_and_ops_makes_the_moves():
    chaos = {name for a in subparser("chaos")._actions if isinstance(a, argparse._SubParsersAction) for name in a.choices}
    assert not chaos & set(catalog.MOVES) and {"list", "halt", "blip", "freeze"} <= chaos
    assert {f for _, f in MOVES} <= set(catalog.MOVES)


def test_the_generator_makes_a_metadata_fault_s_cell_flag_refuse_a_negative_cell():
    parser = argparse.ArgumentParser()
    add_fault_args(parser, catalog.FAULTS["pause-metadata"])
    assert parser.parse_args(["--duration", "5s", "--cell", "2"]).cell == 2
    with pytest.raises(SystemExit):
        parser.parse_args(["--duration", "5s", "--cell", "-1"])
