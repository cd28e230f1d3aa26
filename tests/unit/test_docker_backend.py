"""The docker backend's commands, asserted exactly with an injected runner (no Docker needed)."""

import json
import re
import time
from types import SimpleNamespace

import pytest

from chaos import client
from chaos import docker_backend as db
from chaos import fault_shell as fs
from chaos.catalog import ChaosError
from stormcore.errors import LabError
from stormcore.racks import cell_holders


class FakeRunner:
    def __init__(self, labels):
        self._labels, self.ran = labels, []

    def labels(self, container):
        return self._labels.get(container, {})

    def exec(self, command):
        self.ran.append(command)
        return ""


OURS = {db.PROJECT_LABEL: "stormlab"}


def script(execs):
    [cmd] = execs
    assert cmd.detach and cmd.argv[:2] == ("sh", "-c")
    return cmd.argv[2]


def test_partition_applies_each_rule_and_arms_its_revert_in_one_shell():
    text = script(fs.partition("stormlab-rack-3", ["172.20.0.2"], 5))
    tag = "-m comment --comment stormlab-$$ -j DROP"  # the shell's own rules, by its pid
    applied = [f"iptables -w -I OUTPUT -d 172.20.0.2 {tag}", f"iptables -w -I INPUT -s 172.20.0.2 {tag}"]
    undone = [f"iptables -w -D INPUT -s 172.20.0.2 {tag}", f"iptables -w -D OUTPUT -d 172.20.0.2 {tag}"]
    assert all(f"if ! {a}; then" in text for a in applied)
    assert f"{undone[0]}; {undone[1]}; rm -f $f; }}" in text
    assert "sleep 5 & wait $!" in text and fs.FAULT_FILE in text
    # what it dropped: the packets its own rules counted, read while it holds and once more as it ends
    assert 'count() { iptables -w -L -v -x -n | awk -v c="/* stormlab-$$ */"' in text
    assert 'undo() { n="$(count 2>/dev/null)"; printf' in text


def test_one_way_partition_drops_only_outgoing_traffic():
    text = script(fs.partition("r", ["10.0.0.9"], 2.5, direction="out"))
    assert "iptables -w -I OUTPUT -d 10.0.0.9 -m comment" in text and "INPUT" not in text and "sleep 2.5" in text


def test_latency_loss_freeze_kill_commands():
    delayed = script(fs.latency("m", 200, 50, 10))
    assert "if ! tc qdisc add dev eth0 root netem delay 200ms 50ms; then exit 1; fi" in delayed
    assert "count() { tc -s qdisc show dev eth0 | awk '/netem/ {on = 1} on && /Sent/ {print $4 + 0; exit}'; }" in delayed  # packets held
    lost = script(fs.loss("m", 0.2, 3))
    assert "netem loss 20%" in lost and "{print $7 + 0; exit}" in lost  # the qdisc's drops
    # the service is docker-init's child (init: true): a namespace's PID 1 ignores signals from inside
    frozen = script(fs.freeze("m", 4))
    assert "if ! p=$(pgrep -o -P 1); then exit 1; fi; if ! kill -STOP $p; then exit 1; fi" in frozen
    assert "kill -CONT $p; rm -f $f; }" in frozen and "count() { :; }" in frozen  # nothing to count
    assert fs.kill("m") == [fs.Exec("m", ("sh", "-c", "p=$(pgrep -o -P 1) && kill -KILL $p"))]


def test_runner_runs_only_on_the_labs_containers():
    runner = FakeRunner({"stormlab-rack-1": OURS, "someone-elses-db": {db.PROJECT_LABEL: "payments"}})
    db.run(runner, fs.freeze("stormlab-rack-1", 3))
    assert [c.container for c in runner.ran] == ["stormlab-rack-1"]
    for other in ("someone-elses-db", "no-such-container"):
        with pytest.raises(db.NotOurs):
            db.run(runner, fs.kill(other))
    assert len(runner.ran) == 1


def test_bad_requests_are_refused_when_built():
    with pytest.raises(ValueError):
        fs.partition("r", ["10.0.0.1"], 1, direction="sideways")
    with pytest.raises(ValueError):
        fs.partition("r", [], 1)


class FakeCompose(FakeRunner):
    """Four containers of the project; each fault shell it runs is held until halted."""

    def __init__(self):
        names = ["stormlab_metadata_1", "stormlab_queues_1"] + [f"stormlab_rack-{i}_1" for i in range(4)]
        super().__init__({n: OURS for n in names})
        self.holding = {}
        self.leases = {}  # a service container -> the leases its service holds (/faults)
        self.silent = set()  # service containers whose service does not answer

    def exec(self, command):
        if command.argv[:2] == ("python", "-c") and command.argv[2] == fs.ask_holder("GET")[2]:
            if command.container in self.silent:
                return json.dumps({"ok": False, "error": "URLError: <urlopen error [Errno 111] Connection refused>"}) + "\n"
            held = self.leases.get(command.container, [])
            if command.argv[3] == "DELETE":
                self.leases[command.container] = []
                return json.dumps({"ok": True, "body": {"halted": len(held)}}) + "\n"
            return json.dumps({"ok": True, "body": {"faults": held, "ended": []}}) + "\n"
        if command.argv == fs.LIST:
            return "".join(f"{pid} {fault} 9999999999 held 0\n" for pid, (c, fault) in self.holding.items() if c == command.container)
        if command.argv == fs.HALT:
            ours = [pid for pid, (c, _) in self.holding.items() if c == command.container]
            for pid in ours:
                del self.holding[pid]
            return f"{len(ours)}\n"
        self.ran.append(command)
        if "stormlab-fault" in command.argv[2]:
            fault = re.search(r"printf '%s\\n' \"(\S+) ", command.argv[2]).group(1)
            self.holding[100 + len(self.ran)] = (command.container, fault)
        return ""

    def containers(self, service):
        return sorted(n for n in self._labels if n.startswith(f"stormlab_{service}_"))

    def racks(self):
        return {int(n.split("-")[1].split("_")[0]): n for n in self._labels if "_rack-" in n}

    def ip(self, container):
        rack = self.racks()
        by_rack = {name: f"172.30.1.{r}" for r, name in rack.items()}
        return by_rack.get(container, "172.30.0.2" if "metadata" in container else "172.30.2.1")


def chaos(argv, runner, capsys):
    from chaos.cli import run
    from stormlab.cli import build_parser

    code = run(build_parser().parse_args(["chaos", "--backend", "docker", *argv]), runner)
    return code, capsys.readouterr().out


def test_cli_on_the_docker_backend_runs_the_built_commands(capsys):
    runner = FakeCompose()
    code, out = chaos(["blip", "--rack-set", "2", "--duration", "5s"], runner, capsys)
    assert code == 0 and [c.container for c in runner.ran] == ["stormlab_rack-0_1", "stormlab_rack-1_1"]
    assert runner.ran[0] == fs.partition("stormlab_rack-0_1", ["172.30.0.2"], 5.0, fault="blip")[0]
    code, out = chaos(["partition", "--between", "racks:2", "metadata", "--one-way", "--duration", "1s", "--dry-run"], runner, capsys)
    assert out.startswith("docker exec -d --user root stormlab_rack-2_1 sh -c ") and "-I OUTPUT -d 172.30.0.2" in out
    assert len(runner.ran) == 2  # dry run changed nothing
    chaos(["freeze", "--target", "metadata", "--duration", "2s"], runner, capsys)
    assert runner.ran[-1] == fs.freeze("stormlab_metadata_1", 2.0)[0]


def test_cli_on_the_docker_backend_refuses_what_is_not_the_labs(capsys):
    from chaos.cli import ChaosError

    runner = FakeCompose()
    for argv in (
        ["kill", "--target", "rack-9", "--duration", "1s"],
        ["kill", "--target", "rack-x", "--duration", "1s"],
        ["freeze", "--target", "db-0", "--duration", "1s"],
        ["blip", "--rack-set", "7", "--duration", "1s"],
        ["loss", "--rack-set", "1", "--probability", "2", "--duration", "1s"],
        ["blip", "--duration", "0s"],
    ):
        with pytest.raises(ChaosError):
            chaos(argv, runner, capsys)
    assert runner.ran == []


def test_docker_list_and_halt_find_the_fault_shells_by_their_files(capsys, monkeypatch):
    monkeypatch.delenv("STORMLAB_METADATA_URL", raising=False)
    monkeypatch.setenv("STORMLAB_TOKEN", "t")
    runner = FakeCompose()
    chaos(["blip", "--rack-set", "2", "--duration", "30s"], runner, capsys)
    chaos(["freeze", "--target", "rack-3", "--duration", "30s"], runner, capsys)
    _, out = chaos(["list"], runner, capsys)
    assert out.count("blip") == 2 and "stormlab_rack-3_1" in out and "freeze" in out
    _, out = chaos(["halt"], runner, capsys)
    assert out.strip() == "halted 3 fault(s)" and runner.holding == {}
    _, out = chaos(["list"], runner, capsys)
    assert out.strip() == "no active faults"


def test_from_the_host_list_and_halt_ask_each_holding_service_inside_its_container(capsys, monkeypatch):
    # no STORMLAB_<NAME>_URL: the host's view of a stack (a swarm publishes none of the services' ports)
    for name in ("METADATA", "QUEUES", "SCALING", "CONSOLE", "METRICS"):
        monkeypatch.delenv(f"STORMLAB_{name}_URL", raising=False)
    monkeypatch.setenv("STORMLAB_TOKEN", "t")
    runner = FakeCompose()
    pause = {"id": 2, "fault": "pause-metadata", "target": "metadata", "left_s": 280.0}
    fix = {"id": 1, "fault": "stale-cache", "target": "queues", "left_s": 60.0}
    runner.leases = {"stormlab_metadata_1": [pause], "stormlab_queues_1": [fix]}
    chaos(["blip", "--rack-set", "1", "--duration", "30s"], runner, capsys)
    _, out = chaos(["list"], runner, capsys)
    assert "stormlab_metadata_1#2 pause-metadata on metadata: 280.0s left" in out
    assert "stormlab_queues_1#1 stale-cache on queues: 60.0s left" in out and "blip" in out
    _, out = chaos(["halt"], runner, capsys)
    assert out.strip() == "halted 3 fault(s)"  # the two services' leases and the rack's shell
    assert runner.leases == {"stormlab_metadata_1": [], "stormlab_queues_1": []} and runner.holding == {}
    _, out = chaos(["list"], runner, capsys)
    assert out.strip() == "no active faults"
    # a service that does not answer is named, and the halt fails (exit 1), the others halted all the same
    runner.leases["stormlab_queues_1"] = [fix]
    runner.silent = {"stormlab_metadata_1"}
    with pytest.raises(LabError, match="1 holder"):
        chaos(["halt"], runner, capsys)
    said = capsys.readouterr()
    assert "halted 1 fault(s)" in said.out and "stormlab_metadata_1: its service did not answer: URLError" in said.err
    assert runner.leases["stormlab_queues_1"] == []


def test_a_holder_s_answer_from_inside_its_container():
    assert fs.parse_answer("c", '{"ok": true, "body": {"halted": 2}}\n') == {"halted": 2}
    for printed in ("", "Traceback (most recent call last):", '{"ok": false, "error": "timed out"}', '{"ok": true, "body": 3}'):
        with pytest.raises(LookupError, match="^c: "):
            fs.parse_answer("c", printed)
    assert fs.ask_holder("DELETE")[-1] == "DELETE"
    with pytest.raises(ValueError):
        fs.ask_holder("POST")


def test_a_fault_that_did_not_apply_is_reported(capsys, monkeypatch):
    from chaos import docker_cli
    from stormlab.engine.launcher import LabError

    runner = FakeCompose()
    runner.holding = None  # a shell that never writes its fault file
    monkeypatch.setattr(runner, "exec", lambda command: "")
    monkeypatch.setattr(docker_cli.time, "sleep", lambda s: None)
    with pytest.raises(LabError, match="did not apply in stormlab_rack-0_1"):
        chaos(["blip", "--rack-set", "1", "--duration", "5s"], runner, capsys)


def test_isolate_cuts_a_service_container_off_from_the_racks_and_services_are_targets(capsys, monkeypatch):
    monkeypatch.delenv("STORMLAB_METADATA_URL", raising=False)
    monkeypatch.setenv("STORMLAB_TOKEN", "t")
    runner = FakeCompose()
    code, _ = chaos(["isolate", "--target", "queues", "--rack-set", "0,2", "--duration", "5s"], runner, capsys)
    assert code == 0 and runner.ran == fs.partition("stormlab_queues_1", ["172.30.1.0", "172.30.1.2"], 5.0, fault="isolate")
    chaos(["isolate", "--target", "queues", "--duration", "3s"], runner, capsys)  # every rack by default
    assert runner.ran[-1] == fs.partition("stormlab_queues_1", [f"172.30.1.{r}" for r in range(4)], 3.0, fault="isolate")[0]
    chaos(["kill", "--target", "queues", "--duration", "2s"], runner, capsys)
    assert runner.ran[-1] == fs.kill("stormlab_queues_1")[0]
    _, out = chaos(["list"], runner, capsys)  # a service's container is among those listed and halted
    assert out.count("stormlab_queues_1") == 2 and "isolate" in out
    _, out = chaos(["halt"], runner, capsys)
    assert out.strip() == "halted 2 fault(s)" and runner.holding == {}


@pytest.mark.parametrize(
    ("labels", "rack"),
    [
        ({"com.docker.compose.service": "rack", "com.docker.compose.container-number": "1"}, 0),
        ({"com.docker.compose.service": "rack", "com.docker.compose.container-number": "10"}, 9),
        ({"com.docker.compose.service": "rack", "com.docker.compose.container-number": "0"}, None),
        ({"com.docker.compose.service": "loadgen", "com.docker.compose.container-number": "1"}, None),
        ({"com.docker.compose.service": "rack"}, None),
        ({}, None),
        ({"com.docker.swarm.service.name": "stormlab_rack", "com.docker.swarm.task.name": "stormlab_rack.4.k2j3h4"}, 3),
        ({"com.docker.swarm.service.name": "stormlab_rack", "com.docker.swarm.task.name": "stormlab_rack.0.k2j3h4"}, None),
        ({"com.docker.swarm.service.name": "stormlab_loadgen", "com.docker.swarm.task.name": "stormlab_loadgen.1.x"}, None),
        ({"com.docker.swarm.service.name": "stormlab_rack", "com.docker.swarm.task.name": "other_rack.4.x"}, None),
    ],
)
def test_a_racks_replica_number_or_task_slot_is_its_rack_plus_one(labels, rack):
    assert db.rack_of(labels) == rack


def test_a_swarm_stacks_containers_are_the_labs_too():
    runner = FakeRunner({"stormlab_rack.1.x": {db.STACK_LABEL: "stormlab"}, "other_db.1.y": {db.STACK_LABEL: "payments"}})
    db.check_ours(runner, ["stormlab_rack.1.x"])
    with pytest.raises(db.NotOurs):
        db.check_ours(runner, ["other_db.1.y"])


def test_a_lease_only_the_local_supervisor_holds_is_refused_on_compose():
    runner = FakeCompose()
    with pytest.raises(db.NotOurs, match="held by the local lab's supervisor"):
        db.build({"fault": "deploy", "duration_s": 300.0, "retry_policy": "full-jitter"}, runner)
    compose = {"settings": {"STORMLAB_RACKS": "4"}, "components": {"metadata": {"url": "http://127.0.0.1:1"}}}  # no supervisor
    with pytest.raises(ChaosError, match="held by the local lab's supervisor.*stormlab up"):
        client.build(compose, "deploy", {"retry_policy": "full-jitter", "duration": "5m"})  # `ops deploy` on compose
    assert runner.ran == []


def test_a_blip_of_one_cell_on_compose_is_its_racks_cut_off_from_every_cells_service(capsys, monkeypatch):
    """Two cells (4 racks: cell 1 has racks 2 and 3): `blip --cell 1` runs in those two racks,
    each cut off from `metadata` and `metadata-cell`'s replicas (it talks to its own)."""
    runner = FakeCompose()
    runner._labels["stormlab_metadata-cell_1"] = OURS
    monkeypatch.setenv("STORMLAB_CELLS", "2")
    code, _ = chaos(["blip", "--cell", "1", "--duration", "5s"], runner, capsys)
    assert code == 0 and [c.container for c in runner.ran] == ["stormlab_rack-2_1", "stormlab_rack-3_1"]
    assert runner.ran[0] == fs.partition("stormlab_rack-2_1", ["172.30.0.2", "172.30.0.2"], 5.0, fault="blip")[0]  # both cells' addresses


def test_a_cells_metadata_service_is_a_holder_where_it_answers_and_said_unreachable_where_not():
    engine = {"settings": {"STORMLAB_RACKS": "10", "STORMLAB_CELLS": "4"}, "components": {"metadata": {"url": "http://127.0.0.1:1"}}}
    unreachable = r"cell 2's metadata service does not answer from here.*run --rm ops\|chaos pause-metadata --cell 2"
    with pytest.raises(ChaosError, match=unreachable):
        client.build(engine, "pause-metadata", {"duration": "1m", "cell": 2})  # from the host: not published
    with pytest.raises(ChaosError, match=r"this lab has no cell 4 \(cells: 4\)"):
        client.build(engine, "pause-metadata", {"duration": "1m", "cell": 4})
    # a port-forward (or the stack's network) names it: the fault goes there
    engine["components"] |= cell_holders({"STORMLAB_CELLS": "4", "STORMLAB_METADATA_2_URL": "http://127.0.0.1:9702"})
    url, req = client.build(engine, "pause-metadata", {"duration": "1m", "cell": 2})
    assert url == "http://127.0.0.1:9702" and req.fault.name == "pause-metadata"
    assert cell_holders({"STORMLAB_CELLS": "1", "STORMLAB_METADATA_2_URL": "http://x"}) == {}  # no cells, no cell 2


def test_the_listing_says_what_each_fault_shell_did_and_warns_of_one_that_did_nothing():
    from chaos.docker_cli import listing_of

    found = [
        fs.Held("rack-0", 11, "blip", 130.0, "held", 42),
        fs.Held("rack-1", 12, "partition", 100.0, "orphan", 0),
        fs.Held("rack-2", 13, "blip", 95.0, "ended", 0),  # cut nothing: a finding
        fs.Held("rack-3", 14, "blip", 96.0, "ended", 7),  # did its work: not repeated
        fs.Held("queues", 15, "freeze", 97.0, "ended", None),  # not counted: not judged
        fs.Held("rack-4", 16, "latency", 140.0, "held", 5),
    ]
    listed = listing_of(found, now=100.0)
    assert listed.active == [
        "rack-0 (pid 11) blip: 30s left (dropped 42 packets so far)",
        "rack-1 (pid 12) partition: its holder was gone: reverted now; NO EFFECT: it met no traffic to drop or hold back",
        "rack-4 (pid 16) latency: 40s left (delayed 5 packets so far)",
    ]
    assert listed.quiet == ["rack-2 (pid 13) blip ended 5s ago: NO EFFECT: it met no traffic to drop or hold back"]
    assert [s["state"] for s in listed.shells] == ["held", "orphan", "ended", "ended", "ended", "held"]


class OneContainerGone(FakeCompose):
    """The compose project with one container whose exec fails (gone, restarting)."""

    def exec(self, command):
        if command.container == "stormlab_rack-1_1" and command.argv in (fs.LIST, fs.HALT):
            raise RuntimeError("409 Client Error: container is restarting")
        return super().exec(command)


def test_a_container_that_fails_its_exec_is_reported_and_every_other_is_still_halted(capsys):
    from stormcore.errors import LabError

    runner = OneContainerGone()
    chaos(["blip", "--rack-set", "0,2,3", "--duration", "30s"], runner, capsys)
    assert len(runner.holding) == 3
    with pytest.raises(LabError, match="1 holder\\(s\\) or container\\(s\\) did not answer; the others were halted"):
        chaos(["halt"], runner, capsys)
    out, err = capsys.readouterr()
    assert "halted 3 fault(s)" in out and "stormlab_rack-1_1: 409 Client Error" in err
    assert runner.holding == {}
    with pytest.raises(LabError, match="the others were listed"):
        chaos(["list"], runner, capsys)


class QuietCompose(FakeCompose):
    """A project whose last fault shell ended having dropped nothing."""

    def exec(self, command):
        if command.argv == fs.LIST and command.container == "stormlab_rack-2_1":
            return f"77 blip {time.time() - 30:.0f} ended 0\n"
        return super().exec(command)


def test_a_listing_with_nothing_in_force_says_so_and_then_warns_of_a_fault_that_did_nothing(capsys):
    code, out = chaos(["list"], QuietCompose(), capsys)
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == "no active faults"
    assert re.match(r"stormlab_rack-2_1 \(pid 77\) blip ended (29|30|31)s ago: NO EFFECT", lines[1]), lines


# A swarm of three engines, faked: the manager knows where every task runs; each node's engine
# knows only its own containers. The runner must ask each container through the engine that runs it.
class FakeContainer:
    def __init__(self, name, labels, ip, engine):
        self.name, self.labels, self.engine = name, labels, engine
        self.attrs = {"NetworkSettings": {"Networks": {"ingress": {"IPAddress": "10.0.0.9"}, "stormlab_default": {"IPAddress": ip}}}}

    def exec_run(self, argv, detach, user):
        self.engine.ran.append((self.name, argv[0], user))
        return type("Result", (), {"output": b""})()


class FakeEngine:
    def __init__(self, node, swarm):
        self.node, self.swarm, self.by_id, self.ran = node, swarm, {}, []
        self.containers = SimpleNamespace(list=lambda filters: [], get=self.get)  # no compose project here
        self.services = SimpleNamespace(list=lambda filters: swarm["services"] if self.is_manager() else [])
        self.nodes = SimpleNamespace(get=lambda node: SimpleNamespace(attrs=swarm["nodes"][node]))

    def add(self, name, cid, labels, ip):
        self.by_id[cid] = self.by_id[name] = FakeContainer(name, labels, ip, self)

    def get(self, key):
        if key not in self.by_id:
            raise db.NOT_FOUND(key)
        return self.by_id[key]

    def is_manager(self):
        return self is self.swarm["manager"]

    def info(self):
        return {"Swarm": {"ControlAvailable": self.is_manager(), "NodeID": self.node}}


class FakeService:
    def __init__(self, name, tasks):
        self.name, self._tasks = name, tasks

    def tasks(self, filters):
        assert filters == {"desired-state": "running"}
        return self._tasks


def task(node, cid, state="running"):
    return {"NodeID": node, "DesiredState": "running", "Status": {"State": state, "ContainerStatus": {"ContainerID": cid}}}


def three_engines(labelled=True):
    swarm: dict = {}
    manager, w1, w2 = FakeEngine("n1", swarm), FakeEngine("n2", swarm), FakeEngine("n3", swarm)
    engines = {"tcp://10.9.0.3:2375": w1, "tcp://10.9.0.4:2375": w2}
    swarm["manager"] = manager
    swarm["nodes"] = {
        node: {"ID": node, "Description": {"Hostname": host}, "Spec": {"Labels": {db.ENGINE_LABEL: url} if labelled else {}}}
        for node, host, url in (("n2", "engine-2", "tcp://10.9.0.3:2375"), ("n3", "engine-3", "tcp://10.9.0.4:2375"))
    }
    racks = []
    for slot, (engine, node) in enumerate([(manager, "n1"), (w1, "n2"), (w2, "n3"), (w1, "n2")], start=1):
        name = f"stormlab_rack.{slot}.t{slot}"
        labels = {db.STACK_LABEL: "stormlab", "com.docker.swarm.service.name": "stormlab_rack", "com.docker.swarm.task.name": name}
        engine.add(name, f"c{slot}", labels, f"10.0.1.{10 + slot}")
        racks.append(task(node, f"c{slot}"))
    racks.append(task("n3", "gone", state="shutdown"))  # an old task: not a target
    manager.add("stormlab_metadata.1.m", "cm", {db.STACK_LABEL: "stormlab"}, "10.0.1.2")
    swarm["services"] = [FakeService("stormlab_rack", racks), FakeService("stormlab_metadata", [task("n1", "cm")])]
    connected = []

    def connect(url):
        connected.append(url)
        return engines[url]

    return db.SdkRunner("stormlab", client_factory=lambda: manager, engine_factory=connect), (manager, w1, w2), connected


def test_on_a_swarm_each_rack_is_found_and_blipped_through_the_engine_of_its_node():
    runner, (manager, w1, w2), connected = three_engines()
    assert runner.racks() == {0: "stormlab_rack.1.t1", 1: "stormlab_rack.2.t2", 2: "stormlab_rack.3.t3", 3: "stormlab_rack.4.t4"}
    assert sorted(connected) == ["tcp://10.9.0.3:2375", "tcp://10.9.0.4:2375"]  # each worker's engine once
    commands = db.build({"fault": "blip", "duration_s": 5.0, "racks": [1, 2], "direction": "both"}, runner)
    db.run(runner, commands, "stormlab")
    assert [c.container for c in commands] == ["stormlab_rack.2.t2", "stormlab_rack.3.t3"]
    assert "-d 10.0.1.2 " in commands[0].argv[2]  # the metadata task's address on the lab's network
    assert w1.ran == [("stormlab_rack.2.t2", "sh", "root")] and w2.ran == [("stormlab_rack.3.t3", "sh", "root")]
    assert manager.ran == []


def test_a_node_whose_engine_is_not_labelled_is_refused_with_how_to_label_it():
    runner, _, connected = three_engines(labelled=False)
    with pytest.raises(db.EngineUnknown, match=r"swarm node engine-2.*--label-add stormlab.engine=tcp://HOST:2375 engine-2"):
        runner.racks()
    assert connected == []


@pytest.mark.parametrize(
    ("tasks", "placed"),
    [
        ([task("n1", "a")], [("n1", "a")]),
        ([task("n1", "a", state="starting"), task("n2", "b", state="failed")], []),
        ([{**task("n1", "a"), "DesiredState": "shutdown"}], []),  # being stopped
        ([{"NodeID": "n1", "DesiredState": "running", "Status": {"State": "running"}}], []),  # no container yet
    ],
)
def test_only_running_tasks_with_a_container_are_targets(tasks, placed):
    assert db.running_on(tasks) == placed
