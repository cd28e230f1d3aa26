"""docker/healthz, the containers' healthcheck without Python: healthy on a 200 from /healthz."""

import asyncio
import shutil
import socket
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
