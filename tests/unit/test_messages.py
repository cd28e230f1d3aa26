"""The queues' messages with SQS's semantics, at least once, on a clock the test turns: a
receive hides a message and hands back a receipt, only a delete removes it, and a message whose
receiver never deleted it (crashed, or its answer never arrived) is received again."""

import sqlite3

import pytest

from services.queues.messages import MessageStore


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def store(tmp_path):
    clock = Clock()
    store = MessageStore(tmp_path / "queues.sqlite3", clock)
    yield store, clock
    store.close()


def test_a_received_message_is_hidden_not_deleted_and_comes_back_if_never_deleted(store):
    messages, clock = store
    sent = messages.send("q-0", {"n": 1})
    first = messages.receive("q-0", 10, visibility_s=30)
    assert [(m["id"], m["body"], m["receives"]) for m in first] == [(sent, {"n": 1}, 1)]
    assert messages.receive("q-0", 10, visibility_s=30) == []  # hidden while its receiver works
    assert messages.depth() == (1, 1)
    clock.now += 31  # the receiver crashed, or its answer was lost: nobody deleted it
    again = messages.receive("q-0", 10, visibility_s=30)
    assert [(m["id"], m["receives"]) for m in again] == [(sent, 2)] and again[0]["receipt"] != first[0]["receipt"]
    assert messages.delete("q-0", first[0]["receipt"]) is False  # the old receipt no longer deletes it
    assert messages.delete("q-0", again[0]["receipt"]) is True
    clock.now += 60
    assert messages.receive("q-0", 10, visibility_s=30) == [] and messages.depth() == (0, 0)


def test_receives_take_the_oldest_visible_of_their_own_queue(store):
    messages, _ = store
    ids = [messages.send("q-1", i) for i in range(5)]
    messages.send("q-2", "other")
    assert [m["id"] for m in messages.receive("q-1", 2, 30)] == ids[:2]
    assert [m["id"] for m in messages.receive("q-1", 10, 30)] == ids[2:]
    assert messages.delete("q-2", f"{ids[0]}.0123456789abcdef") is False


def test_a_zero_visibility_hands_the_message_out_again_at_once(store):
    messages, _ = store
    messages.send("q-0", "x")
    assert len(messages.receive("q-0", 1, 0)) == 1 and len(messages.receive("q-0", 1, 0)) == 1


def test_a_store_written_before_receives_kept_their_messages_keeps_its_messages(tmp_path):
    path = tmp_path / "queues.sqlite3"
    old = sqlite3.connect(path)
    old.execute("CREATE TABLE messages (id INTEGER PRIMARY KEY AUTOINCREMENT, queue TEXT NOT NULL, body TEXT NOT NULL)")
    old.execute("INSERT INTO messages (queue, body) VALUES ('q-0', '\"acknowledged before the upgrade\"')")
    old.commit()
    old.close()
    store = MessageStore(path)
    try:
        assert [m["body"] for m in store.receive("q-0", 10, 30)] == ["acknowledged before the upgrade"]
    finally:
        store.close()


def test_the_queue_checker_judges_what_the_producer_was_told_against_what_was_received():
    from stormlab.runs.queuecheck import ACKED, REFUSED, UNKNOWN, QueueLedger, queue_verdict

    ledger = QueueLedger()
    for n in range(5):
        ledger.sent(ACKED, n)
    ledger.sent(REFUSED, 5)
    ledger.sent(UNKNOWN, 6)
    ledger.sent(UNKNOWN, 7)
    for n in (0, 1, 1, 2, 3, 6):  # 1 twice (its delete was lost), 4 never, 6 arrived though its answer did not
        ledger.got({"qc": "run", "n": n}, "run")
    ledger.got({"qc": "an older run", "n": 0}, "run")
    v = queue_verdict(ledger, drained=True)
    assert (v.sent, v.acknowledged, v.refused, v.indeterminate) == (8, 5, 1, 2)
    assert (v.received, v.lost, v.unexpected, v.duplicates, v.recovered, v.foreign) == (5, 1, 0, 1, 1, 1)
    assert not v.ok  # 4 was acknowledged and never received
    ledger.got({"qc": "run", "n": 4}, "run")
    assert queue_verdict(ledger, drained=True).ok
    ledger.got({"qc": "run", "n": 5}, "run")  # refused, yet delivered
    assert queue_verdict(ledger, drained=True).unexpected == 1 and not queue_verdict(ledger, drained=True).ok
    assert not queue_verdict(QueueLedger(), drained=False).ok  # a queue that never drained proves nothing


def test_a_full_store_refuses_sends_and_keeps_receiving_and_deleting(tmp_path):
    from stormcore.sqlite import StoreFull

    store = MessageStore(tmp_path / "queues.sqlite3", quota_bytes=64 * 1024)
    sent = 0
    with pytest.raises(StoreFull):
        for _ in range(10_000):
            store.send("q-0", "x" * 200)
            sent += 1
    assert 50 <= sent < 400
    received = 0
    while got := store.receive("q-0", 10, 30):  # a full store still hands out and deletes
        assert all(store.delete("q-0", m["receipt"]) for m in got)
        received += len(got)
    assert received == sent
    store.send("q-0", "room again")  # the deletes made room
    store.close()
    assert (tmp_path / "queues.sqlite3").stat().st_size <= 64 * 1024
