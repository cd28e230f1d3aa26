"""The docker backend's commands, asserted exactly with an injected runner (no Docker needed)."""
import pytest

from chaos import docker_backend as db


class FakeRunner:
    def __init__(self, labels):
        self._labels, self.ran = labels, []

    def labels(self, container):
        return self._labels.get(container, {})

    def exec(self, command):
        self.ran.append(command)


OURS = {db.PROJECT_LABEL: "stormlab"}


def test_partition_both_ways_applies_and_arms_its_revert_in_one_shell():
    [cmd] = db.partition("stormlab-rack-3", ["172.20.0.2"], 5)
    assert cmd == db.Exec("stormlab-rack-3", ("sh", "-c",
        "trap 'iptables -D OUTPUT -d 172.20.0.2 -j DROP; iptables -D INPUT -s 172.20.0.2 -j DROP' TERM INT; "
        "iptables -I OUTPUT -d 172.20.0.2 -j DROP && iptables -I INPUT -s 172.20.0.2 -j DROP; sleep 5; "
        "iptables -D OUTPUT -d 172.20.0.2 -j DROP; iptables -D INPUT -s 172.20.0.2 -j DROP"), detach=True)


def test_one_way_partition_drops_only_outgoing_traffic():
    [cmd] = db.partition("r", ["10.0.0.9"], 2.5, direction="out")
    assert cmd.argv[2] == ("trap 'iptables -D OUTPUT -d 10.0.0.9 -j DROP' TERM INT; "
                           "iptables -I OUTPUT -d 10.0.0.9 -j DROP; sleep 2.5; iptables -D OUTPUT -d 10.0.0.9 -j DROP")


def test_latency_loss_pause_kill_commands():
    assert db.latency("m", 200, 50, 10)[0].argv[2] == (
        "trap 'tc qdisc del dev eth0 root netem' TERM INT; tc qdisc add dev eth0 root netem delay 200ms 50ms; "
        "sleep 10; tc qdisc del dev eth0 root netem")
    assert "netem loss 20%" in db.loss("m", 0.2, 3)[0].argv[2]
    assert db.pause("m", 4)[0].argv == ("sh", "-c", "trap 'kill -CONT 1' TERM INT; kill -STOP 1; sleep 4; kill -CONT 1")
    assert db.kill("m") == [db.Exec("m", ("sh", "-c", "kill -KILL 1"))]


def test_runner_runs_only_on_the_labs_containers():
    runner = FakeRunner({"stormlab-rack-1": OURS, "someone-elses-db": {db.PROJECT_LABEL: "payments"}})
    db.run(runner, db.pause("stormlab-rack-1", 3))
    assert [c.container for c in runner.ran] == ["stormlab-rack-1"]
    for other in ("someone-elses-db", "no-such-container"):
        with pytest.raises(db.NotOurs):
            db.run(runner, db.kill(other))
    assert len(runner.ran) == 1


def test_bad_requests_are_refused_when_built():
    with pytest.raises(ValueError):
        db.partition("r", ["10.0.0.1"], 1, direction="sideways")
    with pytest.raises(ValueError):
        db.partition("r", [], 1)


class FakeCompose(FakeRunner):
    def __init__(self):
        names = ["stormlab_metadata_1"] + [f"stormlab_rack_{i}" for i in range(1, 4)]
        super().__init__({n: OURS for n in names})

    def containers(self, service):
        return sorted(n for n in self._labels if f"_{service}_" in n)

    def ip(self, container):
        return "172.30.0.2"


def chaos(argv, runner, capsys):
    from chaos.cli import run_docker
    from services.cli import build_parser
    code = run_docker(build_parser().parse_args(["chaos", *argv]), runner)
    return code, capsys.readouterr().out


def test_cli_on_the_docker_backend_runs_the_built_commands(capsys):
    runner = FakeCompose()
    code, out = chaos(["blip", "--racks", "2", "--duration", "5s"], runner, capsys)
    assert code == 0 and [c.container for c in runner.ran] == ["stormlab_rack_1", "stormlab_rack_2"]
    assert runner.ran[0] == db.partition("stormlab_rack_1", ["172.30.0.2"], 5.0)[0]
    code, out = chaos(["partition", "--between", "racks:2", "metadata", "--one-way", "--duration", "1s",
                       "--dry-run"], runner, capsys)
    assert out.startswith("docker exec -d stormlab_rack_3 sh -c ") and "-I OUTPUT -d 172.30.0.2" in out
    assert len(runner.ran) == 2  # dry run changed nothing
    chaos(["pause", "--target", "metadata", "--duration", "2s"], runner, capsys)
    assert runner.ran[-1] == db.pause("stormlab_metadata_1", 2.0)[0]


def test_cli_on_the_docker_backend_refuses_what_is_not_the_labs(capsys):
    from chaos.cli import ChaosError
    runner = FakeCompose()
    for argv in (["kill", "--target", "rack-9", "--duration", "1s"], ["pause", "--target", "db-0", "--duration", "1s"],
                 ["blip", "--racks", "7", "--duration", "1s"]):
        with pytest.raises(ChaosError):
            chaos(argv, runner, capsys)
    assert runner.ran == []
