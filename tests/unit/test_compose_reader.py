"""Where the game-day runner's desk listens for Alertmanager on compose: the bridge's gateway as
Docker says, else docker0's address as the kernel says, else a clear error."""

import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from stormcore.errors import LabError
from stormlab.engine import compose


def docker_answers(monkeypatch, *answers):
    calls = iter(answers)
    monkeypatch.setattr(compose.subprocess, "run", lambda *a, **kw: next(calls))
    monkeypatch.setattr(compose.time, "sleep", lambda s: None)


def test_the_desk_listens_at_the_bridge_s_gateway_docker_names(monkeypatch):
    docker_answers(monkeypatch, subprocess.CompletedProcess([], 0, "172.18.0.1\n", ""))
    assert compose.host_address() == "172.18.0.1"


def test_a_busy_daemon_is_asked_again_then_the_kernel_is(monkeypatch):
    failed = subprocess.CompletedProcess([], 1, "", "Error response from daemon: context deadline exceeded")
    docker_answers(monkeypatch, failed, subprocess.CompletedProcess([], 0, "172.17.0.1\n", ""))
    assert compose.host_address() == "172.17.0.1"  # the second answer
    docker_answers(monkeypatch, failed, failed, failed)
    monkeypatch.setattr(compose, "interface_address", lambda name: "172.17.0.1" if name == "docker0" else None)
    assert compose.host_address() == "172.17.0.1"  # from docker0 itself


def test_no_bridge_at_all_says_what_to_set(monkeypatch):
    failed = subprocess.CompletedProcess([], 1, "", "Cannot connect to the Docker daemon")
    docker_answers(monkeypatch, failed, failed, failed)
    monkeypatch.setattr(compose, "interface_address", lambda name: None)
    with pytest.raises(LabError, match="Cannot connect to the Docker daemon.*STORMLAB_DESK_HOST"):
        compose.host_address()


def test_the_kernel_knows_the_loopback_s_address():
    assert compose.interface_address("lo") == "127.0.0.1" and compose.interface_address("no-such-if") is None


def test_the_stacks_own_ops_container_has_no_docker_cli_and_needs_none(monkeypatch, tmp_path):
    """`docker compose run --rm ops status` crashed on FileNotFoundError: 'docker' (the e2e)."""
    from stormlab.engine import compose

    monkeypatch.setenv("PATH", str(tmp_path))  # no docker here
    assert compose.compose_cmd() == ["docker-compose"]


def stand_in(answers: dict[str, bytes]):
    """A loopback server answering GET paths with JSON bodies (any other path: 404)."""

    class Answer(BaseHTTPRequestHandler):
        def do_GET(self):
            body = answers.get(self.path)
            self.send_response(200 if body is not None else 404)
            self.end_headers()
            self.wfile.write(body or b"")

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Answer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


def test_a_players_links_are_the_dashboards_of_a_grafana_that_answers_and_prometheus_alerts():
    grafana, grafana_url = stand_in({"/api/health": b'{"database": "ok"}'})
    prometheus, prometheus_url = stand_in({"/classic/alerts": b"<html>"})  # Debian's Prometheus: no /alerts, the classic page
    try:
        links = compose.dashboard_links(prometheus_url, grafana_url)
        titles = {link["title"]: link["url"] for link in links}
        assert titles["stormlab · Storm overview"] == f"{grafana_url}/d/stormlab-storm"
        assert titles["stormlab · The cascade"] == f"{grafana_url}/d/stormlab-cascade"
        assert len(links) == len(list(compose.DASHBOARDS.glob("*.json"))) + 1 and links[-1]["url"] == f"{prometheus_url}/classic/alerts"
        grafana.shutdown()
        grafana.server_close()
        # a stack whose Grafana is not running (its image not to be had): Prometheus's alerts only
        assert [link["url"] for link in compose.dashboard_links(prometheus_url, grafana_url)] == [f"{prometheus_url}/classic/alerts"]
    finally:
        prometheus.shutdown()
        prometheus.server_close()
    assert compose.dashboard_links(prometheus_url, grafana_url) == []
    assert compose.published_url("grafana", {}) == "http://127.0.0.1:3000"
