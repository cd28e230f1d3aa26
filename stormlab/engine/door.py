"""The lab in its own user and network namespace (``link_cut=namespace``): the kernel's links without root.

Cutting the racks' links in the kernel needs iptables, and iptables needs root. A user without
root may still make a user namespace and a network namespace of its own (as rootless containers
do): inside them the lab's processes are root of a loopback nobody else uses, and the link proxy
cuts the racks' links with the same rules as a root lab's (chaos/kernel_link.py). The renewals,
the herd and the cuts are then the kernel's, as in a root lab; nothing of the host is touched,
and the rules die with the namespace.

What the host must still reach (the CLI, the demo, Prometheus, a browser) is on the lab's ports in
the host's namespace: ``up`` binds them there, before the namespace is made, and hands them to
this process (the door), which is the first process in the namespace. It brings the namespace's
loopback up, starts the supervisor under it, and passes each connection made to a host port on
to the same port inside (a socket keeps the namespace it was made in). Only the observers'
traffic crosses the door; the renewals never do. The door stops the supervisor when it is asked
to stop, and ends when the supervisor ends.

``python -m stormlab.engine.door PORTS_JSON -- SUPERVISOR_ARGV...`` (``PORTS_JSON``: port -> the
inherited listening socket's file descriptor), run by the launcher under ``unshare``.
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import shutil
import signal
import socket
import struct
import subprocess
import sys
from collections.abc import Sequence
from functools import partial
from typing import cast

from chaos.kernel_link import iptables_path  # the same iptables the link proxy will run
from stormcore import procs
from stormcore.web import uvloop
from stormlab.engine.ports import HOST

UNSHARE = ("unshare", "--user", "--map-root-user", "--net", "--")
SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1
HIGH_WATER = 256 * 1024  # bytes a side holds unwritten before the other side stops reading
CONNECT_S = 5.0  # an inside that takes longer to accept (a frozen or swamped lab process) is a refusal
MAX_WAITING = 256  # outside connections whose inside connection is not yet made; past it, new ones are closed


def unshare_argv() -> list[str] | None:
    """The command that makes the namespaces (util-linux's ``unshare``), or None where there is none."""
    found = shutil.which(UNSHARE[0])
    return [found, *UNSHARE[1:]] if found else None


def why_not() -> str | None:
    """None if this user may run a lab in its own user and network namespace and cut its links
    there with iptables, else why not (tried: an iptables listing inside fresh namespaces)."""
    argv, iptables = unshare_argv(), iptables_path()
    if argv is None:
        return "a namespace of the lab's own needs util-linux's unshare"
    if iptables is None:
        return "cutting links in the kernel needs iptables (Debian: apt-get install iptables)"
    try:
        done = subprocess.run([*argv, iptables, "-w", "5", "-t", "nat", "-S", "OUTPUT"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"no user and network namespace of the lab's own here ({exc})"
    if done.returncode != 0:
        said = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
        return f"no user and network namespace of the lab's own here (unprivileged user namespaces off?): {said}"
    return None


def listen(ports: Sequence[int]) -> dict[int, socket.socket]:
    """The lab's ports bound on the host's loopback (before the namespace is made), inheritable."""
    socks: dict[int, socket.socket] = {}
    try:
        for port in ports:
            socks[port] = sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((HOST, port))
            sock.listen(4096)
            sock.set_inheritable(True)
    except OSError:
        for sock in socks.values():
            sock.close()
        raise
    return socks


def loopback_up() -> None:
    """A new network namespace's loopback is down: bring it up (``ip link set lo up``, by ioctl)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        asked = struct.pack("16sH14x", b"lo", 0)
        flags = struct.unpack("16sH14x", fcntl.ioctl(sock, SIOCGIFFLAGS, asked))[1]
        fcntl.ioctl(sock, SIOCSIFFLAGS, struct.pack("16sH14x", b"lo", flags | IFF_UP))


class Side(asyncio.Protocol):
    """One end of a passed-on connection: what it reads is written to the other end, and it stops
    reading while the other end's unwritten bytes are past the high-water mark."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.peer: Side | None = None
        self.early: bytes = b""  # one read before the other end was joined (then reading pauses)
        self.eof = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's transports are not asyncio.Transport's subclasses
        self.transport.set_write_buffer_limits(high=HIGH_WATER)

    def join(self, peer: Side) -> None:
        self.peer = peer
        if peer.transport is not None:
            if self.early:
                peer.transport.write(self.early)
            if self.eof and peer.transport.can_write_eof():
                peer.transport.write_eof()
        self.early = b""
        if self.transport is not None and not self.transport.is_closing():
            self.transport.resume_reading()

    def data_received(self, data: bytes) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.write(data)
        elif self.transport is not None:  # the other end is not joined yet: hold this one read, read no more
            self.early += data
            self.transport.pause_reading()

    def eof_received(self) -> bool:
        self.eof = True
        peer = self.peer
        if peer is not None and peer.transport is not None:
            if peer.eof:  # both ways ended: nothing more to carry
                peer.transport.close()
                return False
            if peer.transport.can_write_eof():
                peer.transport.write_eof()
        return True  # half-closed: the other way may still carry the answer

    def connection_lost(self, exc: Exception | None) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.close()

    def pause_writing(self) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.resume_reading()


class Waiting:
    """The outside connections whose inside connection is still being made (shared by a door's ports)."""

    def __init__(self, limit: int = MAX_WAITING) -> None:
        self.limit, self.now = limit, 0
        self.tasks: set[asyncio.Task[None]] = set()  # each one's pass-on, held so the loop cannot lose it mid-connect


class Outside(Side):
    """A connection made to a lab port on the host's loopback: passed on to ``target`` (the same
    port, inside). Nothing is read from it until the inside connection is made, so the door holds
    no byte of it meanwhile (the kernel's socket buffer does, and then the sender waits); an inside
    that does not accept within ``CONNECT_S``, or more than ``waiting.limit`` connections waiting at
    once, closes it as a refusal would."""

    def __init__(self, target: tuple[str, int], waiting: Waiting | None = None) -> None:
        super().__init__()
        self.target, self.waiting = target, waiting or Waiting()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        assert self.transport is not None
        if self.waiting.now >= self.waiting.limit:
            self.transport.abort()
            return
        self.transport.pause_reading()  # flow control from the first byte
        self.waiting.now += 1
        task = asyncio.get_running_loop().create_task(self._pass_on())
        self.waiting.tasks.add(task)
        task.add_done_callback(self.waiting.tasks.discard)

    async def _pass_on(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            _, inside = await asyncio.wait_for(loop.create_connection(Side, *self.target), CONNECT_S)
        except (TimeoutError, OSError):  # nothing listening inside (starting, gone) or not accepting: refused
            if self.transport is not None:
                self.transport.abort()
            return
        finally:
            self.waiting.now -= 1
        if self.transport is None or self.transport.is_closing():  # the outside went while we connected
            if inside.transport is not None:
                inside.transport.close()
            return
        inside.join(self)
        self.join(inside)


async def serve(fds: dict[int, int], argv: Sequence[str]) -> int:
    loop = asyncio.get_running_loop()
    child = await asyncio.create_subprocess_exec(*argv, preexec_fn=procs.die_with_parent)

    def stop() -> None:  # asked to stop: the supervisor stops its lab
        if child.returncode is None:
            child.terminate()

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        loop.add_signal_handler(sig, stop)
    waiting = Waiting()
    for port, fd in fds.items():
        await loop.create_server(partial(Outside, (HOST, port), waiting), sock=socket.socket(fileno=fd))
    return await child.wait()


def main(argv: Sequence[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) < 3 or args[1] != "--":
        raise SystemExit("usage: python -m stormlab.engine.door PORTS_JSON -- SUPERVISOR_ARGV...")
    fds = {int(port): int(fd) for port, fd in json.loads(args[0]).items()}
    loopback_up()
    loop = uvloop.new_event_loop() if uvloop is not None else asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        code = loop.run_until_complete(serve(fds, args[2:]))
    finally:
        loop.close()
    raise SystemExit(code if code >= 0 else 128 - code)


if __name__ == "__main__":
    main()
