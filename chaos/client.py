"""Asking the processes that hold faults: one path for `stormlab chaos`, `stormlab ops` and the
game-day runner.

A request is built by the fault catalog from plain values, sent to the process that holds the
fault (its ``/faults`` API), and, when it is a responder's move (pause, resume, capacity),
written to the responders' journal whichever command made it.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from typing import Any

from chaos import catalog
from chaos.catalog import ChaosError
from chaos.journal import Journal
from stormcore import roster
from stormcore.auth import headers
from stormcore.errors import LabError
from stormcore.fleet import cell_name
from stormcore.racks import cells_in


class ServerFailed(LabError):
    """A process answered 5xx: a bug in it (a refusal is a 4xx), not a process that is away."""


class NoAnswer(LabError):
    """A process took the request and did not answer in time (frozen, or too busy): exit 1, named."""


def call(method: str, url: str, token: str, body: dict[str, Any] | None = None, timeout: float = 5.0) -> dict[str, Any]:
    """One JSON request; a 4xx answer raises ChaosError, a 5xx ServerFailed, an unreachable
    process LabError, a request with no answer within ``timeout`` (a read, urllib's) NoAnswer."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json", **headers(token)})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            answer = json.loads(resp.read())
            return answer if isinstance(answer, dict) else {"answer": answer}
    except urllib.error.HTTPError as exc:
        raw = exc.read()
        try:
            message = json.loads(raw).get("message", str(exc))
        except (ValueError, AttributeError):
            message = f"{exc}: {raw[:200].decode(errors='replace')}"
        if exc.code >= 500:
            raise ServerFailed(f"{url} failed ({exc.code}): {message}") from None
        if exc.code == 401:
            raise LabError(f"refused: {message}") from None
        raise ChaosError(message) from None
    except TimeoutError:
        raise NoAnswer(f"{url} did not answer within {timeout:g}s (frozen, or too busy to answer)") from None
    except OSError as exc:
        if isinstance(getattr(exc, "reason", None), TimeoutError):
            raise NoAnswer(f"{url} did not answer within {timeout:g}s (frozen, or too busy to answer)") from None
        raise LabError(f"{url} did not answer: {exc}") from None
    except ValueError as exc:  # an answer that is not JSON: the holder's bug, said as a failed answer
        raise ServerFailed(f"{url} answered something that is not JSON: {exc}") from None


def holders(state: Mapping[str, Any]) -> dict[str, str]:
    """Each fault-holding process of the lab and its URL."""
    comps = state.get("components", {})
    found = {
        "supervisor": state.get("supervisor_url"),
        **{p.name: comps.get(p.name, {}).get("url") for p in roster.ROSTER if p.holds_faults},
        **{name: c.get("url") for name, c in comps.items() if name.startswith("metadata-")},  # the other cells
    }
    return {who: url for who, url in found.items() if url}


HOLDER_DEADLINE_S = 5.0  # how long any request to a fault holder waits (list, halt, a repair); a frozen one is named after it


def silent() -> str:
    return f"did not answer within {HOLDER_DEADLINE_S:g}s (frozen, or too busy to answer)"


def ask_holder(method: str, url: str, token: str) -> dict[str, Any]:
    """One request to a fault holder, answered within HOLDER_DEADLINE_S as a whole (urllib's timeout
    is per read: a holder that trickles its answer gets no longer), else NoAnswer. Every path that
    asks a holder (``chaos halt HOLDER#ID``, a repair through the desk) has this deadline and
    these errors: a 4xx ChaosError, a 5xx ServerFailed, no answer NoAnswer, nothing else."""
    box: dict[str, Any] = {}

    def ask() -> None:
        try:
            box["answer"] = call(method, url, token, timeout=HOLDER_DEADLINE_S)
        except Exception as exc:  # handed to the caller's thread below
            box["error"] = exc

    thread = threading.Thread(target=ask, daemon=True)  # one a holder keeps past the deadline keeps nothing alive
    thread.start()
    thread.join(HOLDER_DEADLINE_S + 1.0)
    if "answer" in box:
        return box["answer"]
    error = box.get("error") or NoAnswer(f"{url} {silent()}")
    if isinstance(error, (LabError, ChaosError)):
        raise error
    raise LabError(f"{url}: {type(error).__name__}: {error}")


def ask_every_holder(
    state: Mapping[str, Any], token: str, method: str, fault: str | None = None
) -> tuple[list[tuple[str, dict[str, Any]]], list[str]]:
    """``method`` /faults asked of every holder of the lab at once (GET: its book; DELETE: every
    lease ended, reverted), each within HOLDER_DEADLINE_S: the answers, and the holders that did not
    answer, each named with why. A holder that accepts the connection and never answers (a frozen
    process) holds up nobody: it is named when the deadline passes."""
    found = holders(state)
    query = ""
    if fault is not None:  # only the leases of one fault, asked of the processes that hold it (every cell's, for the metadata's)
        holder = catalog.find(fault).holder
        found = {who: url for who, url in found.items() if who == holder or (holder == "metadata" and who.startswith("metadata-"))}
        query = f"?fault={fault}"
    answers: dict[str, dict[str, Any]] = {}
    failed: dict[str, str] = {}

    def ask(who: str, url: str) -> None:
        try:
            answers[who] = call(method, f"{url}/faults{query}", token, timeout=HOLDER_DEADLINE_S)
        except NoAnswer:
            failed[who] = silent()
        except (LabError, ChaosError) as exc:
            failed[who] = str(exc)
        except Exception as exc:  # a connection cut mid-answer: this holder's, not the others'
            failed[who] = f"{type(exc).__name__}: {exc}"

    # Daemon threads: one that a holder keeps past the deadline does not keep the command alive.
    threads = [threading.Thread(target=ask, args=item, daemon=True) for item in found.items()]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + HOLDER_DEADLINE_S + 1.0  # urllib's timeout is per read: a trickle gets no longer
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    done = dict(answers)  # what had come by the deadline; a late answer changes nothing now
    named = [f"{who}: {failed.get(who, silent())}" for who in found if who not in done]
    return [(who, done[who]) for who in found if who in done], named


def halt_every_holder(state: Mapping[str, Any], token: str, fault: str | None = None) -> tuple[int, list[str]]:
    """End every lease of every holder of the lab (``fault``: only that fault's), each reverted: how
    many, and the holders that did not answer (one that does not answer does not stop the others)."""
    answers, failed = ask_every_holder(state, token, "DELETE", fault)
    return sum(int(answer.get("halted", 0)) for _, answer in answers), failed


def racks_total(state: Mapping[str, Any]) -> int:
    return int(state["settings"]["STORMLAB_RACKS"])


def build(state: Mapping[str, Any], fault: str, values: Mapping[str, Any]) -> tuple[str, catalog.Request]:
    """The holder's URL and the checked request (nothing is sent). ``values`` may name a ``cell``:
    which cell's metadata service holds a fault of the metadata service (the first by default)."""
    values = dict(values)
    cell = values.pop("cell", None)
    req = catalog.request(fault, values, racks_total(state))
    holder = req.fault.holder
    if cell is not None:
        if holder != "metadata":
            raise ChaosError(f"--cell picks a cell's metadata service; {fault} is held by the {holder}")
        holder = cell_name(cell)
    url = holders(state).get(holder)
    if url is None:
        cells = cells_in(state.get("settings", {}))
        if cell is not None and cell < cells:  # an engine's cell, whose admin API is not published on this host
            raise ChaosError(
                f"cell {cell}'s metadata service does not answer from here (its admin API is not published on the host): on "
                f"compose, send {fault} from the stack's own chaos or ops container (`docker compose run --rm ops|chaos {fault} "
                f"--cell {cell} ...`), which finds it behind `cells`; on Kubernetes, port-forward it (STORMLAB_METADATA_{cell}_URL)"
            )
        if cell is not None:
            raise ChaosError(f"this lab has no cell {cell} (cells: {cells})")
        if holder == "supervisor":  # a live deploy: only the local lab runs a supervisor
            raise ChaosError(f"{fault} is held by the local lab's supervisor, which this lab does not run: use `stormlab up` for it")
        raise ChaosError(f"{fault} is held by the {holder}, which this lab does not have")
    return url, req


def send(url: str, req: catalog.Request, token: str) -> dict[str, Any]:
    timeout = req.client.get("timeout_s", 5.0)
    try:
        return call("POST", f"{url}/faults", token, req.body, timeout=timeout)
    except NoAnswer:
        raise LabError(
            f"{req.fault.name} timed out after {timeout:g}s: the admin request waits behind the storm "
            "on the metadata service's own CPU (as in 2015). Nothing changed. Pause first, or "
            "--break-glass goes around it."
        ) from None


def apply(
    state: Mapping[str, Any],
    fault: str,
    values: Mapping[str, Any],
    token: str,
    *,
    journal: Journal | None = None,
    via: str = "chaos",
    action: str | None = None,
    role: str | None = None,
) -> tuple[dict[str, Any], catalog.Request]:
    """Build, send and, for a responder's move, journal one fault (a move that is refused is
    journaled too); returns the holder's lease and the request."""
    spec = catalog.FAULTS.get(fault)
    moves = journal if spec is not None and spec.move else None
    args = {k: v for k, v in values.items() if v is not None}
    try:
        url, req = build(state, fault, values)
        lease = send(url, req, token)
    except (ChaosError, LabError) as exc:
        if moves is not None:
            moves.record(action or fault, args, False, str(exc), fault=fault, via=via, role=role)
        raise
    if moves is not None:
        moves.record(action or fault, args, True, describe(lease, req), fault=fault, via=via, role=role)
    return lease, req


def describe(lease: Mapping[str, Any], req: catalog.Request) -> str:
    return (
        f"{lease.get('fault', req.fault.name)} #{lease.get('id')} on {lease.get('target')} for "
        f"{req.body['duration_s']:g}s; it reverts by itself, and then {req.fault.reverts}"
    )
