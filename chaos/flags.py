"""The fault catalog's arguments as command-line flags: one generator for every command that
takes them (`stormlab chaos FAULT`, `stormlab ops MOVE`), so a flag has one name, one range and
one help line wherever it appears."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Mapping

from chaos.catalog import FLAG, RACKS, Arg, Fault
from stormcore.commandline import deprecated
from stormcore.labstate import BACKENDS

CELL_HELP = "with --cells: which cell's metadata service (default 0, the first)"
CELL_RACKS_HELP = "with --cells: every rack of this cell (instead of --rack-set; 10 racks in 4 cells: 0-2, 3-4, 5-7, 8-9) (default: none)"


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Every command's help: descriptions as written, and each option's default said, unless its
    help says it already or it has none."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        default = action.default
        nothing = default is None or default is False or default is argparse.SUPPRESS or default == []  # 0 is a default
        if nothing or not action.option_strings or "default" in text:
            return text
        return f"{text} (default {str(default).replace('%', '%%')})"


def every_parser_says_its_defaults(parser: argparse.ArgumentParser) -> None:
    """One formatter for every (sub)command's help: descriptions as written, defaults said."""
    parser.formatter_class = HelpFormatter
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                every_parser_says_its_defaults(child)


def help_text(text: str) -> str:
    """A help line argparse will not take a ``%`` in as a format (``~0.2% of traffic``)."""
    return text.replace("%", "%%")


BACKEND_CHOICES = ("auto", *BACKENDS)
BACKEND_WORDS = {"local": "the local lab's processes", "docker": "the compose stack (or a swarm)", "k8s": "a Kubernetes namespace"}
OLD_BACKEND_WORDS = {"compose": "docker"}  # `room up --backend compose` named docker's backend so


def backend_word(text: str) -> str:
    """A backend's one name; an old one still read, with a message saying the name."""
    if text in OLD_BACKEND_WORDS:
        print(f"--backend {text} is now --backend {OLD_BACKEND_WORDS[text]} ({text} still works, and will go)", file=sys.stderr)
        return OLD_BACKEND_WORDS[text]
    return text


def add_backend(parser: argparse.ArgumentParser, acts_on: tuple[str, ...] = BACKENDS) -> None:
    """``--backend``: the same choices and the same rule on every command that acts on a lab
    (stormcore.labstate.backend); one the command cannot act on is refused when it runs."""
    on = "; ".join(f"{b}: {BACKEND_WORDS[b]}" for b in acts_on)
    parser.add_argument(
        "--backend",
        choices=BACKEND_CHOICES,
        type=backend_word,
        help=f"which lab: {on} (default auto: STORMLAB_BACKEND, else k8s if STORMLAB_K8S_NAMESPACE is set, "
        "docker if STORMLAB_COMPOSE_PROJECT is, else local)",
    )


def cell_number(text: str) -> int:
    """``--cell``: a cell's number, from 0 (the lab checks it against its cells)."""
    try:
        cell = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a cell is a number from 0, got {text!r}") from None
    if cell < 0:
        raise argparse.ArgumentTypeError(f"a cell is a number from 0, got {cell}")
    return cell


def add_arg(parser: argparse.ArgumentParser, arg: Arg, required: bool = True, positional: bool = False, filled: str = "") -> None:
    """One argument of a fault: ``--KEY VALUE`` (an on/off argument: ``--KEY``), or a positional;
    its help says its range and default. ``required``: as the catalog says (a command that fills
    in its own defaults passes False, and says each default it fills in as ``filled``: "default …")."""
    said = help_text(arg.describe()) + (f" ({filled})" if filled else "")
    if positional:
        parser.add_argument(arg.key, help=said)
    elif arg.kind == FLAG:
        parser.add_argument(arg.flag, dest=arg.key, action="store_true", default=None, help=said)
    else:
        parser.add_argument(arg.flag, dest=arg.key, required=required and arg.required, metavar=arg.key.upper(), help=said)
    if arg.kind == RACKS:  # a rack selection was --racks, which is a fleet's size on `up`
        deprecated(parser, "--racks", arg.flag, dest=arg.key)


def add_fault_args(
    parser: argparse.ArgumentParser,
    fault: Fault,
    keys: Iterable[str] | None = None,
    positional: Iterable[str] = (),
    required: bool = True,
    filled: Mapping[str, str] | None = None,
) -> None:
    """A fault's arguments (``keys``: only these, in this order; ``cell``: the metadata service's
    cell, for a fault it holds, or a cell's racks, for a fault of racks) as flags, ``positional``
    ones as positionals; ``filled``: the defaults a command fills in itself, by key, for its help)."""
    by_key = {a.key: a for a in fault.args}
    celled = fault.holder == "metadata" or "racks" in by_key
    for key in keys if keys is not None else [*by_key, *(["cell"] if celled else [])]:
        if key == "cell":
            parser.add_argument("--cell", type=cell_number, help=CELL_RACKS_HELP if "racks" in by_key else CELL_HELP)
        elif key in by_key:
            add_arg(parser, by_key[key], required, positional=key in positional, filled=(filled or {}).get(key, ""))
