"""A halt that nothing stops: a holder that accepts the connection and never answers (a frozen
process) is named once the deadline passes, while every other holder, and every other team of a
room, is asked at the same time and halted. Real sockets on loopback, no lab."""

import asyncio
import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from chaos import cli, client
from stormcore.errors import LabError
from stormlab.rooms import cli as room_cli
from stormlab.rooms import room


class Silent:
    """A process that is frozen: the kernel accepts its connections, nobody ever answers them."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.given_up: list[float] = []  # when each client gave its connection up (monotonic)
        self.held: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.held.append(conn)
            threading.Thread(target=self._until_closed, args=(conn,), daemon=True).start()

    def _until_closed(self, conn: socket.socket) -> None:
        try:
            while conn.recv(4096):
                pass
        except OSError:
            pass
        self.given_up.append(time.monotonic())

    def close(self) -> None:
        self.sock.close()
        for conn in self.held:
            conn.close()


class Holder:
    """A holder that answers: two leases, halted on DELETE. It notes the time of each request: before
    the silent holder's client gave up, both were asked at once; after it, one waited for the other."""

    def __init__(self) -> None:
        seen = self.seen = []

        class Handler(BaseHTTPRequestHandler):
            def _answer(self, body: dict) -> None:
                seen.append((self.command, time.monotonic()))
                data = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                self._answer({"faults": [{"id": 1, "fault": "blip", "target": "rack-0", "left_s": 3.0}]})

            def do_DELETE(self) -> None:
                self._answer({"halted": 2})

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def lab(monkeypatch, tmp_path):
    """A lab whose supervisor (the first holder asked) is frozen and whose other two holders answer."""
    monkeypatch.setenv("STORMLAB_STATE_DIR", str(tmp_path))
    monkeypatch.setattr(client, "HOLDER_DEADLINE_S", 0.5)
    silent = Silent()
    holder = Holder()
    state = {
        "settings": {"STORMLAB_RACKS": "10"},
        "supervisor_url": silent.url,
        "components": {"linkproxy": {"url": holder.url}, "metadata": {"url": holder.url}},
    }
    yield state, holder, silent
    holder.close()
    silent.close()


def test_chaos_halt_halts_every_other_holder_at_once_and_names_the_frozen_one(lab, capsys):
    state, holder, silent = lab
    with pytest.raises(LabError, match="1 holder"):
        cli.manage("halt", state, None, None)
    out, err = capsys.readouterr()
    assert "halted 4 fault(s)" in out
    assert "supervisor: did not answer within 0.5s" in err and "Traceback" not in err
    assert [method for method, _ in holder.seen] == ["DELETE", "DELETE"]
    for _ in range(50):  # its reading thread notes the close a moment after the client made it
        if silent.given_up:
            break
        time.sleep(0.1)
    assert silent.given_up, "the frozen holder's connection was never given up"
    asked_last = max(at for _, at in holder.seen)
    assert asked_last < min(silent.given_up), "the holders after the frozen one were asked only once it was given up"


def test_chaos_list_lists_every_other_holder_and_names_the_frozen_one(lab, capsys):
    state, holder, _ = lab
    with pytest.raises(LabError, match="listed"):
        cli.manage("list", state, None, None)
    out, err = capsys.readouterr()
    assert out.count("blip on rack-0") == 2
    assert "supervisor: did not answer" in err


def test_a_holder_that_answers_with_what_is_not_json_is_named_not_a_traceback(lab, monkeypatch):
    state, _, _ = lab

    def garbled(method, url, token, body=None, timeout=5.0):
        raise ValueError("Expecting value: line 1 column 1")

    monkeypatch.setattr(client, "call", garbled)
    halted, failed = client.halt_every_holder(state, "t" * 32)
    assert halted == 0 and len(failed) == 3 and all("ValueError" in line for line in failed)


def two_local_teams(tmp_path: Path) -> dict[str, Path]:
    home = room.room_dir(tmp_path)
    teams = {t: home / t for t in ("team-1", "team-2")}
    for where in teams.values():
        where.mkdir(parents=True)
    (home / room.CARD).write_text(json.dumps({"teams": {t: str(w) for t, w in teams.items()}, "sizing": {"speed": 1}}))
    return teams


def test_room_halt_halts_the_other_teams_and_names_the_team_that_is_frozen(lab, monkeypatch, tmp_path, capsys):
    state, holder, _ = lab
    frozen = {**state, "components": {}}  # team 1: its only holder, the supervisor, is frozen
    answering = {**state, "supervisor_url": holder.url}
    teams = two_local_teams(tmp_path)
    by_dir = {str(teams["team-1"]): frozen, str(teams["team-2"]): answering}
    monkeypatch.setattr(room, "running", lambda where: by_dir[str(where)])
    with pytest.raises(LabError, match="team-1: some holders did not answer"):
        room_cli.halt(None)
    out, err = capsys.readouterr()
    assert "team-2: halted 6 fault(s)" in out
    assert "team-1: halted 0 fault(s); did not answer: supervisor: did not answer within 0.5s" in out
    assert any(waiting >= 1 for _, waiting in holder.seen), "team 2 was asked only once team 1's frozen holder was given up"


def test_room_halt_on_compose_reaches_a_team_whose_metadata_service_does_not_answer(monkeypatch, tmp_path):
    """On compose the chaos container's halt reaches the fault shells (a freeze of the metadata
    container among them) whether or not the metadata service answers /status."""
    home = room.room_dir(tmp_path)
    teams = {t: home / t for t in ("team-1", "team-2")}
    for where in teams.values():
        where.mkdir(parents=True)
    env = {t: {"COMPOSE_PROJECT_NAME": f"stormlab-{t}", "METADATA_PORT": "1"} for t in teams}
    card = {"backend": "compose", "teams": {t: str(w) for t, w in teams.items()}, "compose": env, "sizing": {"speed": 1}}
    (home / room.CARD).write_text(json.dumps(card))
    halted = []
    monkeypatch.setattr(room.room_compose, "get_json", lambda url, *a, **k: None)  # no metadata service answers /status
    monkeypatch.setattr(room.room_compose, "stack_up", lambda variables, where: variables["COMPOSE_PROJECT_NAME"] != "stormlab-team-2")

    def chaos_halt(variables, where):
        halted.append(variables["COMPOSE_PROJECT_NAME"])
        return 1, ["metadata: did not answer within 5s (frozen, or too busy to answer)"]

    monkeypatch.setattr(room.room_compose, "halt", chaos_halt)
    done = room.halt(tmp_path)
    assert halted == ["stormlab-team-1"]  # team 2's stack is not up: nothing to halt there
    assert done == {"team-1": (1, ["metadata: did not answer within 5s (frozen, or too busy to answer)"])}


def test_chaos_halt_of_one_lease_on_a_frozen_holder_is_named_exit_1_not_a_traceback(lab):
    """``chaos halt supervisor#3`` once raised a bare TimeoutError (exit 1 with a traceback and no
    --json document): one deadline and one error for every request to a holder."""
    state, _, _ = lab
    began = time.monotonic()
    with pytest.raises(LabError, match=r"did not answer within 0.5s \(frozen") as raised:
        cli.halt_one(state, "supervisor", 3)
    assert raised.value.exit_code == 1 and time.monotonic() - began < 3


class Trickle(Silent):
    """A holder that answers a byte at a time, each within urllib's per-read timeout: only a
    deadline on the whole request ends it."""

    def _until_closed(self, conn: socket.socket) -> None:
        try:
            conn.recv(4096)
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n")
            while True:
                conn.sendall(b" ")
                time.sleep(0.2)
        except OSError:
            pass


def test_a_holder_trickling_its_answer_gets_no_longer_than_the_deadline(monkeypatch):
    monkeypatch.setattr(client, "HOLDER_DEADLINE_S", 0.5)
    trickle = Trickle()
    try:
        began = time.monotonic()
        with pytest.raises(client.NoAnswer):
            client.ask_holder("DELETE", f"{trickle.url}/faults?id=1", "t" * 32)
        assert time.monotonic() - began < 3
    finally:
        trickle.close()


def test_a_repair_through_the_desk_on_a_frozen_holder_is_a_failed_move_journaled(lab, tmp_path):
    """repair-endpoint through the desk once answered 504 with an empty body and was never
    journaled: the lease manager was frozen, and the desk's request to it raised past the move."""
    from chaos.journal import Journal
    from stormlab.responder.runbook import Ops

    state, _, silent = lab
    journal = Journal(tmp_path, remember=True)
    ops = Ops({**state, "directory": str(tmp_path), "components": {"leases": {"url": silent.url}}}, journal=journal)
    began = time.monotonic()
    entry = asyncio.run(ops.run("repair-endpoint", {}, "leases"))
    assert time.monotonic() - began < 3
    assert entry["ok"] is False and "did not answer within 0.5s" in entry["message"] and isinstance(entry["error"], LabError)
    [kept] = journal.kept
    assert kept["action"] == "repair-endpoint" and kept["ok"] is False and "did not answer" in kept["message"]
