"""The k8s chaos backend against a fake Kubernetes API server: the official client's requests for
every fault the backend holds, asserted as the API server receives them (no cluster needed)."""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from aiohttp import web

from chaos import fault_shell as fs
from chaos import k8s_backend as kb
from chaos.catalog import ChaosError
from chaos.cli import run
from stormlab.cli import build_parser

k8s = pytest.importorskip("kubernetes.client")  # stormlab[k8s]; installed with the test extra

NS = "stormlab"
IMAGE = "stormlab:0.1.0"
PODS = [("metadata-7d9f-abcde", "metadata", "10.1.0.2"), ("queues-0", "queues", "10.1.0.9")] + [
    (f"rack-{n}", "rack", f"10.1.1.{n}") for n in range(4)
]


class FakeApiServer:
    """Pods, Jobs and NetworkPolicies in one namespace, and the exec channel (v4.channel.k8s.io):
    every request is recorded as (method, path, query, body)."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, str, dict[str, list[str]], Any]] = []
        self.jobs: dict[str, dict] = {}
        self.policies: dict[str, dict] = {}
        self.paused: dict[str, int] = {}  # pod -> the pid of the shell holding its pause
        self.pods = {name: component for name, component, _ in PODS}

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self.record])
        base = f"/api/v1/namespaces/{NS}/pods"
        app.router.add_get(base, self.list_pods)
        app.router.add_delete(base + "/{name}", self.delete_pod)
        app.router.add_get(base + "/{name}/exec", self.exec)
        app.router.add_post(f"/apis/batch/v1/namespaces/{NS}/jobs", self.create_job)
        app.router.add_get(f"/apis/batch/v1/namespaces/{NS}/jobs", self.list_jobs)
        app.router.add_delete(f"/apis/batch/v1/namespaces/{NS}/jobs/{{name}}", self.delete_job)
        app.router.add_post(f"/apis/networking.k8s.io/v1/namespaces/{NS}/networkpolicies", self.create_policy)
        return app

    @web.middleware
    async def record(self, request: web.Request, handler):
        body = await request.json() if request.can_read_body else None
        query = {k: request.query.getall(k) for k in request.query}
        self.requests.append((request.method, request.path, query, body))
        return await handler(request)

    def made(self, method: str | None = None) -> list[tuple[str, str, dict, Any]]:
        """The requests that change something (or of ``method``), leaving out the listings."""
        return [r for r in self.requests if (r[0] == method if method else r[0] != "GET" or r[1].endswith("/exec"))]

    async def list_pods(self, request: web.Request) -> web.Response:
        assert request.query["labelSelector"] == "app.kubernetes.io/part-of=stormlab,app.kubernetes.io/name"
        items = [
            {
                "metadata": {"name": name, "namespace": NS, "labels": {kb.PART_OF: "stormlab", kb.NAME: component}},
                "spec": {"containers": [{"name": component, "image": IMAGE}]},
                "status": {"podIP": ip, "phase": "Running"},
            }
            for name, component, ip in PODS
            if name in self.pods
        ]
        return web.json_response({"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": items})

    async def delete_pod(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        if name not in self.pods:
            return web.json_response({"kind": "Status", "code": 404}, status=404)
        return web.json_response({"kind": "Pod", "apiVersion": "v1", "metadata": {"name": name, "namespace": NS}})

    async def create_job(self, request: web.Request) -> web.Response:
        job = await request.json()
        name = job["metadata"]["generateName"] + f"x{len(self.jobs)}"
        job["metadata"] |= {"name": name, "uid": f"uid-{len(self.jobs)}"}
        self.jobs[name] = job
        return web.json_response(job, status=201)

    async def list_jobs(self, request: web.Request) -> web.Response:
        assert request.query["labelSelector"] == f"{kb.LEASE}=true"
        return web.json_response({"kind": "JobList", "apiVersion": "batch/v1", "metadata": {}, "items": list(self.jobs.values())})

    async def delete_job(self, request: web.Request) -> web.Response:
        job = self.jobs.pop(request.match_info["name"])
        owned = [n for n, p in self.policies.items() if p["metadata"]["ownerReferences"][0]["uid"] == job["metadata"]["uid"]]
        for name in owned:  # the garbage collector, at once
            del self.policies[name]
        return web.json_response({"kind": "Status", "status": "Success"})

    async def create_policy(self, request: web.Request) -> web.Response:
        policy = await request.json()
        self.policies[policy["metadata"]["name"]] = policy
        return web.json_response(policy, status=201)

    async def exec(self, request: web.Request) -> web.StreamResponse:
        pod, argv = request.match_info["name"], request.query.getall("command")
        ws = web.WebSocketResponse(protocols=("v4.channel.k8s.io",))
        await ws.prepare(request)
        out = ""
        if tuple(argv) == fs.LIST:
            out = "".join(f"{pid} freeze {time.time() + 20:.0f} held -\n" for p, pid in self.paused.items() if p == pod)
        elif tuple(argv) == fs.HALT:
            out = f"{int(self.paused.pop(pod, 0) > 0)}\n"
        elif "kill -STOP $p" in argv[-1]:  # the detached shell holding a freeze
            self.paused[pod] = 4242
        await ws.send_bytes(b"\x01" + out.encode())
        await ws.send_bytes(b"\x03" + json.dumps({"status": "Success"}).encode())
        await ws.close()
        return ws


@pytest.fixture
def api() -> Iterator[tuple[FakeApiServer, kb.KubeRunner]]:
    fake = FakeApiServer()
    loop = asyncio.new_event_loop()
    runner = web.AppRunner(fake.app())
    loop.run_until_complete(runner.setup())
    site = web.TCPSite(runner, "127.0.0.1", 0)
    loop.run_until_complete(site.start())
    port = runner.addresses[0][1]
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    client = k8s.ApiClient(k8s.Configuration(host=f"http://127.0.0.1:{port}"))
    try:
        yield fake, kb.KubeRunner(NS, client)
    finally:
        client.close()
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        loop.run_until_complete(runner.cleanup())
        loop.close()


def chaos(argv: list[str], runner: kb.KubeRunner, capsys) -> tuple[int, str]:
    code = run(build_parser().parse_args(["chaos", "--backend", "k8s", *argv]), runner)
    return code, capsys.readouterr().out


def test_a_blip_is_a_lease_job_owning_a_policy_that_cuts_the_racks_off_from_the_metadata_pod(api, capsys):
    fake, runner = api
    code, out = chaos(["blip", "--racks", "0,2", "--duration", "5s"], runner, capsys)
    assert code == 0 and "blip on rack-0, rack-2 for 5s: it reverts by itself" in out
    [(_, job_path, _, job), (_, policy_path, _, policy)] = fake.made()
    assert job_path == f"/apis/batch/v1/namespaces/{NS}/jobs"
    assert job["spec"]["activeDeadlineSeconds"] == 5 and job["spec"]["ttlSecondsAfterFinished"] == 0  # the lease's end
    assert job["metadata"]["labels"] == {kb.PART_OF: "stormlab", kb.LEASE: "true", kb.FAULT: "blip"}
    assert job["metadata"]["annotations"][kb.TARGETS] == "rack-0,rack-2"
    assert job["spec"]["template"]["spec"]["containers"][0]["image"] == IMAGE  # the lab's own image, read from the pod
    assert policy_path == f"/apis/networking.k8s.io/v1/namespaces/{NS}/networkpolicies"
    assert policy["metadata"]["ownerReferences"] == [
        {"apiVersion": "batch/v1", "kind": "Job", "name": "stormlab-chaos-blip-x0", "uid": "uid-0", "blockOwnerDeletion": False}
    ]
    spec = policy["spec"]
    assert spec["podSelector"] == {"matchExpressions": [{"key": kb.POD_NAME, "operator": "In", "values": ["rack-0", "rack-2"]}]}
    assert spec["policyTypes"] == ["Ingress", "Egress"]
    allowed = [
        {"podSelector": {"matchExpressions": [{"key": kb.NAME, "operator": "NotIn", "values": ["metadata"]}]}},
        {"namespaceSelector": {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": [NS]}]}},
    ]
    assert spec["egress"] == [{"to": allowed}] and spec["ingress"] == [{"from": allowed}]


def test_a_one_way_partition_drops_only_the_racks_egress(api, capsys):
    fake, runner = api
    code, _ = chaos(["partition", "--between", "racks:3", "metadata", "--one-way", "--duration", "1m"], runner, capsys)
    assert code == 0
    [(_, _, _, job), (_, _, _, policy)] = fake.made()
    assert job["spec"]["activeDeadlineSeconds"] == 60
    assert policy["spec"]["policyTypes"] == ["Egress"] and "ingress" not in policy["spec"]
    assert policy["spec"]["podSelector"]["matchExpressions"][0]["values"] == ["rack-3"]


def test_isolate_cuts_a_service_pod_off_from_the_chosen_racks(api, capsys):
    fake, runner = api
    code, _ = chaos(["isolate", "--target", "queues", "--racks", "1,3", "--duration", "30s"], runner, capsys)
    assert code == 0
    [(_, _, _, job), (_, _, _, policy)] = fake.made()
    assert job["metadata"]["annotations"][kb.TARGETS] == "queues-0"
    assert policy["spec"]["podSelector"] == {"matchLabels": {kb.NAME: "queues"}}
    peers = policy["spec"]["egress"][0]["to"][0]["podSelector"]
    assert peers == {"matchExpressions": [{"key": kb.POD_NAME, "operator": "NotIn", "values": ["rack-1", "rack-3"]}]}


def test_kill_deletes_the_pod_and_its_controller_starts_another(api, capsys):
    fake, runner = api
    code, out = chaos(["kill", "--target", "rack-2", "--duration", "5s"], runner, capsys)
    assert code == 0 and "started again by its controller" in out
    assert fake.made() == [("DELETE", f"/api/v1/namespaces/{NS}/pods/rack-2", {"gracePeriodSeconds": ["0"]}, None)]


def test_freeze_execs_the_armed_shell_in_the_pod_and_confirms_it_holds(api, capsys):
    fake, runner = api
    code, out = chaos(["freeze", "--target", "rack-01", "--duration", "10s"], runner, capsys)
    assert code == 0 and "freeze on rack-1 for 10s" in out
    execs = [q["command"] for m, p, q, _ in fake.made() if p.endswith("/rack-1/exec")]
    assert execs[0] == list(fs.LIST)  # what was held before
    shell = execs[1]
    assert shell[:2] == ["sh", "-c"] and shell[2].startswith("setsid sh -c ")  # it outlives the exec
    assert kb.SERVICE_PID in shell[2] and "kill -STOP $p" in shell[2] and "kill -CONT $p" in shell[2] and "sleep 10" in shell[2]
    assert execs[2] == list(fs.LIST)  # confirmed: its fault file is there


def test_list_and_halt_cover_the_lease_jobs_and_the_shells_in_the_pods(api, capsys):
    fake, runner = api
    chaos(["blip", "--racks", "3", "--duration", "20s"], runner, capsys)
    chaos(["freeze", "--target", "queues", "--duration", "20s"], runner, capsys)
    code, out = chaos(["list"], runner, capsys)
    assert code == 0
    assert re.search(r"stormlab-chaos-blip-x0 blip on rack-0,rack-1,rack-2: (19|20)s left", out), out  # a second may tick by
    assert re.search(r"queues-0 \(pid 4242\) freeze: (19|20)s left", out), out
    code, out = chaos(["halt"], runner, capsys)
    assert code == 0 and "halted 2 fault(s)" in out
    assert (fake.jobs, fake.policies, fake.paused) == ({}, {}, {})
    [(_, path, query, _)] = [r for r in fake.made("DELETE") if "/jobs/" in r[1]]
    assert path.endswith("/jobs/stormlab-chaos-blip-x0") and query.get("propagationPolicy", ["Background"]) == ["Background"]


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["latency", "--racks", "1", "--delay", "100ms", "--duration", "5s"], "netem as root"),
        (["loss", "--racks", "1", "--probability", "0.1", "--duration", "5s"], "netem as root"),
        (["kill", "--target", "rack-9", "--duration", "5s"], "not a pod of the lab"),
        (["blip", "--racks", "7", "--duration", "5s"], "the lab has 4 racks"),
        (["gsi-growth", "--factor", "2", "--duration", "5s"], "STORMLAB_METADATA_URL.*port-forward"),
        (["blip", "--racks", "2,9", "--duration", "5s"], "rack"),
    ],
)
def test_what_the_backend_cannot_do_is_refused_before_any_request(api, argv, says, capsys):
    fake, runner = api
    with pytest.raises(ChaosError, match=says):
        chaos(argv, runner, capsys)
    assert fake.made() == []


def test_dry_run_prints_the_requests_and_sends_none(api, capsys):
    fake, runner = api
    code, out = chaos(["blip", "--racks", "1", "--duration", "5s", "--dry-run"], runner, capsys)
    assert code == 0 and fake.made() == []
    assert out.startswith(f"POST /apis/batch/v1/namespaces/{NS}/jobs ")
    assert f"POST /apis/networking.k8s.io/v1/namespaces/{NS}/networkpolicies " in out


def test_pods_being_deleted_and_lease_pods_are_not_the_labs_targets():
    pod_list = {
        "items": [
            {
                "metadata": {"name": "rack-0", "labels": {kb.NAME: "rack"}},
                "spec": {"containers": [{"image": IMAGE}]},
                "status": {"podIP": "10.0.0.1"},
            },
            {"metadata": {"name": "rack-1", "labels": {kb.NAME: "rack"}, "deletionTimestamp": "2026-12-01T00:00:00Z"}},
            {"metadata": {"name": "stormlab-chaos-blip-x0-abc", "labels": {kb.LEASE: "true", kb.NAME: "rack"}}},
            {"metadata": {"name": "rack-2", "labels": {kb.NAME: "rack"}}, "spec": {"containers": [{"image": IMAGE}]}, "status": {}},
        ]
    }
    assert kb.pods_in(pod_list) == [kb.Pod("rack-0", "rack", "10.0.0.1", IMAGE), kb.Pod("rack-2", "rack", "", IMAGE)]
    jobs = {"items": [{"metadata": {"name": "j", "labels": {kb.FAULT: "blip"}, "annotations": {kb.ENDS_AT: "12", kb.TARGETS: "rack-0"}}}]}
    assert kb.leases_in(jobs) == [kb.Lease("j", "blip", "rack-0", 12.0)]
    assert kb.leases_in({"items": [{"metadata": {"name": "j", "deletionTimestamp": "x"}}]}) == []


def test_metadata_faults_go_to_the_metadata_service_s_api_not_the_cluster(api, capsys, monkeypatch):
    fake, runner = api
    monkeypatch.setenv("STORMLAB_METADATA_URL", "http://metadata.example:8700")
    code, out = chaos(["gsi-growth", "--duration", "30s", "--dry-run"], runner, capsys)
    assert code == 0 and out.startswith('POST http://metadata.example:8700/faults {"fault": "gsi-growth"')
    code, out = chaos(["stuck-partition", "--duration", "1m", "--dry-run"], runner, capsys)
    assert code == 0 and out.startswith('POST http://metadata.example:8700/faults {"fault": "stuck-partition"')
    assert fake.requests == []  # nothing asked of the Kubernetes API
