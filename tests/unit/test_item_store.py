"""A rack's item store: a quota the customer API cannot pass, and files only its user can read."""

import os
import stat

import pytest

from storage_node.store import ItemStore, QuotaExceeded

QUOTA = 64 * 1024


def test_writes_past_the_quota_on_disk_are_refused_and_change_nothing(tmp_path):
    """Keys and rows count, not only values: 256-byte keys with 1-byte values once took ~600x a
    quota that counted value bytes."""
    store = ItemStore(tmp_path / "rack.sqlite3", quota_bytes=QUOTA)
    written = 0
    with pytest.raises(QuotaExceeded, match="at its quota"):
        for i in range(10_000):
            store.put("orders", 0, f"{i:0256d}", 1)
            written += 1
    assert 20 <= written < 200 and store.count() == written and store.bytes <= QUOTA
    assert store.get("orders", 0, f"{written:0256d}") == (False, None)  # the refused write is not there
    assert store.get("orders", 0, f"{0:0256d}") == (True, 1)  # a full store keeps serving reads
    store.put("orders", 0, f"{0:0256d}", 2)  # an overwrite of the same size fits in its page
    assert store.get("orders", 0, f"{0:0256d}") == (True, 2)
    store.close()
    assert (tmp_path / "rack.sqlite3").stat().st_size <= QUOTA  # on disk, once the WAL is checkpointed
    again = ItemStore(tmp_path / "rack.sqlite3", quota_bytes=QUOTA)  # the limit holds after a restart
    with pytest.raises(QuotaExceeded):
        again.put("orders", 0, "one more" * 30, 1)
    assert again.count() == written
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
