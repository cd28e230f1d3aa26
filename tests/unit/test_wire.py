"""The documents one process writes and another reads: written and read through one type."""

import pytest

from metadata_service.membership import MembershipStore
from services.loadgen.traffic import Indexes, Routes
from stormcore.racks import RackUrls
from stormcore.settings import LabSettings
from stormcore.wire import LoadgenStatus, Membership, MetadataStatus, PartitionMap, RackStatus, WireError, parse_object


def test_a_membership_written_by_the_store_is_read_back_by_a_node():
    store = MembershipStore.for_fleet(LabSettings(racks=2, nodes_per_rack=20))
    node = store.nodes[0]
    membership = Membership.decode(store.membership(node))
    assert membership.node == node and membership.version == store.version
    assert len(membership.owned()) == store.entries(node)
    assert Membership.decode(membership.encode()) == membership


@pytest.mark.parametrize(
    "raw",
    [
        b"not json",
        b"[]",
        b'{"node": "r00n000", "version": "1", "entries": []}',
        b'{"node": "r00n000", "version": 1}',
        b'{"node": "r00n000", "version": 1, "entries": [{"table": "orders", "index": null, "partition": 0}]}',
        b'{"node": "r00n000", "version": 1, "entries": [{"table": 7, "index": null, "partition": 0, "range": [0, 1]}]}',
    ],
)
def test_a_membership_of_the_wrong_shape_is_refused(raw):
    with pytest.raises(WireError):
        Membership.decode(raw)


def test_a_document_nested_deeper_than_the_parser_goes_is_refused_not_a_crash():
    with pytest.raises(WireError, match="nested too deeply"):
        parse_object(b"[" * 100_000)


def test_the_partition_map_routes_the_customers():
    store = MembershipStore.for_fleet(LabSettings(racks=2, nodes_per_rack=20))
    routes = Routes(PartitionMap.decode(store.partition_map()))
    assert routes.version == store.version and set(routes.tables) == set(store.tables)
    with pytest.raises(WireError):
        PartitionMap.decode(b'{"version": 1, "tables": {"orders": {"owners": "r00n000", "gsis": [], "status": "active"}}}')
    with pytest.raises(WireError, match="no index_owners"):  # a GSI must say where its partitions are
        PartitionMap.decode(b'{"version": 1, "tables": {"orders": {"owners": ["r00n000"], "gsis": ["g"], "status": "active"}}}')
    with pytest.raises(WireError, match="index_owners"):
        PartitionMap.decode(b'{"version": 1, "tables": {"o": {"owners": [], "gsis": ["g"], "index_owners": "x", "status": "active"}}}')
    plain = PartitionMap.decode(b'{"version": 1, "tables": {"orders": {"owners": ["r00n000"], "gsis": [], "status": "active"}}}')
    assert plain.tables["orders"].gsi_owners() == ()


def test_a_new_gsi_is_queried_only_once_its_owners_have_had_a_renewal_and_an_allowance_to_learn_it():
    store = MembershipStore.for_fleet(LabSettings(racks=2, nodes_per_rack=20))
    table = sorted(store.tables)[0]
    store.add_gsis(table, 1)
    indexes = Indexes(activation_s=11.0)  # a renewal period of 10 s and an allowance of 1 s
    indexes.seen(PartitionMap.decode(store.partition_map()), now=100.0)
    assert indexes.creating(100.0) == frozenset() and indexes.next_active(100.0) is None  # the map the lab starts with
    before = Routes(PartitionMap.decode(store.partition_map()))
    store.add_gsis(table, 1)  # customers adopt one more
    grown = PartitionMap.decode(store.partition_map())
    indexes.seen(grown, now=130.0)
    new = (table, f"{table}-gsi-2")
    assert indexes.creating(135.0) == {new} and indexes.next_active(135.0) == 141.0
    creating = Routes(grown, indexes.creating(135.0))
    assert creating.size == before.size and new[1] not in {index for _, index, _, _ in creating.targets}
    active = Routes(grown, indexes.creating(141.0))
    assert indexes.creating(141.0) == frozenset() and active.size > before.size
    assert {index for _, index, _, _ in active.targets} >= {new[1], f"{table}-gsi-1"}
    store.remove_gsis(table, [new[1]])
    indexes.seen(PartitionMap.decode(store.partition_map()), now=150.0)
    assert new not in indexes.first_seen  # gone: added again later, it is new again
    store.add_gsis(table, 1)
    indexes.seen(PartitionMap.decode(store.partition_map()), now=160.0)
    assert indexes.creating(165.0) == {new}


def test_every_status_reads_back_what_was_written():
    rack = RackStatus(
        loop_lag_p99_s=0.001,
        rack=3,
        pid=42,
        link_up=True,
        nodes_total=100,
        nodes_serving=99,
        nodes_disqualified=1,
        nodes_starting=0,
        renewal_p99_s=0.6,
        renewal_attempts_total={"first": 10.0, "retry": 2.0},
        allowance_s=1.0,
    )
    assert RackStatus.from_json(rack.to_json()) == rack
    assert rack.to_json()["component"] == "rack"
    loadgen = LoadgenStatus(loop_lag_p99_s=0.0, rate_per_s=200.0, requests_last_10s=2000, customer_error_ratio=0.55)
    assert LoadgenStatus.from_json(loadgen.to_json()) == loadgen
    with pytest.raises(WireError, match="not the status of a metadata"):
        MetadataStatus.from_json(rack.to_json())
    with pytest.raises(WireError, match="without"):
        RackStatus.from_json({"component": "rack", "rack": 1})


def test_a_dependent_services_row_key_never_contains_a_slash():
    from services.storage import Storage

    with pytest.raises(ValueError):
        Storage("http://m", RackUrls(), None, 1.0).url("scaling-groups", "group/g-1")
