"""The k8s backend: the same faults on the lab's pods in one Kubernetes namespace, built as the
exact API requests that apply them (pure; ``chaos/k8s_runner.py`` sends them).

- Network faults (``blip``, ``partition``, ``isolate``, ``latency``, ``loss``) run the docker
  backend's fault shell (``chaos/fault_shell.py``) as root with NET_ADMIN in an **ephemeral
  container** of the target pod, as Chaos Mesh's daemon does. It shares the pod's network
  namespace, so its iptables rules (or netem qdisc) act on the pod's own packets, a kept-alive
  renewal connection included; it shares the pod's process namespace, so the pod's other
  containers' pids are seen. The shell counts the packets it dropped and ends with its lease;
  the container ends with it. A shell that died with its rules in (its container ended unclean)
  is found by ``list`` and ``halt``, and a reaper container reverts what it left.
- Where a user asks for it (``STORMLAB_K8S_NETWORK_FAULTS=networkpolicy``), blip, partition and
  isolate are NetworkPolicies owned by a lease Job instead (the Job's deadline is the duration,
  its TTL deletes it and the garbage collector its policies). Common CNIs enforce a policy when a
  connection is set up, so a kept-alive connection may not be cut: nothing counts what it did.
- ``freeze`` is the armed shell exec'd in the pod (the service's own user may SIGSTOP it);
  ``kill`` deletes the pod and its controller starts another.

Only pods labelled ``app.kubernetes.io/part-of=stormlab`` in the namespace are touched. The Jobs
and policies this backend creates carry the lab's name (``stormlab.dev/lab``), and ``list`` and
``halt`` select by it: another lab's, or anyone else's, are never listed or deleted.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from typing import Any

from chaos import docker_backend as db
from chaos import fault_shell as fs
from stormcore.documents import is_decimal

PART_OF = "app.kubernetes.io/part-of"
NAME = "app.kubernetes.io/name"
POD_NAME = "statefulset.kubernetes.io/pod-name"
LAB = "stormlab.dev/lab"
LEASE = "stormlab.dev/chaos-lease"
FAULT = "stormlab.dev/fault"
ENDS_AT = "stormlab.dev/ends-at"
TARGETS = "stormlab.dev/targets"
DEFAULT_NAMESPACE = DEFAULT_LAB = "stormlab"
EPHEMERAL, POLICY = "ephemeral", "networkpolicy"  # how network faults are applied
CHAOS = "stormlab-chaos-"  # an ephemeral container holding a fault: CHAOS + fault + "-" + milliseconds
REAPED = "-r"  # the reaper of a chaos container that ended unclean: its name + REAPED
# The pod's service, seen from an exec in it: the oldest python process (with a shared process
# namespace, PID 1 is the pod's pause container, never the service).
SERVICE_PID = "p=$(pgrep -o python)"


@dataclass(frozen=True)
class Chaos:
    """An ephemeral container of this backend in a pod, as the pod's status shows it."""

    name: str
    state: str  # waiting, running, terminated
    exit_code: int | None = None
    finished_at: float | None = None  # epoch seconds, once terminated

    @property
    def fault(self) -> str:
        return self.name.removeprefix(CHAOS).rsplit("-", 1)[0]

    @property
    def reaper(self) -> bool:
        return self.name.endswith(REAPED)

    @property
    def unclean(self) -> bool:
        """Ended neither by its lease or a halt (0) nor by refusing to apply (1): killed with its rules in."""
        return self.state == "terminated" and self.exit_code not in (0, 1)


@dataclass(frozen=True)
class Pod:
    name: str
    component: str  # its app.kubernetes.io/name: metadata, rack, queues…
    ip: str
    image: str
    container: str = ""  # its service's container (an ephemeral container's target)
    chaos: tuple[Chaos, ...] = ()


@dataclass(frozen=True)
class Plan:
    """A fault as API requests: a lease Job and the NetworkPolicies it owns, pods to delete,
    commands to exec in pods, or ephemeral containers to add (pod, container spec)."""

    fault: str
    targets: list[str]
    lease: dict[str, Any] | None = None
    policies: list[dict[str, Any]] = field(default_factory=list)
    delete_pods: list[str] = field(default_factory=list)
    execs: list[fs.Exec] = field(default_factory=list)
    ephemeral: list[tuple[str, dict[str, Any]]] = field(default_factory=list)


def racks(pods: list[Pod]) -> dict[int, Pod]:
    """Rack N is the StatefulSet's pod rack-N (the pod's ordinal is its rack)."""
    found = {}
    for pod in pods:
        head, _, ordinal = pod.name.rpartition("-")
        if pod.component == "rack" and head == "rack" and is_decimal(ordinal):
            found[int(ordinal)] = pod
    return found


def labels(lab: str, fault: str | None = None) -> dict[str, str]:
    """What this backend's Jobs and policies carry: the lab they belong to, and the fault."""
    return {PART_OF: "stormlab", LAB: lab, LEASE: "true", **({FAULT: fault} if fault else {})}


def selector(lab: str) -> str:
    """The label selector of this lab's lease Jobs and policies, and nobody else's."""
    return ",".join(f"{k}={v}" for k, v in labels(lab).items())


def _not_in(key: str, values: list[str]) -> dict[str, Any]:
    return {"matchExpressions": [{"key": key, "operator": "NotIn", "values": sorted(values)}]}


def _in(key: str, values: list[str]) -> dict[str, Any]:
    return {"matchExpressions": [{"key": key, "operator": "In", "values": sorted(values)}]}


def cut_off(
    name: str, namespace: str, lab: str, fault: str, selected: dict[str, Any], peers: dict[str, Any], direction: str
) -> dict[str, Any]:
    """A NetworkPolicy: the ``selected`` pods may talk to anything but the ``peers`` (pods of this
    namespace not matching ``peers``, and every other namespace: DNS keeps working), in
    ``direction`` (both, out: their egress, in: their ingress)."""
    others = [{"podSelector": peers}, {"namespaceSelector": _not_in("kubernetes.io/metadata.name", [namespace])}]
    spec: dict[str, Any] = {"podSelector": selected, "policyTypes": []}
    if direction in ("both", "in"):
        spec["policyTypes"].append("Ingress")
        spec["ingress"] = [{"from": others}]
    if direction in ("both", "out"):
        spec["policyTypes"].append("Egress")
        spec["egress"] = [{"to": others}]
    meta = {"name": name, "namespace": namespace, "labels": labels(lab, fault)}
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": meta, "spec": spec}


def lease_job(fault: str, namespace: str, lab: str, targets: list[str], duration_s: float, image: str, now: float) -> dict[str, Any]:
    """The Job that holds a NetworkPolicy fault: it runs for the fault's duration (its deadline),
    then its TTL deletes it and, with it, the policies it owns."""
    deadline = max(1, round(duration_s))
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "generateName": f"stormlab-chaos-{fault}-",
            "namespace": namespace,
            "labels": labels(lab, fault),
            "annotations": {ENDS_AT: f"{now + deadline:.0f}", TARGETS: ",".join(targets)},
        },
        "spec": {
            "activeDeadlineSeconds": deadline,
            "ttlSecondsAfterFinished": 0,
            "backoffLimit": 0,
            "template": {
                "metadata": {"labels": {PART_OF: "stormlab", LAB: lab, LEASE: "true"}},
                "spec": {
                    "restartPolicy": "Never",
                    "securityContext": {"runAsNonRoot": True, "runAsUser": 10001},
                    "containers": [{"name": "lease", "image": image, "command": ["sleep", str(deadline + 60)]}],
                },
            },
        },
    }


def ephemeral(name: str, pod: Pod, argv: tuple[str, ...]) -> dict[str, Any]:
    """An ephemeral container running ``argv`` in ``pod``'s namespaces, as root with NET_ADMIN (the
    pod's own containers run unprivileged), from the pod's own image (already on its node)."""
    return {
        "name": name,
        "image": pod.image,
        "imagePullPolicy": "IfNotPresent",
        "command": list(argv),
        "targetContainerName": pod.container or pod.component,
        "securityContext": {"runAsUser": 0, "runAsNonRoot": False, "capabilities": {"add": ["NET_ADMIN"]}},
    }


def reaper(pod: Pod, died: Chaos) -> dict[str, Any]:
    """The container that reverts what a chaos container that ended unclean left in ``pod``."""
    return ephemeral(died.name + REAPED, pod, fs.REAP)


def _pick(pods: list[Pod], target: str) -> Pod:
    by_rack = racks(pods)
    rack = db.rack_named(target)
    chosen = [p for p in pods if p.component == target and target in db.SERVICES] or ([by_rack[rack]] if rack in by_rack else [])
    if not chosen:
        names = ", ".join([*db.SERVICES, *(f"rack-{n}" for n in sorted(by_rack))])
        raise db.NotOurs(f"--target {target!r} is not a pod of the lab; targets: {names}")
    return chosen[0]


def build(
    body: dict[str, Any],
    pods: list[Pod],
    namespace: str = DEFAULT_NAMESPACE,
    now: float = 0.0,
    lab: str = DEFAULT_LAB,
    via: str = EPHEMERAL,
) -> Plan:
    """The requests for a checked fault request (``chaos/catalog.py``) on the namespace's pods."""
    f, duration = body["fault"], body["duration_s"]
    if f not in db.ENGINE_FAULTS:
        raise db.NotOurs(db.not_on_engine(f, "Kubernetes"))
    if f in ("freeze", "kill"):
        pod = _pick(pods, body["target"])
        if f == "kill":
            return Plan(f, [pod.name], delete_pods=[pod.name])
        return Plan(f, [pod.name], execs=fs.freeze(pod.name, duration, SERVICE_PID))
    by_rack = racks(pods)
    missing = [r for r in body["racks"] if r not in by_rack]
    if missing:
        raise db.NotOurs(f"no pod for rack(s) {', '.join(map(str, missing))}")
    chosen = [by_rack[r] for r in body["racks"]]
    service = _pick(pods, body["target"]) if f == "isolate" else None
    if via == POLICY:
        return _as_policy(f, duration, chosen, service, body.get("direction", "both"), namespace, lab, now)
    return _in_pods(f, body, chosen, service, pods, now)


def _in_pods(f: str, body: dict[str, Any], chosen: list[Pod], service: Pod | None, pods: list[Pod], now: float) -> Plan:
    """The fault shell in an ephemeral container of each target pod."""
    duration = body["duration_s"]
    if service is not None:  # isolate: the service's side drops its packets to and from those racks
        execs = fs.partition(service.name, [_address(p) for p in chosen], duration, "both", f)
    elif f in ("blip", "partition"):
        meta = [_address(p) for p in pods if p.component in db.CELLS]  # every cell's: a rack talks to its own
        if not meta:
            raise db.NotOurs("the lab has no metadata pod to cut the racks off from")
        direction = {"both": "both", "to-metadata": "out", "from-metadata": "in"}[body.get("direction", "both")]
        execs = [cmd for p in chosen for cmd in fs.partition(p.name, meta, duration, direction, f)]
    elif f == "latency":
        execs = [cmd for p in chosen for cmd in fs.latency(p.name, 1000 * body["delay_s"], 1000 * body["jitter_s"], duration)]
    else:  # loss: every other fault has been answered before
        execs = [cmd for p in chosen for cmd in fs.loss(p.name, body["probability"], duration)]
    by_name = {p.name: p for p in pods}
    name = f"{CHAOS}{f}-{int(now * 1000)}"
    return Plan(
        f, sorted({e.container for e in execs}), ephemeral=[(e.container, ephemeral(name, by_name[e.container], e.argv)) for e in execs]
    )


def _address(pod: Pod) -> str:
    if not pod.ip:
        raise db.NotOurs(f"{pod.name} has no address yet (is it running?)")
    return pod.ip


def _as_policy(
    f: str, duration: float, chosen: list[Pod], service: Pod | None, direction: str, namespace: str, lab: str, now: float
) -> Plan:
    if f in ("latency", "loss"):
        raise db.NotOurs(f"{f} needs netem in the pod: STORMLAB_K8S_NETWORK_FAULTS={EPHEMERAL} (the default) applies it there")
    rack_pods = sorted(p.name for p in chosen)
    if service is not None:
        selected, peers, cut, targets = {"matchLabels": {NAME: service.component}}, _not_in(POD_NAME, rack_pods), "both", [service.name]
    else:
        cut = {"both": "both", "to-metadata": "out", "from-metadata": "in"}[direction]
        selected, peers, targets = _in(POD_NAME, rack_pods), _not_in(NAME, list(db.CELLS)), rack_pods
    image = (service or chosen[0]).image
    policy = cut_off(f"stormlab-chaos-{f}-{int(now * 1000)}", namespace, lab, f, selected, peers, cut)
    return Plan(f, targets, lease=lease_job(f, namespace, lab, targets, duration, image, now), policies=[policy])


def owned_by(policy: dict[str, Any], job: dict[str, Any]) -> dict[str, Any]:
    """The policy, owned by the lease Job the API server created (its name and uid)."""
    meta = job["metadata"]
    owner = {"apiVersion": "batch/v1", "kind": "Job", "name": meta["name"], "uid": meta["uid"], "blockOwnerDeletion": False}
    return {**policy, "metadata": {**policy["metadata"], "ownerReferences": [owner]}}


@dataclass(frozen=True)
class FaultLease:
    job: str
    fault: str
    targets: str
    ends_at: float | None  # None: its annotation could not be read (listed and halted all the same)


def pods_in(pod_list: dict[str, Any]) -> list[Pod]:
    """The lab's pods in a PodList (those being deleted and the lease Jobs' pods left out), each
    with this backend's ephemeral containers as its status shows them."""
    out = []
    for item in pod_list.get("items", []):
        meta, labels_ = item.get("metadata", {}), item.get("metadata", {}).get("labels") or {}
        if meta.get("deletionTimestamp") or labels_.get(LEASE):
            continue
        first: dict[str, Any] = next(iter(item.get("spec", {}).get("containers", [])), {})
        status = item.get("status", {})
        chaos = tuple(_chaos(s) for s in status.get("ephemeralContainerStatuses") or [] if str(s.get("name", "")).startswith(CHAOS))
        ip, image = status.get("podIP") or "", first.get("image", "")
        out.append(Pod(meta.get("name", ""), labels_.get(NAME, ""), ip, image, first.get("name", ""), chaos))
    return out


def _chaos(status: dict[str, Any]) -> Chaos:
    state = status.get("state") or {}
    if "terminated" in state:
        done = state["terminated"] or {}
        return Chaos(status["name"], "terminated", done.get("exitCode"), _epoch(done.get("finishedAt")))
    return Chaos(status["name"], "running" if "running" in state else "waiting")


def _epoch(stamp: Any) -> float | None:
    try:
        return datetime.datetime.fromisoformat(str(stamp)).timestamp()
    except ValueError:
        return None


def leases_in(job_list: dict[str, Any]) -> list[FaultLease]:
    """The fault leases in a JobList (those being deleted left out); one whose annotation cannot be
    read is listed with no end, never the reason the others are not."""
    out = []
    for item in job_list.get("items", []):
        meta = item.get("metadata", {})
        if meta.get("deletionTimestamp"):
            continue
        notes = meta.get("annotations") or {}
        try:
            ends_at: float | None = float(notes.get(ENDS_AT, ""))
        except ValueError:
            ends_at = None
        out.append(FaultLease(meta.get("name", ""), (meta.get("labels") or {}).get(FAULT, "?"), notes.get(TARGETS, ""), ends_at))
    return out


def orphan_policies(policy_list: dict[str, Any], jobs: list[FaultLease]) -> list[str]:
    """The lab's policies whose lease Job is gone (deleted before it owned them, or a garbage
    collector that has not got there): held by nothing, so ``list`` and ``halt`` delete them."""
    alive = {lease.job for lease in jobs}
    out = []
    for item in policy_list.get("items", []):
        meta = item.get("metadata", {})
        owners = [o.get("name") for o in meta.get("ownerReferences") or [] if o.get("kind") == "Job"]
        if not meta.get("deletionTimestamp") and not any(o in alive for o in owners):
            out.append(meta.get("name", ""))
    return out


def chaos_in(pod: Pod) -> tuple[list[Chaos], list[Chaos], list[Chaos]]:
    """A pod's chaos containers: those holding a fault now, those that ended unclean and wait for
    a reaper, and those that ended cleanly (their log says what they did)."""
    reaped = {c.name.removesuffix(REAPED) for c in pod.chaos if c.reaper}
    own = [c for c in pod.chaos if not c.reaper]
    running = [c for c in own if c.state == "running"]
    to_reap = [c for c in own if c.unclean and c.name not in reaped]
    ended = [c for c in own if c.state == "terminated" and c.exit_code == 0]
    return running, to_reap, ended
