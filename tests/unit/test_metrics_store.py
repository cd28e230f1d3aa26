"""The metrics service's datapoints: a group's series holds only what was stored with its group
(a gap is a datapoint stored without it), oldest first; a store written before timestamps gains them."""

import sqlite3

from services.metrics.app import DatapointStore


def test_a_groups_series_is_what_was_stored_with_its_group_since_a_time(tmp_path):
    store = DatapointStore(tmp_path / "metrics.sqlite3")
    store.put("Custom/app", "customer_error_ratio", "g-1", 0.5, True, at=1002.0)
    store.put("Custom/app", "customer_error_ratio", "g-1", 0.4, True, at=1001.0)
    store.put("Custom/app", "customer_error_ratio", "g-1", 0.9, False, at=1003.0)  # stored without its group: a gap
    store.put("Custom/app", "customer_error_ratio", "g-2", 0.1, True, at=1004.0)
    store.put("Custom/app", "nodes_disqualified", "g-1", 150.0, True, at=1005.0)
    assert store.series("Custom/app", "customer_error_ratio", "g-1", 0.0, 10) == [(1001.0, 0.4), (1002.0, 0.5)]
    assert store.series("Custom/app", "customer_error_ratio", "g-1", 1001.0, 10) == [(1002.0, 0.5)]
    assert store.series("Custom/app", "customer_error_ratio", "g-1", 0.0, 1) == [(1001.0, 0.4)]
    assert store.count() == 5
    store.close()


def test_a_store_written_before_timestamps_gains_the_column_and_keeps_its_datapoints(tmp_path):
    path = tmp_path / "metrics.sqlite3"
    old = sqlite3.connect(path)
    old.execute(
        "CREATE TABLE datapoints (id INTEGER PRIMARY KEY AUTOINCREMENT, namespace TEXT NOT NULL,"
        " name TEXT NOT NULL, grp TEXT NOT NULL, value REAL NOT NULL, enriched INTEGER NOT NULL)"
    )
    old.execute("INSERT INTO datapoints (namespace, name, grp, value, enriched) VALUES ('AWS/EC2', 'CPU', 'g-1', 1.0, 1)")
    old.commit()
    old.close()
    store = DatapointStore(path)
    store.put("AWS/EC2", "CPU", "g-1", 2.0, True, at=50.0)
    assert store.count() == 2 and store.series("AWS/EC2", "CPU", "g-1", -1.0, 10) == [(0.0, 1.0), (50.0, 2.0)]
    store.close()
