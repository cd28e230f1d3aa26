"""`stormlab chaos --backend k8s …`: network and process faults on the lab's pods in a Kubernetes
namespace (STORMLAB_K8S_NAMESPACE, default stormlab); metadata and service faults still go to
their holders' APIs (STORMLAB_METADATA_URL …), as on compose."""

from __future__ import annotations

import json
import os
import time
from typing import Any

from chaos import docker_backend as db
from chaos import docker_cli
from chaos import k8s_backend as kb
from chaos.catalog import ChaosError


def namespace() -> str:
    return os.environ.get("STORMLAB_K8S_NAMESPACE", kb.DEFAULT_NAMESPACE)


def runner_for(runner: kb.KubeRunner | None) -> kb.KubeRunner:
    if runner is not None:
        return runner
    try:
        return kb.KubeRunner(namespace())
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
    return out


def apply(body: dict, runner: kb.KubeRunner, dry_run: bool = False, wait: bool = False) -> int:
    try:
        plan = kb.build(body, runner.pods(), runner.namespace)
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
    duration = body["duration_s"]
    ends = "its pod is started again by its controller" if plan.delete_pods else "it reverts by itself"
    print(f"{plan.fault} on {', '.join(plan.targets)} for {duration:g}s: {ends}")
    if wait:
        time.sleep(duration)
    return 0


def listing(runner: kb.KubeRunner, failed: list[str]) -> tuple[list[str], list[dict[str, Any]]]:
    now = time.time()
    leases = [f"{lease.job} {lease.fault} on {lease.targets}: {max(0.0, lease.ends_at - now):.0f}s left" for lease in runner.leases()]
    rows, shells = docker_cli.listing(runner, failed)
    return leases + rows, shells


def halt(runner: kb.KubeRunner) -> tuple[int, list[str]]:
    halted, failed = docker_cli.halt(runner)
    return runner.end_leases() + halted, failed
