"""The fault catalog's arguments as command-line flags: one generator for every command that
takes them (`stormlab chaos FAULT`, `stormlab ops MOVE`), so a flag has one name, one range and
one help line wherever it appears."""

from __future__ import annotations

import argparse
from collections.abc import Iterable

from chaos.catalog import FLAG, Arg, Fault

CELL_HELP = "with --cells: which cell's metadata service (default 0, the first)"


def cell_number(text: str) -> int:
    """``--cell``: a cell's number, from 0 (the lab checks it against its cells)."""
    try:
        cell = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a cell is a number from 0, got {text!r}") from None
    if cell < 0:
        raise argparse.ArgumentTypeError(f"a cell is a number from 0, got {cell}")
    return cell


def add_arg(parser: argparse.ArgumentParser, arg: Arg, required: bool = True, positional: bool = False) -> None:
    """One argument of a fault: ``--KEY VALUE`` (an on/off argument: ``--KEY``), or a positional;
    its help says its range and default. ``required``: as the catalog says (a command that fills
    in its own defaults passes False)."""
    if positional:
        parser.add_argument(arg.key, help=arg.describe())
    elif arg.kind == FLAG:
        parser.add_argument(arg.flag, action="store_true", default=None, help=arg.describe())
    else:
        parser.add_argument(arg.flag, required=required and arg.required, metavar=arg.key.upper(), help=arg.describe())


def add_fault_args(
    parser: argparse.ArgumentParser,
    fault: Fault,
    keys: Iterable[str] | None = None,
    positional: Iterable[str] = (),
    required: bool = True,
) -> None:
    """A fault's arguments (``keys``: only these, in this order; ``cell``: the metadata service's
    cell, for a fault it holds) as flags, ``positional`` ones as positionals."""
    by_key = {a.key: a for a in fault.args}
    for key in keys if keys is not None else [*by_key, *(["cell"] if fault.holder == "metadata" else [])]:
        if key == "cell":
            parser.add_argument("--cell", type=cell_number, help=CELL_HELP)
        elif key in by_key:
            add_arg(parser, by_key[key], required, positional=key in positional)
