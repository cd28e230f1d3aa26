"""A rack killed with SIGKILL serves every write it acknowledged, with its value."""

import os
import signal
import subprocess
import sys
import textwrap

from storage_node.store import ItemStore

WRITER = textwrap.dedent("""
    import sys
    from storage_node.store import ItemStore
    store = ItemStore(sys.argv[1])
    for i in range(1_000_000):
        store.put("orders", i % 97, f"item-{i}", {"n": i})
        print(i, flush=True)  # acknowledged only once committed
""")


def test_every_acknowledged_write_survives_sigkill(tmp_path):
    db = tmp_path / "rack.sqlite3"
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(db)], stdout=subprocess.PIPE, text=True)
    acked = []
    try:
        for line in proc.stdout:
            acked.append(int(line))
            if len(acked) >= 3000:
                break
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        proc.stdout.close()
    store = ItemStore(db)
    lost = [i for i in acked if store.get("orders", i % 97, f"item-{i}") != (True, {"n": i})]
    store.close()
    assert len(acked) == 3000 and lost == []
