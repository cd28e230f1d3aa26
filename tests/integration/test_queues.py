"""The queue service on a real small lab: its API refuses bad input, its metadata follows the
lab's table (failing once the metadata service is paused, unless the stale-cache fix is on), and
no message it acknowledged is lost, across a pause and a SIGKILL of its process."""

import asyncio

import aiohttp
import pytest

from chaos import cli as chaos_cli
from tests.conftest import eventually

QUIET = {"customer_rate": 0, "cascade_rate": 0, "queue_cache_ttl_s": 1.0}  # only the test's own requests


def start(lab, *also, **changes):
    return lab(cascade=("queues", *also), **QUIET | changes)


async def post(s, url, body, raw=None):
    kw = {"data": raw} if raw is not None else {"json": body}
    async with s.post(url, timeout=aiohttp.ClientTimeout(total=3), **kw) as r:
        return r.status, await r.json(content_type=None)


@pytest.mark.timeout(120)
def test_bad_input_gets_a_json_4xx_and_changes_nothing(lab):
    queues = start(lab).url("queues")

    async def scenario():
        async with aiohttp.ClientSession() as s:
            await eventually(lambda: ok_send(s, queues), timeout_s=20, interval_s=0.2, what="a send")
            _, before = await json_status(s, queues)
            for path, body, raw, status in [
                ("/queues/q-99/messages", {"body": 1}, None, 404),
                ("/queues/q-1/messages", None, b"not json", 400),
                ("/queues/q-1/messages", None, b"[1, 2]", 400),
                ("/queues/q-1/messages", {"nobody": 1}, None, 400),
                ("/queues/q-1/messages", {"body": "x" * 5000}, None, 400),
                ("/queues/q-1/receive", {"max": 0}, None, 400),
                ("/queues/q-1/receive", {"max": 11}, None, 400),
                ("/queues/q-1/receive", {"max": True}, None, 400),
                ("/queues/q-1/receive", {"max": "3"}, None, 400),
                ("/queues/q-1/receive", None, b"[" * 5000, 400),
                ("/queues/q-1/receive", {"visibility_timeout_s": -1}, None, 400),
                ("/queues/q-1/receive", {"visibility_timeout_s": 1e9}, None, 400),
                ("/queues/q-1/receive", {"visibility_timeout_s": "30s"}, None, 400),
                ("/queues/q-1/receive", {"max": 1, "wait": 5}, None, 400),
                ("/queues/q-1/receive", None, b"\n", 400),  # blanks are not JSON (the fuzzer's finding)
            ]:
                got, answer = await post(s, queues + path, body, raw)
                assert got == status and "error" in answer and "message" in answer, (path, body, raw, got, answer)
            for path, status in [("/queues/q-1/messages/not-a-receipt", 400), ("/queues/q-99/messages/1.0123456789abcdef", 404),
                                 ("/queues/q-1/messages/" + "9" * 30 + ".0123456789abcdef", 400)]:  # fmt: skip
                async with s.delete(queues + path, timeout=aiohttp.ClientTimeout(total=3)) as r:
                    answer = await r.json(content_type=None)
                    assert r.status == status and "error" in answer, (path, r.status, answer)
            _, after = await json_status(s, queues)
            assert after["messages_stored"] == before["messages_stored"]

    asyncio.run(scenario())


async def ok_send(s, queues):
    status, _ = await post(s, f"{queues}/queues/q-0/messages", {"body": "warm-up"})
    return status == 201


async def json_status(s, url):
    async with s.get(f"{url}/status") as r:
        return r.status, await r.json()


@pytest.mark.timeout(180)
@pytest.mark.lab
def test_pause_fails_the_queues_after_their_ttl_and_no_acknowledged_message_is_lost(lab):
    started = start(lab)
    queues = started.url("queues")

    async def scenario():
        async with aiohttp.ClientSession() as s:
            await eventually(lambda: ok_send(s, queues), timeout_s=20, interval_s=0.2, what="a send")
            acked = set()

            async def send(i):
                status, answer = await post(s, f"{queues}/queues/q-{i % 8}/messages", {"body": {"n": i}})
                if status == 201:
                    acked.add(i)
                return status

            results = [await send(i) for i in range(200)]
            assert results.count(201) == 200
            started.lease({"fault": "pause-metadata", "duration_s": 6})
            await asyncio.sleep(3)  # every node is refusing: the queue metadata cannot be refreshed
            during = [await send(i) for i in range(200, 260)]
            assert during.count(503) >= 50, during  # the 2015 coupling: no fresh metadata, no send
            started.lease({"fault": "kill", "target": "queues", "duration_s": 1})
            await asyncio.sleep(1.5)
            await eventually(lambda: ok_send(s, queues), timeout_s=40, interval_s=0.2, what="a send")
            received = set()
            for q in range(8):
                for _ in range(200):  # a queue whose node is still coming back answers 503: try again
                    status, answer = await post(s, f"{queues}/queues/q-{q}/receive", {"max": 10})
                    if status == 503:
                        await asyncio.sleep(0.2)
                        continue
                    assert status == 200
                    if not answer["messages"]:
                        break
                    received |= {m["body"]["n"] for m in answer["messages"] if isinstance(m["body"], dict)}
            lost = acked - received
            print({"acknowledged": len(acked), "received": len(received & acked), "lost": len(lost)})
            assert len(acked) >= 200 and lost == set()

    asyncio.run(scenario())


@pytest.mark.timeout(120)
@pytest.mark.lab
def test_with_the_stale_cache_fix_the_queues_keep_serving_through_the_pause(lab):
    started = start(lab, fix_stale_cache=True)
    queues = started.url("queues")

    async def scenario():
        async with aiohttp.ClientSession() as s:
            await eventually(lambda: ok_send(s, queues), timeout_s=20, interval_s=0.2, what="a send")
            for q in range(8):  # every queue's metadata is cached once
                assert (await post(s, f"{queues}/queues/q-{q}/messages", {"body": "seen"}))[0] == 201
            started.lease({"fault": "pause-metadata", "duration_s": 6})
            await asyncio.sleep(3)
            during = [(await post(s, f"{queues}/queues/q-{i % 8}/messages", {"body": i}))[0] for i in range(40)]
            assert during == [201] * 40
            await asyncio.sleep(4)  # the pause is over
            received = []
            for q in range(8):
                while answer := (await post(s, f"{queues}/queues/q-{q}/receive", {"max": 10}))[1]["messages"]:
                    received += [m["body"] for m in answer if isinstance(m["body"], int)]
            assert sorted(received) == list(range(40))  # every message acknowledged during the outage

    asyncio.run(scenario())


@pytest.mark.timeout(120)
@pytest.mark.lab
def test_isolate_cuts_the_queues_off_from_the_racks_until_its_lease_ends(lab, capsys):
    started = start(lab, "console")
    queues, console = started.url("queues"), started.url("console")

    async def scenario():
        async with aiohttp.ClientSession() as s:
            await eventually(lambda: ok_send(s, queues), timeout_s=20, interval_s=0.2, what="a send")
            assert chaos_cli.main(["isolate", "--target", "queues", "--duration", "8s"]) == 0
            cut_at = asyncio.get_running_loop().time()
            assert "isolate" in capsys.readouterr().out
            await asyncio.sleep(1.2)  # past the metadata's TTL: the refresh cannot reach the table
            during = [(await post(s, f"{queues}/queues/q-{i % 8}/messages", {"body": i}))[0] for i in range(3)]
            assert during == [503] * 3, during  # each waited out its table read (1 s), well inside the lease
            status, login = await post(s, f"{console}/login", {"user": "u1"})  # another service, same racks
            assert status == 200 and login["lookup"] == "ok", login
            assert asyncio.get_running_loop().time() - cut_at < 7
            await asyncio.sleep(max(0.0, cut_at + 8.5 - asyncio.get_running_loop().time()))  # the path heals by itself
            await eventually(lambda: ok_send(s, queues), timeout_s=10, interval_s=0.2, what="a send")

    asyncio.run(scenario())
