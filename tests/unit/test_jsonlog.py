"""The lab's JSON-lines logs: they rotate past their size and a whole read spans the generations."""

from stormcore import jsonlog


def test_a_log_rotates_past_its_size_and_a_read_spans_its_generations(tmp_path):
    path = tmp_path / "events.jsonl"
    for i in range(50):
        jsonlog.append(path, {"i": i, "pad": "x" * 80}, max_bytes=1000, keep=2)
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == ["events.jsonl", "events.jsonl.1", "events.jsonl.2"]  # the oldest beyond two dropped
    assert all(p.stat().st_size <= 1000 for p in tmp_path.iterdir())
    kept = [e["i"] for e in jsonlog.read(path, keep=2)]
    assert kept == list(range(50 - len(kept), 50)) and 20 <= len(kept) < 50  # newest last, in order, none twice


def test_a_line_cut_short_by_a_crash_is_skipped(tmp_path):
    path = tmp_path / "journal.jsonl"
    path.write_text('{"a": 1}\n{"b": 2, "cut\n[1, 2]\n{"c": 3}\n')
    assert jsonlog.read(path) == [{"a": 1}, {"c": 3}]
