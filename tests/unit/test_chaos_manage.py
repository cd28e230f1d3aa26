"""`chaos list` and `chaos halt` ask every holder, whatever one of them does."""

import pytest

from chaos import cli, client
from stormcore.errors import LabError

STATE = {
    "settings": {"STORMLAB_RACKS": "10"},
    "supervisor_url": "http://sup",
    "components": {"linkproxy": {"url": "http://proxy"}, "metadata": {"url": "http://meta"}},
}


@pytest.fixture
def calls(monkeypatch, tmp_path):
    monkeypatch.setenv("STORMLAB_STATE_DIR", str(tmp_path))
    asked = []

    def call(method, url, token, body=None, timeout=5.0):
        asked.append((method, url))
        if url.startswith("http://meta"):  # paused or killed: it does not answer
            raise LabError(f"{url} did not answer: timed out")
        if method == "DELETE":
            return {"halted": 2}
        return {"faults": [{"id": 1, "fault": "blip", "target": "rack-0", "left_s": 3.0}]}

    monkeypatch.setattr(client, "call", call)
    return asked


def test_halt_halts_every_other_holder_and_says_which_did_not_answer(calls, capsys):
    with pytest.raises(LabError, match="1 holder"):
        cli.manage("halt", STATE, None, None)
    out, err = capsys.readouterr()
    assert "halted 4 fault(s)" in out and "metadata" in err
    assert sorted(url for _, url in calls) == ["http://meta/faults", "http://proxy/faults", "http://sup/faults"]


def test_list_lists_every_other_holder(calls, capsys):
    with pytest.raises(LabError, match="listed"):
        cli.manage("list", STATE, None, None)
    out, _ = capsys.readouterr()
    assert out.count("blip on rack-0") == 2
