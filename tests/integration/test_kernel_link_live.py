"""The racks' links in the kernel, live (root and iptables only): a rack's link port leads on to
the metadata service, a blip lease drops its packets and counts them, its end puts it back,
and nothing of the lab's is left in iptables after."""

import asyncio
import socket
from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp import web

from chaos.kernel_link import KernelLinks, available
from chaos.linkproxy import PROXY, create_app
from storage_node.client import RenewalClient

pytestmark = pytest.mark.skipif(available() is not None, reason=str(available()))
TOKEN = "test-token-for-the-kernel-link"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
async def target() -> AsyncIterator[tuple[str, int]]:
    """A service the links lead on to: it answers /healthz."""

    async def healthz(request: web.Request) -> web.Response:
        return web.json_response({"ok": True})

    service = web.Application()
    service.router.add_get("/healthz", healthz)
    runner = web.AppRunner(service)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", free_port())
    await site.start()
    yield ("127.0.0.1", int(site.name.rsplit(":", 1)[1]))
    await runner.cleanup()


async def answers(url: str, timeout_s: float = 0.5) -> bool:
    try:
        async with aiohttp.ClientSession() as session, session.get(url, timeout=aiohttp.ClientTimeout(total=timeout_s)) as resp:
            return resp.status == 200
    except (TimeoutError, aiohttp.ClientError):
        return False


async def test_a_blip_in_the_kernel_drops_the_links_packets_until_its_lease_ends(aiohttp_client, target):
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
    finally:
        await proxy.close()
    listing = "".join(kernel._run("-S", table=t, check=False) for t in ("filter", "nat"))
    assert tag not in listing  # the proxy's shutdown removed its chains and jumps


async def test_a_latency_takes_the_link_through_the_proxy_and_gives_it_back(aiohttp_client, target):
    """The kernel has no netem: a latency detours the link through the proxy for its life. A
    renewal client's kept-alive connection (carried by the kernel) is reset at its next request
    and the client takes it again through the proxy, delayed; at the latency's end the proxy's
    connection is reset the same way and the link is the kernel's again. No request fails."""

    link = free_port()
    kernel = KernelLinks(f"t{link}")
    app = create_app(target, {0: ("127.0.0.1", link)}, token=TOKEN, kernel=kernel)
    proxy = await aiohttp_client(app, headers={"Authorization": f"Bearer {TOKEN}"})
    carried = app[PROXY].links[0].connections  # the connections this proxy carries on rack 0's link
    client = RenewalClient(f"http://127.0.0.1:{link}", "X-Refusal")
    request = client.request("/healthz", {})
    loop = asyncio.get_running_loop()

    async def renew() -> float:
        start = loop.time()
        answer = await client.get(request, loop.time() + 5)
        assert answer.status == 200
        return loop.time() - start

    try:
        assert await renew() < 0.1 and not carried  # the kernel carries it: the proxy sees nothing
        resp = await proxy.post("/faults", json={"fault": "latency", "racks": [0], "duration_s": 2.0, "delay_s": 0.2})
        assert resp.status == 201, await resp.text()
        assert await renew() >= 0.2  # the kept-alive connection reset, the request taken again, through the proxy
        assert len(carried) == 1 and client.connections == 1
        assert await renew() >= 0.2  # and the next on the proxy's connection, kept alive
        (lease,) = (await (await proxy.get("/status")).json())["faults"]
        assert lease["effect"]["delayed_bytes"] > 0
        assert len(kernel.rules()) == 1  # the reset of requests on the kernel's connections (the detour is in nat)
        await asyncio.sleep(2.2)  # the latency's end
        assert kernel.rules() == [] and kernel._run("-S", kernel.nat, table="nat").count("RETURN") == 0  # both gone
        assert await renew() < 0.1  # reset on the proxy's connection, taken again through the kernel
        await asyncio.sleep(0.1)
        assert not carried and client.connections == 1  # the proxy's connection closed, the client's new one the kernel's
        assert await renew() < 0.1
    finally:
        client.close()
        await proxy.close()
    listing = "".join(kernel._run("-S", table=t, check=False) for t in ("filter", "nat"))
    assert f"t{link}" not in listing
