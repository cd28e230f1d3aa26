import pytest

from chaos.fault_lease import FaultLeaseBook, FaultLeaseError


def test_a_lease_is_due_at_its_end_and_only_once():
    book = FaultLeaseBook()
    lease = book.open("blip", "rack-0", 5, now=10.0, racks=[0])
    assert book.due(14.9) == []
    assert book.active(12.0) == [{"id": 1, "fault": "blip", "target": "rack-0", "left_s": 3.0, "racks": [0]}]
    assert book.due(15.0) == [lease]
    assert book.due(20.0) == [] and len(book) == 0


def test_due_in_end_order_and_halt_takes_everything():
    book = FaultLeaseBook()
    a = book.open("freeze", "rack-1", 10, now=0.0)
    b = book.open("blip", "rack-2", 3, now=0.0)
    assert book.due(11.0) == [b, a]
    book.open("kill", "rack-3", 60, now=0.0)
    book.open("kill", "rack-4", 60, now=0.0)
    assert [x.target for x in book.halt()] == ["rack-3", "rack-4"] and len(book) == 0


@pytest.mark.parametrize("duration", [0, -1, 601, float("inf"), "5", None, True])
def test_bad_durations_are_refused_and_nothing_is_opened(duration):
    book = FaultLeaseBook(max_duration_s=600)
    with pytest.raises(FaultLeaseError):
        book.open("blip", "rack-0", duration, now=0.0)
    assert len(book) == 0


def test_holding():
    book = FaultLeaseBook()
    lease = book.open("freeze", "metadata", 5, now=0.0)
    assert book.holding("metadata") == [lease] and book.holding("rack-0") == []


def test_a_lease_on_several_targets_holds_each_of_them():
    book = FaultLeaseBook()
    book.open("blip", "rack-0,rack-1", 5, now=0.0)
    book.open("latency", "rack-1", 5, now=0.0)
    assert [x.fault for x in book.holding("rack-1")] == ["blip", "latency"]
    assert [x.fault for x in book.holding("rack-1", "blip")] == ["blip"]
    assert book.holding("rack-2") == []
