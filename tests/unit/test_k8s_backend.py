"""The k8s chaos backend against a fake Kubernetes API server: the official client's requests for
every fault the backend holds, asserted as the API server receives them (no cluster needed)."""

from __future__ import annotations

import asyncio
import datetime
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
from chaos.k8s_runner import KubeRunner
from stormlab.cli import build_parser

k8s = pytest.importorskip("kubernetes.client")  # stormlab[k8s]; installed with the test extra

NS = "stormlab"
SELECTOR = "app.kubernetes.io/part-of=stormlab,stormlab.dev/lab=stormlab,stormlab.dev/chaos-lease=true"
IMAGE = "stormlab:0.1.0"
PODS = [
    ("metadata-7d9f-abcde", "metadata", "10.1.0.2"),
    ("metadata-cell-0", "metadata-cell", "10.1.0.3"),
    ("queues-0", "queues", "10.1.0.9"),
] + [(f"rack-{n}", "rack", f"10.1.1.{n}") for n in range(4)]


class FakeApiServer:
    """Pods, Jobs and NetworkPolicies in one namespace, the pods' ephemeral containers and logs, and
    the exec channel (v4.channel.k8s.io): every request is recorded as (method, path, query, body)."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, str, dict[str, list[str]], Any]] = []
        self.jobs: dict[str, dict] = {}
        self.policies: dict[str, dict] = {}
        self.paused: dict[str, int] = {}  # pod -> the pid of the shell holding its pause
        self.pods = {name: component for name, component, _ in PODS if component != "metadata-cell"}  # with cells: add it
        self.ephemeral: dict[str, dict[str, dict]] = {}  # pod -> container name -> its status
        self.logs: dict[tuple[str, str], str] = {}
        self.failing_pods: set[str] = set()  # pods whose exec fails (a node away)
        self.start_as = "running"  # what a new ephemeral container does: runs, or ends at once (exit 1)
        self.leases: dict[str, list[dict]] = {}  # pod -> the leases its service holds (/faults, asked inside the pod)

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self.record])
        base = f"/api/v1/namespaces/{NS}/pods"
        app.router.add_get(base, self.list_pods)
        app.router.add_delete(base + "/{name}", self.delete_pod)
        app.router.add_get(base + "/{name}/exec", self.exec)
        app.router.add_get(base + "/{name}/log", self.log)
        app.router.add_patch(base + "/{name}/ephemeralcontainers", self.add_ephemeral)
        app.router.add_post(f"/apis/batch/v1/namespaces/{NS}/jobs", self.create_job)
        app.router.add_get(f"/apis/batch/v1/namespaces/{NS}/jobs", self.list_jobs)
        app.router.add_delete(f"/apis/batch/v1/namespaces/{NS}/jobs/{{name}}", self.delete_job)
        policies = f"/apis/networking.k8s.io/v1/namespaces/{NS}/networkpolicies"
        app.router.add_post(policies, self.create_policy)
        app.router.add_get(policies, self.list_policies)
        app.router.add_delete(policies + "/{name}", self.delete_policy)
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
                "status": {
                    "podIP": ip,
                    "phase": "Running",
                    "ephemeralContainerStatuses": [
                        {"name": n, "image": IMAGE, "imageID": "", "ready": False, "restartCount": 0, **st}
                        for n, st in self.ephemeral.get(name, {}).items()
                    ],
                },
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

    async def add_ephemeral(self, request: web.Request) -> web.Response:
        assert request.content_type == "application/strategic-merge-patch+json"  # adds; never replaces the others
        pod = request.match_info["name"]
        for spec in (await request.json())["spec"]["ephemeralContainers"]:
            if self.start_as == "running" or spec["name"].endswith(kb.REAPED):
                state = {"running": {"startedAt": "2026-12-02T05:00:00Z"}}
            else:
                state = {"terminated": {"exitCode": 1, "finishedAt": "2026-12-02T05:00:00Z"}}
            if spec["name"].endswith(kb.REAPED):  # a reaper runs to its end at once
                state = {"terminated": {"exitCode": 0, "finishedAt": "2026-12-02T05:00:00Z"}}
            self.ephemeral.setdefault(pod, {})[spec["name"]] = {"state": state}
        return web.json_response({"kind": "Pod", "apiVersion": "v1", "metadata": {"name": pod, "namespace": NS}})

    def end(self, pod: str, name: str, exit_code: int, log: str = "", finished: float | None = None) -> None:
        """The chaos container's shell ends (its lease, a halt, or killed with its rules in)."""
        stamp = datetime.datetime.fromtimestamp(finished or time.time(), datetime.UTC).isoformat()
        self.ephemeral[pod][name] = {"state": {"terminated": {"exitCode": exit_code, "finishedAt": stamp}}}
        self.logs[(pod, name)] = log

    async def log(self, request: web.Request) -> web.Response:
        return web.Response(text=self.logs.get((request.match_info["name"], request.query["container"]), ""))

    async def create_job(self, request: web.Request) -> web.Response:
        job = await request.json()
        name = job["metadata"]["generateName"] + f"x{len(self.jobs)}"
        job["metadata"] |= {"name": name, "uid": f"uid-{len(self.jobs)}"}
        self.jobs[name] = job
        return web.json_response(job, status=201)

    @staticmethod
    def ours(request: web.Request, items: Any, kind: str, api: str) -> web.Response:
        """A list the lab's label selector asked for: the lab's objects only."""
        assert request.query["labelSelector"] == SELECTOR
        mine = [x for x in items if x["metadata"]["labels"].get(kb.LAB) == "stormlab"]
        return web.json_response({"kind": kind, "apiVersion": api, "metadata": {}, "items": mine})

    async def list_jobs(self, request: web.Request) -> web.Response:
        return self.ours(request, self.jobs.values(), "JobList", "batch/v1")

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

    async def list_policies(self, request: web.Request) -> web.Response:
        return self.ours(request, self.policies.values(), "NetworkPolicyList", "networking.k8s.io/v1")

    async def delete_policy(self, request: web.Request) -> web.Response:
        del self.policies[request.match_info["name"]]
        return web.json_response({"kind": "Status", "status": "Success"})

    async def exec(self, request: web.Request) -> web.StreamResponse:
        pod, argv, container = request.match_info["name"], request.query.getall("command"), request.query.get("container", "")
        ws = web.WebSocketResponse(protocols=("v4.channel.k8s.io",))
        await ws.prepare(request)
        out = ""
        if pod in self.failing_pods:
            await ws.send_bytes(b"\x03" + json.dumps({"status": "Failure", "message": "the node is away"}).encode())
            await ws.close()
            return ws
        if container.startswith(kb.CHAOS):  # a fault shell's own ephemeral container (pid 7)
            fault = container.removeprefix(kb.CHAOS).rsplit("-", 1)[0]
            if tuple(argv) == fs.LIST:
                out = (
                    f"7 {fault} {int(time.time() + 20)} held 12\n"  # whole seconds cut, as `date +%s` writes them (rounding could say 21 s)
                )
            elif tuple(argv) == fs.HALT:
                self.end(pod, container, 0, f"{fault} {time.time():.0f} 12\n")
                out = "1\n"
        elif tuple(argv[:3]) == fs.ask_holder("GET")[:3]:  # a holder's service, asked inside its pod
            held = self.leases.get(pod, [])
            if argv[3] == "DELETE":
                self.leases[pod] = []
            out = json.dumps({"ok": True, "body": {"halted": len(held)} if argv[3] == "DELETE" else {"faults": held, "ended": []}}) + "\n"
        elif tuple(argv) == fs.LIST:
            out = "".join(f"{pid} freeze {int(time.time() + 20)} held -\n" for p, pid in self.paused.items() if p == pod)
        elif tuple(argv) == fs.HALT:
            out = f"{int(self.paused.pop(pod, 0) > 0)}\n"
        elif "kill -STOP $p" in argv[-1]:  # the detached shell holding a freeze
            self.paused[pod] = 4242
        await ws.send_bytes(b"\x01" + out.encode())
        await ws.send_bytes(b"\x03" + json.dumps({"status": "Success"}).encode())
        await ws.close()
        return ws


@pytest.fixture
def api() -> Iterator[tuple[FakeApiServer, KubeRunner]]:
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
        yield fake, KubeRunner(NS, client)
    finally:
        client.close()
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        loop.run_until_complete(runner.cleanup())
        loop.close()


def chaos(argv: list[str], runner: KubeRunner, capsys) -> tuple[int, str]:
    code = run(build_parser().parse_args(["chaos", "--backend", "k8s", *argv]), runner)
    return code, capsys.readouterr().out


def patched(fake: FakeApiServer) -> list[tuple[str, dict]]:
    """The ephemeral containers added: (pod, spec)."""
    return [
        (path.split("/")[-2], spec)
        for method, path, _, body in fake.made("PATCH")
        if path.endswith("/ephemeralcontainers")
        for spec in body["spec"]["ephemeralContainers"]
    ]


def test_a_blip_runs_the_fault_shell_in_an_ephemeral_container_of_each_rack_pod(api, capsys):
    fake, runner = api
    code, out = chaos(["blip", "--rack-set", "0,2", "--duration", "5s"], runner, capsys)
    assert code == 0 and "blip on rack-0, rack-2 for 5s: it reverts by itself" in out
    added = patched(fake)
    assert [pod for pod, _ in added] == ["rack-0", "rack-2"]
    for pod, spec in added:
        assert spec["name"].startswith("stormlab-chaos-blip-") and spec["image"] == IMAGE  # the pod's own image
        assert spec["targetContainerName"] == "rack"  # the rack's namespaces: its network, its processes
        assert spec["securityContext"] == {"runAsUser": 0, "runAsNonRoot": False, "capabilities": {"add": ["NET_ADMIN"]}}
        # the docker backend's shell, cutting the pod off from the metadata pod's own address, both ways
        assert tuple(spec["command"]) == fs.partition(pod, ["10.1.0.2"], 5.0, "both", "blip")[0].argv
    # confirmed: the listing in each new container says its shell holds the blip
    confirmed = [(p, q["container"]) for m, p, q, _ in fake.requests if p.endswith("/exec") and q.get("command") == list(fs.LIST)]
    assert sorted(confirmed) == sorted((f"/api/v1/namespaces/{NS}/pods/{pod}/exec", [spec["name"]]) for pod, spec in added)
    assert fake.jobs == {} and fake.policies == {}  # no NetworkPolicy unless asked for


def test_a_blip_of_one_cell_cuts_that_cells_racks_off_from_every_cells_metadata_pod(api, capsys, monkeypatch):
    """Two cells on the cluster (4 racks: cell 0 has racks 0-1, cell 1 racks 2-3): `blip --cell 1`
    is racks 2 and 3, each cut off from both cells' metadata pods (it talks to its own)."""
    fake, runner = api
    fake.pods["metadata-cell-0"] = "metadata-cell"
    monkeypatch.setenv("STORMLAB_CELLS", "2")
    code, out = chaos(["blip", "--cell", "1", "--duration", "5s"], runner, capsys)
    assert code == 0 and "blip on rack-2, rack-3 for 5s: it reverts by itself" in out
    added = patched(fake)
    assert [pod for pod, _ in added] == ["rack-2", "rack-3"]
    for pod, spec in added:
        assert tuple(spec["command"]) == fs.partition(pod, ["10.1.0.2", "10.1.0.3"], 5.0, "both", "blip")[0].argv
    before = len(fake.requests)
    with pytest.raises(ChaosError, match=r"this lab has no cell 2 \(cells: 2\)"):
        chaos(["blip", "--cell", "2", "--duration", "5s"], runner, capsys)
    with pytest.raises(ChaosError, match="give it or the racks, not both"):
        chaos(["blip", "--cell", "1", "--rack-set", "0,", "--duration", "5s"], runner, capsys)
    assert not [r for r in fake.requests[before:] if r[0] != "GET"]  # refused: nothing asked of the cluster but its pods


def test_a_one_way_partition_drops_only_the_racks_egress_in_the_pod(api, capsys):
    fake, runner = api
    code, _ = chaos(["partition", "--between", "racks:3", "metadata", "--one-way", "--duration", "1m"], runner, capsys)
    assert code == 0
    [(pod, spec)] = patched(fake)
    assert pod == "rack-3" and tuple(spec["command"]) == fs.partition("rack-3", ["10.1.0.2"], 60.0, "out", "partition")[0].argv


def test_isolate_cuts_a_service_pod_off_from_the_chosen_racks_in_its_own_namespace(api, capsys):
    fake, runner = api
    code, _ = chaos(["isolate", "--target", "queues", "--rack-set", "1,3", "--duration", "30s"], runner, capsys)
    assert code == 0
    [(pod, spec)] = patched(fake)
    assert pod == "queues-0" and spec["targetContainerName"] == "queues"
    assert tuple(spec["command"]) == fs.partition("queues-0", ["10.1.1.1", "10.1.1.3"], 30.0, "both", "isolate")[0].argv


def test_latency_and_loss_are_netem_in_the_pod_now_that_the_shell_runs_as_root_there(api, capsys):
    fake, runner = api
    chaos(["latency", "--rack-set", "1,", "--delay", "100ms", "--duration", "5s"], runner, capsys)
    chaos(["loss", "--rack-set", "2,", "--probability", "0.25", "--duration", "5s"], runner, capsys)
    [(_, delayed), (_, lost)] = patched(fake)
    assert tuple(delayed["command"]) == fs.latency("rack-1", 100.0, 0.0, 5.0)[0].argv
    assert tuple(lost["command"]) == fs.loss("rack-2", 0.25, 5.0)[0].argv


def test_a_shell_whose_rules_did_not_go_in_is_reported_not_applied(api, capsys):
    from chaos.docker_cli import NotApplied

    fake, runner = api
    fake.start_as = "terminated"  # iptables refused: the shell exits 1 and its container ends
    with pytest.raises(NotApplied, match="blip did not apply in rack-1"):
        chaos(["blip", "--rack-set", "1,", "--duration", "5s"], runner, capsys)


@pytest.fixture
def policies(monkeypatch):
    monkeypatch.setenv("STORMLAB_K8S_NETWORK_FAULTS", "networkpolicy")


def test_asked_for_a_blip_is_a_lease_job_owning_a_policy_that_names_the_lab(api, capsys, policies):
    fake, runner = api
    code, out = chaos(["blip", "--rack-set", "0,2", "--duration", "5s"], runner, capsys)
    assert code == 0 and "blip on rack-0, rack-2 for 5s: it reverts by itself" in out
    [(_, job_path, _, job), (_, policy_path, _, policy)] = fake.made()
    assert job_path == f"/apis/batch/v1/namespaces/{NS}/jobs"
    assert job["spec"]["activeDeadlineSeconds"] == 5 and job["spec"]["ttlSecondsAfterFinished"] == 0  # the lease's end
    assert job["metadata"]["labels"] == {kb.PART_OF: "stormlab", kb.LAB: "stormlab", kb.LEASE: "true", kb.FAULT: "blip"}
    assert job["metadata"]["annotations"][kb.TARGETS] == "rack-0,rack-2"
    assert job["spec"]["template"]["spec"]["containers"][0]["image"] == IMAGE  # the lab's own image, read from the pod
    assert policy_path == f"/apis/networking.k8s.io/v1/namespaces/{NS}/networkpolicies"
    assert policy["metadata"]["labels"][kb.LAB] == "stormlab"
    assert policy["metadata"]["ownerReferences"] == [
        {"apiVersion": "batch/v1", "kind": "Job", "name": "stormlab-chaos-blip-x0", "uid": "uid-0", "blockOwnerDeletion": False}
    ]
    spec = policy["spec"]
    assert spec["podSelector"] == {"matchExpressions": [{"key": kb.POD_NAME, "operator": "In", "values": ["rack-0", "rack-2"]}]}
    assert spec["policyTypes"] == ["Ingress", "Egress"]
    allowed = [
        {
            "podSelector": {"matchExpressions": [{"key": kb.NAME, "operator": "NotIn", "values": ["metadata", "metadata-cell"]}]}
        },  # every cell's
        {"namespaceSelector": {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": [NS]}]}},
    ]
    assert spec["egress"] == [{"to": allowed}] and spec["ingress"] == [{"from": allowed}]


def test_asked_for_a_one_way_policy_drops_only_the_racks_egress(api, capsys, policies):
    fake, runner = api
    code, _ = chaos(["partition", "--between", "racks:3", "metadata", "--one-way", "--duration", "1m"], runner, capsys)
    assert code == 0
    [(_, _, _, job), (_, _, _, policy)] = fake.made()
    assert job["spec"]["activeDeadlineSeconds"] == 60
    assert policy["spec"]["policyTypes"] == ["Egress"] and "ingress" not in policy["spec"]
    assert policy["spec"]["podSelector"]["matchExpressions"][0]["values"] == ["rack-3"]


def test_asked_for_an_isolate_policy_cuts_a_service_pod_off_from_the_chosen_racks(api, capsys, policies):
    fake, runner = api
    code, _ = chaos(["isolate", "--target", "queues", "--rack-set", "1,3", "--duration", "30s"], runner, capsys)
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


def test_list_and_halt_cover_every_kind_of_fault_the_lab_holds_and_nobody_elses(api, capsys, monkeypatch):
    fake, runner = api
    chaos(["blip", "--rack-set", "3,", "--duration", "20s"], runner, capsys)  # a shell in an ephemeral container
    chaos(["freeze", "--target", "queues", "--duration", "20s"], runner, capsys)  # a shell exec'd in the pod
    monkeypatch.setenv("STORMLAB_K8S_NETWORK_FAULTS", "networkpolicy")
    chaos(["blip", "--rack-set", "1,", "--duration", "20s"], runner, capsys)  # a lease Job and its policy
    foreign = {"metadata": {"name": "payments-chaos", "labels": {kb.PART_OF: "stormlab", kb.LEASE: "true", kb.LAB: "payments"}}}
    fake.jobs["payments-chaos"] = foreign  # another lab's lease in the same namespace
    [(_, blip)] = patched(fake)
    fake.leases["metadata-7d9f-abcde"] = [{"id": 3, "fault": "pause-metadata", "target": "metadata", "left_s": 30.0}]
    code, out = chaos(["list"], runner, capsys)
    assert code == 0
    assert "metadata-7d9f-abcde#3 pause-metadata on metadata: 30.0s left" in out  # held by the service, asked inside its pod
    assert re.search(r"stormlab-chaos-blip-x0 blip on rack-1: (19|20)s left", out), out
    assert re.search(r"rack-3 \(pid 7\) blip: (19|20)s left \(dropped 12 packets so far\)", out), out
    assert re.search(r"queues-0 \(pid 4242\) freeze: (19|20)s left", out), out
    assert "payments" not in out
    code, out = chaos(["halt"], runner, capsys)
    assert code == 0 and "halted 4 fault(s)" in out
    assert fake.policies == {} and fake.paused == {} and list(fake.jobs) == ["payments-chaos"]  # theirs untouched
    assert fake.leases["metadata-7d9f-abcde"] == []
    assert fake.ephemeral["rack-3"][blip["name"]]["state"]["terminated"]["exitCode"] == 0  # its shell reverted
    [(_, path, query, _)] = [r for r in fake.made("DELETE") if "/jobs/" in r[1]]
    assert path.endswith("/jobs/stormlab-chaos-blip-x0") and query.get("propagationPolicy", ["Background"]) == ["Background"]


def test_a_shell_killed_with_its_rules_in_is_reaped_and_one_that_did_nothing_says_so(api, capsys):
    fake, runner = api
    chaos(["blip", "--rack-set", "0,2", "--duration", "20s"], runner, capsys)
    [(_, spec), _] = patched(fake)
    fake.end("rack-0", spec["name"], 137)  # SIGKILLed: its rules may still be in the pod
    fake.end("rack-2", spec["name"], 0, f"blip {time.time() - 5:.0f} 0\n", finished=time.time() - 5)  # it met no traffic
    code, out = chaos(["list"], runner, capsys)
    assert code == 0
    assert "rack-0 (pid 0) blip: its holder was gone: reverted now" in out
    assert re.search(r"rack-2 \(pid 0\) blip ended [456]s ago: NO EFFECT", out), out  # 5 s ago, its end written in whole seconds
    [(pod, reaper)] = [(p, s) for p, s in patched(fake) if s["name"].endswith(kb.REAPED)]
    assert pod == "rack-0" and reaper["name"] == spec["name"] + kb.REAPED and tuple(reaper["command"]) == fs.REAP
    chaos(["list"], runner, capsys)
    assert len([s for _, s in patched(fake) if s["name"].endswith(kb.REAPED)]) == 1  # reaped once
    code, out = chaos(["list", "--json"], runner, capsys)
    [ended] = [s for s in json.loads(out)["shells"] if s["state"] == "ended"]
    assert (ended["container"], ended["effect"], ended["no_effect"]) == ("rack-2", {"dropped_packets": 0}, True)


def test_a_bad_annotation_an_orphan_policy_and_a_failing_pod_stop_neither_list_nor_halt(api, capsys, monkeypatch):
    from stormcore.errors import LabError

    fake, runner = api
    monkeypatch.setenv("STORMLAB_K8S_NETWORK_FAULTS", "networkpolicy")
    chaos(["blip", "--rack-set", "1,", "--duration", "20s"], runner, capsys)
    chaos(["isolate", "--target", "queues", "--rack-set", "2,", "--duration", "20s"], runner, capsys)
    fake.jobs["stormlab-chaos-blip-x0"]["metadata"]["annotations"][kb.ENDS_AT] = "soon"  # not a time
    del fake.jobs["stormlab-chaos-isolate-x1"]  # its Job went; its policy stayed (no garbage collector here)
    code, out = chaos(["list"], runner, capsys)
    assert "stormlab-chaos-blip-x0 blip on rack-1: its ends-at annotation is unreadable" in out
    assert re.search(r"networkpolicy stormlab-chaos-isolate-\d+: its lease Job was gone: deleted now", out), out
    assert [p["metadata"]["labels"][kb.FAULT] for p in fake.policies.values()] == ["blip"]
    monkeypatch.delenv("STORMLAB_K8S_NETWORK_FAULTS")
    chaos(["blip", "--rack-set", "0,3", "--duration", "20s"], runner, capsys)  # shells in two pods
    fake.failing_pods.add("rack-0")  # its node is away: its exec fails
    with pytest.raises(LabError, match="did not answer; the others were halted"):
        chaos(["halt"], runner, capsys)
    out, err = capsys.readouterr()
    assert "rack-0:" in err and "halted 2 fault(s)" in out  # rack-3's shell and the blip's Job
    assert fake.jobs == {} and fake.policies == {}


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["kill", "--target", "rack-9", "--duration", "5s"], "not a pod of the lab"),
        (["blip", "--rack-set", "7", "--duration", "5s"], "the lab has 4 racks"),
        (["gsi-growth", "--factor", "2", "--duration", "5s"], "STORMLAB_METADATA_URL.*port-forward"),
        (["blip", "--rack-set", "2,9", "--duration", "5s"], "rack"),
    ],
)
def test_what_the_backend_cannot_do_is_refused_before_any_request(api, argv, says, capsys):
    fake, runner = api
    with pytest.raises(ChaosError, match=says):
        chaos(argv, runner, capsys)
    assert fake.made() == []


def test_dry_run_prints_the_requests_and_sends_none(api, capsys, monkeypatch):
    fake, runner = api
    code, out = chaos(["blip", "--rack-set", "1,", "--duration", "5s", "--dry-run"], runner, capsys)
    assert code == 0 and fake.made() == []
    assert out.startswith(f"PATCH /api/v1/namespaces/{NS}/pods/rack-1/ephemeralcontainers ")
    monkeypatch.setenv("STORMLAB_K8S_NETWORK_FAULTS", "networkpolicy")
    code, out = chaos(["blip", "--rack-set", "1", "--duration", "5s", "--dry-run"], runner, capsys)
    assert out.startswith(f"POST /apis/batch/v1/namespaces/{NS}/jobs ")
    assert f"POST /apis/networking.k8s.io/v1/namespaces/{NS}/networkpolicies " in out and fake.made() == []


def test_policies_cannot_hold_netem_and_an_unknown_way_is_refused(api, capsys, monkeypatch):
    fake, runner = api
    monkeypatch.setenv("STORMLAB_K8S_NETWORK_FAULTS", "networkpolicy")
    with pytest.raises(ChaosError, match="latency needs netem in the pod"):
        chaos(["latency", "--rack-set", "1", "--delay", "100ms", "--duration", "5s"], runner, capsys)
    monkeypatch.setenv("STORMLAB_K8S_NETWORK_FAULTS", "iptables")
    with pytest.raises(ChaosError, match="must be ephemeral or networkpolicy"):
        chaos(["blip", "--rack-set", "1", "--duration", "5s"], runner, capsys)
    assert fake.made() == []


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
    assert kb.leases_in(jobs) == [kb.FaultLease("j", "blip", "rack-0", 12.0)]
    jobs["items"].append({"metadata": {"name": "k", "annotations": {kb.ENDS_AT: "x"}}})  # unreadable: listed, not a crash
    assert kb.leases_in(jobs)[1] == kb.FaultLease("k", "?", "", None)
    assert kb.leases_in({"items": [{"metadata": {"name": "j", "deletionTimestamp": "x"}}]}) == []


def test_metadata_faults_go_to_the_metadata_service_s_api_not_the_cluster(api, capsys, monkeypatch):
    fake, runner = api
    monkeypatch.setenv("STORMLAB_METADATA_URL", "http://metadata.example:8700")
    code, out = chaos(["gsi-growth", "--duration", "30s", "--dry-run"], runner, capsys)
    assert code == 0 and out.startswith('POST http://metadata.example:8700/faults {"fault": "gsi-growth"')
    code, out = chaos(["stuck-partition", "--duration", "1m", "--dry-run"], runner, capsys)
    assert code == 0 and out.startswith('POST http://metadata.example:8700/faults {"fault": "stuck-partition"')
    assert fake.requests == []  # nothing asked of the Kubernetes API
