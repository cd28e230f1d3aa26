"""The API fuzzer: every operation of every process of the running lab, sent generated requests
good and bad, judged against the process's own description (``/openapi.json``).

    stormlab fuzz [--requests 1000] [--seed 1] [--only metadata,rack-00,desk,door]   (against the running lab)

Beside the lab's processes it fuzzes the game's consoles, which it serves itself on loopback
against the lab (``desk``: a team's desk, whose moves are made on the lab; ``room``: a room's
console with its own controls on a room of no labs, its join page's seats dealt and its debrief
written), and the rootless lab's door (``door``: stormlab/runs/fuzz_door.py, a door of the
fuzzer's own in front of the metadata service: raw bytes, slow writers, half-open connections and
a frozen inside). A rack that serves no description of its own
(an external rack, docs/contract.md) is judged by the rack contract the supervisor serves
(``/contract.json``).

For each operation the fuzzer draws requests with schemathesis (Hypothesis strategies built
from the description): half valid by the description, half not (a wrong type, a value out of
range, a missing field, a malformed body) where the operation takes any input; path parameters
the description gives examples of (real node ids, queue names) are used half of the time, so
requests get past "no such node" to the code behind it; protected operations are also sent
without the lab token and with a wrong one; each request carries a few unknown query
parameters, which must be ignored. Each answer is checked:

- never a 500 (a 503 is an answer some operations describe: a node disqualified, a pause);
- its status, content type, headers and body are those the description lists for it;
- a request the description calls invalid is refused (4xx), not carried out.

The supervisor's ``POST /faults`` (where the live deploys are drawn) is fuzzed three times: with
the fleet as it is, then, with a quarter of the requests each (a deploy waits up to 3 s for a
rack that does not answer), with rack-00 frozen (SIGSTOP, renewed every second) and with rack-00
killed (SIGKILL every two seconds, as the supervisor restarts it): a deploy that meets a rack
that does not answer must still be an answer, never a 500, and leave nothing behind.

Between operations every fault is halted (every change to the lab is a lease, so the metadata
service takes renewals on its cores again) and every process must answer ``/healthz`` again; at
the end every process must run, none stopped, no lease held. Prints a table (operation,
requests, answers by status, findings) and, with ``--json``, the figures; exit 1 on any finding.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import re
import signal
import sys
import threading
import time
import urllib.parse
import warnings
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from chaos import client
from stormcore import fleet, roster
from stormcore.auth import ensure_token, headers, join_token
from stormcore.errors import LabError, UsageError
from stormcore.labstate import running, state_dir
from stormcore.later import Later
from stormlab.runs.fuzz_door import fuzz_door

# the fuzzer's tools come with the test extras (make test, make fuzz), imported at the fuzzer's first use; the lab runs without them
hypothesis = Later("hypothesis")
st = Later("hypothesis.strategies")
hypothesis_errors = Later("hypothesis.errors")
schemathesis = Later("schemathesis")
schemathesis_checks = Later("schemathesis.checks")
requests = Later("requests")

LAB_TARGETS = (*(p.name if p.kind != roster.RACK else roster.rack_name(0) for p in roster.ROSTER), "supervisor")  # one of each kind
CONSOLES = ("desk", "room")  # the game's web apps, served by the fuzzer itself against the lab (``consoles``: rooms/standalone.py)
DOOR = "door"  # the rootless lab's door, served by the fuzzer itself in front of the metadata service (fuzz_door.py)
Consoles = Callable[[dict[str, Any], str, Path], contextlib.AbstractContextManager[dict[str, str]]]
TARGETS = (*LAB_TARGETS, *CONSOLES, DOOR)
NO_ANSWER = "no answer"
SERVER_ERROR = "server error: 500"


@dataclass
class OperationResult:
    target: str
    operation: str
    requests: int = 0
    negative: int = 0  # of the requests, those invalid by the description
    statuses: Counter[int] = field(default_factory=Counter)
    findings: Counter[str] = field(default_factory=Counter)
    repro: dict[str, str] = field(default_factory=dict)  # one curl command per kind of finding

    def found(self, kind: str, repro: str) -> None:
        self.findings[kind] += 1
        self.repro.setdefault(kind, repro)

    def describe(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "operation": self.operation,
            "requests": self.requests,
            "negative": self.negative,
            "statuses": {str(k): v for k, v in sorted(self.statuses.items())},
            "findings": dict(self.findings),
            "repro": self.repro,
        }


def _schemathesis() -> Any:
    if not schemathesis.installed:  # pragma: no cover - installed with the test extras
        raise UsageError("stormlab fuzz needs schemathesis: pip install -e '.[test]' (make test installs it)")
    return schemathesis


def checks() -> list[Callable]:
    return [
        schemathesis_checks.status_code_conformance,
        schemathesis_checks.content_type_conformance,
        schemathesis_checks.response_headers_conformance,
        schemathesis_checks.response_schema_conformance,
        schemathesis_checks.negative_data_rejection,
    ]


def findings_of(exc: BaseException) -> list[str]:
    """The kinds of finding a failed validation reports (schemathesis groups them)."""
    subs = getattr(exc, "exceptions", None)
    if subs:
        return [kind for sub in subs for kind in findings_of(sub)]
    title = getattr(exc, "title", "") or str(exc).splitlines()[0][:120]
    return [f"{type(exc).__name__}: {title}"]


def fuzz_operation(
    target: str, base_url: str, op: Any, token: str, requests_n: int, seed: int, known: list[dict[str, Any]] | None = None
) -> OperationResult:
    """Send ``requests_n`` generated requests to one operation and judge each answer. ``known``:
    path parameter values that go together (a node and a partition it holds), used for a share
    of the valid requests, as are the examples the description gives."""
    fuzz = OperationFuzz(target, base_url, op, token, known or [])
    try:
        return fuzz.run(requests_n, seed)
    finally:
        fuzz.session.close()


class OperationFuzz:
    """One operation's requests, drawn from its description, sent, and their answers judged."""

    def __init__(self, target: str, base_url: str, op: Any, token: str, known: list[dict[str, Any]]) -> None:
        self.base_url, self.op, self.token = base_url, op, token
        self.result = OperationResult(target, f"{op.method.upper()} {op.path}")
        definition = op.definition.raw
        self.takes_input = bool(definition.get("parameters") or definition.get("requestBody"))
        path_params = {p["name"]: p.get("schema", {}) for p in definition.get("parameters", []) if p.get("in") == "path"}
        self.examples = {name: schema["examples"] for name, schema in path_params.items() if schema.get("examples")}
        self.together = [v for v in ({k: x for k, x in values.items() if k in path_params} for values in known) if v]
        self.junk = st.dictionaries(st.from_regex(r"\Azz[a-z]{1,6}\Z"), st.text(max_size=16), max_size=2)
        self.auth = st.sampled_from(["token"] * 8 + ["none", "wrong"]) if definition.get("security") else st.just("token")
        self.session = requests.Session()
        self.validators = checks()

    def run(self, requests_n: int, seed: int) -> OperationResult:
        """Half the requests invalid by the description (where it takes input), the rest valid."""
        if self.takes_input:
            self.draw(self.op.as_strategy(schemathesis.GenerationMode.NEGATIVE), requests_n // 2, seed)
            self.result.negative = self.result.requests
        for extra_seed in range(1, 10):  # positive draws fill the rest (a few rounds if the space is small)
            if self.result.requests >= requests_n:
                break
            self.draw(self.positive(), requests_n - self.result.requests, seed + extra_seed)
        return self.result

    def positive(self) -> Any:
        """Valid requests: generated, or with the description's examples, or with values known to go together."""
        op, valid = self.op, schemathesis.GenerationMode.POSITIVE
        options = [op.as_strategy(valid)]
        if self.examples:
            options.append(st.fixed_dictionaries({k: st.sampled_from(v) for k, v in self.examples.items()}))
        if self.together:
            options.append(st.sampled_from(self.together))
        with_values = [s.flatmap(lambda values: op.as_strategy(valid, path_parameters=values)) for s in options[1:]]
        return st.one_of(options[0], *with_values)

    def send(self, drawn: tuple[Any, dict[str, str], str]) -> None:
        case, extra, who = drawn
        case.query = {**(case.query or {}), **extra}
        sent = {"none": {}, "wrong": headers("not-the-lab-token-" + "x" * 8), "token": headers(self.token)}[who]
        result = self.result
        result.requests += 1
        try:
            response = case.call(base_url=self.base_url, session=self.session, headers=sent, timeout=30, allow_redirects=False)
        except requests.RequestException as exc:
            result.found(f"{NO_ANSWER}: {type(exc).__name__}", case.as_curl_command(headers=sent))
            return
        result.statuses[response.status_code] += 1
        if response.status_code == 400 and too_long(response.request):  # the HTTP layer's refusal (text), before any handler
            return
        if response.status_code == 500:  # never described: a handler that raised
            result.found(SERVER_ERROR, case.as_curl_command(headers=sent))
        if who != "token" and response.status_code != 401:
            result.found(f"served without the lab token: {response.status_code}", case.as_curl_command(headers=sent))
            return
        try:
            case.validate_response(response, checks=self.validators, headers=sent)
        except (Exception, BaseExceptionGroup) as exc:  # schemathesis reports what it found as (groups of) exceptions
            for kind in findings_of(exc):
                if kind.startswith(ACCEPTED_NEGATIVE) and sent_was_valid(self.op.definition.raw, response.request):
                    continue  # the invalid value went on the wire as a valid one: nothing invalid was accepted
                result.found(kind, case.as_curl_command(headers=sent))

    def draw(self, strategy: Any, n: int, seed_n: int) -> None:
        runner = hypothesis.settings(
            max_examples=n,
            database=None,
            deadline=None,
            phases=[hypothesis.Phase.generate],
            suppress_health_check=list(hypothesis.HealthCheck),
            report_multiple_bugs=False,
        )(hypothesis.given(st.tuples(strategy, self.junk, self.auth))(self.send))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # schemathesis's notes on the description are not findings
            try:
                hypothesis.seed(seed_n)(runner)()
            except hypothesis_errors.Unsatisfiable:  # nothing in this operation can be made invalid (a free-form string)
                pass


MAX_REQUEST_LINE = 8190  # aiohttp's HTTP parser refuses a longer request line (400, text/plain) before any handler runs
ACCEPTED_NEGATIVE = "AcceptedNegativeData"


def too_long(request: Any) -> bool:
    """Whether a request's line is longer than the HTTP layer takes (every process's server)."""
    return len(f"{request.method} {request.path_url} HTTP/1.1") > MAX_REQUEST_LINE


def sent_was_valid(definition: dict[str, Any], request: Any) -> bool:
    """Whether a request schemathesis drew as invalid went on the wire as a valid one: an operation
    with no body whose query parameters, as the strings sent, each fit their schema (an array of
    one enum value goes as ``fault=blip``; a number as its digits). schemathesis's own checks
    know some of these serialisations, not all; nothing else is excused."""
    if "requestBody" in definition:
        return False
    sent = urllib.parse.parse_qs(urllib.parse.urlsplit(request.url).query, keep_blank_values=True)
    for param in definition.get("parameters", []):
        if param.get("in") == "path":
            return False  # a path the router matched is not re-read here: not excused
        if param.get("in") != "query":
            continue
        values = sent.get(param["name"], [])
        if (param.get("required") and not values) or len(values) > 1 or not all(_fits(v, param.get("schema", {})) for v in values):
            return False
    return True


def _fits(text: str, schema: dict[str, Any]) -> bool:
    if "enum" in schema:
        return text in [str(e) for e in schema["enum"]]
    # a bare string takes any text; numbers, patterns and lengths are not judged here, so not excused
    return schema.get("type") == "string" and not set(schema) - {"type", "description", "examples"}


def known_values(urls: dict[str, str], token: str) -> dict[str, list[dict[str, Any]]]:
    """For each rack, (node, table, partition) triples it holds, from the partition map: valid
    requests that get past "wrong owner" to the item store."""
    found: dict[str, list[dict[str, Any]]] = {}
    tables = client.call("GET", f"{urls['metadata']}/partition-map", token)["tables"]
    for table, route in sorted(tables.items()):
        for partition, owner in enumerate(route["owners"][:8]):
            rack = f"rack-{fleet.rack_of(owner):02d}"
            found.setdefault(rack, []).append({"node": owner, "table": table, "partition": partition})
    return found


def seat_codes(room_url: str, token: str) -> list[dict[str, Any]]:
    """The seats the room console has dealt, read off its join page with the join token: requests
    that get past "no such seat" to a seat's page and its claim."""
    answer = requests.get(f"{room_url}/join/links", headers=headers(join_token(token)), timeout=30)
    return [{"code": code} for code in sorted(set(re.findall(r"/seat/([A-Za-z0-9_-]+)", answer.text)))]


class Lab:
    """The running lab: its processes' URLs and the way to put it back between operations."""

    def __init__(self) -> None:
        state = running()
        if not state:
            raise LabError("no lab is up: start one with `stormlab up` (make fuzz starts one of its own)")
        self.token = ensure_token(state_dir())
        self.state = state

    def urls(self) -> dict[str, str]:
        state = running() or self.state
        comps = {name: c["url"] for name, c in state["components"].items()}
        return comps | {"supervisor": state["supervisor_url"]}

    def restore(self, cores: float, limit_s: float = 60.0) -> None:
        """Every fault halted (so the fleet readmitted with its cores), every process answering."""
        deadline = time.monotonic() + limit_s
        while True:
            try:
                urls = self.urls()
                for url in client.holders(running() or self.state).values():
                    client.call("DELETE", f"{url}/faults", self.token, timeout=10)
                meta = client.call("GET", f"{urls['metadata']}/status", self.token, timeout=10)
                if meta["paused"] or meta["cores"] != cores:  # every change is a lease: halted, each is undone
                    raise LabError(f"the metadata service is {'paused' if meta['paused'] else 'running'} on {meta['cores']} cores")
                for url in urls.values():
                    client.call("GET", f"{url}/healthz", self.token, timeout=5)
                sup = client.call("GET", f"{urls['supervisor']}/status", self.token, timeout=10)["components"]
                down = {n: c for n, c in sup.items() if not c["running"] or c["held_down"]}
                if down:  # a kill lease's restart still under way (a fuzzed kill of 0 s, say): the supervisor's word, not a port's
                    raise LabError(f"the supervisor has not got them running again: {down}")
                for name, url in urls.items():  # the nodes renewed again: a rack answers as it does in a healthy lab
                    if name.startswith("rack-"):
                        rack = client.call("GET", f"{url}/status", self.token, timeout=5)
                        if rack["nodes_serving"] < rack["nodes_total"]:
                            raise LabError(f"{name}: {rack['nodes_serving']} of {rack['nodes_total']} nodes serving")
                return
            except (LabError, TimeoutError) as exc:
                if time.monotonic() > deadline:
                    raise LabError(f"the lab did not come back within {limit_s:.0f} s: {exc}") from None
                time.sleep(0.5)

    @contextlib.contextmanager
    def held_down(self, rack: str, how: str) -> Iterator[None]:
        """``rack`` frozen (SIGSTOP, again every second: a freeze lease drawn by the fuzzer may
        SIGCONT it) or killed (SIGKILL every two seconds, as the supervisor restarts it) while the
        block runs; awake and running after."""
        done = threading.Event()
        sig, every = (signal.SIGSTOP, 1.0) if how == "frozen" else (signal.SIGKILL, 2.0)

        def hold() -> None:
            while not done.is_set():
                with contextlib.suppress(ProcessLookupError, KeyError, TypeError):
                    os.kill(int((running() or self.state)["components"][rack]["pid"]), sig)
                done.wait(every)

        holder = threading.Thread(target=hold, name=f"fuzz-{how}", daemon=True)
        holder.start()
        try:
            yield
        finally:
            done.set()
            holder.join()
            with contextlib.suppress(ProcessLookupError, KeyError, TypeError):
                os.kill(int((running() or self.state)["components"][rack]["pid"]), signal.SIGCONT)

    def health(self) -> dict[str, Any]:
        urls = self.urls()
        sup = client.call("GET", f"{urls['supervisor']}/status", self.token)["components"]
        books = {who: client.call("GET", f"{url}/faults", self.token)["faults"] for who, url in client.holders(self.state).items()}
        answering = {}
        for name, url in urls.items():
            try:
                answering[name] = client.call("GET", f"{url}/healthz", self.token, timeout=5).get("ok") is True
            except (LabError, TimeoutError):
                answering[name] = False
        return {
            "not_answering": sorted(n for n, ok in answering.items() if not ok),
            "not_running": sorted(n for n, c in sup.items() if not c["running"] or c["held_down"]),
            "supervisor": {n: c for n, c in sup.items() if not c["running"] or c["held_down"]},  # what it says of them
            "stopped": sorted(n for n, c in sup.items() if c["paused"]),
            "leases_held": sum(len(b) for b in books.values()),
        }


HELD_RACK = "rack-00"


def conditions(target: str, operation: str) -> tuple[str | None, ...]:
    """The states of the fleet an operation is fuzzed in: the supervisor's faults (the live deploys
    among them) also with a rack frozen and with a rack killed."""
    return (None, "frozen", "killed") if (target, operation) == ("supervisor", "POST /faults") else (None,)


def description_of(target: str, urls: dict[str, str], token: str) -> str:
    """Where a target's description is: its own ``/openapi.json``; for a rack that does not serve
    one (an external rack: docs/contract.md), the rack contract the supervisor serves."""
    if target.startswith("rack-"):
        try:
            client.call("GET", f"{urls[target]}/openapi.json", token, timeout=5)
        except (LabError, UsageError, TimeoutError):  # a 404 (a 4xx is a UsageError), or no answer
            return f"{urls['supervisor']}/contract.json"
    return f"{urls[target]}/openapi.json"


def fuzz(
    requests_n: int, seed: int, only: tuple[str, ...], echo: Callable[[str], None] = print, consoles: Consoles | None = None
) -> dict[str, Any]:
    """``consoles``: what serves the desk and the room console against the lab while the block runs
    (stormlab/rooms/standalone.py's ``serving``, handed in by the command: the game's room sits
    beside this one); without it they cannot be fuzzed."""
    schemathesis = _schemathesis()
    lab = Lab()
    urls = lab.urls()
    if consoles is None and set(only) & set(CONSOLES):
        raise UsageError("the desk and the room console are served by `stormlab fuzz` itself: run it as that command")
    unknown = sorted(set(only) - set(urls) - {*CONSOLES, DOOR})
    if unknown:
        raise UsageError(f"no process {', '.join(unknown)} in this lab; it has {', '.join(sorted([*urls, *CONSOLES, DOOR]))}")
    cores = float(client.call("GET", f"{urls['metadata']}/status", lab.token)["cores"])
    results: list[OperationResult] = []
    started = time.monotonic()
    rng = random.Random(seed)
    known = known_values(urls, lab.token)
    serving: contextlib.AbstractContextManager[dict[str, str]] = contextlib.nullcontext({})
    if consoles is not None and set(only) & set(CONSOLES):
        serving = consoles(lab.state, lab.token, Path(lab.state["directory"]) / "fuzz-consoles")
    with serving as served:
        if "room" in served:
            known["room"] = seat_codes(served["room"], lab.token)
        for target in only:
            if target == DOOR:
                lab.restore(cores)
                for row in fuzz_door(urls["metadata"], requests_n, rng.randrange(2**31), partial(OperationResult, DOOR)):
                    results.append(row)
                    echo(f"fuzz: {DOOR:<10} {row.operation:<58} {row.requests:>5} connections  {_verdict(row)}")
                continue
            where = lambda: lab.urls() | served  # noqa: E731 (a restarted process may have a new URL)
            description = schemathesis.openapi.from_url(description_of(target, where(), lab.token))
            for found in description.get_all_operations():
                op = found.ok()
                for condition in conditions(target, f"{op.method.upper()} {op.path}"):
                    lab.restore(cores)
                    took = time.monotonic()
                    n = requests_n if condition is None else max(1, requests_n // 4)  # a deploy to a rack that does not answer waits 3 s
                    with lab.held_down(HELD_RACK, condition) if condition else contextlib.nullcontext():
                        result = fuzz_operation(target, where()[target], op, lab.token, n, rng.randrange(2**31), known.get(target))
                    result.operation += f" ({HELD_RACK} {condition})" if condition else ""
                    results.append(result)
                    took = time.monotonic() - took
                    echo(f"fuzz: {target:<10} {result.operation:<58} {result.requests:>5} requests in {took:5.1f} s  {_verdict(result)}")
    lab.restore(cores)
    health = lab.health()
    findings = sum(sum(r.findings.values()) for r in results)
    healthy = not any(health[k] for k in ("not_answering", "not_running", "stopped")) and health["leases_held"] == 0
    return {
        "operations": len(results),
        "requests": sum(r.requests for r in results),
        "fewest_requests_per_operation": min((r.requests for r in results), default=0),
        "findings": findings,
        "server_errors": sum(v for r in results for s, v in r.statuses.items() if s >= 500 and s not in (503, 507)),
        "seconds": round(time.monotonic() - started, 1),
        "healthy_afterwards": healthy,
        "health": health,
        "results": [r.describe() for r in results],
        "ok": findings == 0 and healthy,
    }


def _verdict(result: OperationResult) -> str:
    statuses = " ".join(f"{k}:{v}" for k, v in sorted(result.statuses.items()))
    return f"{statuses}  {'ok' if not result.findings else f'{sum(result.findings.values())} FINDINGS'}"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--requests", type=int, default=1000, help="generated requests per operation (default 1000)")
    p.add_argument("--seed", type=int, default=1, help="seed for the generated requests")
    p.add_argument(
        "--only",
        default=None,
        help=f"comma list of targets, of {','.join(TARGETS)} (default: every process this lab runs, the consoles and the door)",
    )
    p.add_argument("--json", action="store_true", help="one JSON document on stdout (progress on stderr): every operation's figures")


def run(args: argparse.Namespace, consoles: Consoles | None = None) -> int:
    if not 1 <= args.requests <= 1_000_000:
        raise UsageError("--requests must be 1-1000000")
    if args.only is None:
        ran = set(Lab().urls())
        only = tuple(t for t in TARGETS if t in ran or t in (*CONSOLES, DOOR))
    else:
        only = tuple(t.strip() for t in args.only.split(",") if t.strip())
    if not only:
        raise UsageError("--only names no process")
    progress = sys.stderr if args.json else sys.stdout  # with --json, stdout holds the one document
    result = fuzz(args.requests, args.seed, only, echo=lambda line: print(line, file=progress, flush=True), consoles=consoles)
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        for r in result["results"]:
            for kind, count in r["findings"].items():
                print(f"FINDING {r['target']} {r['operation']}: {kind} ({count}x)\n  {r['repro'][kind]}")
        summary = {k: v for k, v in result.items() if k != "results"}
        print(json.dumps(summary, indent=1))
    return 0 if result["ok"] else 1
