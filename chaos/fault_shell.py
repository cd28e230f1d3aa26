"""The fault shells: each fault on a container or a pod, as the exact shell that applies it, holds
it for its lease, counts what it does and reverts it (pure: text in, text out).

One detached shell applies the rules, sleeps for the duration, then removes them. It lives in the
target's own namespaces, so the revert is armed on the target side: killing the chaos command (or
its container) does not leave the fault behind. Network faults use iptables in the target's
network namespace (the pattern pumba and Chaos Mesh use), so they drop packets and never stop the
process. The docker backend runs these shells through `docker exec`, the k8s backend in an
ephemeral container of the target pod.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Exec:
    container: str
    argv: tuple[str, ...]
    detach: bool = True


# The shell holding a fault writes ``FAULT_FILE + its pid`` once every rule is in: the first line
# "fault ends-at-epoch-seconds", the second the command that counts what the fault has done so
# far (packets its rules dropped, or its netem qdisc held back; ":" where nothing is counted),
# then its undo commands (newest first). When it ends it writes ``ENDED_FILE + its pid``: "fault
# ended-at count", kept ten minutes for `chaos list`, which reports a fault that did nothing.
# /dev/shm is a tmpfs that a container restart empties, so a file never outlives the container's
# processes.
FAULT_FILE = "/dev/shm/stormlab-fault."
ENDED_KEPT_S = 600


def ended_prefix(prefix: str) -> str:
    return prefix.rsplit("fault.", 1)[0] + "ended."


# Only files owned by the user reading them (root: the fault shells run as root) are trusted; the
# service's own user can write to /dev/shm too. A file's holder is alive when its pid is a number
# above 1 whose command line is a fault shell; a file whose holder is gone (killed, crashed) is an
# orphan: its undo lines are run and it is removed, by `list` and by `halt` alike. A name that is
# not a pid is removed, never signalled.
def _each(prefix: str) -> str:
    return (
        f'for f in {prefix}*; do [ -f "$f" ] && [ -O "$f" ] || continue; p="${{f##*.}}"; '
        'case "$p" in ""|*[!0-9]*) rm -f "$f"; continue;; esac; first="$(head -n 1 "$f")"; '
        'if [ "$p" -gt 1 ] && grep -qs stormlab-fault "/proc/$p/cmdline"; then '
    )


_COUNT = 'n="$(sed -n 2p "$f" | sh 2>/dev/null)"; '
_REAP = 'else tail -n +3 "$f" | sh; rm -f "$f"; '


def _ended(prefix: str) -> str:
    """The ended records: listed while young, removed once ``ENDED_KEPT_S`` old (or malformed)."""
    return (
        f'for f in {ended_prefix(prefix)}*; do [ -f "$f" ] && [ -O "$f" ] || continue; p="${{f##*.}}"; set -- $(cat "$f"); '
        'case "$p:${2:-}" in *[!0-9:]*|:*|*:) rm -f "$f"; continue;; esac; '
        f'if [ $(( $(date +%s) - $2 )) -gt {ENDED_KEPT_S} ]; then rm -f "$f"; else echo "$p $1 $2 ended ${{3:--}}"; fi; done; '
    )


def list_command(prefix: str = FAULT_FILE) -> tuple[str, ...]:
    """Faults in a container, one line each: "pid fault time state count". State: held (time is
    when it ends), orphan (its holder was gone and it has just been reverted), ended (time is when
    it ended); count: what it did (packets), or "-" where not counted."""
    return (
        "sh",
        "-c",
        _each(prefix)
        + _COUNT
        + 'echo "$p $first held ${n:--}"; '
        + _REAP
        + 'echo "$p $first orphan ${n:--}"; fi; done; '
        + _ended(prefix)
        + "true",
    )


def halt_command(prefix: str = FAULT_FILE) -> tuple[str, ...]:
    """Ends them now: TERM to each live holding shell runs its revert; orphans are reverted here."""
    return ("sh", "-c", "n=0; " + _each(prefix) + 'kill -TERM "$p" && n=$((n+1)); ' + _REAP + "n=$((n+1)); fi; done; echo $n")


LIST, HALT = list_command(), halt_command()

# A fault-holding service's own leases, asked inside its container (an engine's services publish no
# admin port the host can count on: a swarm's none): METHOD /faults on its own port, with the token
# the container holds; one line of JSON, {"ok": true, "body": ...} or {"ok": false, "error": ...}.
_ASK = """\
import json, os, sys, urllib.request
path = os.environ.get("STORMLAB_TOKEN_FILE")
try:
    token = os.environ.get("STORMLAB_TOKEN") or (open(path).read().strip() if path else "")
    url = "http://127.0.0.1:%s/faults" % os.environ["STORMLAB_PORT"]
    request = urllib.request.Request(url, method=sys.argv[1], headers={"Authorization": "Bearer " + token})
    with urllib.request.urlopen(request, timeout=10) as reply:
        print(json.dumps({"ok": True, "body": json.load(reply)}))
except Exception as exc:
    print(json.dumps({"ok": False, "error": "%s: %s" % (type(exc).__name__, exc)}))
"""


def ask_holder(method: str) -> tuple[str, ...]:
    """The command that asks a holder's service, inside its container: GET (its leases) or DELETE (all ended)."""
    if method not in ("GET", "DELETE"):
        raise ValueError(f"a holder is asked GET or DELETE, not {method!r}")
    return ("python", "-c", _ASK, method)


def parse_answer(container: str, text: str) -> dict[str, Any]:
    """What ``ask_holder`` printed: the holder's answer (LookupError: it did not answer, and why)."""
    lines = text.strip().splitlines()
    try:
        said = json.loads(lines[-1]) if lines else None
    except ValueError:
        said = None
    if not isinstance(said, dict):
        raise LookupError(f"{container}: no answer from its service ({text.strip()[:200] or 'nothing printed'})")
    if not said.get("ok") or not isinstance(said.get("body"), dict):
        raise LookupError(f"{container}: its service did not answer: {said.get('error')}")
    return said["body"]


Step = tuple[str, "str | None"]  # a command, and what undoes it (None: nothing to undo)
PID = "{pid}"  # in a count command: the holding shell's pid (its rules carry it as their comment)


def _dq(command: str) -> str:
    """``command`` inside double quotes: its ``$p`` expands when written, nothing else does."""
    return '"' + command.replace("\\", "\\\\").replace('"', '\\"').replace("`", "\\`") + '"'


def _with_pid(template: str) -> str:
    """A shell word that is ``template`` with its pid placeholder as the writing shell's pid."""
    head, _, tail = template.partition(PID)
    return shlex.quote(head) + ('"$$"' + shlex.quote(tail) if _ else "")


def _armed(fault: str, steps: list[Step], duration_s: float, prefix: str = FAULT_FILE, count: str = ":") -> tuple[str, ...]:
    """One shell that applies the steps, writes its fault file, waits out the lease, and reverts;
    TERM or INT (`chaos halt`) reverts at once. A step that fails undoes the steps before it and
    the shell exits 1 without a file: nothing applied, nothing reverted that was not its own.
    ``count`` prints what the fault has done so far (its pid placeholder: this shell's pid); it
    is read once more as the fault ends, into the ended record."""
    parts: list[str] = ["f=" + prefix + "$$", "e=" + ended_prefix(prefix) + "$$"]
    undone: list[str] = []
    for apply, undo in steps:
        parts.append(f"if ! {apply}; then {'; '.join([*undone, 'exit 1'])}; fi")
        if undo is not None:
            undone.insert(0, undo)
    ends = f"$(( $(date +%s) + {max(1, round(duration_s))} ))"
    # the ended record, in its file and on the shell's output (an ephemeral container's log keeps it)
    record_end = f'n="$(count 2>/dev/null)"; printf \'%s\\n\' "{fault} $(date +%s) ${{n:--}}" > $e; cat $e'
    parts += [
        f"count() {{ {count.replace(PID, '$$')}; }}",
        f"undo() {{ {'; '.join([record_end, *undone, 'rm -f $f'])}; }}",
        "trap 'kill $! 2>/dev/null; undo; exit 0' TERM INT",
        f"printf '%s\\n' \"{fault} {ends}\" {_with_pid(count)} {' '.join(_dq(u) for u in undone)} > $f",
        f"sleep {duration_s:g} & wait $!",
        "undo",
    ]
    return ("sh", "-c", "; ".join(parts))


def _drop_rules(peer_ips: list[str], direction: str) -> list[list[str]]:
    rules = []
    for ip in peer_ips:
        if direction in ("both", "out"):
            rules.append(["OUTPUT", "-d", ip])
        if direction in ("both", "in"):
            rules.append(["INPUT", "-s", ip])
    return rules


# Each rule carries its shell's pid as a comment, so the shell's own rules are counted and removed,
# never another lease's that drops the same address.
TAGGED = "-m comment --comment stormlab-$$ -j DROP"
COUNT_DROPPED = 'iptables -w -L -v -x -n | awk -v c="/* stormlab-' + PID + " */\" 'index($0, c) {s += $1} END {print s + 0}'"


def partition(container: str, peer_ips: list[str], duration_s: float, direction: str = "both", fault: str = "partition") -> list[Exec]:
    """Cut ``container`` off from ``peer_ips``: both ways, or only ``out`` / ``in``; counts the
    packets its rules drop."""
    if direction not in ("both", "out", "in"):
        raise ValueError("direction must be both, out or in")
    if not peer_ips:
        raise ValueError("no peers to cut off")
    steps: list[Step] = [
        (f"{shlex.join(['iptables', '-w', '-I', *r])} {TAGGED}", f"{shlex.join(['iptables', '-w', '-D', *r])} {TAGGED}")
        for r in _drop_rules(peer_ips, direction)
    ]
    return [Exec(container, _armed(fault, steps, duration_s, count=COUNT_DROPPED))]


def _netem(container: str, fault: str, spec: list[str], duration_s: float, device: str, count: str) -> list[Exec]:
    add = shlex.join(["tc", "qdisc", "add", "dev", device, "root", "netem", *spec])
    undo = shlex.join(["tc", "qdisc", "del", "dev", device, "root", "netem"])
    return [Exec(container, _armed(fault, [(add, undo)], duration_s, count=count))]


def _qdisc_count(device: str, field: str) -> str:
    """The netem qdisc's packets (``$4`` of its "Sent … bytes N pkt (dropped D, …)" line) or drops (``$7``)."""
    return f"tc -s qdisc show dev {shlex.quote(device)} | awk '/netem/ {{on = 1}} on && /Sent/ {{print {field} + 0; exit}}'"


def latency(container: str, delay_ms: float, jitter_ms: float, duration_s: float, device: str = "eth0") -> list[Exec]:
    """Hold back every packet ``container`` sends; counts the packets it held back."""
    spec = ["delay", f"{delay_ms:g}ms"] + ([f"{jitter_ms:g}ms"] if jitter_ms else [])
    return _netem(container, "latency", spec, duration_s, device, _qdisc_count(device, "$4"))


def loss(container: str, probability: float, duration_s: float, device: str = "eth0") -> list[Exec]:
    """Drop a share of the packets ``container`` sends; counts the packets it dropped."""
    return _netem(container, "loss", ["loss", f"{100 * probability:g}%"], duration_s, device, _qdisc_count(device, "$7"))


# The lab's containers run with `init: true`: PID 1 is docker-init, the service is its child.
# (A signal to a namespace's PID 1 from inside is ignored, so the service must not be PID 1.)
SERVICE_PID = "p=$(pgrep -o -P 1)"


def freeze(container: str, duration_s: float, find_pid: str = SERVICE_PID) -> list[Exec]:
    """SIGSTOP the container's service process (``find_pid`` sets ``$p`` to it); the shell doing
    it stays awake to SIGCONT it."""
    return [Exec(container, _armed("freeze", [(find_pid, None), ("kill -STOP $p", "kill -CONT $p")], duration_s))]


def kill(container: str) -> list[Exec]:
    """SIGKILL the service; docker-init exits with it and compose's restart policy brings it back."""
    return [Exec(container, ("sh", "-c", f"{SERVICE_PID} && kill -KILL $p"))]


COUNTED = {"latency": "delayed_packets"}  # what each fault's count is; the others drop packets
NOT_COUNTED = ("freeze",)


@dataclass(frozen=True)
class Held:
    container: str
    pid: int  # of the shell holding it
    fault: str
    at: float  # when it ends (held, orphan) or ended (ended)
    state: str  # held; orphan: its holder was gone, reverted just now by the listing; ended: by its lease or a halt
    acted: int | None = None  # packets it dropped or held back (None: not counted)

    @property
    def orphan(self) -> bool:
        return self.state == "orphan"

    @property
    def ends_at(self) -> float:
        return self.at

    @property
    def effect(self) -> dict[str, int] | None:
        if self.fault in NOT_COUNTED or self.acted is None:
            return None
        return {COUNTED.get(self.fault, "dropped_packets"): self.acted}


def parse_ended(container: str, text: str) -> Held | None:
    """The ended record a fault shell printed as it ended (its last line: "fault ended-at count")."""
    for line in reversed(text.splitlines()):
        parts = line.split()
        if len(parts) == 3 and parts[1].isdecimal():
            fault, at, count = parts
            return Held(container, 0, fault, float(at), "ended", int(count) if count.isdecimal() else None)
    return None


def parse_listing(container: str, text: str) -> list[Held]:
    """A listing's lines (``list_command``) as records; a line that is not a fault's is skipped."""
    rows = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 5 and parts[0].isdecimal() and parts[3] in ("held", "orphan", "ended"):
            pid, fault, at, state, count = parts
            try:
                rows.append(Held(container, int(pid), fault, float(at), state, int(count) if count.isdecimal() else None))
            except ValueError:
                continue
    return rows


# What a fault shell that died leaves in a network namespace, found without its fault file (an
# ephemeral container's /dev/shm may be its own): the rules tagged with a pid that is no longer a
# fault shell, and a netem qdisc no live shell holds. The pod's containers share one process
# namespace, so the pids are seen. Prints how many it reverted.
REAP = (
    "sh",
    "-c",
    "r=0; for rule in $(iptables-save 2>/dev/null | grep -e '--comment \"*stormlab-[0-9]' | sed 's/ /@/g'); do "
    'rule="$(echo "$rule" | sed "s/@/ /g")"; '
    'p="$(echo "$rule" | sed -n "s/.*--comment \\"*stormlab-\\([0-9]*\\).*/\\1/p")"; '
    'if [ -n "$p" ] && ! grep -qs stormlab-fault "/proc/$p/cmdline"; then '
    'iptables -w $(echo "$rule" | sed "s/^-A /-D /") && r=$((r+1)); fi; done; '
    'live=""; for c in /proc/[0-9]*/cmdline; do [ "$c" = "/proc/$$/cmdline" ] && continue; '
    'grep -qs stormlab-fault "$c" && grep -qs netem "$c" && live=1; done; '
    'if [ -z "$live" ] && tc qdisc show dev eth0 2>/dev/null | grep -q netem; then tc qdisc del dev eth0 root netem && r=$((r+1)); fi; '
    "echo $r",
)
