"""`stormlab chaos …` (or `python -m chaos …`): break the world. Network, process and database
faults on the running lab; the operator's moves (capacity, the metadata service's pause and
readmission, the cascade's fixes, deploys) are `stormlab ops`.

Every fault is a lease that reverts by itself. The command only asks: the process that holds
the target (the link proxy for network faults, the supervisor for process faults, the metadata
service for its own; on compose, a shell inside the target container) applies the fault and
arms its revert in the same moment, so killing this command never leaves a fault behind.
The faults, their arguments and their ranges are those of the fault catalog (chaos/catalog.py).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

from chaos import catalog, client, docker_cli, k8s_cli
from chaos import docker_backend as db
from chaos.catalog import ChaosError
from chaos.fault_lease import describe_effect
from chaos.flags import HelpFormatter, add_backend, add_fault_args, every_parser_says_its_defaults, help_text
from chaos.journal import Journal
from stormcore import commandline, roster
from stormcore.auth import ensure_token
from stormcore.commandline import Parser
from stormcore.documents import is_decimal
from stormcore.errors import LabError
from stormcore.fleet import racks_of_cell
from stormcore.labstate import backend, running, state_dir
from stormcore.racks import cell_holders, cells_in
from stormcore.settings import DEFAULT_PROFILE, profile

FORMATTER = HelpFormatter


def describe(fault: catalog.Fault) -> str:
    return (
        f"{fault.help}.\n\nWhat it emulates: {fault.emulates}.\nWhen the lease ends: {fault.reverts}.\n"
        f"Held by: {catalog.HOLDERS[fault.holder]}; on compose, network and process faults are held by a shell "
        "in the target container."
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The fault subcommands, one per fault of the catalog (its moves are `stormlab ops`'s), with
    the catalog's arguments as flags."""
    add_backend(parser)
    faults = parser.add_subparsers(dest="fault", required=True, metavar="FAULT")
    for fault in catalog.FAULTS.values():
        if fault.move:
            continue
        p = faults.add_parser(fault.name, help=help_text(fault.help), description=describe(fault), formatter_class=FORMATTER)
        add_fault_args(p, fault)
        if any(a.kind == catalog.RACKS for a in fault.args):
            p.add_argument(
                "--fraction", type=float, help="instead of --rack-set: this fraction of the racks (more than 0, at most 1; default: none)"
            )
        if fault.name == "partition":
            p.add_argument("--between", nargs=2, metavar=("A", "B"), help="instead of --rack-set: racks:1,2 and metadata (default: none)")
            p.add_argument("--one-way", action="store_true", help="with --between: drop only traffic from A to B")
        p.add_argument("--dry-run", action="store_true", help="print the exact request and change nothing")
        p.add_argument("--wait", action="store_true", help="stay until the fault ends (Ctrl-C leaves it to end by itself)")
    listing = faults.add_parser("list", help="every lease in force (the faults and the operator's moves) and its time left")
    listing.add_argument("--json", action="store_true", help="one JSON document: every lease, by holder")
    halt = faults.add_parser("halt", help="end every lease now (the faults and the operator's moves), each reverted")
    halt.add_argument(
        "lease",
        nargs="?",
        metavar="LEASE",
        help="end only this lease, HOLDER#ID as `chaos list` shows it (linkproxy#3; the local lab) (default: every lease)",
    )
    halt.add_argument(
        "--fault",
        dest="only",
        choices=tuple(catalog.FAULTS),
        metavar="NAME",
        help="end only this fault's leases (the local lab), e.g. blip or capacity; default: every lease",
    )
    commandline.anywhere(parser, "--backend")
    for name, child in faults.choices.items():
        commandline.explain(child, *(f"{PROG} {line}" for line in EXAMPLES[name]), description=DESCRIPTIONS.get(name))


PROG = "stormlab chaos"
EXAMPLES = {  # each as a person types it (a test parses every one)
    "blip": ("blip --rack-set 3 --duration 5s", "blip --rack-set 2,5,7 --duration 1m30s --dry-run"),
    "partition": ("partition --between racks:1,2 metadata --one-way --duration 30s",),
    "latency": ("latency --rack-set 3 --delay 200ms --jitter 50ms --duration 1m",),
    "loss": ("loss --fraction 0.5 --probability 0.1 --duration 30s",),
    "freeze": ("freeze --target metadata --duration 10s",),
    "kill": ("kill --target rack-03 --duration 30s",),
    "isolate": ("isolate --target queues --duration 1m",),
    "gsi-growth": ("gsi-growth --factor 2 --ramp 30s --duration 5m",),
    "stuck-partition": ("stuck-partition --tables metric-groups --duration 5m",),
    "dns-empty": ("dns-empty --duration 5m",),
    "list": ("list", "list --json"),
    "halt": ("halt", "halt linkproxy#3", "halt --fault blip --json"),
}
DESCRIPTIONS = {
    "list": "Every lease in force, by its holder (the faults and the operator's moves), with its time left and what it has done "
    "so far; then any lease that ended lately having done nothing (a blip that cut nothing is a finding).",
    "halt": "End every lease now, each reverted by the process that holds it (--fault: only that fault's). A holder that does "
    "not answer within 5 s is named and does not stop the others (exit 1).",
}


def add_parser(sub: argparse._SubParsersAction) -> None:
    chaos = sub.add_parser(
        "chaos", help="inject faults into the running lab (each reverts by itself)", description=__doc__, formatter_class=FORMATTER
    )
    add_arguments(chaos)
    chaos.set_defaults(func=run)


def parse_between(a: str, b: str, racks_total: int, one_way: bool) -> tuple[list[int], str]:
    """``racks:1,2 metadata`` (or the other way round) -> the racks and the direction cut."""
    groups = {a, b}
    rack_group = next((g for g in groups if g.startswith("racks:")), None)
    if rack_group is None or groups - {rack_group} != {"metadata"}:
        raise ChaosError("partitions are between racks and the metadata service: --between racks:1,2 metadata")
    racks = catalog.RACKS_ARG.parse(rack_group.removeprefix("racks:") + ",", racks_total)  # racks:3 names rack 3
    if not one_way:
        return racks, "both"
    return racks, "to-metadata" if a == rack_group else "from-metadata"


def values_from(args: argparse.Namespace, racks_total: int, cells: int = 1) -> dict[str, Any]:
    """The fault's arguments as the catalog takes them, from the command line (``--cell`` of a
    fault of racks: every rack of that cell, of ``cells``)."""
    fault = catalog.FAULTS[args.fault]
    values = {a.key: getattr(args, a.key) for a in fault.args}
    cell = getattr(args, "cell", None)
    if cell is not None and "racks" in values:
        if values["racks"] is not None or getattr(args, "fraction", None) is not None or getattr(args, "between", None):
            raise ChaosError("--cell picks every rack of a cell: give it or the racks, not both")
        if cell >= cells:
            raise ChaosError(f"this lab has no cell {cell} (cells: {cells})")
        values["racks"] = racks_of_cell(cell, cells, racks_total)
    elif cell is not None:
        values["cell"] = cell
    fraction = checked_fraction(args)
    if fraction is not None:
        values["racks"] = list(range(max(1, round(fraction * racks_total))))
    if getattr(args, "between", None):
        a, b = args.between
        values["racks"], values["direction"] = parse_between(a, b, racks_total, args.one_way)
    return values


def lab_state(docker: bool, fault: str | None = None) -> dict[str, Any]:
    """Who holds what: the local lab's state file, or on compose the metadata service's URL."""
    if docker:  # the processes that hold their own faults, by STORMLAB_<NAME>_URL
        urls = {name: os.environ.get(f"STORMLAB_{name.upper()}_URL", "") for name in ENGINE_HOLDERS}
        holder = catalog.FAULTS[fault].holder if fault in catalog.FAULTS else None
        if holder in urls and not urls[holder]:
            raise ChaosError(
                f"{fault} goes to the {holder} service: set STORMLAB_{holder.upper()}_URL "
                "(on compose the chaos container has it: `docker compose run --rm chaos …`; on Kubernetes, "
                "`kubectl port-forward` the service and set it to that address)"
            )
        return {
            "settings": {"STORMLAB_RACKS": os.environ.get("STORMLAB_RACKS", "10"), "STORMLAB_CELLS": os.environ.get("STORMLAB_CELLS", "1")},
            "components": {name: {"url": url} for name, url in urls.items() if url} | cell_holders(os.environ),
        }
    state = running()
    if not state:
        raise LabError("no lab is up: start one with `stormlab up`")
    return state


def check_offline(args: argparse.Namespace) -> None:
    """What the command line says that can be judged with no lab: each argument given, read as the
    catalog reads it (the fleet's size aside), and --fraction's range. With no lab up, bad input is
    told as such (exit 2) rather than "no lab is up" (exit 1); with one, the lab's own checks speak."""
    fault = catalog.FAULTS[args.fault]
    for arg in fault.args:
        raw = getattr(args, arg.key, None)
        if raw is not None and not (arg.key == "racks" and raw == "all"):
            arg.parse(raw, None)
    checked_fraction(args)


def checked_fraction(args: argparse.Namespace) -> float | None:
    """``--fraction``, more than 0 and at most 1 (None: not given)."""
    fraction = getattr(args, "fraction", None)
    if fraction is not None and not 0 < fraction <= 1:
        raise ChaosError("--fraction must be more than 0 and at most 1")
    return fraction


def dry_run_offline(args: argparse.Namespace) -> int:
    """``--dry-run`` with no lab up: the request a lab of the default profile would be sent (its
    racks' count; the holder's address is the lab's, so it is named, not given)."""
    racks_total = profile(DEFAULT_PROFILE).racks
    req = catalog.request(args.fault, values_from(args, racks_total), racks_total)
    commandline.tell(request={"method": "POST", "url": None, "holder": req.fault.holder, "body": req.body})
    print(f"no lab is up: the request a lab of the {DEFAULT_PROFILE} profile ({racks_total} racks) would be sent", file=sys.stderr)
    print(f"POST <the {req.fault.holder}>/faults {json.dumps(req.body)}")
    return 0


ENGINES = {"docker": docker_cli, "k8s": k8s_cli}  # each: runner_for, apply, listing, halt
ENGINE_HOLDERS = tuple(p.name for p in roster.ROSTER if p.holds_faults and p.engines)  # reached by URL on an engine


def run(args: argparse.Namespace, runner: Any = None) -> int:
    engine = ENGINES.get(backend(args.backend))  # None: the local lab
    docker = engine is not None  # an engine: the holders are reached by their URLs
    if args.fault in ("list", "halt"):
        as_json = getattr(args, "json", False)
        only, lease = getattr(args, "only", None), getattr(args, "lease", None)
        if (only or lease) and engine:
            raise ChaosError("chaos halt LEASE and --fault end leases of the local lab; on an engine, halt ends every lease")
        if only and lease:
            raise ChaosError("give a lease or --fault, not both")
        holder, lease_id = parse_lease(lease) if lease else (None, None)  # malformed: exit 2 before "no lab is up"
        state = lab_state(docker)
        if holder is not None and lease_id is not None:
            return halt_one(state, holder, lease_id)
        return manage(args.fault, state, engine, engine.runner_for(runner) if engine else None, as_json, only)
    if engine and catalog.FAULTS[args.fault].holder not in ENGINE_HOLDERS:
        runner = engine.runner_for(runner)
        racks_total = max(runner.racks(), default=-1) + 1
        req = catalog.request(args.fault, values_from(args, racks_total, cells_in(os.environ)), racks_total)
        return engine.apply(req.body, runner, args.dry_run, args.wait)
    try:
        state = lab_state(docker, args.fault)
    except LabError:  # no lab: bad input is still told as such (exit 2), before "no lab is up" (exit 1)
        check_offline(args)
        if args.dry_run and not docker:
            return dry_run_offline(args)
        raise
    values = values_from(args, client.racks_total(state), cells_in(state["settings"]))
    if args.dry_run:
        url, req = client.build(state, args.fault, values)
        commandline.tell(request={"method": "POST", "url": f"{url}/faults", "holder": req.fault.holder, "body": req.body})
        print(f"POST {url}/faults {json.dumps(req.body)}")
        return 0
    directory = state_dir()
    lease, req = client.apply(state, args.fault, values, ensure_token(directory), journal=Journal(directory), via="chaos")
    commandline.tell(lease={"holder": req.fault.holder, **lease}, request=req.body)
    print(client.describe(lease, req))
    if args.wait:
        time.sleep(req.body["duration_s"])
    return 0


def parse_lease(text: str) -> tuple[str, int]:
    """``linkproxy#3`` (as `chaos list` shows a lease) -> the holder and the lease's number."""
    holder, _, number = text.partition("#")
    if not holder or not is_decimal(number):
        raise ChaosError(f"a lease is HOLDER#ID as `chaos list` shows it (linkproxy#3), got {text!r}")
    return holder, int(number)


def halt_one(state: dict[str, Any], holder: str, lease_id: int) -> int:
    """End one lease, reverted by the process that holds it."""
    url = client.holders(state).get(holder)
    if url is None:
        raise ChaosError(f"no holder {holder!r} in this lab; holders: {', '.join(client.holders(state))}")
    answer = client.ask_holder("DELETE", f"{url}/faults?id={lease_id}", ensure_token(state_dir()))
    commandline.tell(halted=int(answer.get("halted", 0)), lease=f"{holder}#{lease_id}")
    print(f"halted {holder}#{lease_id}")
    return 0


def manage(what: str, state: dict[str, Any], engine: Any, runner: Any, as_json: bool = False, only: str | None = None) -> int:
    """``list`` or ``halt`` every holder (``only``: halt one fault's leases); one that does not
    answer does not stop the others."""
    token = ensure_token(state_dir())
    rows: list[tuple[str, dict[str, Any]]] = []
    ended: list[tuple[str, dict[str, Any]]] = []
    halted = 0
    failed: list[str] = []
    books: list[tuple[str, dict[str, Any]]] = []
    if what == "list":
        books, failed = client.ask_every_holder(state, token, "GET")
    else:
        halted, failed = client.halt_every_holder(state, token, only)
    if engine is not None:  # the holders with no URL here, asked inside their own containers
        answers = db.asked(runner, inside_holders(state), "GET" if what == "list" else "DELETE", failed)
        if what == "list":
            books += answers
        else:
            halted += sum(int(answer.get("halted", 0)) for _, answer in answers)
    for who, book in books:
        rows += [(who, f) for f in book.get("faults", [])]
        ended += [(who, e) for e in book.get("ended", []) if e.get("ended_s_ago", NO_EFFECT_SHOWN_S) < NO_EFFECT_SHOWN_S]
    if what == "list":
        held = engine.listing(runner, failed) if engine else docker_cli.Listing([], [], [])
        if as_json:
            leases = [{"holder": who, **f} for who, f in rows]
            ends = [{"holder": who, **e} for who, e in ended]
            found = {"held_in_containers": held.active, "quiet_in_containers": held.quiet, "shells": held.shells}
            print(json.dumps({"leases": leases, "ended": ends, **found, "unanswered": failed}))
        else:
            print_listing(rows, ended, held)
    else:
        count, failures = engine.halt(runner) if engine else (0, [])
        halted, failed = halted + count, failed + failures
        commandline.tell(halted=halted, unanswered=failed)
        print(f"halted {halted} fault(s)" + (f" (the {only} leases)" if only else ""))
    for line in failed:
        print(f"stormlab: {line}", file=sys.stderr)
    if failed:
        raise LabError(
            f"{len(failed)} holder(s) or container(s) did not answer; the others were {'listed' if what == 'list' else 'halted'}"
        )
    return 0


NO_EFFECT_SHOWN_S = 600.0  # `list` warns of leases that ended with no effect in the last ten minutes


def inside_holders(state: dict[str, Any]) -> list[str]:
    """An engine's fault-holding services that ``state`` has no URL for (from the host: no
    STORMLAB_<NAME>_URL, and a swarm publishes none of their ports), to be asked inside their own
    containers; and the other cells' metadata services, unless they were found by URL (the chaos
    container finds them behind `cells`)."""
    known = client.holders(state)
    services = [name for name in ENGINE_HOLDERS if name not in known]
    if not any(name.startswith("metadata-") for name in known):
        services.append(db.CELLS[1])  # metadata-cell: none without cells
    return services


def print_listing(rows: list[tuple[str, dict[str, Any]]], ended: list[tuple[str, dict[str, Any]]], held: docker_cli.Listing) -> None:
    """The leases in force (the holders' and the engine's), or "no active faults"; then any lease
    that ended lately having done nothing."""
    for who, f in rows:
        extra = ", ".join(f"{k}={v}" for k, v in f.items() if k not in ("id", "fault", "target", "left_s", "effect"))
        so_far = f"  ({describe_effect(f['effect'])} so far)" if f.get("effect") is not None else ""
        print(f"{who}#{f['id']} {f['fault']} on {f['target']}: {f['left_s']:.1f}s left  {extra}{so_far}".rstrip())
    for row in held.active:
        print(row)
    if not rows and not held.active:
        print("no active faults")
    for who, e in ended:
        if e.get("no_effect"):
            print(f"{who}#{e['id']} {e['fault']} on {e['target']} ended {e['ended_s_ago']:.0f}s ago: {describe_effect(e['effect'])}")
    for row in held.quiet:
        print(row)


def main(argv: list[str] | None = None) -> int:
    """``python -m chaos``: the same commands as ``stormlab chaos``."""
    argv = sys.argv[1:] if argv is None else argv
    Parser.json_wanted = "--json" in argv
    parser = Parser(prog="chaos", description=__doc__, formatter_class=FORMATTER)
    add_arguments(parser)
    every_parser_says_its_defaults(parser)
    commandline.every_command_answers_json(parser)
    return commandline.run("chaos", parser.parse_args(argv), run)
