"""A rack's index on every engine, and the racks found behind one DNS name."""

import asyncio
import socket
import struct

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from stormcore.racks import (
    RackSpecError,
    RackUrls,
    cell_address,
    cell_from_env,
    cell_index,
    cell_urls,
    checked,
    find_cell,
    ptr_answers,
    ptr_query,
    rack_from_env,
    rack_index,
    wait_until_up,
)


@pytest.mark.parametrize(
    ("spec", "hostname", "names", "rack"),
    [
        ("3", "", (), 3),
        (" 0 ", "", (), 0),
        ("slot:1", "", (), 0),
        ("slot:10", "", (), 9),
        ("ordinal", "rack-3", (), 3),
        ("ordinal", "stormlab-rack-12", (), 12),
        ("replica", "0a1b2c3d4e51", ["stormlab_rack_4.stormlab_default"], 3),  # compose 1.29
        ("replica", "0a1b2c3d4e51", ["stormlab-rack-1.stormlab_default"], 0),  # compose v2
        ("replica", "x", ["10.0.0.7", "stormlab_rack_10"], 9),
    ],
)
def test_each_engine_names_its_racks_its_own_way(spec, hostname, names, rack):
    assert rack_index(spec, hostname, names) == rack


@pytest.mark.parametrize(
    ("spec", "hostname", "names", "says"),
    [
        ("", "h", (), "give a number"),
        ("-1", "h", (), "give a number"),
        ("rack-3", "h", (), "give a number"),
        ("slot:0", "h", (), "give a number"),  # swarm counts slots from 1
        ("slot:x", "h", (), "give a number"),
        ("ordinal", "0a1b2c3d4e51", (), "does not end in -N"),  # a container id is not an ordinal
        ("replica", "h", ["stormlab_rack_0"], "no name ending"),  # compose counts replicas from 1
        ("replica", "h", [], "no name ending"),
    ],
)
def test_a_spec_that_names_no_rack_says_what_would(spec, hostname, names, says):
    with pytest.raises(RackSpecError, match=says):
        rack_index(spec, hostname, names)


def test_from_env_takes_a_list_or_a_dns_name_and_refuses_neither():
    assert RackUrls.from_env({"STORMLAB_RACK_URLS": "http://a:1/,http://b:2"})[1] == "http://b:2"
    assert RackUrls.from_env({"STORMLAB_RACKS_DNS": "racks:8800"}).dns == ("racks", 8800)
    for env in ({}, {"STORMLAB_RACKS_DNS": "racks"}, {"STORMLAB_RACKS_DNS": ":8800"}):
        with pytest.raises(ValueError, match="STORMLAB_RACK"):
            RackUrls.from_env(env)


def test_an_address_gone_from_the_name_is_forgotten_and_a_silent_one_asked_again():
    urls = RackUrls(dns=("racks", 8800))
    urls.learn({"10.0.0.2": 1, "10.0.0.3": 0, "10.0.0.4": None})
    assert (urls[0], urls[1], len(urls)) == ("http://10.0.0.3:8800", "http://10.0.0.2:8800", 2)
    urls.learn({"10.0.0.5": 1, "10.0.0.3": 0})  # rack 1 restarted at a new address
    assert urls[1] == "http://10.0.0.5:8800"
    with pytest.raises(KeyError):
        urls[2]


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


async def test_racks_behind_one_name_are_asked_which_rack_they_serve():
    """Two racks on two loopback addresses behind one name: each is asked its /status once;
    one that does not answer is left out, then found when it answers."""
    asked: list[str] = []

    def rack(n: int | None):
        async def status(request: web.Request) -> web.Response:
            asked.append(request.host)
            if n is None:
                return web.json_response({"error": "starting"}, status=503)
            return web.json_response({"rack": n})

        app = web.Application()
        app.router.add_get("/status", status)
        return app

    port = _free_port("127.0.0.2")
    servers = [TestServer(rack(1), host="127.0.0.2", port=port), TestServer(rack(None), host="127.0.0.3", port=port)]
    for s in servers:
        await s.start_server()

    async def resolve(host, port_, type):
        assert host == "racks"
        return [(socket.AF_INET, type, 6, "", (a, port_)) for a in ("127.0.0.3", "127.0.0.2")]

    urls = RackUrls(dns=("racks", port))
    try:
        async with aiohttp.ClientSession() as session:
            await urls.refresh(session, resolve)
            assert (len(urls), urls[1]) == (1, f"http://127.0.0.2:{port}")
            await urls.refresh(session, resolve)
            assert sorted(asked) == [f"127.0.0.2:{port}", f"127.0.0.3:{port}", f"127.0.0.3:{port}"]  # the silent one again
            await servers[1].close()
            servers[1] = TestServer(rack(0), host="127.0.0.3", port=port)
            await servers[1].start_server()
            await urls.refresh(session, resolve)
            assert (len(urls), urls[0], urls[1]) == (2, f"http://127.0.0.3:{port}", f"http://127.0.0.2:{port}")
    finally:
        for s in servers:
            await s.close()


def test_the_reverse_lookup_asks_for_the_ptr_record_and_reads_compressed_answers():
    query = ptr_query("172.18.0.2", qid=0x1234)
    assert query[:2] == b"\x12\x34" and b"\x012\x010\x0218\x03172\x07in-addr\x04arpa\x00" in query
    assert query.endswith(b"\x00\x0c\x00\x01")  # PTR, IN
    # Docker's answer: the question, then one PTR whose owner name points back at it (0xc00c)
    rdata = b"\x0edbg_metadata_1\x0bdbg_default\x00"
    answer = b"\xc0\x0c" + struct.pack("!HHIH", 12, 1, 600, len(rdata)) + rdata
    reply = struct.pack("!HHHHHH", 0x1234, 0x8180, 1, 1, 0, 0) + query[12:] + answer
    assert ptr_answers(reply) == ["dbg_metadata_1.dbg_default"]
    assert ptr_answers(struct.pack("!HHHHHH", 0x1234, 0x8183, 1, 0, 0, 0) + query[12:]) == []  # NXDOMAIN: no names


async def test_a_rack_waits_for_its_peer_to_answer_before_it_starts():
    answers = iter([503, 503, 200])

    async def healthz(request: web.Request) -> web.Response:
        return web.json_response({}, status=next(answers))

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    try:
        url = f"http://127.0.0.1:{server.port}/healthz"
        assert await asyncio.to_thread(wait_until_up, url, 10.0, 0.01) is True  # after two 503s
        closed = f"http://127.0.0.1:{_free_port('127.0.0.1')}/healthz"
        assert await asyncio.to_thread(wait_until_up, closed, 0.05, 0.01) is False  # gives up, starts anyway
    finally:
        await server.close()


def test_a_replica_scaled_past_the_labs_racks_is_refused_with_what_to_do():
    assert checked(9, 10) == 9
    with pytest.raises(RackSpecError, match="scale the racks and STORMLAB_RACKS together"):
        checked(10, 10)
    assert rack_from_env(4, {"STORMLAB_RACK": "slot:4"}) == 3
    with pytest.raises(RackSpecError, match="this is rack 4, but the lab has 4 racks"):
        rack_from_env(4, {"STORMLAB_RACK": "slot:5"})


@pytest.mark.parametrize(
    ("spec", "hostname", "names", "cell"),
    [
        ("", "h", (), 0),  # the `metadata` service, and the local lab's first
        ("2", "h", (), 2),  # the local launcher's
        ("replica", "x", ["stormlab_metadata-cell_1.stormlab_default"], 1),  # compose: metadata-cell's first replica is cell 1
        ("replica", "x", ["stormlab-metadata-cell-3.stormlab_default"], 3),
        ("slot:1", "h", (), 1),  # a swarm's task slot
        ("ordinal", "metadata-cell-0", (), 1),  # a StatefulSet's first pod
    ],
)
def test_a_cell_is_named_as_a_rack_is_but_counted_from_the_metadata_services_own(spec, hostname, names, cell):
    assert cell_index(spec, hostname, names) == cell


def test_a_cell_past_the_labs_or_a_miscounted_second_service_is_refused_with_what_to_give():
    assert cell_from_env(4, {"STORMLAB_CELL": "slot:3", "STORMLAB_MORE_CELLS": "3"}) == 3
    assert cell_from_env(1, {"STORMLAB_MORE_CELLS": "0"}) == 0
    with pytest.raises(RackSpecError, match="this is cell 4, but the lab has 4 cells"):
        cell_from_env(4, {"STORMLAB_CELL": "slot:4"})
    with pytest.raises(RackSpecError, match="give STORMLAB_MORE_CELLS=3"):
        cell_from_env(4, {"STORMLAB_MORE_CELLS": "2"})  # compose cannot count: the two must agree
    with pytest.raises(RackSpecError, match="give STORMLAB_MORE_CELLS=0"):
        cell_from_env(1, {"STORMLAB_MORE_CELLS": "x"})
    with pytest.raises(RackSpecError, match="STORMLAB_CELL='cell-1': give a number"):
        cell_from_env(4, {"STORMLAB_CELL": "cell-1"})


def test_the_address_that_says_it_serves_the_cell_is_the_racks():
    assert cell_address({"10.0.0.9": 1, "10.0.0.3": 0, "10.0.0.4": None}, 1) == "10.0.0.9"
    assert cell_address({"10.0.0.9": 1, "10.0.0.8": 1}, 1) == "10.0.0.8"  # the same answer each time
    assert cell_address({"10.0.0.3": 0, "10.0.0.4": None}, 2) is None


async def test_a_rack_asks_every_metadata_service_behind_the_name_for_its_cell_and_waits_for_it():
    """Cells 0 and 2 on two loopback addresses behind `cells`; cell 2's rack links to the second,
    once it answers (it says 503 first); a rack of a cell no one serves gives up saying so."""
    cells, asked = {"127.0.0.2": 0, "127.0.0.3": 2}, {"127.0.0.2": 0, "127.0.0.3": 0}

    def service(address: str):
        async def status(request: web.Request) -> web.Response:
            asked[address] += 1
            if address == "127.0.0.3" and asked[address] == 1:
                return web.json_response({"error": "starting"}, status=503)
            return web.json_response({"cell": cells[address]})

        app = web.Application()
        app.router.add_get("/status", status)
        return app

    port = _free_port("127.0.0.2")
    servers = [TestServer(service(a), host=a, port=port) for a in cells]
    for s in servers:
        await s.start_server()

    def resolve(host, port_, type):
        assert host == "cells"
        return [(socket.AF_INET, type, 6, "", (a, port_)) for a in cells]

    try:
        found = await asyncio.to_thread(find_cell, f"cells:{port}", 2, 10.0, 0.01, resolve)
        assert found == f"http://127.0.0.3:{port}" and asked == {"127.0.0.2": 2, "127.0.0.3": 2}
        every = await asyncio.to_thread(cell_urls, f"cells:{port}", resolve)  # the chaos container's view: asked once
        assert every == {0: f"http://127.0.0.2:{port}", 2: f"http://127.0.0.3:{port}"}
        with pytest.raises(RackSpecError, match=f"no metadata service behind cells:{port} serves cell 3"):
            await asyncio.to_thread(find_cell, f"cells:{port}", 3, 0.05, 0.01, resolve)
        with pytest.raises(RackSpecError, match="give NAME:PORT"):
            find_cell("cells", 1)
    finally:
        for s in servers:
            await s.close()
