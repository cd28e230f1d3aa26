"""One kind of lab process (pure): what the roster lists and an incident's declaration adds."""

from __future__ import annotations

from dataclasses import dataclass

from stormcore.wire import Status

METADATA, LINKPROXY, RACK, CUSTOMERS, DEPENDENT = "metadata", "linkproxy", "rack", "customers", "dependent"
COMPOSE_BASE_PORT = 8700  # compose publishes a process's port at this plus its offset


@dataclass(frozen=True)
class Process:
    name: str
    module: str
    kind: str  # metadata, linkproxy, rack, customers, or dependent (the cascade's services)
    port: int  # offset from the base port (the racks and the cells have ranges of their own)
    status: type[Status] | None  # its /status document
    what: str  # one line: what it is in the lab
    target: bool = True  # the supervisor may pause or kill it (`--target NAME`)
    holds_faults: bool = False  # it holds leases of its own (/faults)
    engines: bool = True  # it runs on compose, swarm and Kubernetes too (the link proxy is the local lab's network)
    role: str | None = None  # the on-call role that owns its moves in a team's game day
    oncall: str = ""  # who that is, in its incident's words
    incident: str = ""  # the incident whose world it belongs to (its declaration sets it); empty: every lab runs it

    @property
    def published_port(self) -> int:
        return COMPOSE_BASE_PORT + self.port
