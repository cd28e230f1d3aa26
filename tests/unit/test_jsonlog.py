"""The lab's JSON-lines logs: they rotate past their size, a whole read spans the generations, and
a tail reads only what is new (across a rotation too)."""

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


def test_a_tail_reads_only_what_is_new_even_across_a_rotation(tmp_path):
    path = tmp_path / "pages.jsonl"
    tail = jsonlog.Tail(path)
    assert tail.new() == []  # no file yet
    jsonlog.append(path, [{"n": 1}, {"n": 2}])
    assert [e["n"] for e in tail.new()] == [1, 2]
    assert tail.new() == []
    with path.open("a") as f:
        f.write('{"n": 3}\n{"n": ')  # a writer in the middle of a line
    assert [e["n"] for e in tail.new()] == [3]
    with path.open("a") as f:
        f.write("4}\n")
    assert [e["n"] for e in tail.new()] == [4]
    jsonlog.rotate(path)
    jsonlog.append(path, {"n": 5})
    assert [e["n"] for e in tail.new()] == [5]
