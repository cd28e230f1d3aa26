"""Sizes in bytes: the 4,096-byte limits on an item's value and a queue message's body measure the
bytes stored (compact JSON, UTF-8), not ``repr``, which counted an emoji as one character while
the store kept its twelve-byte JSON escape: 4,094 emoji were 48 kB stored."""

import pytest

from services.queues.app import create_app as queues_app
from storage_node.app import MAX_VALUE_BYTES
from storage_node.app import create_app as rack_app
from stormcore.documents import dumps, encoded_bytes
from stormcore.racks import RackUrls
from stormcore.settings import LabSettings

EMOJI = "\N{GRINNING FACE}"
TOKEN = "b" * 32


def test_a_value_is_measured_in_the_bytes_it_is_stored_as():
    assert encoded_bytes(EMOJI * 1000) == 4002  # four bytes each in UTF-8, and its two quotes
    assert encoded_bytes({"a": [1, 2]}) == len('{"a":[1,2]}')
    assert len(repr(EMOJI * 4094)) <= 4096 < encoded_bytes(EMOJI * 4094)  # what repr let through


@pytest.fixture
async def rack(aiohttp_client, tmp_path):
    settings = LabSettings(racks=1, nodes_per_rack=2, renewal_period_s=0.2)
    app = rack_app(settings, 0, "http://127.0.0.1:9", tmp_path / "data", token=TOKEN)
    return await aiohttp_client(app)


async def test_a_rack_refuses_a_value_over_4096_bytes_stored_however_few_characters(rack):
    url = "/nodes/0-0/tables/orders/partitions/0/items/k"
    refused = await rack.put(url, json={"value": EMOJI * 1100})  # 1,102 characters, 4,402 bytes
    assert refused.status == 400 and "4096 bytes" in (await refused.json())["message"]
    near = "x" * (MAX_VALUE_BYTES - 2)  # 4,096 bytes with its quotes: at the limit, not past it
    assert encoded_bytes(near) == MAX_VALUE_BYTES
    taken = await rack.put(url, json={"value": near})
    assert taken.status != 400, await taken.text()  # past the size check (the node, unrenewed, may refuse it)


async def test_the_queues_refuse_a_message_over_4096_bytes_stored(aiohttp_client, tmp_path, monkeypatch):
    monkeypatch.setenv("STORMLAB_TOKEN", TOKEN)
    app = queues_app(LabSettings(), "http://127.0.0.1:9", RackUrls(["http://127.0.0.1:9"]), tmp_path)
    client = await aiohttp_client(app)
    refused = await client.post("/queues/q-0/messages", json={"body": EMOJI * 4094})
    assert refused.status == 400 and "4096 bytes as JSON" in (await refused.json())["message"]
    ok_size = await client.post("/queues/q-0/messages", json={"body": "x" * 4094})
    assert ok_size.status != 400  # past the size check; the queue's metadata is another matter here


def test_the_stores_keep_exactly_what_was_measured():
    value = {"text": EMOJI * 3, "n": 1}
    assert dumps(value).encode() == '{"text":"😀😀😀","n":1}'.encode()
