"""The lab's processes, named once (pure): every list of them is derived from this roster.

A process here is one kind of lab process: its name (its component name in the local lab, its
fault target, its compose service and the on-call role that owns its moves), the module it runs
as (``python -m MODULE``), its port (an offset from the local lab's base port; on compose the
published port is 8700 plus it), its /status type, and what it does in the lab. The racks are
one process kind run many times (``rack-00``, ``rack-01``, …), the metadata service once per
cell (``metadata``, ``metadata-1``, …).

Adding a process to the lab is one entry here, or in its incident's declaration
(stormcore/incidents/): the launcher starts it, the chaos catalog knows it as a target and a
holder, the fuzzer sends it requests, sizing counts it, the compose reader publishes it, and
tests check that the compose, swarm and Kubernetes files run it.
"""

from __future__ import annotations

import re

from stormcore.incidents import INCIDENTS, REGISTERED
from stormcore.process import COMPOSE_BASE_PORT, CUSTOMERS, DEPENDENT, LINKPROXY, METADATA, RACK, Process
from stormcore.wire import LoadgenStatus, MetadataStatus, RackStatus

__all__ = ["COMPOSE_BASE_PORT", "CUSTOMERS", "DEPENDENT", "LINKPROXY", "METADATA", "RACK", "Process"]


ROSTER: tuple[Process, ...] = (
    Process("metadata", "metadata_service", METADATA, 0, MetadataStatus, "the metadata service: memberships, the virtual CPU, the door",
            holds_faults=True, role="database", oncall="DynamoDB's on-call: the metadata service (pause, capacity, readmission)"),
    Process("linkproxy", "chaos.linkproxy", LINKPROXY, 1, None,
            "the link proxy (every rack's path to the metadata service, every service's path to each rack)",
            target=False, holds_faults=True, engines=False),
    Process("rack", "storage_node", RACK, 10, RackStatus, "a rack: many virtual storage nodes renewing their memberships"),
    Process("loadgen", "services.loadgen", CUSTOMERS, 2, LoadgenStatus, "the customers: reads and writes routed by the partition map",
            target=False),
)  # fmt: skip
ROSTER += tuple(p for incident in REGISTERED for p in incident.processes)  # what each incident's world adds
SUPERVISOR_PORT = 3  # the local lab's supervisor: the parent of every process, the holder of process faults
BY_NAME = {p.name: p for p in ROSTER}

# Derived lists, each read where it is needed.
CASCADE: tuple[str, ...] = tuple(p.name for p in ROSTER if p.kind == DEPENDENT)  # the services beside the database


def cascade_of(incident: str) -> tuple[str, ...]:
    """The services beside the database an incident's lab runs unless told otherwise."""
    return tuple(p.name for p in ROSTER if p.kind == DEPENDENT and p.incident == incident)


SINGLE: tuple[Process, ...] = tuple(p for p in ROSTER if p.kind != RACK)  # one process each (the metadata service: one per cell)
NAMED_TARGETS: tuple[str, ...] = tuple(p.name for p in ROSTER if p.target and p.kind != RACK)  # a `--target` by its name
ENGINE_SERVICES: tuple[str, ...] = tuple(p.name for p in ROSTER if p.engines)  # compose services (the racks: one scaled service)
ROLES: dict[str, str] = {p.role: p.oncall for p in ROSTER if p.role}  # every on-call role (who may make a move)


def game_roles(incident: str) -> tuple[str, ...]:
    """The roles a team's game day of this incident hands tokens to (its declaration's): its own services' on-calls."""
    declared = INCIDENTS.get(incident)
    return declared.roles if declared else ()


TARGET_NAME = re.compile(rf"^({'|'.join(NAMED_TARGETS)}|rack-\d{{1,4}})$")


def targets_text() -> str:
    """The processes a `--target` may name, as people read them."""
    names = [n if n != "metadata" else "metadata, rack-NN" for n in NAMED_TARGETS]
    return ", ".join(names[:-1]) + f" or {names[-1]}"


def module_kinds() -> dict[str, str]:
    """Each process's module -> its name (``storage_node`` -> ``rack``): who a command line is."""
    return {p.module: p.name for p in ROSTER}


def rack_name(index: int) -> str:
    return f"rack-{index:02d}"


def role_of(holder: str) -> str:
    """The on-call role whose service holds a lease (the database's: the metadata service, the
    supervisor and the link proxy, which act on the storage fleet)."""
    process = BY_NAME.get(holder)
    return process.role if process is not None and process.role else ROSTER[0].role or "database"
