"""Starts the lab's components, restarts any that dies, holds process faults, stops all on SIGTERM.

Run by ``stormlab up`` as ``python -m stormlab.engine.supervisor STATE_DIR``; it reads ``plan.json``,
keeps ``state.json`` (pids and URLs) current for ``status`` and ``down``, and serves a control
API on its own port:

  POST /faults {"fault": "freeze", "target": "rack-03", "duration_s": 10}  SIGSTOP, SIGCONT at the end
  POST /faults {"fault": "kill", "target": "metadata", "duration_s": 5}    SIGKILL, restarted at the end
  GET|DELETE /faults, GET /status, /healthz, /metrics

It is the process that owns the components, so it is the reaper for their faults: a paused
component is continued and a killed one restarted when the lease ends, whatever happened to
the command that asked. Children die with it (Linux parent-death signal).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web
from prometheus_client import CollectorRegistry

from chaos import catalog
from chaos.control import LEASE_SCHEMA, LeaseRunner, Plan, Recorder, add_fault_routes
from storage_node import contract
from storage_node.app import HELD_ENV
from stormcore import openapi, procs
from stormcore.auth import ENV as TOKEN_ENV
from stormcore.auth import FILE_ENV as TOKEN_FILE_ENV
from stormcore.auth import from_env, headers, token_middleware
from stormcore.fleet import node_id
from stormcore.openapi import Answer, Operation
from stormcore.settings import LabSettings, SettingsError
from stormcore.web import BadRequest, LoopLag, base_app, error_body, serve
from stormlab.engine.deploys import DeployBook, Held, Reconciler, Stale

RESTART_DELAY_S = 1.0  # after a first crash; doubling with each quick crash after it ...
RESTART_MAX_DELAY_S = 30.0  # ... up to this
STABLE_S = 60.0  # a child that ran this long starts counting its crashes afresh
DEPLOY_ANSWER_S = 3.0  # a deploy's answer waits this long for its first step's racks to run it
PUSH_TIMEOUT_S = 2.0  # a push to a rack that takes longer is tried again (a frozen rack is not pushed to)
LOG_MAX_BYTES = 20 * 1024 * 1024  # a component's log is rotated (one old copy kept) at a start past this


def restart_delay(quick_crashes: int) -> float:
    """How long to wait before restarting a child after its ``quick_crashes``-th crash in a row."""
    return min(RESTART_MAX_DELAY_S, RESTART_DELAY_S * 2 ** max(0, quick_crashes - 1))


def rotate(log: Path, max_bytes: int = LOG_MAX_BYTES) -> None:
    """Move a log past ``max_bytes`` to ``NAME.log.1`` (replacing the older copy)."""
    try:
        if log.stat().st_size > max_bytes:
            log.replace(log.with_name(log.name + ".1"))
    except FileNotFoundError:
        pass


FAULTS = catalog.names("supervisor")


def child_env(comp: dict[str, Any], environ: Mapping[str, str]) -> dict[str, str]:
    """What a lab process starts with: the supervisor's environment and its own. An external rack
    (a command of the user's: ``argv``) is not handed the lab's token: the contract needs none (no
    deploy reaches it, it serves no admin API), and the token opens every holder's faults."""
    env = {**environ, **comp["env"], "PYTHONUNBUFFERED": "1"}
    if comp.get("argv"):
        for secret in (TOKEN_ENV, TOKEN_FILE_ENV):
            env.pop(secret, None)
    return env


class Supervisor:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.plan = json.loads((directory / "plan.json").read_text())
        self.comps = {c["name"]: c for c in self.plan["components"]}
        self.procs: dict[str, asyncio.subprocess.Process] = {}
        self.restarts: dict[str, int] = {name: 0 for name in self.comps}
        self.crashes: dict[str, int] = {name: 0 for name in self.comps}  # quick crashes in a row
        self.started: dict[str, float] = {}
        self.held_down: set[str] = set()
        self.stopped: set[str] = set()
        self.stopping = False
        self.started_at = time.time()
        self._watchers: set[asyncio.Task] = set()
        # the racks live deploys reach: an external rack runs its own policy (docs/contract.md)
        self.racks = tuple(
            sorted((n for n, c in self.comps.items() if n.startswith("rack-") and not c.get("argv")), key=lambda n: int(n.split("-")[1]))
        )
        self.deploys = DeployBook(self.racks)
        self.reconciler = Reconciler(self.deploys, self.push_held, self.ready, time.monotonic)

    def contract_nodes(self) -> list[str]:
        """The node ids of an external rack (else of rack 0): the contract's examples."""
        outside = [c["env"].get("STORMLAB_NODE_IDS", "") for c in self.comps.values() if c.get("argv")]
        return [n for n in outside[0].split(",") if n] if outside else [node_id(0, i) for i in range(3)]

    async def start(self, name: str) -> None:
        comp = self.comps[name]
        env = child_env(comp, os.environ)
        if name in self.deploys.racks:  # a (re)started rack runs what the live deploys hold from its start
            generation, held = self.reconciler.started(name)
            env[HELD_ENV] = json.dumps({"generation": generation, "held": held})
        path = self.directory / "logs" / f"{name}.log"
        rotate(path)
        self.started[name] = time.monotonic()
        argv = comp.get("argv") or [sys.executable, "-m", comp["module"]]  # an external rack runs its own command
        with open(path, "ab") as log:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                env=env,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=log,
                stderr=asyncio.subprocess.STDOUT,
                preexec_fn=procs.die_with_parent,
            )
        self.procs[name] = proc
        watcher = asyncio.create_task(self._watch(name, proc))
        self._watchers.add(watcher)
        watcher.add_done_callback(self._watchers.discard)
        self.write_state()

    async def _watch(self, name: str, proc: asyncio.subprocess.Process) -> None:
        code = await proc.wait()
        if self.stopping or name in self.held_down or self.procs.get(name) is not proc:
            return
        ran_s = time.monotonic() - self.started.get(name, 0.0)
        self.crashes[name] = 1 if ran_s >= STABLE_S else self.crashes[name] + 1
        delay = restart_delay(self.crashes[name])
        print(f"{name} exited with {code} after {ran_s:.0f}s; restarting in {delay:g}s", flush=True)
        await asyncio.sleep(delay)
        if not self.stopping and name not in self.held_down:
            self.restarts[name] += 1
            await self.start(name)

    def write_state(self) -> None:
        state = {
            "supervisor_pid": os.getpid(),
            "supervisor_url": self.plan["supervisor_url"],
            "directory": str(self.directory),
            "started_at": self.started_at,
            "settings": self.plan["settings"],
            "links": self.plan.get("links", ""),
            "components": {
                n: {"url": c["url"], "port": c["port"], "pid": self.procs[n].pid if n in self.procs else None, "restarts": self.restarts[n]}
                for n, c in self.comps.items()
            },
        }
        tmp = self.directory / "state.json.tmp"
        tmp.write_text(json.dumps(state, indent=1))
        tmp.replace(self.directory / "state.json")

    def target(self, values: dict[str, Any]) -> str:
        name = values["target"]  # the catalog checked it names metadata or a rack
        if name not in self.comps:
            raise BadRequest(
                f"target must be the metadata service or a rack of this lab: "
                f"{', '.join(n for n in self.comps if catalog.TARGET_NAME.match(n))}"
            )
        if name in self.held_down or name in self.stopped:
            raise web.HTTPConflict(text=f"{name} already has a freeze or kill fault on it")
        if self.procs[name].returncode is not None:
            raise web.HTTPConflict(text=f"{name} is not running right now (it is being restarted)")
        return name

    async def freeze(self, body: dict[str, Any]) -> Plan:
        name = self.target(body)

        def apply() -> None:
            self.procs[name].send_signal(signal.SIGSTOP)
            self.stopped.add(name)

        def revert() -> None:
            self.stopped.discard(name)
            if self.procs[name].returncode is None:
                try:
                    self.procs[name].send_signal(signal.SIGCONT)
                except ProcessLookupError:  # died while stopped: its watcher restarts it
                    pass

        return Plan(name, apply, revert, {"pid": self.procs[name].pid})

    async def kill(self, body: dict[str, Any]) -> Plan:
        name = self.target(body)

        def apply() -> None:
            self.held_down.add(name)
            if self.procs[name].returncode is None:
                self.procs[name].kill()

        async def restart() -> None:
            await self.procs[name].wait()  # its port is free only once it is gone
            self.held_down.discard(name)
            if not self.stopping:
                self.restarts[name] += 1
                await self.start(name)

        def revert() -> None:
            task = asyncio.ensure_future(restart())
            self._watchers.add(task)
            task.add_done_callback(self._watchers.discard)

        return Plan(name, apply, revert, {"pid": self.procs[name].pid})

    def ready(self, name: str) -> bool:
        """Can this process take a request now (running, not frozen, not held down)?"""
        proc = self.procs.get(name)
        return proc is not None and proc.returncode is None and name not in self.stopped and name not in self.held_down

    async def deploy(self, body: dict[str, Any]) -> Plan:
        """A live deploy, rolled out in ``staged`` steps ``every_s`` apart (the racks in order, as
        evenly as they divide). The lease holds its values on every rack it has reached, and the
        reconciler keeps each rack on what the live deploys hold (a rack down, frozen or slow is
        brought to it when it answers); when the lease ends its values are no longer held."""
        changes = {k: body[k] for k in sorted(catalog.DEPLOYED & set(body))}
        if not self.racks:
            why = "deploy: no rack of this lab takes a deploy: an external rack runs its own retries (docs/contract.md)"
            raise web.HTTPConflict(text=error_body("no_rack_to_deploy", why).decode(), content_type="application/json")
        try:
            LabSettings.from_env(self.comps[self.racks[0]]["env"]).deployed(changes)  # every rack takes them, or none
        except SettingsError as exc:
            raise BadRequest(f"deploy: {exc}") from None
        seq: list[int] = []

        async def apply() -> None:
            now = time.monotonic()
            seq.append(self.deploys.add(changes, body["staged"], now, body["every_s"]))
            first = [r for r in self.deploys.reached(seq[0], now) if self.ready(r)]  # a frozen or down rack catches up later
            await self.reconciler.settle(first, timeout_s=DEPLOY_ANSWER_S)  # the first step, if its racks answer

        def revert() -> None:
            if seq:
                self.deploys.end(seq[0])
            self.reconciler.wake()

        return Plan(",".join(self.racks), apply, revert, {"changes": changes, "steps": min(body["staged"], len(self.racks))})

    async def push_held(self, name: str, held: Held, generation: int) -> Held:
        """POST a rack what the live deploys hold on it; what it holds now (Stale if it runs a newer push)."""
        async with (
            aiohttp.ClientSession() as session,
            session.post(
                f"{self.comps[name]['url']}/admin/deploy",
                json={"generation": generation, "held": held},
                headers=headers(from_env()),
                timeout=aiohttp.ClientTimeout(total=PUSH_TIMEOUT_S),
            ) as resp,
        ):
            answer = await resp.json()
            if resp.status == 409:
                raise Stale(answer.get("message", "stale"), int(answer.get("generation", 0)))
            if resp.status != 200:
                raise RuntimeError(f"{name} refused the deploy: {answer.get('message', resp.status)}")
            return dict(answer["held"])

    async def shutdown(self) -> None:
        self.stopping = True
        for name in list(self.stopped):
            self.procs[name].send_signal(signal.SIGCONT)
        for proc in self.procs.values():
            if proc.returncode is None:
                proc.terminate()
        for proc in self.procs.values():
            try:
                await asyncio.wait_for(proc.wait(), timeout=10.0)
            except TimeoutError:
                proc.kill()
                await proc.wait()
        (self.directory / "state.json").unlink(missing_ok=True)


_COMPONENT = {
    "type": "object",
    "required": ["pid", "running", "paused", "held_down", "restarts"],
    "properties": {
        "pid": {"type": "integer"},
        "running": {"type": "boolean"},
        "paused": {"type": "boolean"},
        "held_down": {"type": "boolean"},
        "restarts": {"type": "integer", "minimum": 0},
    },
}
STATUS_SCHEMA = {  # the supervisor's /status
    "type": "object",
    "required": ["component", "components", "faults"],
    "properties": {
        "component": {"const": "supervisor"},
        "components": {"type": "object", "additionalProperties": _COMPONENT},
        "faults": {"type": "array", "items": LEASE_SCHEMA},
        "deploys": {
            "type": "object",
            "description": "the live deploy leases, the racks not yet running what they hold, and why",
            "properties": {
                "live": {"type": "array", "items": {"type": "integer"}},
                "behind": {"type": "array", "items": {"type": "string"}},
                "failures": {"type": "object", "additionalProperties": {"type": "string"}},
            },
        },
    },
}


def create_app(sup: Supervisor) -> web.Application:
    registry = CollectorRegistry()
    app = base_app("stormlab supervisor", registry, LoopLag(registry), middlewares=[token_middleware(from_env())])
    runner = LeaseRunner(Recorder(registry, FAULTS, "supervisor"))
    add_fault_routes(
        app,
        runner,
        {"freeze": sup.freeze, "kill": sup.kill, "deploy": sup.deploy},
        conflict="the process already has a freeze or kill on it, or is being restarted; or a deploy finds no rack it reaches",
    )

    async def status(request: web.Request) -> web.Response:
        now = asyncio.get_running_loop().time()
        comps = {
            n: {
                "pid": p.pid,
                "running": p.returncode is None,
                "paused": n in sup.stopped,
                "held_down": n in sup.held_down,
                "restarts": sup.restarts[n],
            }
            for n, p in sup.procs.items()
        }
        rec = sup.reconciler
        deploys = {"live": sup.deploys.live(), "behind": rec.behind(), "failures": dict(rec.failures)}
        return web.json_response({"component": "supervisor", "components": comps, "faults": runner.active(now), "deploys": deploys})

    async def lifecycle(app: web.Application):
        for name in sup.comps:
            await sup.start(name)
        reconciling = asyncio.ensure_future(sup.reconciler.run())
        yield
        runner.halt()
        reconciling.cancel()
        await asyncio.gather(reconciling, return_exceptions=True)
        await sup.reconciler.stop()
        await sup.shutdown()

    openapi.add(
        app,
        Operation("GET", "/status", "every lab process: running, paused, restarts", {200: Answer("the lab's processes", STATUS_SCHEMA)}),
        status,
    )

    async def rack_contract(request: web.Request) -> web.Response:
        return web.json_response(contract.description(sup.contract_nodes()))

    what = "the rack contract (docs/contract.md) as an OpenAPI description: what a rack of yours answers (`stormlab fuzz` judges it)"
    described = {200: Answer("the OpenAPI 3.1 description", {"type": "object"})}
    openapi.add(app, Operation("GET", "/contract.json", what, described), rack_contract)
    app.cleanup_ctx.append(lifecycle)
    return app


def main() -> None:
    sup = Supervisor(Path(sys.argv[1]))
    serve(create_app(sup), "127.0.0.1", sup.plan["supervisor_port"])


if __name__ == "__main__":
    main()
