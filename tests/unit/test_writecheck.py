"""The write checker's verdict: what the client was told against what the lab holds."""

from stormlab.runs.writecheck import ACKED, REFUSED, UNKNOWN, Ledger, verdict


def ledger_of(**outcomes):
    ledger = Ledger()
    for outcome, keys in outcomes.items():
        for key in keys:
            ledger.record({"acked": ACKED, "refused": REFUSED, "unknown": UNKNOWN}[outcome], "orders", key, {"k": key})
    return ledger


def test_everything_acknowledged_found_and_nothing_refused_stored_is_ok():
    ledger = ledger_of(acked=["a", "b"], refused=["c"], unknown=["d"])
    found = {("orders", "a"): {"k": "a"}, ("orders", "b"): {"k": "b"}, ("orders", "c"): None}
    v = verdict(ledger, found, set())
    assert (v.written, v.acknowledged, v.refused, v.indeterminate, v.read_back, v.lost, v.refused_but_stored) == (4, 2, 1, 1, 2, 0, 0)
    assert v.ok


def test_a_lost_write_a_changed_value_and_a_refusal_that_was_stored_are_each_caught():
    ledger = ledger_of(acked=["a", "b"], refused=["c"])
    found = {("orders", "a"): None, ("orders", "b"): {"k": "other"}, ("orders", "c"): {"k": "c"}}
    v = verdict(ledger, found, set())
    assert (v.lost, v.refused_but_stored, v.read_back) == (2, 1, 0) and not v.ok


def test_an_item_that_could_not_be_read_is_not_called_lost_but_fails_the_check():
    v = verdict(ledger_of(acked=["a"]), {}, {("orders", "a")})
    assert (v.lost, v.unreadable) == (0, 1) and not v.ok
