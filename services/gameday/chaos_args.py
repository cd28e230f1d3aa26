"""A fault as `stormlab chaos` takes it: its command line, parsed and checked by the chaos CLI
itself, then turned into the request for the process that holds it. Scenarios, `ops` and the
runner all go through here, so a fault means the same thing everywhere."""
from __future__ import annotations

import argparse
import contextlib
import io
from typing import Any

from chaos import cli as chaos_cli
from services.common.settings import parse_duration

TIMED = ("duration", "ramp", "every", "timeout", "delay", "jitter")


def fault_argv(fault: str, args: dict[str, str], speed: float) -> list[str]:
    """The `stormlab chaos` command line of a scenario's fault step, its times divided by ``speed``."""
    argv = ["chaos", fault]
    for key, value in args.items():
        flag = "--" + key.replace("_", "-")
        if key == "break_glass":
            argv += [flag] if str(value).lower() in ("true", "yes", "on", "1") else []
        elif key in TIMED:
            argv += [flag, f"{parse_duration(value) / speed:g}s"]
        else:
            argv += [flag, str(value)]
    return argv


def parse_fault(argv: list[str]) -> argparse.Namespace:
    """Parse with the real `stormlab chaos` parser; its complaint becomes a ValueError."""
    from services.cli import build_parser  # noqa: PLC0415 - services.cli imports the gameday CLI

    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            return build_parser().parse_args(argv)
    except SystemExit:
        said = err.getvalue().strip().splitlines()
        raise ValueError(said[-1].removeprefix("stormlab: error: ") if said else f"bad fault {argv}") from None


def fault_request(fault: str, args: dict[str, Any], state: dict, speed: float = 1.0) -> tuple[str, dict[str, Any]]:
    """The holder's URL and the request body (bad arguments raise ValueError or ChaosError)."""
    return chaos_cli.request_for(parse_fault(fault_argv(fault, args, speed)), state)
