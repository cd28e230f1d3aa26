"""The Kubernetes client behind the k8s backend (imported only when it is used): sends the plans
``chaos/k8s_backend.py`` builds, finds the fault shells in the lab's pods, lists and halts them.

It is also the docker backend's Runner, so the shells exec'd in pods (freeze) are listed and
halted as they are in containers. A command meant for an ephemeral container names it after the
pod: ``rack-3/stormlab-chaos-blip-1796…``.
"""

from __future__ import annotations

import json
import shlex
import time
from typing import Any

from chaos import docker_backend as db
from chaos import fault_shell as fs
from chaos import k8s_backend as kb
from stormcore.later import Later

# the Kubernetes client is optional (stormlab[k8s]): only this backend needs it, imported at its first use
k8s = Later("kubernetes.client")
k8s_config = Later("kubernetes.config")
k8s_streams = Later("kubernetes.stream")

STRATEGIC = "application/strategic-merge-patch+json"  # adds an ephemeral container by its name


class KubeRunner:
    # The client's exec stream swaps its ApiClient's request method for the call's duration: two
    # execs at once through one client would cross, so `list` and `halt` ask pods one at a time.
    exec_at_once = False

    def __init__(self, namespace: str = kb.DEFAULT_NAMESPACE, api_client: Any = None, lab: str = kb.DEFAULT_LAB) -> None:
        if not k8s.installed:
            raise ImportError("the k8s backend needs the Kubernetes client: pip install 'stormlab[k8s]'")
        if api_client is None:
            try:
                k8s_config.load_incluster_config()
            except k8s_config.ConfigException:
                k8s_config.load_kube_config()
            api_client = k8s.ApiClient()
        self.namespace, self.lab = namespace, lab
        self.core = k8s.CoreV1Api(api_client)
        self.batch = k8s.BatchV1Api(api_client)
        self.net = k8s.NetworkingV1Api(api_client)
        self.api = api_client

    # what the pods are
    def pods(self) -> list[kb.Pod]:
        return kb.pods_in(self._plain(self.core.list_namespaced_pod(self.namespace, label_selector=f"{kb.PART_OF}=stormlab,{kb.NAME}")))

    def _plain(self, model: Any) -> dict[str, Any]:
        """An API answer as the JSON the server sent (camelCase keys, plain values)."""
        return self.api.sanitize_for_serialization(model)

    # the docker backend's Runner, on pods
    def labels(self, container: str) -> dict[str, str]:
        ours = any(p.name == container.split("/")[0] for p in self.pods())
        return {db.PROJECT_LABEL: db.DEFAULT_PROJECT} if ours else {}

    def exec(self, command: fs.Exec) -> str:
        pod, _, container = command.container.partition("/")
        argv = list(command.argv)
        if command.detach:  # the shell outlives the exec: it holds the fault and arms its revert
            argv = ["sh", "-c", f"setsid {shlex.join(argv)} >/dev/null 2>&1 &"]
        options = {"container": container} if container else {}
        session = k8s_streams.stream(
            self.core.connect_get_namespaced_pod_exec,
            pod,
            self.namespace,
            command=argv,
            stderr=True,
            stdin=False,
            stdout=True,
            tty=False,
            _preload_content=False,
            **options,
        )
        try:
            session.run_forever(timeout=30)
            out = session.read_stdout() or ""
            failed = _failure(session.read_channel(3))
        finally:
            session.close()
            if getattr(session, "sock", None) is not None:  # closed by the server first, websocket-client keeps the socket
                session.sock.shutdown()
        if failed:
            raise RuntimeError(f"exec in {command.container} failed: {failed}")
        return "" if command.detach else str(out)

    def racks(self) -> dict[int, str]:
        return {n: p.name for n, p in kb.racks(self.pods()).items()}

    def containers(self, service: str) -> list[str]:
        return sorted(p.name for p in self.pods() if p.component == service)

    def ip(self, container: str) -> str:
        return next(p.ip for p in self.pods() if p.name == container)

    # the plan, applied
    def apply(self, plan: kb.Plan) -> None:
        for name in plan.delete_pods:
            self.core.delete_namespaced_pod(name, self.namespace, grace_period_seconds=0)
        if plan.lease is not None:
            lease: Any = plan.lease  # the client takes the JSON body as it is
            job = self._plain(self.batch.create_namespaced_job(self.namespace, lease))
            for policy in plan.policies:
                body: Any = kb.owned_by(policy, job)
                self.net.create_namespaced_network_policy(self.namespace, body)
        for command in plan.execs:
            self.exec(command)
        for pod, spec in plan.ephemeral:
            self.add_container(pod, spec)

    def add_container(self, pod: str, spec: dict[str, Any]) -> None:
        patch: Any = {"spec": {"ephemeralContainers": [spec]}}
        self.core.patch_namespaced_pod_ephemeralcontainers(pod, self.namespace, patch, _content_type=STRATEGIC)

    def chaos_state(self, pod: str, name: str) -> kb.Chaos | None:
        found = [c for p in self.pods() if p.name == pod for c in p.chaos if c.name == name]
        return found[0] if found else None

    def log(self, pod: str, container: str) -> str:
        return str(self.core.read_namespaced_pod_log(pod, self.namespace, container=container))

    # the lab's lease Jobs and policies, and nobody else's
    def leases(self) -> list[kb.FaultLease]:
        return kb.leases_in(self._plain(self.batch.list_namespaced_job(self.namespace, label_selector=kb.selector(self.lab))))

    def orphan_policies(self, leases: list[kb.FaultLease]) -> list[str]:
        listed = self.net.list_namespaced_network_policy(self.namespace, label_selector=kb.selector(self.lab))
        return kb.orphan_policies(self._plain(listed), leases)

    def end_leases(self, failed: list[str]) -> int:
        """Deletes this lab's lease Jobs (the garbage collector deletes the policies they own) and
        any of its policies whose Job is already gone; one that fails is named in ``failed``."""
        ended, leases = 0, self.leases()
        for lease in leases:
            try:
                self.batch.delete_namespaced_job(lease.job, self.namespace, propagation_policy="Background")
                ended += 1
            except Exception as exc:  # one object's refusal must not keep the others' faults in force
                failed.append(f"job {lease.job}: {exc}")
        for name in self.orphan_policies(leases):
            try:
                self.net.delete_namespaced_network_policy(name, self.namespace)
                ended += 1
            except Exception as exc:
                failed.append(f"networkpolicy {name}: {exc}")
        return ended


def _failure(status: str) -> str:
    """The exec's error channel: its message when the API server says it failed, else ""."""
    try:
        said = json.loads(status) if status else {}
    except ValueError:
        return status.strip()
    return str(said.get("message") or said.get("reason") or "failure") if said.get("status") == "Failure" else ""


def confirm_started(runner: KubeRunner, plan: kb.Plan, within_s: float = 30.0) -> list[str]:
    """Waits until each ephemeral container of the plan holds its fault (running, its shell's
    file written); returns the pods where it did not (ended at once: its rules did not go in)."""
    deadline = time.monotonic() + within_s
    waiting = {(pod, spec["name"]) for pod, spec in plan.ephemeral}
    failed: list[str] = []
    while waiting and time.monotonic() < deadline:
        for pod, name in sorted(waiting):
            state = runner.chaos_state(pod, name)
            if state is not None and state.state == "terminated":
                failed.append(pod)
                waiting.discard((pod, name))
            elif state is not None and state.state == "running":
                held = fs.parse_listing(f"{pod}/{name}", runner.exec(fs.Exec(f"{pod}/{name}", fs.LIST, detach=False)))
                if any(h.state == "held" and h.fault == plan.fault for h in held):
                    waiting.discard((pod, name))
        if waiting:
            time.sleep(0.2)
    return failed + sorted(pod for pod, _ in waiting)
