"""The k8s backend: the same faults on the lab's pods in one Kubernetes namespace.

Each fault is built, by pure functions, as the exact Kubernetes API requests that apply it, and
its revert is armed in the cluster, not in the chaos command:

- the network faults (``blip``, ``partition``, ``isolate``) are NetworkPolicies owned by a lease
  Job. The Job's ``activeDeadlineSeconds`` is the fault's duration; when it ends, the Job's TTL
  deletes it and the garbage collector deletes the policies it owns. Killing the chaos command
  leaves nothing behind, and ``halt`` deletes the lease Jobs (their policies go with them);
- ``freeze`` is the docker backend's armed shell, run in the pod through the exec API (the pods
  share their process namespace, so the service is not PID 1 and SIGSTOP reaches it);
- ``kill`` deletes the pod; its StatefulSet or Deployment starts a new one.

``latency`` and ``loss`` need netem as root in the pod; the lab's pods run unprivileged, so this
backend refuses them (the local lab and compose have them).

Only pods labelled ``app.kubernetes.io/part-of=stormlab`` in the namespace are touched.
"""

from __future__ import annotations

import shlex
import time
from dataclasses import dataclass, field
from typing import Any

from chaos import docker_backend as db
from chaos import fault_shell as fs

try:  # the Kubernetes client is optional: only this backend needs it
    from kubernetes import client as k8s
    from kubernetes import config as k8s_config
    from kubernetes.stream import stream as k8s_stream
except ImportError:  # pragma: no cover - installed with stormlab[k8s]
    k8s = k8s_config = k8s_stream = None  # type: ignore[assignment]

PART_OF = "app.kubernetes.io/part-of"
NAME = "app.kubernetes.io/name"
POD_NAME = "statefulset.kubernetes.io/pod-name"
LEASE = "stormlab.dev/chaos-lease"
FAULT = "stormlab.dev/fault"
ENDS_AT = "stormlab.dev/ends-at"
TARGETS = "stormlab.dev/targets"
DEFAULT_NAMESPACE = "stormlab"
# The pod's service, seen from an exec in it: the oldest python process (with a shared process
# namespace, PID 1 is the pod's pause container, never the service).
SERVICE_PID = "p=$(pgrep -o python)"


@dataclass(frozen=True)
class Pod:
    name: str
    component: str  # its app.kubernetes.io/name: metadata, rack, queues…
    ip: str
    image: str


@dataclass(frozen=True)
class Plan:
    """A fault as API requests: a lease Job and the NetworkPolicies it owns, pods to delete, or
    commands to exec in pods."""

    fault: str
    targets: list[str]
    lease: dict[str, Any] | None = None
    policies: list[dict[str, Any]] = field(default_factory=list)
    delete_pods: list[str] = field(default_factory=list)
    execs: list[fs.Exec] = field(default_factory=list)


def racks(pods: list[Pod]) -> dict[int, Pod]:
    """Rack N is the StatefulSet's pod rack-N (the pod's ordinal is its rack)."""
    found = {}
    for pod in pods:
        head, _, ordinal = pod.name.rpartition("-")
        if pod.component == "rack" and head == "rack" and ordinal.isdigit():
            found[int(ordinal)] = pod
    return found


def _not_in(key: str, values: list[str]) -> dict[str, Any]:
    return {"matchExpressions": [{"key": key, "operator": "NotIn", "values": sorted(values)}]}


def _in(key: str, values: list[str]) -> dict[str, Any]:
    return {"matchExpressions": [{"key": key, "operator": "In", "values": sorted(values)}]}


def cut_off(name: str, namespace: str, fault: str, selected: dict[str, Any], peers: dict[str, Any], direction: str) -> dict[str, Any]:
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
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": name, "namespace": namespace, "labels": {PART_OF: "stormlab", LEASE: "true", FAULT: fault}},
        "spec": spec,
    }


def lease_job(fault: str, namespace: str, targets: list[str], duration_s: float, image: str, now: float) -> dict[str, Any]:
    """The Job that holds a network fault: it runs for the fault's duration (its deadline), then
    its TTL deletes it and, with it, the policies it owns."""
    deadline = max(1, round(duration_s))
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "generateName": f"stormlab-chaos-{fault}-",
            "namespace": namespace,
            "labels": {PART_OF: "stormlab", LEASE: "true", FAULT: fault},
            "annotations": {ENDS_AT: f"{now + deadline:.0f}", TARGETS: ",".join(targets)},
        },
        "spec": {
            "activeDeadlineSeconds": deadline,
            "ttlSecondsAfterFinished": 0,
            "backoffLimit": 0,
            "template": {
                "metadata": {"labels": {PART_OF: "stormlab", LEASE: "true"}},
                "spec": {
                    "restartPolicy": "Never",
                    "securityContext": {"runAsNonRoot": True, "runAsUser": 10001},
                    "containers": [{"name": "lease", "image": image, "command": ["sleep", str(deadline + 60)]}],
                },
            },
        },
    }


def build(body: dict[str, Any], pods: list[Pod], namespace: str = DEFAULT_NAMESPACE, now: float | None = None) -> Plan:
    """The requests for a checked fault request (``chaos/catalog.py``) on the namespace's pods."""
    f, duration = body["fault"], body["duration_s"]
    now = time.time() if now is None else now
    by_rack = racks(pods)
    if f not in db.ENGINE_FAULTS:
        raise db.NotOurs(db.not_on_engine(f, "Kubernetes"))
    if f in ("latency", "loss"):
        raise db.NotOurs(f"{f} needs netem as root in the pod; the lab's pods run unprivileged: use the local lab or compose for it")
    if f in ("freeze", "kill", "isolate"):
        target = body["target"]
        rack = db.rack_named(target)
        chosen = [p for p in pods if p.component == target and target in db.SERVICES] or ([by_rack[rack]] if rack in by_rack else [])
        if not chosen:
            names = ", ".join([*db.SERVICES, *(f"rack-{n}" for n in sorted(by_rack))])
            raise db.NotOurs(f"--target {target!r} is not a pod of the lab; targets: {names}")
        pod = chosen[0]
        if f == "kill":
            return Plan(f, [pod.name], delete_pods=[pod.name])
        if f == "freeze":
            return Plan(f, [pod.name], execs=fs.freeze(pod.name, duration, SERVICE_PID))
    missing = [r for r in body["racks"] if r not in by_rack]
    if missing:
        raise db.NotOurs(f"no pod for rack(s) {', '.join(map(str, missing))}")
    rack_pods = sorted(by_rack[r].name for r in body["racks"])
    if f == "isolate":
        selected, peers, direction, targets = {"matchLabels": {NAME: pod.component}}, _not_in(POD_NAME, rack_pods), "both", [pod.name]
    else:  # blip, partition: every other fault has been answered above
        direction = {"both": "both", "to-metadata": "out", "from-metadata": "in"}[body.get("direction", "both")]
        selected, peers, targets = _in(POD_NAME, rack_pods), _not_in(NAME, ["metadata"]), rack_pods
    image = next(p.image for p in pods if p.name in targets)
    policy = cut_off(f"stormlab-chaos-{f}-{int(now * 1000)}", namespace, f, selected, peers, direction)
    return Plan(f, targets, lease=lease_job(f, namespace, targets, duration, image, now), policies=[policy])


def owned_by(policy: dict[str, Any], job: dict[str, Any]) -> dict[str, Any]:
    """The policy, owned by the lease Job the API server created (its name and uid)."""
    meta = job["metadata"]
    owner = {"apiVersion": "batch/v1", "kind": "Job", "name": meta["name"], "uid": meta["uid"], "blockOwnerDeletion": False}
    return {**policy, "metadata": {**policy["metadata"], "ownerReferences": [owner]}}


@dataclass(frozen=True)
class Lease:
    job: str
    fault: str
    targets: str
    ends_at: float


def pods_in(pod_list: dict[str, Any]) -> list[Pod]:
    """The lab's pods in a PodList (those being deleted and the lease Jobs' pods left out)."""
    out = []
    for item in pod_list.get("items", []):
        meta, labels = item.get("metadata", {}), item.get("metadata", {}).get("labels") or {}
        if meta.get("deletionTimestamp") or labels.get(LEASE):
            continue
        image = next((c.get("image", "") for c in item.get("spec", {}).get("containers", [])), "")
        out.append(Pod(meta.get("name", ""), labels.get(NAME, ""), item.get("status", {}).get("podIP") or "", image))
    return out


def leases_in(job_list: dict[str, Any]) -> list[Lease]:
    """The fault leases in a JobList (those being deleted left out)."""
    out = []
    for item in job_list.get("items", []):
        meta = item.get("metadata", {})
        if meta.get("deletionTimestamp"):
            continue
        notes = meta.get("annotations") or {}
        out.append(
            Lease(meta.get("name", ""), (meta.get("labels") or {}).get(FAULT, "?"), notes.get(TARGETS, ""), float(notes.get(ENDS_AT, 0)))
        )
    return out


class KubeRunner:
    """The Kubernetes client behind the backend (imported only when the k8s backend is used);
    also the docker backend's Runner, so its shells (freeze, list, halt) run in pods as they do in
    containers."""

    def __init__(self, namespace: str = DEFAULT_NAMESPACE, api_client: Any = None) -> None:
        if k8s is None:
            raise ImportError("the k8s backend needs the Kubernetes client: pip install 'stormlab[k8s]'")
        if api_client is None:
            try:
                k8s_config.load_incluster_config()
            except k8s_config.ConfigException:
                k8s_config.load_kube_config()
            api_client = k8s.ApiClient()
        self.namespace = namespace
        self.core = k8s.CoreV1Api(api_client)
        self.batch = k8s.BatchV1Api(api_client)
        self.net = k8s.NetworkingV1Api(api_client)
        self.api = api_client

    # what the pods are
    def pods(self) -> list[Pod]:
        return pods_in(self._plain(self.core.list_namespaced_pod(self.namespace, label_selector=f"{PART_OF}=stormlab,{NAME}")))

    def _plain(self, model: Any) -> dict[str, Any]:
        """An API answer as the JSON the server sent (camelCase keys, plain values)."""
        return self.api.sanitize_for_serialization(model)

    # the docker backend's Runner, on pods
    def labels(self, container: str) -> dict[str, str]:
        ours = any(p.name == container for p in self.pods())
        return {db.PROJECT_LABEL: db.DEFAULT_PROJECT} if ours else {}

    def exec(self, command: fs.Exec) -> str:
        argv = list(command.argv)
        if command.detach:  # the shell outlives the exec: it holds the fault and arms its revert
            argv = ["sh", "-c", f"setsid {shlex.join(argv)} >/dev/null 2>&1 &"]
        session = k8s_stream(
            self.core.connect_get_namespaced_pod_exec,
            command.container,
            self.namespace,
            command=argv,
            stderr=True,
            stdin=False,
            stdout=True,
            tty=False,
            _preload_content=False,
        )
        try:
            session.run_forever(timeout=30)
            out = session.read_stdout() or ""
        finally:
            session.close()
            if getattr(session, "sock", None) is not None:  # closed by the server first, websocket-client keeps the socket
                session.sock.shutdown()
        return "" if command.detach else str(out)

    def racks(self) -> dict[int, str]:
        return {n: p.name for n, p in racks(self.pods()).items()}

    def containers(self, service: str) -> list[str]:
        return sorted(p.name for p in self.pods() if p.component == service)

    def ip(self, container: str) -> str:
        return next(p.ip for p in self.pods() if p.name == container)

    # the plan, applied
    def apply(self, plan: Plan) -> None:
        for name in plan.delete_pods:
            self.core.delete_namespaced_pod(name, self.namespace, grace_period_seconds=0)
        if plan.lease is not None:
            lease: Any = plan.lease  # the client takes the JSON body as it is
            job = self._plain(self.batch.create_namespaced_job(self.namespace, lease))
            for policy in plan.policies:
                body: Any = owned_by(policy, job)
                self.net.create_namespaced_network_policy(self.namespace, body)
        for command in plan.execs:
            self.exec(command)

    def leases(self) -> list[Lease]:
        return leases_in(self._plain(self.batch.list_namespaced_job(self.namespace, label_selector=f"{LEASE}=true")))

    def end_leases(self) -> int:
        """Deletes every lease Job; the garbage collector deletes the policies they own."""
        ended = self.leases()
        for lease in ended:
            self.batch.delete_namespaced_job(lease.job, self.namespace, propagation_policy="Background")
        return len(ended)
