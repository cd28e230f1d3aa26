"""`stormlab chaos …`: fault leases on the running lab. Every fault reverts by itself.

The command only asks: the process that holds the target (the link proxy for network faults,
the supervisor for process faults, the metadata service for its own) applies the fault and arms
its revert in the same moment, so killing this command never leaves a fault behind.
"""
from __future__ import annotations

import argparse
import json
import os
import time
import urllib.error
import urllib.request
from typing import Any

from chaos.lease import max_duration_s
from services.common.auth import ensure_token, headers
from services.common.settings import SettingsError, parse_duration
from services.launcher import LabError, running, state_dir

NETWORK = ("blip", "partition", "latency", "loss")
PROCESS = ("pause", "kill")
METADATA = ("pause-metadata", "resume-metadata", "capacity", "gsi-growth", "stuck-partition")


class ChaosError(LabError):
    """Bad fault request: exit code 2, nothing changed."""


def parse_racks(text: str, racks_total: int) -> list[int]:
    """``3`` means three racks (0, 1, 2); ``2,5,7`` names them."""
    if "," in text:
        return parse_rack_list(text, racks_total)
    try:
        count = int(text)
    except ValueError:
        raise ChaosError(f"--racks must be a count or a comma list of rack numbers, got {text!r}") from None
    if not 1 <= count <= racks_total:
        raise ChaosError(f"--racks {count}: the lab has {racks_total} racks")
    return list(range(count))


def parse_rack_list(text: str, racks_total: int) -> list[int]:
    """``2,5,7`` (or ``3``): rack numbers, each at most once."""
    try:
        chosen = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise ChaosError(f"racks must be rack numbers, got {text!r}") from None
    if not chosen or len(set(chosen)) != len(chosen) or any(not 0 <= r < racks_total for r in chosen):
        raise ChaosError(f"racks {text}: racks are numbered 0..{racks_total - 1}, each at most once")
    return chosen


def parse_between(a: str, b: str, racks_total: int, one_way: bool) -> tuple[list[int], str]:
    """``racks:1,2 metadata`` (or the other way round) -> the racks and the direction cut."""
    groups = {a, b}
    rack_group = next((g for g in groups if g.startswith("racks:")), None)
    if rack_group is None or groups - {rack_group} != {"metadata"}:
        raise ChaosError("the local backend partitions racks from the metadata service: "
                         "--between racks:1,2 metadata (other groups need the docker backend)")
    racks = parse_rack_list(rack_group.removeprefix("racks:"), racks_total)  # racks:3 names rack 3
    if not one_way:
        return racks, "both"
    return racks, "to-metadata" if a == rack_group else "from-metadata"


def duration(text: str | None, required: bool = True) -> float | None:
    if text is None:
        if required:
            raise ChaosError("--duration is required: every fault ends by itself")
        return None
    try:
        value = parse_duration(text)
    except SettingsError as exc:
        raise ChaosError(str(exc)) from None
    if not 0 < value <= max_duration_s():
        raise ChaosError(f"--duration must be more than 0 and at most {max_duration_s():g}s")
    return value


def request_for(args: argparse.Namespace, state: dict) -> tuple[str, dict[str, Any]]:
    """The control URL and body of a fault request: pure, so --dry-run prints exactly this."""
    racks_total = int(state["settings"]["STORMLAB_RACKS"])
    f = args.fault
    comps = state["components"]
    if f == "resume-metadata":
        every = duration(args.every, required=False) or 0.0
        span = max(0.001, (args.staged - 1) * every) if args.staged > 1 else 0.001
        if args.staged < 1 or args.staged > 1000:
            raise ChaosError("--staged must be between 1 and 1000")
        return comps["metadata"]["url"], {"fault": f, "duration_s": span, "staged": args.staged, "every_s": every}
    body: dict[str, Any] = {"fault": f, "duration_s": duration(args.duration)}
    if f in NETWORK:
        if f == "partition" and args.between:
            body["racks"], body["direction"] = parse_between(*args.between, racks_total, args.one_way)
        else:
            body["racks"] = _racks(args, racks_total)
        if f == "latency":
            body["delay_ms"] = duration(args.delay, required=True) * 1000
            body["jitter_ms"] = (duration(args.jitter, required=False) or 0.0) * 1000
        if f == "loss":
            if not 0 <= args.probability <= 1:
                raise ChaosError("--probability must be between 0 and 1")
            body["probability"] = args.probability
        return comps["linkproxy"]["url"], body
    if f in PROCESS:
        target = args.target
        if target not in comps or not (target == "metadata" or target.startswith("rack-")):
            raise ChaosError(f"--target {target!r} is not a process of this lab; "
                             f"targets: metadata, {', '.join(n for n in comps if n.startswith('rack-'))}")
        body["target"] = target
        return state["supervisor_url"], body
    if f == "capacity":
        if not 0.1 <= args.cores <= 100_000:
            raise ChaosError("--cores must be between 0.1 and 100000")
        body |= {"cores": args.cores, "break_glass": args.break_glass}
    if f == "stuck-partition":
        body["tables"] = [t for t in args.tables.split(",") if t]
    if f == "gsi-growth":
        body |= {"tables": [t for t in args.tables.split(",") if t], "factor": args.factor,
                 "ramp_s": duration(args.ramp, required=False) or 0.0}
    return comps["metadata"]["url"], body


def _racks(args: argparse.Namespace, racks_total: int) -> list[int]:
    if args.fraction is not None:
        if not 0 < args.fraction <= 1:
            raise ChaosError("--fraction must be more than 0 and at most 1")
        return list(range(max(1, round(args.fraction * racks_total))))
    return parse_racks(args.racks, racks_total)


def call(method: str, url: str, token: str, body: dict | None = None, timeout: float = 5.0) -> dict:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"Content-Type": "application/json", **headers(token)})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        raw = exc.read()
        try:
            message = json.loads(raw).get("message", str(exc))
        except ValueError:
            message = f"{exc}: {raw[:200].decode(errors='replace')}"
        if exc.code >= 500:
            raise LabError(f"{url} failed: {message}") from None
        if exc.code == 401:
            raise LabError(f"refused: {message}") from None
        raise ChaosError(message) from None
    except TimeoutError:
        raise
    except OSError as exc:
        if isinstance(getattr(exc, "reason", None), TimeoutError):
            raise TimeoutError(str(exc)) from None
        raise LabError(f"{url} did not answer: {exc}") from None


def add_parser(sub: argparse._SubParsersAction) -> None:
    chaos = sub.add_parser("chaos", help="inject faults into the running lab (each reverts by itself)",
                           description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    chaos.add_argument("--backend", choices=("auto", "local", "docker"),
                       help="local processes or the compose project's containers (default: detected)")
    faults = chaos.add_subparsers(dest="fault", required=True)

    def fault(name: str, help: str, needs_duration: bool = True) -> argparse.ArgumentParser:
        p = faults.add_parser(name, help=help, description=help)
        if needs_duration:
            p.add_argument("--duration", help=f"how long, e.g. 5s, 500ms, 2m (required; at most {max_duration_s():g}s)")
        p.add_argument("--dry-run", action="store_true", help="print the exact request and change nothing")
        p.add_argument("--wait", action="store_true", help="stay until the fault ends (Ctrl-C leaves it to end by itself)")
        return p

    def racks(p: argparse.ArgumentParser) -> None:
        p.add_argument("--racks", default="3", help="how many racks (3 = racks 0,1,2) or which (2,5,7); default 3")
        p.add_argument("--fraction", type=float, help="instead of --racks: this fraction of the racks")

    racks(fault("blip", "cut racks off from the metadata service (both ways): the 2:19 AM disruption"))
    p = fault("partition", "cut racks off from the metadata service, both ways or one")
    racks(p)
    p.add_argument("--between", nargs=2, metavar=("A", "B"), help="groups: racks:1,2 and metadata")
    p.add_argument("--one-way", action="store_true", help="drop only traffic from A to B")
    p = fault("latency", "delay the traffic on racks' links")
    racks(p)
    p.add_argument("--delay", required=True, help="added delay, e.g. 200ms")
    p.add_argument("--jitter", help="+/- jitter, e.g. 50ms")
    p = fault("loss", "lose segments on racks' links (TCP delivers them a retransmission timeout later)")
    racks(p)
    p.add_argument("--probability", type=float, required=True, help="chance a segment is lost, 0-1")
    for name, what in (("pause", "freeze a process (SIGSTOP), continue it at the end"),
                       ("kill", "kill a process (SIGKILL); the supervisor restarts it at the end")):
        fault(name, what).add_argument("--target", required=True, help="metadata or rack-NN")
    fault("pause-metadata", "pause membership requests (AWS, 5:06 AM); resumes at the end")
    p = fault("resume-metadata", "readmit the fleet now: all at once, or in steps", needs_duration=False)
    p.add_argument("--staged", type=int, default=1, help="readmit in this many steps (default 1: all at once)")
    p.add_argument("--every", help="time between steps, e.g. 10s")
    p = fault("capacity", "set the metadata service's virtual cores, through the shared admin path")
    p.add_argument("--cores", type=float, required=True, help="virtual cores for the duration")
    p.add_argument("--break-glass", action="store_true", help="bypass the virtual CPU (the path AWS did not have)")
    p.add_argument("--timeout", default="2s", help="how long the admin request may take (default 2s)")
    p = fault("gsi-growth", "customers adopt GSIs: memberships of these tables grow")
    p.add_argument("--tables", default="catalog,clickstream", help="comma list (default catalog,clickstream)")
    p.add_argument("--factor", type=float, default=2.0, help="growth of those tables' entries (default 2)")
    p.add_argument("--ramp", help="spread the growth over this long (default: at once)")
    p = fault("stuck-partition", "the Monday tail: the metadata partition behind these tables stops taking its share")
    p.add_argument("--tables", default="metric-groups", help="comma list (default metric-groups, ~0.2%% of traffic)")
    faults.add_parser("list", help="active faults and their time left")
    faults.add_parser("halt", help="revert every fault now")


def holders(state: dict) -> dict[str, str]:
    comps = state["components"]
    found = {"linkproxy": comps.get("linkproxy", {}).get("url"), "supervisor": state.get("supervisor_url"),
             "metadata": comps.get("metadata", {}).get("url")}
    return {who: url for who, url in found.items() if url}


def backend(args: argparse.Namespace) -> str:
    chosen = args.backend or os.environ.get("STORMLAB_BACKEND", "auto")
    if chosen == "auto":
        return "docker" if os.environ.get("STORMLAB_COMPOSE_PROJECT") else "local"
    return chosen


def lab_state(args: argparse.Namespace) -> dict:
    """Who holds what: the local lab's state file, or on compose the metadata service's URL."""
    if backend(args) == "docker":
        url = os.environ.get("STORMLAB_METADATA_URL", "")
        if not url and args.fault in METADATA:
            raise ChaosError(f"{args.fault} goes to the metadata service: set STORMLAB_METADATA_URL "
                             "(the chaos container has it: docker compose run --rm chaos …)")
        return {"settings": {"STORMLAB_RACKS": os.environ.get("STORMLAB_RACKS", "10")},
                "components": {"metadata": {"url": url}} if url else {}}
    state = running()
    if not state:
        raise ChaosError("no lab is up: start one with `stormlab up`")
    return state


def run_docker(args: argparse.Namespace, runner=None) -> int:
    """Network and process faults on the compose project's containers."""
    from chaos import docker_cli  # noqa: PLC0415 - the Docker SDK only when asked for

    try:
        runner = docker_cli.runner_for(runner)
        args.duration_s = duration(args.duration)
        if args.fault in NETWORK:
            racks_total = max(runner.racks(), default=-1) + 1
            if args.fault == "partition" and args.between:
                args.rack_list, args.direction = parse_between(*args.between, racks_total, args.one_way)
            else:
                args.rack_list = _racks(args, racks_total)
            if args.fault == "latency":
                args.delay_ms, args.jitter_ms = duration(args.delay) * 1000, (duration(args.jitter, False) or 0) * 1000
            if args.fault == "loss" and not 0 <= args.probability <= 1:
                raise ChaosError("--probability must be between 0 and 1")
        return docker_cli.apply(args, runner)
    except docker_cli.DockerChaosError as exc:
        raise ChaosError(str(exc)) from None
    except docker_cli.NotApplied as exc:
        raise LabError(str(exc)) from None


def run(args: argparse.Namespace, runner=None) -> int:
    docker = backend(args) == "docker"
    if docker and args.fault in NETWORK + PROCESS:
        return run_docker(args, runner)
    state = lab_state(args)
    token = ensure_token(state_dir())
    if args.fault in ("list", "halt") and docker:
        from chaos import docker_cli  # noqa: PLC0415

        try:
            runner = docker_cli.runner_for(runner)
        except docker_cli.DockerChaosError as exc:
            raise ChaosError(str(exc)) from None
    if args.fault == "list":
        rows = [(who, f) for who, url in holders(state).items() for f in call("GET", f"{url}/faults", token)["faults"]]
        for who, f in rows:
            extra = ", ".join(f"{k}={v}" for k, v in f.items() if k not in ("id", "fault", "target", "left_s"))
            print(f"{who}#{f['id']} {f['fault']} on {f['target']}: {f['left_s']:.1f}s left  {extra}")
        in_containers = docker_cli.held_rows(runner) if docker else []
        for row in in_containers:
            print(row)
        if not rows and not in_containers:
            print("no active faults")
        return 0
    if args.fault == "halt":
        total = sum(call("DELETE", f"{url}/faults", token)["halted"] for url in holders(state).values())
        total += docker_cli.halt(runner) if docker else 0
        print(f"halted {total} fault(s)")
        return 0
    url, body = request_for(args, state)
    if args.dry_run:
        print(f"POST {url}/faults {json.dumps(body)}")
        return 0
    timeout = parse_duration(args.timeout) if args.fault == "capacity" else 5.0
    try:
        lease = call("POST", f"{url}/faults", token, body, timeout=timeout)
    except TimeoutError:
        raise LabError(f"{args.fault} timed out after {timeout:g}s: the metadata service is too loaded to process "
                       "the administrative request (as in 2015). Nothing changed. --break-glass goes around it.") from None
    print(f"{lease['fault']} #{lease['id']} on {lease['target']} for {body['duration_s']:g}s; it reverts by itself")
    if args.wait:
        time.sleep(body["duration_s"])
    return 0
