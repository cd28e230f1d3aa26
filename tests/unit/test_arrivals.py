"""The herd's shape, as the metadata service saw it: when each membership request reached its door
and whose (``GET /arrivals``), so a heal's herd can be measured per rack and per link mechanism."""

import time

from metadata_service.app import create_app
from stormcore.settings import LabSettings

TOKEN = "a" * 32


async def test_each_membership_request_is_kept_with_its_arrival_and_read_back_since_a_time(aiohttp_client):
    settings = LabSettings(racks=2, nodes_per_rack=3, cost_base_s=0.0, cost_per_entry_s=0.0)
    client = await aiohttp_client(create_app(settings, token=TOKEN))
    before = time.time()
    for node in ("r00n000", "r01n002", "r00n001"):
        assert (await client.get(f"/membership/{node}")).status == 200
    assert (await client.get("/membership/nobody")).status == 404  # not a node of the fleet: not kept
    seen = (await (await client.get("/arrivals")).json())["arrivals"]
    assert [node for _, node in seen] == ["r00n000", "r01n002", "r00n001"]
    assert all(before <= t <= time.time() for t, _ in seen) and [t for t, _ in seen] == sorted(t for t, _ in seen)
    later = (await (await client.get(f"/arrivals?since={seen[0][0]}")).json())["arrivals"]
    assert [node for _, node in later] == ["r01n002", "r00n001"]
    for bad in ("abc", "nan"):
        assert (await client.get(f"/arrivals?since={bad}")).status == 400
