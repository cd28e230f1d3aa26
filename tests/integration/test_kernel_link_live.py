"""The racks' links in the kernel, live (root and iptables only): a rack's link port leads on to
the metadata service, a blip lease drops its packets and counts them, its end puts it back,
and nothing of the lab's is left in iptables after."""

import asyncio
import socket

import aiohttp
import pytest
from aiohttp import web

from chaos.kernel_link import KernelLinks, available
from chaos.linkproxy import create_app

pytestmark = pytest.mark.skipif(available() is not None, reason=str(available()))
TOKEN = "test-token-for-the-kernel-link"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def answers(url: str, timeout_s: float = 0.5) -> bool:
    try:
        async with aiohttp.ClientSession() as session, session.get(url, timeout=aiohttp.ClientTimeout(total=timeout_s)) as resp:
            return resp.status == 200
    except (TimeoutError, aiohttp.ClientError):
        return False


async def test_a_blip_in_the_kernel_drops_the_links_packets_until_its_lease_ends(aiohttp_client):
    async def healthz(request: web.Request) -> web.Response:
        return web.json_response({"ok": True})

    service = web.Application()
    service.router.add_get("/healthz", healthz)
    runner = web.AppRunner(service)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", free_port())
    await site.start()
    target = ("127.0.0.1", int(site.name.rsplit(":", 1)[1]))
    link = free_port()
    tag = f"t{link}"
    kernel = KernelLinks(tag)
    proxy = await aiohttp_client(
        create_app(target, {0: ("127.0.0.1", link)}, token=TOKEN, kernel=kernel), headers={"Authorization": f"Bearer {TOKEN}"}
    )
    try:
        assert (await (await proxy.get("/status")).json())["links"] == "kernel"
        assert await answers(f"http://127.0.0.1:{link}/healthz")  # the link leads on to the service
        resp = await proxy.post("/faults", json={"fault": "blip", "racks": [0], "duration_s": 1.5})
        assert resp.status == 201, await resp.text()
        assert len(kernel.rules()) == 1
        assert not await answers(f"http://127.0.0.1:{link}/healthz")  # cut: the connection never completes
        (lease,) = (await (await proxy.get("/status")).json())["faults"]
        assert lease["effect"]["dropped_bytes"] > 0  # read from its rule's counters: the SYNs it dropped
        await asyncio.sleep(1.5)
        assert kernel.rules() == []  # the lease's revert deleted its rule
        assert await answers(f"http://127.0.0.1:{link}/healthz", timeout_s=2.0)
        latency = await proxy.post("/faults", json={"fault": "latency", "racks": [0], "duration_s": 1, "delay_s": 0.1})
        assert latency.status == 400 and "netem" in (await latency.json())["message"]  # said, not half done
    finally:
        await proxy.close()
        await runner.cleanup()
    listing = "".join(kernel._run("-S", table=t, check=False) for t in ("filter", "nat"))
    assert tag not in listing  # the proxy's shutdown removed its chains and jumps
