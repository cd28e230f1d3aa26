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

Cells on an engine: the metadata service of cell 0 is the ``metadata`` service, the others are
the replicas of a second service (``metadata-cell``, STORMLAB_CELLS - 1 of them), each learning
its cell from ``STORMLAB_CELL`` as a rack does from ``STORMLAB_RACK`` but counted from cell 1
(``replica``: ``stormlab_metadata-cell_1`` is cell 1; ``slot:1`` is cell 1). A rack finds its
cell's service with ``STORMLAB_CELLS_DNS=cells:8700``: it asks every address behind the name
which cell it serves (``/status``) and links to its own.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import random
import re
import socket
import struct
import time
import urllib.request
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import aiohttp

from stormcore.documents import is_decimal
from stormcore.fleet import cell_name

log = logging.getLogger(__name__)

REFRESH_S = 5.0
MORE_CELLS_ENV = "STORMLAB_MORE_CELLS"  # the metadata-cell replicas on compose and a swarm: STORMLAB_CELLS - 1
SCHEDULE_ORIGIN_ENV = "STORMLAB_SCHEDULE_ORIGIN"  # unix seconds every rack counts its nodes' renewal slots from
_TRAILING = re.compile(r"[-_](\d+)$")


class RackSpecError(ValueError):
    """STORMLAB_RACK says nothing this module can turn into a rack index."""


def rack_index(spec: str, hostname: str = "", dns_names: Iterable[str] = (), name: str = "STORMLAB_RACK") -> int:
    """The rack index ``spec`` names (see the module's description; ``name``: the variable that
    said it, for the errors); pure."""
    spec = spec.strip()
    if is_decimal(spec):
        return int(spec)
    if spec.startswith("slot:") and is_decimal(spec[5:]) and int(spec[5:]) >= 1:
        return int(spec[5:]) - 1
    if spec == "ordinal":
        match = _TRAILING.search(hostname)
        if not match:
            raise RackSpecError(f"{name}=ordinal: hostname {hostname!r} does not end in -N (a StatefulSet pod does)")
        return int(match.group(1))
    if spec == "replica":
        for dns_name in dns_names:
            match = _TRAILING.search(dns_name.split(".")[0])
            if match and int(match.group(1)) >= 1:
                return int(match.group(1)) - 1
        raise RackSpecError(f"{name}=replica: no name ending in _N or -N among {sorted(dns_names)} (compose names its replicas so)")
    raise RackSpecError(f"{name}={spec!r}: give a number, 'replica', 'slot:N' or 'ordinal'")


def cell_index(spec: str, hostname: str = "", dns_names: Iterable[str] = ()) -> int:
    """The cell ``STORMLAB_CELL`` names (pure): a number (none: 0), or a replica, slot or ordinal
    of the ``metadata-cell`` service, whose first is cell 1 (cell 0 is the ``metadata`` service)."""
    spec = spec.strip()
    if not spec or is_decimal(spec):
        return int(spec or 0)
    return rack_index(spec, hostname, dns_names, "STORMLAB_CELL") + 1


def ptr_query(address: str, qid: int) -> bytes:
    """A DNS query for the PTR record of an IPv4 address (pure)."""
    name = ".".join(reversed(address.split("."))) + ".in-addr.arpa"
    labels = b"".join(bytes([len(part)]) + part.encode() for part in name.split("."))
    return struct.pack("!HHHHHH", qid, 0x0100, 1, 0, 0, 0) + labels + b"\0" + struct.pack("!HH", 12, 1)


def ptr_answers(data: bytes) -> list[str]:
    """The names in a DNS answer's PTR records (pure; compressed names followed)."""

    def name_at(offset: int, hops: int = 0) -> tuple[list[str], int]:
        labels: list[str] = []
        while True:
            n = data[offset]
            if n == 0:
                return labels, offset + 1
            if n & 0xC0 == 0xC0:
                if hops > 16:
                    raise ValueError("a DNS name that points in circles")
                rest, _ = name_at(((n & 0x3F) << 8) | data[offset + 1], hops + 1)
                return labels + rest, offset + 2
            labels.append(data[offset + 1 : offset + 1 + n].decode(errors="replace"))
            offset += 1 + n

    _, _, questions, answers, _, _ = struct.unpack("!HHHHHH", data[:12])
    offset, names = 12, []
    for _ in range(questions):
        offset = name_at(offset)[1] + 4
    for _ in range(answers):
        offset = name_at(offset)[1]
        rtype, _, _, length = struct.unpack("!HHIH", data[offset : offset + 10])
        offset += 10
        if rtype == 12:
            names.append(".".join(name_at(offset)[0]))
        offset += length
    return names


def own_dns_names(resolv_conf: Path = Path("/etc/resolv.conf"), timeout_s: float = 2.0) -> list[str]:
    """The names the network's DNS gives this container's address: Docker's embedded DNS answers
    the reverse lookup with the container's name (asked directly: /etc/hosts, which the C
    library reads first, only knows the container's id)."""
    try:
        address = socket.gethostbyname(socket.gethostname())
        servers = [line.split()[1] for line in resolv_conf.read_text().splitlines() if line.startswith("nameserver ")]
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.settimeout(timeout_s)
            s.sendto(ptr_query(address, random.randrange(65536)), (servers[0], 53))
            return ptr_answers(s.recv(4096))
    except (OSError, IndexError, ValueError, struct.error):
        return []


def rack_from_env(racks: int, environ: dict[str, str] | None = None) -> int:
    """This process's rack, which must be one of the lab's ``racks`` (a replica scaled past
    STORMLAB_RACKS would serve nodes the metadata service never planned)."""
    env = os.environ if environ is None else environ
    spec = env.get("STORMLAB_RACK", "")
    index = rack_index(spec, socket.gethostname(), own_dns_names() if spec.strip() == "replica" else ())
    return checked(index, racks)


def cell_from_env(cells: int, environ: dict[str, str] | None = None) -> int:
    """This metadata service's cell, which must be one of the lab's ``cells``; and the number of
    ``metadata-cell`` replicas, where the environment says it (STORMLAB_MORE_CELLS: compose and a
    swarm scale by a variable and cannot count), must be STORMLAB_CELLS - 1."""
    env = os.environ if environ is None else environ
    more = env.get(MORE_CELLS_ENV, "").strip()
    if more and (not is_decimal(more) or int(more) != cells - 1):
        raise RackSpecError(f"{MORE_CELLS_ENV}={more!r} with STORMLAB_CELLS={cells}: the metadata-cell replicas serve cells 1 to "
                            f"{cells - 1}, so give {MORE_CELLS_ENV}={cells - 1} (or `make up CELLS={cells}`)")  # fmt: skip
    spec = env.get("STORMLAB_CELL", "")
    index = cell_index(spec, socket.gethostname(), own_dns_names() if spec.strip() == "replica" else ())
    if index >= cells:
        raise RackSpecError(f"this is cell {index}, but the lab has {cells} cells (STORMLAB_CELLS): give {MORE_CELLS_ENV}={cells - 1}")
    return index


def cell_address(answers: dict[str, int | None], cell: int) -> str | None:
    """The address that said it serves ``cell`` (answers: address -> the cell it said, None: no
    answer), the lowest if several did (pure)."""
    return min((a for a, c in answers.items() if c == cell), default=None)


def find_cell(dns: str, cell: int, limit_s: float = 600.0, every_s: float = 1.0, resolve: Callable = socket.getaddrinfo) -> str:
    """The URL of ``cell``'s metadata service: every address behind ``dns`` (NAME:PORT) is asked
    which cell it serves until one says ``cell`` (blocking, at most ``limit_s``: the services of
    an engine start in no order). Raises RackSpecError if none did."""
    deadline, said = time.monotonic() + limit_s, time.monotonic()
    while True:
        answers = ask_cells(dns, resolve)
        found = cell_address(answers, cell)
        if found is not None:
            return cell_url(dns, found)
        if time.monotonic() >= deadline:
            raise RackSpecError(f"no metadata service behind {dns} serves cell {cell} (asked: {answers}): is {MORE_CELLS_ENV} "
                                "STORMLAB_CELLS - 1?")  # fmt: skip
        if time.monotonic() - said >= 10.0:
            log.warning("waiting for cell %d's metadata service behind %s (asked: %s)", cell, dns, answers)
            said = time.monotonic()
        time.sleep(every_s)


def cell_urls(dns: str, resolve: Callable = socket.getaddrinfo) -> dict[int, str]:
    """Each cell's metadata service that answers now behind ``dns`` (NAME:PORT), asked once."""
    answers = ask_cells(dns, resolve)
    return {c: cell_url(dns, a) for c in sorted({c for c in answers.values() if c is not None}) if (a := cell_address(answers, c))}


def cell_holders(env: Mapping[str, str]) -> dict[str, dict[str, str]]:
    """On an engine with cells, the other cells' metadata services (``metadata-1``, …) as fault
    holders: ``STORMLAB_METADATA_<N>_URL`` (a port-forward), else those that answer behind
    ``STORMLAB_CELLS_DNS`` (inside the stack's network: the chaos and ops containers; their admin
    APIs are not published on the host)."""
    cells = cells_in(env)
    given = {c: env[f"STORMLAB_METADATA_{c}_URL"] for c in range(1, cells) if env.get(f"STORMLAB_METADATA_{c}_URL")}
    found = cell_urls(env["STORMLAB_CELLS_DNS"]) if cells > 1 and len(given) < cells - 1 and env.get("STORMLAB_CELLS_DNS") else {}
    return {cell_name(c): {"url": url} for c, url in sorted((found | given).items()) if 0 < c < cells}


def cells_in(env: Mapping[str, Any]) -> int:
    """STORMLAB_CELLS in an environment or a lab's settings (1 if not a number)."""
    said = str(env.get("STORMLAB_CELLS", "")).strip()
    return int(said) if is_decimal(said) and int(said) >= 1 else 1


def ask_cells(dns: str, resolve: Callable = socket.getaddrinfo) -> dict[str, int | None]:
    """Every address behind ``dns`` (NAME:PORT) and the cell it says it serves (None: no answer)."""
    host, _, port = dns.rpartition(":")
    if not host or not is_decimal(port):
        raise RackSpecError(f"STORMLAB_CELLS_DNS={dns!r}: give NAME:PORT, e.g. cells:8700")
    try:
        addresses = sorted({str(info[4][0]) for info in resolve(host, int(port), type=socket.SOCK_STREAM)})
    except OSError:
        addresses = []
    return {a: _which_cell(f"http://{_host(a)}:{port}/status") for a in addresses}


def cell_url(dns: str, address: str) -> str:
    return f"http://{_host(address)}:{dns.rpartition(':')[2]}"


def _which_cell(url: str) -> int | None:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            body = json.loads(resp.read())
    except (OSError, ValueError):
        return None
    cell = body.get("cell") if isinstance(body, dict) else None
    return cell if isinstance(cell, int) and cell >= 0 else None


def checked(index: int, racks: int) -> int:
    if index >= racks:
        raise RackSpecError(
            f"this is rack {index}, but the lab has {racks} racks (STORMLAB_RACKS): scale the racks and STORMLAB_RACKS together"
        )
    return index


def wait_until_up(url: str, limit_s: float = 600.0, every_s: float = 1.0) -> bool:
    """Block until ``url`` answers 200 (at most ``limit_s``): for engines that start services in
    no order (swarm, Kubernetes). A rack whose nodes started before the metadata service answered
    would have all of them renew at once when it did, a herd at start-up that can hold the lab in
    the storm with no blip at all (seen on a swarm). True once it answered."""
    deadline = time.monotonic() + limit_s
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:
                if resp.status == 200:
                    return True
        except (OSError, ValueError):
            pass
        if time.monotonic() >= deadline:
            log.warning("%s did not answer within %gs; starting anyway", url, limit_s)
            return False
        time.sleep(every_s)


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
            if not host or not is_decimal(port):
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
        """Refresh every second until ``expected`` racks are known, then every REFRESH_S (a fixed
        list has nothing to refresh)."""
        while self.dns is not None:
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
