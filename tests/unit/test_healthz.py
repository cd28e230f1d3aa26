"""docker/healthz, the containers' healthcheck without Python: healthy on a 200 from /healthz."""

import asyncio
import shutil
import socket
import time
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

HEALTHZ = Path(__file__).resolve().parents[2] / "docker" / "healthz"
pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="the image's healthcheck is a bash script")


async def healthz(port: int) -> int:
    proc = await asyncio.create_subprocess_exec(str(HEALTHZ), str(port))
    return await asyncio.wait_for(proc.wait(), 10)


def app(status: int) -> web.Application:
    async def answer(request: web.Request) -> web.Response:
        return web.json_response({"ok": status == 200}, status=status)

    a = web.Application()
    a.router.add_get("/healthz", answer)
    return a


@pytest.mark.parametrize(("status", "rc"), [(200, 0), (503, 1), (404, 1)])
async def test_healthy_only_on_a_200(status, rc):
    server = TestServer(app(status), host="127.0.0.1")
    await server.start_server()
    try:
        assert await healthz(server.port) == rc
    finally:
        await server.close()


async def test_nothing_listening_is_unhealthy():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, not listening: connections are refused
        assert await healthz(port) == 1


@pytest.fixture
def fault_files(tmp_path, monkeypatch):
    prefix = str(tmp_path / "stormlab-fault.")
    monkeypatch.setenv("STORMLAB_FAULT_FILES", prefix)
    return prefix


@pytest.fixture
def holder():
    """A live process whose command line is a fault shell's (as the freeze lease's holder is)."""
    import subprocess

    proc = subprocess.Popen(["sh", "-c", "sleep 30 # stormlab-fault"])
    yield proc.pid
    proc.kill()
    proc.wait()


@pytest.fixture
def frozen_port():
    """A port whose service never answers: the kernel accepts, nobody reads (as under SIGSTOP)."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        yield listener.getsockname()[1]


async def test_a_service_frozen_inside_a_freeze_lease_stays_healthy_and_unhealthy_after(fault_files, holder, frozen_port):
    port = frozen_port
    assert await healthz(port) == 1  # frozen with no lease: unhealthy
    Path(fault_files + str(holder)).write_text(f"freeze {int(time.time()) + 60}\n:\nkill -CONT $p\n")
    assert await healthz(port) == 0  # the lease holds: an orchestrator must not restart it
    Path(fault_files + str(holder)).write_text(f"freeze {int(time.time()) - 5}\n:\n")
    assert await healthz(port) == 1  # the lease is over and it still does not answer: unhealthy


async def test_only_a_live_freeze_holder_counts(fault_files, holder, frozen_port):
    port, later = frozen_port, int(time.time()) + 60
    Path(fault_files + str(holder)).write_text(f"blip {later}\n")  # another fault: no excuse
    assert await healthz(port) == 1
    Path(fault_files + str(holder)).unlink()
    Path(fault_files + "999999999").write_text(f"freeze {later}\n")  # its holder is gone
    Path(fault_files + "abc").write_text(f"freeze {later}\n")  # not a pid
    assert await healthz(port) == 1
