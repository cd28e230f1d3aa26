"""The `stormlab` command: up, status, down, demo, chaos, scenario, ops, room."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from dataclasses import fields
from functools import partial
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import aiohttp

from chaos import cli as chaos_cli
from chaos.flags import HelpFormatter, every_parser_says_its_defaults, help_text
from stormcore import commandline, incidents, policies, roster
from stormcore.commandline import Parser, deprecated
from stormcore.errors import LabError, UsageError
from stormcore.labstate import running
from stormcore.settings import DEFAULT_PROFILE, POLICY_TIMEOUTS, SET_HELP, LabSettings, flag_of, parse_value, profile, shown_default
from stormlab.engine import launcher, observe
from stormlab.engine.reading import Reading
from stormlab.engine.speed import first_guess, parse_speed
from stormlab.incidents import registry
from stormlab.responder import cli as ops_cli
from stormlab.rooms import cli as room_cli
from stormlab.rooms import standalone
from stormlab.runs import bench, certify, demo, fuzz, mitigations, sizing, soak, sweep, writecheck
from stormlab.scenarios import cli as gameday_cli
from stormlab.scenarios import replay_cli

HAND_SETTINGS = ("retry_policy", "speed")  # their flags written by hand: a policy of the user's is probed apart; speed takes auto
SETTING_FLAGS = {f.name: flag_of(f.name) for f in fields(LabSettings) if f.name not in HAND_SETTINGS}
OLD_SETTING_FLAGS = {"--capacity": "capacity_cores"}  # named apart from its setting before every setting had a flag


def lab_flags(p: argparse.ArgumentParser) -> None:
    """Every setting of the profile as a flag, generated from the settings: one name (the setting's,
    ``flag_of``), its range, its doc line, its default and its environment twin. The flags stay unset
    unless given, so a scenario's settings hold; ``--set KEY=VALUE`` takes the same."""
    d = profile(DEFAULT_PROFILE)
    group = p.add_argument_group(
        "the lab's settings",
        "every setting of the profile (`python -m stormcore.settings` lists them; --set KEY=VALUE takes the same); "
        "each is STORMLAB_<SETTING> in the lab's processes",
    )
    group.add_argument("--profile", default=DEFAULT_PROFILE, help="calibrated settings to start from")
    group.add_argument(
        "--retry-policy",
        help="immediate (2015), exponential, full-jitter, decorrelated-jitter; add +budget (a retry budget), +adaptive "
        "(adaptive throttling) or +breaker (a circuit breaker per rack); or your own: FILE.py:NAME (a class, a tenacity "
        "Retrying, a urllib3 Retry), a policy file, a gRPC service config or an Envoy retry_policy, docs/policies.md "
        f"(default {d.retry_policy})",
    )
    for f in fields(LabSettings):
        if f.name not in HAND_SETTINGS:
            setting_flag(group, f, d)
    for old, name in OLD_SETTING_FLAGS.items():
        deprecated(p, old, SETTING_FLAGS[name], dest=name, type=float)
    p.add_argument(
        "--speed",
        default="1",
        help="time dilation: run the whole profile this many times faster (0.05-20; below 1 is slow motion for a "
        "slow host), or auto: the fastest speed this host runs validly (default 1)",
    )
    p.add_argument(
        "--external-rack",
        metavar="CMD",
        help="run this command as one rack instead of the lab's own (a process the lab did not write: docs/contract.md says "
        "what it is told and must answer; examples/external_rack/urllib3_rack.py is one) (default none: the lab's own racks)",
    )
    p.add_argument(
        "--external-rack-at", type=int, default=0, help="which rack the external one is (default 0: among the 2015 blip's racks)"
    )
    p.add_argument("--base-port", type=int, default=launcher.DEFAULT_BASE_PORT, help="first port (0 = any free ports)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help=SET_HELP)


def setting_flag(group: Any, f: Any, d: LabSettings) -> None:
    """One setting's flag: a count or a number read as such, a duration, on/off or a choice read as
    ``--set`` reads it (settings_from)."""
    kind = f.type if isinstance(f.type, str) else f.type.__name__
    typed = int if kind == "int" else float if kind == "float" and not f.name.endswith("_s") else None
    limits = f"{f.metadata['min']:g}-{f.metadata['max']:g}{'s' if f.name.endswith('_s') else ''}; " if "min" in f.metadata else ""
    metavar = "on|off" if kind == "bool" else "DURATION" if f.name.endswith("_s") else None
    group.add_argument(
        SETTING_FLAGS[f.name],
        dest=f.name,
        choices=f.metadata.get("choices"),
        metavar=metavar,
        help=help_text(f"{f.metadata['doc']} ({limits}default {shown_default(f, d)})"),
        **({"type": typed} if typed else {}),
    )


def settings_from(args: argparse.Namespace) -> LabSettings:
    base = profile(args.profile)
    given = {name: getattr(args, name, None) for name in POLICY_TIMEOUTS}
    pairs = []
    for pair in args.set:
        name = pair.partition("=")[0].strip().replace("-", "_")
        if name in given:
            given[name] = pair.partition("=")[2]  # the last one said
        else:
            pairs.append(pair)
    by_name = {f.name: f for f in fields(LabSettings)}
    changes: dict[str, Any] = {}
    for name in SETTING_FLAGS:
        raw = getattr(args, name, None)
        changes[name] = parse_value(by_name[name], raw) if isinstance(raw, str) else raw
    for name, timeout_setting in POLICY_TIMEOUTS.items():
        text = given[name]
        if not text:
            continue
        described = policies.checked(text)  # a user's: probed apart, under limits (exit 2)
        changes[name] = described.spec
        if described.attempt_timeout_s is not None and getattr(args, timeout_setting, None) is None:
            changes[timeout_setting] = described.attempt_timeout_s  # the policy's own per-attempt timeout
    return base.replace(**{k: v for k, v in changes.items() if v is not None}).with_text(pairs)


def external_racks(args: argparse.Namespace) -> dict[int, str] | None:
    """``--external-rack CMD`` at ``--external-rack-at`` (a rack index), for the launcher."""
    if not args.external_rack:
        return None
    if not args.external_rack.strip():
        raise UsageError("--external-rack: give the command that runs the rack")
    return {args.external_rack_at: args.external_rack}


def parse_cascade(text: str, incident: str = DEFAULT_PROFILE) -> tuple[str, ...]:
    """``--cascade``: ``all`` (the incident's services), ``every`` (every incident's: what the fuzzer
    judges), ``none``, or a comma list of the cascade's services."""
    if text.strip() == "all":
        return roster.cascade_of(incident)
    if text.strip() == "every":
        return roster.CASCADE
    chosen = tuple(s.strip() for s in text.split(",") if s.strip() and s.strip() != "none")
    unknown = sorted(set(chosen) - set(roster.CASCADE))
    if unknown:
        raise UsageError(
            f"--cascade: no service {', '.join(unknown)}; the cascade's services: {', '.join(roster.CASCADE)} (or all, every, none)"
        )
    return chosen


def cmd_up(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    cascade = parse_cascade(args.cascade, settings.incident)
    requested = parse_speed(args.speed)
    speed = requested if requested is not None else first_guess(settings.nodes_total)
    if requested is None:
        print(f"speed auto: {speed:g} for {settings.nodes_total} nodes on {os.cpu_count()} cores (`status` says whether it stays valid)")
    settings = settings.sped_up(speed)
    beside = f" and the cascade's {', '.join(cascade)}" if cascade else ""
    print(
        f"starting {settings.nodes_total} storage nodes in {settings.racks} racks, the metadata service, the link proxy, loadgen{beside} …",
        flush=True,
    )
    state = launcher.up(settings, args.base_port, cascade=cascade, external=external_racks(args))
    commandline.tell(components=state["components"], speed=speed, nodes=settings.nodes_total)
    for name, comp in state["components"].items():
        print(f"  {name:<10} {comp['url']}  (pid {comp['pid']})")
    print(state["links"])
    print(f"nodes come up spread over one renewal period ({settings.renewal_period_s:g}s at speed {speed:g}); watch with `stormlab status`")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    state = running()
    if not state:
        raise LabError("no lab is up: start one with `stormlab up`")

    async def read() -> Reading:
        async with aiohttp.ClientSession() as session:
            return await observe.snapshot(session, state)

    snap = asyncio.run(read())
    print(json.dumps(snap.to_json(), indent=1) if args.json else observe.render(snap))
    return 0


def cmd_down(args: argparse.Namespace) -> int:
    stopped = launcher.down()
    commandline.tell(stopped=bool(stopped))
    print("stopped the lab" if stopped else "no lab was up")
    return 0


def cmd_completion(args: argparse.Namespace) -> int:
    script = commandline.bash_completion(build_parser(), "stormlab")
    if args.shell == "zsh":
        script = "autoload -U bashcompinit && bashcompinit\n" + script
    print(script, end="")
    return 0


def stormlab_version() -> str:
    try:
        return version("stormlab")
    except PackageNotFoundError:  # pragma: no cover - run from a checkout that was never installed
        return "unknown"


EXIT_CODES = """exit codes:
  0    done (a demo: a valid run; a scenario: every expectation held)
  1    the lab did not start, did not answer, or refused (LabError); a scenario's expectation failed;
       a check (soak, fuzz, writecheck, sweep agreement) found something
  2    bad input: a setting, a fault, a move or a scenario the lab cannot take; nothing was changed
  3    the demo ran, but INVALID: the host, not the model, shaped it (its figures are not the storm's)
  130  interrupted (Ctrl-C, SIGTERM): what the command started is stopped, its leases reverted"""


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="stormlab",
        description=(
            "A live lab of the DynamoDB retry storm of 20 September 2015: a metadata service and a fleet of storage "
            "nodes exchanging membership over HTTP on loopback. `stormlab chaos` breaks the world; `stormlab ops` "
            "holds the operator's moves."
        ),
        epilog=EXIT_CODES,
        formatter_class=HelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"stormlab {stormlab_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    up = sub.add_parser("up", help="start the lab as local processes and return")
    lab_flags(up)
    up.add_argument(
        "--cascade",
        default="all",
        help="the services beside the database to run: all (default: the profile's incident's), every (every incident's), none, "
        f"or a comma list of {', '.join(roster.CASCADE)}",
    )
    up.set_defaults(func=cmd_up)
    st = sub.add_parser("status", help="nodes serving/disqualified, customer errors, metadata load, margin")
    st.add_argument("--json", action="store_true", help="machine-readable output")
    st.set_defaults(func=cmd_status)
    sub.add_parser("down", help="stop exactly what `up` started").set_defaults(func=cmd_down)
    d = sub.add_parser("demo", help="the whole story: settle, show the margin, blip, watch the storm hold, report")
    lab_flags(d)
    demo.add_flags(d)
    d.set_defaults(func=lambda args: registry.demo(args, settings_from(args)))  # the story of the incident its profile tells
    chaos_cli.add_parser(sub)
    gameday_cli.add_parser(sub)
    ops_cli.add_parser(sub)
    room_cli.add_parser(sub, lab_flags, settings_from)
    replay_cli.add_parser(sub)
    tools = (
        ("writecheck", writecheck, "write unique items while racks are killed, read them all back: nothing acknowledged may be lost"),
        ("soak", soak, "many random fault leases with their holders killed at random, then proof that none is left"),
        ("fuzz", fuzz, "send every operation of every process generated requests, good and bad, and judge each answer by /openapi.json"),
        (
            "bench",
            bench,
            "the lab's costs on this machine (membership path against a bare handler, fault latency, fleets) into reports/benchmarks.md",
        ),
        (
            "sweep",
            sweep,
            "the map of where a blip leaves the lab stuck, and which fix moves the 2015 point: the model's grid, a live sample",
        ),
        ("certify", certify, "would your retry policy have held in 2015, and from which trigger on not: a certificate and an exit code"),
        ("mitigations", mitigations, "the 2015 trigger against every policy and fix, live: plateau, recovery, wasted work, error-minutes"),
        ("sizing", sizing, "CPU, memory and Prometheus series per process, measured here, and what 100,000 nodes need: reports/sizing.md"),
    )
    for name, module, summary in tools:  # each module describes itself: its docstring, its flags, its run
        p = sub.add_parser(name, help=summary, description=module.__doc__)
        module.add_arguments(p)
        runs = {fuzz: partial(fuzz.run, consoles=standalone.serving), certify: registry.certify}  # the fuzzer serves the consoles
        p.set_defaults(func=runs.get(module, module.run))
    completion = sub.add_parser(
        "completion",
        help="a shell completion script: commands, flags and their choices",
        description="Print a completion script for bash (zsh: after `autoload -U bashcompinit && bashcompinit`), written "
        "from the command tree itself: every command, its flags, and the choices of a flag that has them.",
    )
    completion.add_argument("shell", choices=("bash", "zsh"), help="the shell it is for")
    completion.set_defaults(func=cmd_completion)
    for name, child in sub.choices.items():
        if name in EXAMPLES:
            commandline.explain(child, *(f"stormlab {line}" for line in EXAMPLES[name]), description=DESCRIPTIONS.get(name))
    every_parser_says_its_defaults(parser)
    commandline.every_command_answers_json(parser)
    return parser


EXAMPLES = {  # each as a person types it (a test parses every one)
    "up": ("up", "up --racks 20 --speed auto", "up --retry-policy full-jitter --allowance 2s --cascade none"),
    "status": ("status", "status --json"),
    "down": ("down",),
    "demo": ("demo", "demo --blip-racks 4 --watch 1m --json", "demo --retry-policy decorrelated-jitter+budget"),
    "writecheck": ("writecheck --duration 1m30s --queues",),
    "soak": ("soak --leases 200 --holder-kills 0.05",),
    "fuzz": ("fuzz --requests 200 --only metadata,linkproxy",),
    "bench": ("bench --fleets 1000,10000:1000 --page -", "bench --json --page -"),
    "sweep": ("sweep --quick --live 4", "sweep --blip-sizes 2,4 --blip-durations 5s --live 0 --json"),
    "certify": (
        "certify --live 0 full-jitter",
        "certify --quick examples/policies/my_policy.py:CappedJitter",
        *(f"certify --profile {i.name} --live 0 full-jitter+breaker" for i in incidents.REGISTERED[1:]),
    ),
    "mitigations": ("mitigations --only '2015,allowance 2s,full jitter' --speed auto",),
    "sizing": ("sizing --fleets 1000 --nodes 100000 --page -",),
    "completion": ("completion bash", "completion zsh"),
}
DESCRIPTIONS = {
    "up": "Start the lab as local processes (the metadata service, the racks of storage nodes, the link proxy, the "
    "customers' load, the cascade's services and the supervisor that holds them) and return once every process answers. "
    "The nodes come up spread over one renewal period; `stormlab status` shows them join. `stormlab down` stops it.",
    "status": "One reading of the lab: nodes serving and disqualified, the customers' error rate, the metadata service's load "
    "and margin, each table's errors, and whether the host keeps up (a lab the host shapes is INVALID).",
    "down": "Stop exactly what `stormlab up` started (by the pids it recorded), every fault reverted with its holder.",
    "demo": "The whole story in one command: start a lab, settle, show the margin, blip the racks, watch the retry storm "
    "hold after the blip is gone, and report: the plateau against 2015's ~55%, a chart and the samples. Exit 3 if the "
    "host, not the model, shaped the run (INVALID).",
}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    Parser.json_wanted = "--json" in argv  # a command line's error is a document too
    args = build_parser().parse_args(argv)
    with launcher.terms_as_interrupt():  # SIGTERM and SIGHUP as Ctrl-C: a command's own lab is stopped on the way out
        return commandline.run("stormlab", args, args.func)


if __name__ == "__main__":
    sys.exit(main())
