"""A room for a class: a second machine made of a network namespace of the test's own (a veth pair,
addresses of its own), whose headless Chromium reaches a two-team room over TLS at the host's veth
address. It opens the facilitator's console and team A's database on-call's console, acks her page
and pauses the metadata service from her form; team B's lab is untouched; a foreign Host header is
refused; team A's token does not read team B's game. Root, ip and Chromium are needed (CI has them)."""

import base64
import hashlib
import json
import os
import shutil
import ssl
import subprocess
import sys
from pathlib import Path

import pytest

from chaos import journal
from stormlab.cli import main
from stormlab.gameday import room
from tests.browser import CHROMIUM, DRIVER
from tests.conftest import until

pytestmark = [
    pytest.mark.storm,
    pytest.mark.skipif(os.geteuid() != 0 or shutil.which("ip") is None, reason="needs root and ip (CI runs as root)"),
    pytest.mark.skipif(CHROMIUM is None or DRIVER is None, reason="no headless Chromium: apt-get install chromium chromium-driver"),
]
SCENARIO = Path(__file__).parents[2] / "scenarios" / "room-2015.yaml"
ROOT = Path(__file__).parents[2]


@pytest.fixture
def laptop():
    """A network namespace joined to the host by a veth pair: the host at .1, the laptop at .2 of a
    /30 of the test's own. Yields (namespace, the host's address); everything is gone after."""
    n = os.getpid() % 250 + 1
    name, host_end, its_end = f"stormlab-class-{os.getpid()}", f"slch{os.getpid() % 100000}", f"slcp{os.getpid() % 100000}"
    host_ip, its_ip = f"10.231.{n}.1", f"10.231.{n}.2"

    def ip(*argv: str, inside: bool = False) -> None:
        subprocess.run([*(["ip", "netns", "exec", name] if inside else []), "ip", *argv], check=True, capture_output=True)

    if subprocess.run(["ip", "netns", "add", name], capture_output=True).returncode != 0:
        pytest.skip("cannot make a network namespace here")
    try:
        ip("link", "add", host_end, "type", "veth", "peer", "name", its_end)
        ip("link", "set", its_end, "netns", name)
        ip("addr", "add", f"{host_ip}/30", "dev", host_end)
        ip("link", "set", host_end, "up")
        ip("addr", "add", f"{its_ip}/30", "dev", its_end, inside=True)
        ip("link", "set", its_end, "up", inside=True)
        ip("link", "set", "lo", "up", inside=True)
        yield name, host_ip
    finally:
        subprocess.run(["ip", "link", "del", host_end], capture_output=True)  # its peer goes with it
        subprocess.run(["ip", "netns", "del", name], capture_output=True)


def spki(cert: str) -> str:
    """The certificate's public key's SHA-256, base64: what Chromium pins with --ignore-certificate-errors-spki-list."""
    der = ssl.PEM_cert_to_DER_cert(Path(cert).read_text())
    key = subprocess.run(["openssl", "x509", "-inform", "der", "-pubkey", "-noout"], input=der, capture_output=True, check=True).stdout
    spki_der = subprocess.run(["openssl", "pkey", "-pubin", "-outform", "der"], input=key, capture_output=True, check=True).stdout
    return base64.b64encode(hashlib.sha256(spki_der).digest()).decode()


@pytest.mark.timeout(480)
def test_a_class_plays_from_its_own_machine_over_tls(tmp_path, monkeypatch, capsys, laptop):
    namespace, host_ip = laptop
    home = (tmp_path / "state").resolve()
    monkeypatch.setenv("STORMLAB_STATE_DIR", str(home))
    console = None
    try:
        assert main(["room", "up", "--teams", "2", "--scenario", str(SCENARIO), "--speed", "2", "--listen", host_ip, "--tls"]) == 0
        out = capsys.readouterr().out
        assert f"the room's pages are served on {host_ip}; the players' links use https://{host_ip}" in out, out
        card = room.read_card()
        reach = card["reach"]
        fingerprint = out.split("SHA-256 fingerprint: ", 1)[1].split()[0]
        a, b = (Path(card["teams"][t]) for t in ("team-1", "team-2"))
        argv = [sys.executable, "-m", "stormlab.cli", "room", "console", "--port", "0"]
        console = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, env=os.environ.copy())
        assert console.stdout is not None
        url = console.stdout.readline().split()[3]  # "the room's console: https://HOST:PORT/ (…)"
        assert url.startswith(f"https://{host_ip}:"), url
        said = [console.stdout.readline() for _ in range(2)]  # the join page's line, the certificate's
        assert "/join#token=" in said[0] and fingerprint in said[1]  # the console says the same certificate
        assert main(["room", "play"]) == 0
        played = capsys.readouterr().out
        links = {team: room.player_links(where) for team, where in (("team-1", a), ("team-2", b))}
        assert links["team-1"]["database"].startswith(f"https://{host_ip}:") and links["team-1"]["database"] in played
        player = [
            "ip", "netns", "exec", namespace, sys.executable, "-m", "tests.class_player",
            "--cert", reach["tls_cert"], "--spki", spki(reach["tls_cert"]),
            "--console", f"{url}#token={room.facilitator_token()}",
            "--player", links["team-1"]["database"],
            "--other-desk", links["team-2"]["database"].split("/play", 1)[0],
        ]  # fmt: skip
        done = subprocess.run(player, capture_output=True, text=True, timeout=400, cwd=ROOT)
        assert done.returncode == 0, (done.stdout, done.stderr[-2000:])
        saw = json.loads(done.stdout.strip().splitlines()[-1])
        assert saw["other_team_s_game_with_my_token"] == 401 and saw["my_team_s_game_without_a_token"] == 401
        assert saw["my_team_s_game_with_my_token"] == 200 and saw["a_foreign_host"] == 421
        assert "team-1 · database on-call" in saw["who"] and saw["ack"].startswith("done: acknowledged RetryStorm")
        assert saw["pause"].startswith("done: pause-metadata"), saw["pause"]
        # team A's lab holds the pause, made as its database on-call; team B's lab saw nothing of it
        until(lambda: [e for e in journal.read_journal(a) if e.get("fault") == "pause-metadata"], 20, what="team A's pause")
        assert not [e for e in journal.read_journal(b) if e.get("role") or e.get("fault") == "pause-metadata"]
    finally:
        if console is not None:
            console.terminate()
            console.communicate(timeout=30)
        monkeypatch.setenv("STORMLAB_STATE_DIR", str(home))
        main(["room", "end"])
        main(["room", "down"])
