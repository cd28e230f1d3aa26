"""Which rack a storage-node process is, and where each rack answers, on any engine.

A rack learns its index from ``STORMLAB_RACK``:

- ``3``: rack 3 (the local launcher, hand-written services);
- ``replica``: compose's replica number, from the name Docker's DNS gives the container
  (``stormlab_rack_4`` or ``stormlab-rack-4`` is rack 3: compose counts from 1);
- ``slot:4``: a swarm task slot (``STORMLAB_RACK: "slot:{{.Task.Slot}}"``), rack 3;
- ``ordinal``: a Kubernetes StatefulSet pod's ordinal, from its hostname (``rack-3`` is rack 3).

The services that call racks (loadgen, the cascade) find them with ``STORMLAB_RACK_URLS`` (a
fixed list, rack N at position N) or ``STORMLAB_RACKS_DNS=racks:8800``: every address the name
resolves to is asked which rack it serves (its ``/status``), again every few seconds, so a
rack restarted at a new address is found again.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import socket
from collections.abc import Callable, Iterable

import aiohttp

log = logging.getLogger(__name__)

REFRESH_S = 5.0
_TRAILING = re.compile(r"[-_](\d+)$")


class RackSpecError(ValueError):
    """STORMLAB_RACK says nothing this module can turn into a rack index."""


def rack_index(spec: str, hostname: str = "", dns_names: Iterable[str] = ()) -> int:
    """The rack index ``spec`` names (see the module's description); pure."""
    spec = spec.strip()
    if spec.isdigit():
        return int(spec)
    if spec.startswith("slot:") and spec[5:].isdigit() and int(spec[5:]) >= 1:
        return int(spec[5:]) - 1
    if spec == "ordinal":
        match = _TRAILING.search(hostname)
        if not match:
            raise RackSpecError(f"STORMLAB_RACK=ordinal: hostname {hostname!r} does not end in -N (a StatefulSet pod does)")
        return int(match.group(1))
    if spec == "replica":
        for name in dns_names:
            match = _TRAILING.search(name.split(".")[0])
            if match and int(match.group(1)) >= 1:
                return int(match.group(1)) - 1
        raise RackSpecError(f"STORMLAB_RACK=replica: no name ending in _N or -N among {sorted(dns_names)} (compose names its replicas so)")
    raise RackSpecError(f"STORMLAB_RACK={spec!r}: give a number, 'replica', 'slot:N' or 'ordinal'")


def own_dns_names() -> list[str]:
    """The names the network's DNS gives this container's address (Docker's embedded DNS answers
    the reverse lookup with the container's name)."""
    try:
        address = socket.gethostbyname(socket.gethostname())
        name, aliases, _ = socket.gethostbyaddr(address)
    except OSError:
        return []
    return [name, *aliases]


def rack_from_env(environ: dict[str, str] | None = None) -> int:
    env = os.environ if environ is None else environ
    spec = env.get("STORMLAB_RACK", "")
    return rack_index(spec, socket.gethostname(), own_dns_names() if spec.strip() == "replica" else ())


class RackUrls:
    """Where rack N answers: ``urls[n]``, a KeyError while it is not known."""

    def __init__(self, fixed: Iterable[str] = (), dns: tuple[str, int] | None = None) -> None:
        self.by_rack: dict[int, str] = dict(enumerate(u.rstrip("/") for u in fixed))
        self.dns = dns
        self._asked: dict[str, int] = {}  # address -> the rack it said it serves

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> RackUrls:
        env = os.environ if environ is None else environ
        if env.get("STORMLAB_RACKS_DNS"):
            host, _, port = env["STORMLAB_RACKS_DNS"].rpartition(":")
            if not host or not port.isdigit():
                raise ValueError(f"STORMLAB_RACKS_DNS={env['STORMLAB_RACKS_DNS']!r}: give NAME:PORT, e.g. racks:8800")
            return cls(dns=(host, int(port)))
        if env.get("STORMLAB_RACK_URLS"):
            return cls(fixed=env["STORMLAB_RACK_URLS"].split(","))
        raise ValueError("set STORMLAB_RACK_URLS (rack N's URL at position N) or STORMLAB_RACKS_DNS (NAME:PORT)")

    def __getitem__(self, rack: int) -> str:
        return self.by_rack[rack]

    def __len__(self) -> int:
        return len(self.by_rack)

    def learn(self, answers: dict[str, int | None]) -> None:
        """The racks the addresses now behind the DNS name said they serve (None: did not
        answer yet); an address gone from the name is forgotten."""
        port = self.dns[1] if self.dns else 0
        self._asked = {a: r for a, r in answers.items() if r is not None}
        self.by_rack = {r: f"http://{_host(a)}:{port}" for a, r in sorted(self._asked.items(), key=lambda ar: ar[1])}

    async def refresh(self, session: aiohttp.ClientSession, resolve: Callable | None = None) -> None:
        if self.dns is None:
            return
        host, port = self.dns
        try:
            infos = await (resolve or asyncio.get_running_loop().getaddrinfo)(host, port, type=socket.SOCK_STREAM)
        except OSError as exc:
            log.warning("racks not resolved through %s: %s", host, exc)
            return
        addresses = sorted({str(info[4][0]) for info in infos})
        answers = {a: self._asked.get(a) for a in addresses}
        for address in (a for a, r in answers.items() if r is None):
            answers[address] = await _ask(session, f"http://{_host(address)}:{port}/status")
        self.learn(answers)

    async def keep_fresh(self, session: aiohttp.ClientSession, expected: int) -> None:
        """Refresh every second until ``expected`` racks are known, then every REFRESH_S."""
        while True:
            await self.refresh(session)
            await asyncio.sleep(1.0 if len(self) < expected else REFRESH_S)


async def _ask(session: aiohttp.ClientSession, url: str) -> int | None:
    try:
        async with session.get(url, timeout=aiohttp.ClientTimeout(total=2)) as resp:
            body = await resp.json(content_type=None)
        rack = body.get("rack") if resp.status == 200 and isinstance(body, dict) else None
        return rack if isinstance(rack, int) and rack >= 0 else None
    except (aiohttp.ClientError, TimeoutError, ValueError):
        return None


def _host(address: str) -> str:
    return f"[{address}]" if ":" in address else address
