"""`stormlab chaos --backend k8s …`: network and process faults on the lab's pods in a Kubernetes
namespace (STORMLAB_K8S_NAMESPACE, default stormlab); metadata and service faults still go to
their holders' APIs (STORMLAB_METADATA_URL …), as on compose.

STORMLAB_K8S_LAB names the lab its lease Jobs and policies carry (default stormlab), so two labs
in one namespace never list or halt each other's. STORMLAB_K8S_NETWORK_FAULTS chooses how network
faults are applied: ``ephemeral`` (the default: the fault shell in an ephemeral container of the
target pod) or ``networkpolicy``."""

from __future__ import annotations

import json
import os
import time

from chaos import docker_backend as db
from chaos import docker_cli
from chaos import fault_shell as fs
from chaos import k8s_backend as kb
from chaos.catalog import ChaosError
from chaos.k8s_runner import KubeRunner, confirm_started
from stormcore.documents import is_decimal


def namespace() -> str:
    return os.environ.get("STORMLAB_K8S_NAMESPACE", kb.DEFAULT_NAMESPACE)


def lab() -> str:
    return os.environ.get("STORMLAB_K8S_LAB", kb.DEFAULT_LAB)


def via() -> str:
    chosen = os.environ.get("STORMLAB_K8S_NETWORK_FAULTS", kb.EPHEMERAL)
    if chosen not in (kb.EPHEMERAL, kb.POLICY):
        raise ChaosError(f"STORMLAB_K8S_NETWORK_FAULTS must be {kb.EPHEMERAL} or {kb.POLICY}, got {chosen!r}")
    return chosen


def runner_for(runner: KubeRunner | None) -> KubeRunner:
    if runner is not None:
        return runner
    try:
        return KubeRunner(namespace(), lab=lab())
    except ImportError:
        raise ChaosError("the k8s backend needs the Kubernetes client: pip install 'stormlab[k8s]'") from None
    except Exception as exc:  # no in-cluster account and no kubeconfig
        raise ChaosError(f"no Kubernetes API to talk to: {exc}") from None


def requests(plan: kb.Plan) -> list[str]:
    """The plan as the requests it makes, for --dry-run."""
    ns = namespace()
    out = [f"DELETE /api/v1/namespaces/{ns}/pods/{name}?gracePeriodSeconds=0" for name in plan.delete_pods]
    if plan.lease is not None:
        out.append(f"POST /apis/batch/v1/namespaces/{ns}/jobs {json.dumps(plan.lease)}")
        out += [f"POST /apis/networking.k8s.io/v1/namespaces/{ns}/networkpolicies {json.dumps(p)}" for p in plan.policies]
    out += [f"exec in pod {c.container}: {' '.join(c.argv)}" for c in plan.execs]
    out += [
        f"PATCH /api/v1/namespaces/{ns}/pods/{pod}/ephemeralcontainers {json.dumps({'spec': {'ephemeralContainers': [spec]}})}"
        for pod, spec in plan.ephemeral
    ]
    return out


def apply(body: dict, runner: KubeRunner, dry_run: bool = False, wait: bool = False) -> int:
    try:
        plan = kb.build(body, runner.pods(), runner.namespace, time.time(), runner.lab, via())
    except db.NotOurs as exc:
        raise ChaosError(str(exc)) from None
    if dry_run:
        for line in requests(plan):
            print(line)
        return 0
    before = {(h.container, h.pid) for h in db.held(runner, plan.targets)} if plan.execs else set()
    runner.apply(plan)
    if plan.execs:
        docker_cli.confirm(runner, plan.targets, plan.fault, before)
    if plan.ephemeral:
        missing = confirm_started(runner, plan)
        if missing:
            raise docker_cli.NotApplied(f"{plan.fault} did not apply in {', '.join(missing)} (its ephemeral container ended or never ran)")
    duration = body["duration_s"]
    ends = "its pod is started again by its controller" if plan.delete_pods else "it reverts by itself"
    print(f"{plan.fault} on {', '.join(plan.targets)} for {duration:g}s: {ends}")
    if wait:
        time.sleep(duration)
    return 0


def listing(runner: KubeRunner, failed: list[str]) -> docker_cli.Listing:
    """The lab's lease Jobs, its policies left without one (deleted now), and the fault shells in
    its pods: those in ephemeral containers and those exec'd in the pods' own containers."""
    now, rows = time.time(), []
    leases = runner.leases()
    for lease in leases:
        left = "its ends-at annotation is unreadable" if lease.ends_at is None else f"{max(0.0, lease.ends_at - now):.0f}s left"
        rows.append(f"{lease.job} {lease.fault} on {lease.targets}: {left}")
    for name in runner.orphan_policies(leases):
        try:
            runner.net.delete_namespaced_network_policy(name, runner.namespace)
            rows.append(f"networkpolicy {name}: its lease Job was gone: deleted now")
        except Exception as exc:  # one object's refusal must not hide the others
            failed.append(f"networkpolicy {name}: {exc}")
    in_containers, _ = in_pods(runner, failed, halting=False)
    found = in_containers + db.listed(runner, docker_cli.lab_containers(runner), failed)
    shells = docker_cli.listing_of(found, now)
    return docker_cli.Listing(rows + shells.active, shells.quiet, shells.shells)


def in_pods(runner: KubeRunner, failed: list[str], halting: bool) -> tuple[list[fs.Held], int]:
    """Each running chaos container listed (or halted: its shell TERMed, it reverts), a reaper for
    each that ended unclean (an orphan), and, when listing, the ended records of those that ended
    lately; with how many were halted or reaped. Pod by pod: one that fails is named in ``failed``."""
    found: dict[tuple[str, object], fs.Held] = {}
    ended_now = 0
    for pod in runner.pods():
        running, to_reap, ended = kb.chaos_in(pod)
        try:
            for c in running:
                said = runner.exec(fs.Exec(f"{pod.name}/{c.name}", fs.HALT if halting else fs.LIST, detach=False)).strip()
                ended_now += int(said) if halting and is_decimal(said) else 0
                for h in fs.parse_listing(pod.name, said):  # a pod's shells may share one /dev/shm: each once
                    found[(pod.name, h.pid)] = h
            for c in to_reap:
                runner.add_container(pod.name, kb.reaper(pod, c))
                found[(pod.name, c.name)] = fs.Held(pod.name, 0, c.fault, c.finished_at or time.time(), "orphan", None)
                ended_now += 1
            recent = [c for c in ended if not halting and c.finished_at is not None and time.time() - c.finished_at < fs.ENDED_KEPT_S]
            for c in recent:
                record = fs.parse_ended(pod.name, runner.log(pod.name, c.name))
                if record is not None:
                    found[(pod.name, c.name)] = record
        except Exception as exc:  # one pod's failure must not keep the others' faults in force
            failed.append(f"{pod.name}: {exc}")
    return list(found.values()), ended_now


def halt(runner: KubeRunner) -> tuple[int, list[str]]:
    """Every fault of the lab ended now: the shells in ephemeral containers (TERM: each reverts),
    those exec'd in the pods, orphans reaped, the lease Jobs and their policies deleted."""
    failed: list[str] = []
    _, halted = in_pods(runner, failed, halting=True)
    exec_halted, exec_failed = docker_cli.halt(runner)
    return halted + exec_halted + runner.end_leases(failed), failed + exec_failed
