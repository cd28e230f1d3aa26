"""The flags of every stormlab command and what each means, once: the table in docs/cli.md, generated
from the parser (``make cli-table`` writes it; a test keeps the two the same and fails a flag with no
meaning here, or one whose uses take different values).

A flag means one thing wherever it appears: ``--racks`` is a fleet's size, ``--rack-set`` a
selection of racks, ``--out`` a directory, ``--page`` a Markdown page, ``--watch`` a duration.
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from dataclasses import fields

from stormcore.commandline import leaves
from stormcore.settings import LabSettings, flag_of

MEANINGS = {
    "--abandoned-work": "what the metadata service does with work whose client gave up: cancel or continue",
    "--allowance": "the renewal timeout: how long a node waits for its renewal's answer (a duration)",
    "--as": "your on-call role in a team's game day",
    "--autopilot": "the runner plays AWS's runbook itself instead of waiting for players",
    "--backend": "which lab: local processes, docker (compose or swarm) or k8s",
    "--base-port": "the first port of a lab the command starts (0: free ports)",
    "--between": "a partition's two sides: racks:LIST and metadata",
    "--blip": "how long the demo's blip lasts (a duration)",
    "--blip-durations": "a sweep's trigger durations (a comma list of durations)",
    "--blip-racks": "the racks the demo's blip cuts (a rack set)",
    "--blip-sizes": "a sweep's trigger sizes: how many racks are blipped (a comma list of counts)",
    "--both-clients": "the bench also runs the 2015 storm with both renewal clients in one lab",
    "--break-glass": "a capacity change goes around the overloaded admin path",
    "--cascade": "the services beside the database a lab runs",
    "--cell": "a cell of the lab, by number from 0",
    "--cells": "how many metadata-service instances (cells) share the racks",
    "--concurrency": "requests in flight in the bench's request rounds",
    "--customer-rate": "customer requests per second",
    "--delay": "the latency fault's added delay (a duration)",
    "--demos": "demo JSON files for the bench's storm table",
    "--desk-port": "the port of a game's desk (its status page, Alertmanager's pages)",
    "--direction": "which way a partition drops traffic",
    "--drop": "a replay leaves a move out",
    "--dry-run": "print the exact request and change nothing",
    "--duration": "how long it lasts (a duration)",
    "--every": "the time between a staged move's steps (a duration)",
    "--expect": "what an inject expects back",
    "--external-rack": "a command run as one rack instead of the lab's own",
    "--external-rack-at": "which rack the external one is",
    "--factor": "how much the GSI growth multiplies the tables' entries",
    "--fault": "one fault's leases, by the fault's name",
    "--faults": "how many faults the bench applies and reverts",
    "--fleet-speed": "the speed of the bench's fleets",
    "--fleets": "fleets to measure, as NODES[:PER_RACK] in a comma list",
    "--fraction": "a fraction of the racks, instead of a rack set",
    "--gsi-growth": "whether membership has grown with the GSIs (on: 2015's sizes)",
    "--gsis": "a sweep's membership growths: GSIs per indexed table (a comma list)",
    "--herd-nodes": "nodes in the bench's herd figure",
    "--holder-kills": "the soak's chance per lease of SIGKILLing its holder",
    "--jitter": "the latency fault's +/- jitter (a duration)",
    "--jobs": "processes for the model's points",
    "--json": "one JSON document on stdout (errors too, with the exit code)",
    "--keep-lab": "leave a lab the command started running",
    "--kill-every": "how often writecheck SIGKILLs a random rack (a duration)",
    "--kill-queues-every": "how often writecheck SIGKILLs the queues service (a duration)",
    "--leaderboard": "the leaderboard file a game day writes to",
    "--leases": "how many fault leases the soak asks for",
    "--listen": "the address of this host the pages listen on, for other machines",
    "--live": "how many points also run live",
    "--live-phases": "a sweep's blip moments of the 2015 point run live",
    "--live-retries": "how often a live point the host shaped runs again",
    "--names-tables": "an inject's expected post must name a table whose customers fail",
    "--no-both-clients": "the bench leaves out the storm with both renewal clients",
    "--no-references": "certify leaves out the two reference policies",
    "--nodes": "a fleet's size in nodes (the fleet sizing plans for)",
    "--nodes-per-rack": "virtual storage nodes per rack",
    "--one-way": "a partition drops only the traffic from A to B",
    "--only": "only these of what the command runs through (a comma list of names)",
    "--out": "the directory the command writes its results into",
    "--page": "the Markdown page the command writes its figures into",
    "--panels": "a sweep's panels: the 2015 settings and the fixes to map",
    "--play-port": "the port of the players' pages when they are served apart from the desk",
    "--port": "the port a console listens on",
    "--probability": "the loss fault's chance a segment is lost",
    "--profile": "the calibrated settings a lab starts from",
    "--public-url": "the scheme and host printed links use when a NAT or proxy is in between",
    "--queues": "writecheck also checks the queues service",
    "--quick": "a 400-node fleet (the tests') instead of 1,000 nodes",
    "--rack-set": "a selection of racks: 3 (the first three), 2,5,7 (those), 3, (rack 3 alone), all",
    "--racks": "a fleet's size: how many racks (processes)",
    "--ramp": "the time the GSI growth is spread over (a duration)",
    "--rate": "writecheck's writes per second",
    "--renewal-nodes": "renewals a second in the bench's renewal figures",
    "--renewal-period": "how often a node renews its membership (a duration)",
    "--renewal-sizes": "membership sizes whose renewal path the bench measures",
    "--requests": "the fuzzer's generated requests per operation",
    "--retry-policy": "the renewal retry policy: a name, with wrappers, or your own",
    "--rounds": "rounds of each side of a bench comparison",
    "--scenario": "a scenario file",
    "--seconds": "the length of each bench request round, in seconds",
    "--seed": "the seed of what the command draws at random",
    "--set": "one setting, KEY=VALUE (repeatable)",
    "--outage": "the lease manager's story (October 2025): how long the database endpoint's DNS record stays empty (a duration)",
    "--settle": "the healthy baseline watched before the blip (a duration)",
    "--severity": "how bad a status post says it is for customers",
    "--shift": "a replay moves a move later or earlier",
    "--speed": "time dilation: a number (0.05-20) or auto",
    "--staged": "how many steps a move is made in",
    "--tables": "tables, a comma list",
    "--target": "the process or service a fault acts on",
    "--team": "a team, by its name",
    "--teams": "how many teams (labs) a room has",
    "--timeout": "how long the admin request may take (a duration)",
    "--tls": "serve over https with a certificate the room makes",
    "--tls-cert": "serve over https with this certificate (PEM)",
    "--tls-key": "the private key of --tls-cert (PEM)",
    "--to": "the role an inject goes to, or team",
    "--wait": "stay until the fault ends",
    "--watch": "how long the lab is watched after the blip (the lease manager's story: after the repair) (a duration)",
    "--watch-periods": "renewal periods after the blip when a sweep's point is judged",
    "--within": "how long an inject's answer may take (a duration)",
}


def meanings() -> dict[str, str]:
    """Every flag's meaning: those written above, and each setting's flag by its setting's doc line."""
    settings = {flag_of(f.name): f"a setting: {f.metadata['doc']}" for f in fields(LabSettings)}
    return settings | MEANINGS


def signature(action: argparse.Action) -> tuple[object, ...]:
    """What a flag takes, as the parser reads it: the same in every use of a flag."""
    kind = getattr(action.type, "__name__", None) if action.type else None
    return (type(action).__name__, kind, action.nargs, tuple(sorted(map(str, action.choices))) if action.choices else None)


def uses(parser: argparse.ArgumentParser) -> dict[str, list[tuple[str, argparse.Action]]]:
    """Every long flag a person sees (hidden old names aside), and the commands it is on."""
    found: dict[str, list[tuple[str, argparse.Action]]] = defaultdict(list)
    for path, leaf in leaves(parser):
        for action in leaf._actions:
            if action.help == argparse.SUPPRESS:
                continue
            for flag in action.option_strings:
                if flag.startswith("--") and flag != "--help":
                    found[flag].append((" ".join(path), action))
    return dict(sorted(found.items()))


def old_names(parser: argparse.ArgumentParser) -> dict[tuple[str, str], list[str]]:
    """Old flag names still read (with a message): (old, new) -> the commands."""
    found: dict[tuple[str, str], list[str]] = defaultdict(list)
    for path, leaf in leaves(parser):
        for action in leaf._actions:
            new = getattr(action, "said", None)
            if new:
                found[(action.option_strings[0], new)].append(" ".join(path))
    return dict(sorted(found.items()))


def takes(action: argparse.Action) -> str:
    if action.nargs == 0:
        return "on/off"
    if action.choices:
        return " \\| ".join(str(c) for c in action.choices)
    metavar = action.metavar if isinstance(action.metavar, str) else None
    return metavar or action.dest.upper()


def commands(where: list[str], every: int) -> str:
    if len(where) == every:
        return "every command"
    groups: dict[str, list[str]] = defaultdict(list)
    for words in where:
        head, _, rest = words.partition(" ")
        groups[head].append(rest)
    return ", ".join(f"{head} ({', '.join(r for r in rests)})" if any(rests) else head for head, rests in groups.items())


def markdown(parser: argparse.ArgumentParser) -> str:
    every = len(list(leaves(parser)))
    known = meanings()
    rows = ["| flag | means | takes | on |", "|---|---|---|---|"]
    for flag, where in uses(parser).items():
        meaning = known.get(flag, "(no meaning written)")
        rows.append(f"| `{flag}` | {meaning} | {takes(where[0][1])} | {commands([w for w, _ in where], every)} |")
    rows += ["", "Old names, still read (each with a message on stderr saying its new name):", ""]
    rows += ["| old | new | on |", "|---|---|---|"]
    rows += [f"| `{old}` | `{new}` | {', '.join(where)} |" for (old, new), where in old_names(parser).items()]
    return "\n".join(rows) + "\n"
