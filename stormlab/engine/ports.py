"""Where each process of a local lab listens: a fixed plan from a base port, or free ports.

From a base port B (8700 by default) every process of the roster listens at B plus its offset
(the metadata service B, the link proxy B+1, loadgen B+2, the supervisor B+3, the cascade's
services B+4…); rack R at B+10+R, its link through the proxy at B+100+R, each service's path to
rack R at B+200+64·i+R, the metadata service of cell C at B+80+C. Base port 0 takes free ports
instead, below the kernel's ephemeral range, never handing one port out twice: not in this process,
and not while another process's claim on it is fresh (a claim file per port, made with O_EXCL, in
``claims_dir()``), so two labs started at once (two test workers, a room's teams) never pick the same
port between one's choosing it and its process binding it.
"""

from __future__ import annotations

import os
import random
import socket
import stat
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from chaos.kernel_link import ports_in_kernel
from stormcore import roster
from stormcore.errors import LabError
from stormcore.settings import LabSettings

HOST = "127.0.0.1"
DEFAULT_BASE_PORT = 8700
LINKS_AT, PATHS_AT, PATHS_EVERY, CELLS_AT = 100, 200, 64, 80  # offsets of the port ranges from the base
_HANDED_OUT: set[int] = set()  # ports this process chose for a lab: never chosen twice
CLAIM_S = 300.0  # another process's claim on a port holds this long: time enough for its lab to bind it


@dataclass(frozen=True)
class PortPlan:
    single: dict[str, int]  # the metadata service (cell 0), the link proxy, loadgen, each service run, the supervisor
    racks: list[int]
    links: list[int]  # each rack's path to its metadata service, through the link proxy
    paths: dict[str, list[int]]  # each service's path to each rack, through the link proxy
    cells: list[int]  # the other cells' metadata services


def singles(cascade: Sequence[str]) -> list[str]:
    """The processes that run once (and the supervisor), with the cascade's services asked for."""
    return [p.name for p in roster.SINGLE if p.kind != roster.DEPENDENT or p.name in cascade] + ["supervisor"]


def port_plan(settings: LabSettings, base_port: int, cascade: Sequence[str]) -> PortPlan:
    """Every port of a lab of ``settings`` running the services ``cascade``."""
    n, names = settings.racks, singles(cascade)
    if base_port == 0:
        free = iter(_free_ports(len(names) + 2 * n + len(cascade) * n + settings.cells - 1))
        return PortPlan(
            {name: next(free) for name in names},
            _take(free, n),
            _take(free, n),
            {s: _take(free, n) for s in cascade},
            _take(free, settings.cells - 1),
        )
    if not 1024 <= base_port <= 65535 - 500:
        raise LabError("base port must be 0 (pick free ports) or between 1024 and 65035")
    offsets = {p.name: p.port for p in roster.ROSTER} | {"supervisor": roster.SUPERVISOR_PORT}
    plan = PortPlan(
        {name: base_port + offsets[name] for name in names},
        [base_port + offsets["rack"] + r for r in range(n)],
        [base_port + LINKS_AT + r for r in range(n)],
        {s: [base_port + PATHS_AT + PATHS_EVERY * i + r for r in range(n)] for i, s in enumerate(roster.CASCADE) if s in cascade},
        [base_port + CELLS_AT + c for c in range(1, settings.cells)],
    )
    every = [*plan.single.values(), *plan.racks, *plan.links, *(p for ps in plan.paths.values() for p in ps), *plan.cells]
    if len(set(every)) != len(every) or max(every) > 65535:
        raise LabError(
            f"the fixed port plan has no room for {n} racks (it holds up to {PATHS_EVERY}, one port each): use --base-port 0 for free ports"
        )
    busy = [p for p in every if not port_free(p)]
    if busy:
        raise LabError(f"ports {busy} are in use on {HOST}; pick another --base-port, or 0 for any free ports")
    return plan


def _take(free: Iterator[int], n: int) -> list[int]:
    return [next(free) for _ in range(n)]


def _ephemeral_low() -> int:
    """The lowest port the kernel hands to outgoing connections (Linux; 32768 elsewhere)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _free_ports(n: int) -> list[int]:
    """``n`` free ports below the ephemeral range: between choosing a port and its process binding
    it, the lab's own outgoing connections (which take ephemeral ports) cannot take it first."""
    low, high = 10_000, _ephemeral_low() - 1
    if high - low < 4 * n:  # an unusual range: let the kernel choose
        return _kernel_ports(n)
    start, found = random.randrange(low, high), []
    claims = claims_dir()
    _forget_old_claims(claims)
    ruled = ports_in_kernel()  # a rule of another lab's (or one a killed lab left) would catch it
    for offset in range(high - low):
        port = low + (start - low + offset) % (high - low)
        taken = port in _HANDED_OUT or port in ruled
        if not taken and port_free(port) and _claim(claims, port):  # not bound yet does not mean not promised
            found.append(port)
            if len(found) == n:
                _HANDED_OUT.update(found)
                return found
    raise LabError(f"not {n} free ports between {low} and {high}")


def claims_dir() -> Path | None:
    """Where processes of this user claim the free ports they hand out (made on first use, 0700);
    None where it cannot be made (a read-only temp directory): then this process's promises only.

    The temp directory is shared with every local user, who could make this name first: as a
    symlink (the claims forgotten would then be files wherever it points) or as a folder anyone may
    write (its claims stop every lab that picks free ports). A name that is not a folder of this
    user's that only this user can write is refused, never used."""
    path = Path(tempfile.gettempdir()) / f"stormlab-ports-{os.getuid()}"
    try:
        path.mkdir(mode=0o700)
    except FileExistsError:
        pass
    except OSError:
        return None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError as e:  # a symlink (ELOOP), or not a folder (ENOTDIR)
        raise LabError(f"{path} is not a folder of this user's ({e.strerror}): remove it, then start the lab again") from None
    try:
        found = os.fstat(fd)
    finally:
        os.close(fd)
    if found.st_uid != os.getuid() or found.st_mode & 0o077:
        raise LabError(
            f"{path} belongs to uid {found.st_uid} with mode {found.st_mode & 0o777:o}: free ports are claimed only in a folder "
            f"of this user's (uid {os.getuid()}) that no one else can open; remove it, then start the lab again"
        )
    return path


def _claim(claims: Path | None, port: int) -> bool:
    """This process's claim on ``port``; False while another's is fresh."""
    if claims is None:
        return True
    try:
        os.close(os.open(claims / str(port), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
    except FileExistsError:
        return False
    except OSError:  # the claim cannot be written: this process's own promise only
        return True
    return True


def _forget_old_claims(claims: Path | None) -> None:
    """Claims older than ``CLAIM_S``: their labs have bound their ports (or never will)."""
    if claims is None:
        return
    old = time.time() - CLAIM_S
    for path in claims.iterdir():
        try:
            found = path.lstat()  # a claim is a file this process made: nothing here is followed
            if path.name.isdecimal() and stat.S_ISREG(found.st_mode) and found.st_mtime < old:
                path.unlink()
        except OSError:  # another process forgot it first
            continue


def free_port() -> int:
    """One free port (for a process beside the lab: a bench's bare handler)."""
    return _free_ports(1)[0]


def _kernel_ports(n: int) -> list[int]:
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind((HOST, 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def port_free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the servers do: TIME_WAIT is no obstacle
        try:
            s.bind((HOST, port))
        except OSError:
            return False
    return True
