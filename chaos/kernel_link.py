"""The racks' links cut in the kernel: the link proxy off the renewal path (``link_cut=kernel``).

Every renewal of the fleet crosses the link proxy, and after a blip the whole herd of the blipped
racks reconnects through it at once: one process, one loop. Where the lab may (root, iptables),
the kernel carries the racks' links instead and the proxy only decides what they drop:

- each rack keeps its own link port; a NAT rule sends what a rack connects to there on to its
  cell's metadata service (``DNAT``), so racks, probes and URLs are unchanged;
- a cut on a rack's link is one ``DROP`` rule matching the connections made to that port, both
  ways or one (conntrack's original destination port and direction): a blip or a partition as a
  network shows it, the segments lost and TCP retransmitting them; ``loss`` drops each packet
  with its probability (``-m statistic``) and TCP's own timers re-send it;
- every rule lives in two chains of this lab's own (named by the proxy's port), jumped to from
  ``OUTPUT``; each cut's rule carries its lease's id as a comment, so what it dropped is read
  from the rule's counters, and it is deleted by the lease's revert. The chains are removed when
  the proxy stops, cleared when it starts again, and ``stormlab down`` (or an interrupted
  ``up``) removes what a killed proxy left behind; a lab choosing free ports leaves alone every
  port such rules name.

Latency the kernel cannot add (it has no ``netem``): a latency fault takes its racks' links
back through the proxy for its life (a detour). The proxy listens on every link port all along;
a ``RETURN`` rule ahead of the link's redirect sends new connections to it, and a request sent on
a connection the kernel carried is answered with a reset (``REJECT``, matched by conntrack's
``DNAT`` state: the rack's connections, not the proxy's), so the renewal client takes it again
on a fresh connection, through the proxy, as it does when any kept-alive connection was closed
(and aiohttp's link probe counts one failure). Only requests are reset (a packet with a
payload): the answers, and the acknowledgements of the answers, pass. When the last latency on a
link ends, both rules go and the proxy closes its connections on the link once what they hold
back is written: the client's next request opens a new one, which is the kernel's again.

The rules are built by pure functions; :class:`KernelLinks` runs ``iptables``.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Sequence

IPTABLES = "iptables"
SBIN = "/usr/local/sbin:/usr/sbin:/sbin"  # where iptables lives, not always on a user's PATH
HOST = "127.0.0.1"
DIRECTIONS = {"both": None, "to-metadata": "ORIGINAL", "from-metadata": "REPLY"}  # the proxy's words -> conntrack's


class KernelLinkError(RuntimeError):
    """The kernel cannot carry the links here (not root, no iptables) or a rule was refused."""


def chains(tag: str) -> tuple[str, str]:
    """This lab's NAT and filter chains (iptables chain names: at most 28 characters)."""
    return f"STORMLAB-NAT-{tag}"[:28], f"STORMLAB-CUT-{tag}"[:28]


def jump(chain: str) -> list[str]:
    return ["OUTPUT", "-o", "lo", "-p", "tcp", "-j", chain]


def redirect(link_port: int, target: tuple[str, int]) -> list[str]:
    """What a rack connects to on its link port goes on to its metadata service."""
    return ["-p", "tcp", "-d", HOST, "--dport", str(link_port), "-j", "DNAT", "--to-destination", f"{target[0]}:{target[1]}"]


def cut(link_port: int, direction: str, lease: str, probability: float | None = None) -> list[str]:
    """Drop the packets of connections made to ``link_port`` (``direction``: both, to-metadata,
    from-metadata), each with ``probability`` if given (loss), marked with the lease's id."""
    rule = ["-p", "tcp", "-m", "conntrack", "--ctorigdstport", str(link_port)]
    ctdir = DIRECTIONS[direction]
    if ctdir:
        rule += ["--ctdir", ctdir]
    if probability is not None:
        rule += ["-m", "statistic", "--mode", "random", "--probability", f"{probability:.6f}"]
    return [*rule, "-m", "comment", "--comment", lease, "-j", "DROP"]


def detour(link_port: int) -> list[str]:
    """New connections to ``link_port`` reach the proxy listening there (ahead of its redirect)."""
    return [
        "-p",
        "tcp",
        "-d",
        HOST,
        "--dport",
        str(link_port),
        "-m",
        "comment",
        "--comment",
        f"stormlab-detour-{link_port}",
        "-j",
        "RETURN",
    ]


def reset_requests(link_port: int) -> list[str]:
    """Reset a request sent to ``link_port`` on a connection the kernel carries (redirected:
    conntrack's DNAT state; not the proxy's), so its client takes it again on a new one. Only a
    rack's packets with a payload (longer than a bare acknowledgement's 52 bytes on loopback)."""
    return [
        "-p", "tcp", "-m", "conntrack", "--ctstate", "DNAT", "--ctorigdstport", str(link_port), "--ctdir", "ORIGINAL",
        "-m", "length", "--length", "53:65535",
        "-m", "comment", "--comment", f"stormlab-detour-{link_port}", "-j", "REJECT", "--reject-with", "tcp-reset",
    ]  # fmt: skip


def dropped_bytes(listing: str, lease: str) -> int:
    """The bytes a lease's rules dropped, from ``iptables -L CHAIN -v -x -n``."""
    total = 0
    for line in listing.splitlines():
        if f"/* {lease} */" in line:
            fields = line.split()
            if len(fields) > 1 and fields[1].isdecimal():
                total += int(fields[1])
    return total


RULE_PORTS = re.compile(r"STORMLAB-(?:NAT|CUT)-(\d+)|--dport (\d+)|--ctorigdstport (\d+)|--to-destination [^\s:]+:(\d+)")


def ports_in_rules(saved: str) -> set[int]:
    """The ports stormlab's rules name in ``iptables-save``'s output: their chains' tags (a proxy's
    port), the link ports they match and the services they redirect to."""
    return {int(port) for line in saved.splitlines() if "STORMLAB-" in line for match in RULE_PORTS.findall(line) for port in match if port}


def ports_in_kernel() -> set[int]:
    """The ports any lab's rules in the kernel name (none where the lab may not read them): a lab
    choosing free ports leaves them alone, so a rule a killed lab left cannot catch a new lab's port."""
    if available() is not None:
        return set()
    try:
        done = subprocess.run([f"{iptables_path()}-save"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return set()
    return ports_in_rules(done.stdout) if done.returncode == 0 else set()


def iptables_path() -> str | None:
    """iptables, on the PATH or in the sbin directories (a user's PATH may not name them)."""
    return shutil.which(IPTABLES) or shutil.which(IPTABLES, path=SBIN)


def available() -> str | None:
    """None if the kernel can carry the links here (in this network namespace), else why not."""
    if os.geteuid() != 0:
        return "cutting links in the kernel needs root (iptables); run as root, with link_cut=namespace, or with link_cut=proxy"
    if iptables_path() is None:
        return "cutting links in the kernel needs iptables (Debian: apt-get install iptables); or use link_cut=proxy"
    return None


class KernelLinks:
    """This lab's rules: installed once, cuts added and deleted by leases, removed at the end."""

    def __init__(self, tag: str) -> None:
        if not re.fullmatch(r"[A-Za-z0-9-]{1,14}", tag):
            raise ValueError(f"a chain tag is letters, digits and '-', at most 14: {tag!r}")
        self.nat, self.cut = chains(tag)
        self.iptables = iptables_path() or IPTABLES

    def _run(self, *args: str, table: str = "filter", check: bool = True) -> str:
        done = subprocess.run([self.iptables, "-w", "5", "-t", table, *args], capture_output=True, text=True, timeout=30)
        if check and done.returncode != 0:
            raise KernelLinkError(f"iptables {' '.join(args)}: {done.stderr.strip() or done.returncode}")
        return done.stdout

    def install(self, redirects: dict[int, tuple[str, int]]) -> None:
        """The chains (emptied if a previous proxy of this lab left them) and each link's redirect."""
        self.remove()
        self._run("-N", self.nat, table="nat")
        for port, target in sorted(redirects.items()):
            self._run("-A", self.nat, *redirect(port, target), table="nat")
        self._run("-A", *jump(self.nat), table="nat")
        self._run("-N", self.cut)
        self._run("-A", *jump(self.cut))

    def add(self, rule: Sequence[str]) -> None:
        self._run("-A", self.cut, *rule)

    def delete(self, rule: Sequence[str]) -> None:
        self._run("-D", self.cut, *rule, check=False)  # already gone (the chain removed) is gone

    def add_detour(self, rule: Sequence[str]) -> None:
        self._run("-I", self.nat, "1", *rule, table="nat")  # ahead of the link's redirect

    def delete_detour(self, rule: Sequence[str]) -> None:
        self._run("-D", self.nat, *rule, table="nat", check=False)

    def dropped(self, lease: str) -> int:
        return dropped_bytes(self._run("-L", self.cut, "-v", "-x", "-n", check=False), lease)

    def rules(self) -> list[str]:
        """The cuts in force (``iptables -S`` lines of this lab's cut chain)."""
        return [line for line in self._run("-S", self.cut, check=False).splitlines() if line.startswith("-A ")]

    def remove(self) -> None:
        """Every rule and chain of this lab's, if there are any (idempotent)."""
        for table, chain in (("filter", self.cut), ("nat", self.nat)):
            for _ in range(100):  # a jump added twice (a crash between two installs) is deleted twice
                if not self._jumps(table, chain):
                    break
                self._run("-D", *jump(chain), table=table, check=False)
            if self._exists(table, chain):
                self._run("-F", chain, table=table, check=False)
                self._run("-X", chain, table=table, check=False)

    def present(self) -> bool:
        """Whether any chain or jump of this lab's is in the kernel."""
        return any(self._exists(t, c) or self._jumps(t, c) for t, c in (("filter", self.cut), ("nat", self.nat)))

    def _exists(self, table: str, chain: str) -> bool:
        return subprocess.run([self.iptables, "-w", "5", "-t", table, "-L", chain, "-n"], capture_output=True).returncode == 0

    def _jumps(self, table: str, chain: str) -> bool:
        return subprocess.run([self.iptables, "-w", "5", "-t", table, "-C", *jump(chain)], capture_output=True).returncode == 0
