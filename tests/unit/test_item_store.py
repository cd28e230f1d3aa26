"""A rack's item store: a quota the customer API cannot pass, and files only its user can read."""

import os
import stat

import pytest

from storage_node.store import ItemStore, QuotaExceeded


def test_writes_past_the_quota_are_refused_and_change_nothing(tmp_path):
    store = ItemStore(tmp_path / "rack.sqlite3", quota_bytes=1000)
    written = 0
    with pytest.raises(QuotaExceeded):
        for i in range(100):
            store.put("orders", 0, f"k{i}", "x" * 90)
            written += 1
    assert 8 <= written < 12 and store.count() == written and store.bytes <= 1000
    found, value = store.get("orders", 0, f"k{written}")
    assert not found and value is None  # the refused write is not there
    store.put("orders", 0, "k0", "y" * 90)  # a write that does not grow the store still goes in
    store.put("orders", 0, "k1", "z")  # nor one that shrinks it
    assert store.get("orders", 0, "k0") == (True, "y" * 90)
    before = store.bytes
    store.close()
    again = ItemStore(tmp_path / "rack.sqlite3", quota_bytes=1000)  # the size is read back from disk
    assert again.bytes == before and again.count() == written
    again.close()


def test_the_store_files_are_private_whatever_the_umask(tmp_path):
    old = os.umask(0)
    try:
        store = ItemStore(tmp_path / "rack.sqlite3")
        store.put("orders", 0, "k", 1)
        store.close()
    finally:
        os.umask(old)
    for path in tmp_path.iterdir():
        assert stat.S_IMODE(path.stat().st_mode) & 0o077 == 0, path.name
