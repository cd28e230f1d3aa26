"""A training room played in a real browser: two teams of 400 nodes meet the 2015 blip at the same
moment and storm; the facilitator starts the game from the console; team 1's database on-call acks
her page, answers the executive's inject (a page on her console and in her CLI, fired within 2 s of
its time) with a status post naming the tables, and plays AWS's runbook from her console's forms;
team 2 does nothing. Team 1's journal and score show her moves and the inject answered, and her lab
recovers; team 2's lab never sees them (still storming through
them, its metadata service never paused); the facilitator's page shows both curves and the
leaderboard; a move with another role's token, or another team's, is refused. The facilitator
holds the game for a moment: her console says ON HOLD, a move on the lab is refused, an ack is not.

Where the test may make a second machine (root: a network namespace, tests/browser.py) the class
plays from its own laptop: the room listens on the host's end of a veth pair, over TLS with a
certificate of the test's own that the browser pins, and the browser runs inside the namespace,
reaching the room only there. The facilitator projects the join page (every role's link and QR
code); a request under a foreign Host is refused, and a team's token reads neither another team's
game nor, without it, its own. Elsewhere the room is this host's, on loopback, as before.

Screenshots of both consoles in the storm go to $STORMLAB_SCREENSHOTS if set (docs/rooms/)."""

import asyncio
import base64
import hashlib
import json
import os
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select

from chaos import journal
from stormlab.cli import main
from stormlab.responder import monitoring, players, reach, roles
from stormlab.rooms import cli as room_cli
from stormlab.rooms import room
from tests.browser import Laptop, can_make_a_laptop, chromium, laptop
from tests.conftest import until

pytestmark = pytest.mark.storm
SCENARIO = Path(__file__).parents[2] / "scenarios" / "room-2015.yaml"
RUNBOOK = {"pause-metadata", "capacity", "resume-metadata"}  # the leases the database's three moves take


def readings(card: dict) -> dict:
    """Each team's customers' error (None: loadgen counted no request in its last 10 s), nodes
    serving, and what the host broke of its validity budgets in the last 10 s (loop lag, CPU
    steal: [] when the reading is valid), now."""
    seen = asyncio.run(room_cli.readings(card))
    return {team: (s.reading.customer_error_ratio, s.reading.nodes_serving, s.invalid) for team, s in seen.items() if s}


def host_shaped(through: list[tuple[float | None, int, list[str]]]) -> str:
    """What a failed reading of team 2 says of the host: did it shape the run (INVALID) or not."""
    shaped = sorted({reason for _, _, invalid in through for reason in invalid})
    return f"INVALID, the host shaped team 2's run: {shaped}" if shaped else "valid: the host did not shape team 2's run"


def submit(driver, move: str, **values: str) -> str:
    """Fill a move's form on a role's console, send it, and return what the console said of it."""
    before = driver.find_element(By.ID, "said").text
    form = driver.find_element(By.CSS_SELECTOR, f"form[data-move='{move}']")
    for name, value in values.items():
        form.find_element(By.NAME, name).send_keys(value)
    form.find_element(By.TAG_NAME, "button").click()
    return until(lambda: (said := driver.find_element(By.ID, "said").text) != before and said, 60, what=f"{move}'s answer")


def text(driver, element_id: str) -> str:
    """An element's text now ('' if the page redrew it as it was read: the panels are redrawn every 2 s)."""
    try:
        return driver.find_element(By.ID, element_id).text
    except StaleElementReferenceException:
        return ""


def ack(driver, alert: str, before=lambda: None) -> str:
    """Click the ack of a page on the console once it is paged (``before`` then: the page as the
    player sees it); the list is redrawn every 2 s, so a button can go stale."""

    def click() -> bool:
        try:
            driver.find_element(By.CSS_SELECTOR, f"#pages button[data-alert='{alert}']").click()
        except StaleElementReferenceException:
            return False
        return True

    until(lambda: driver.find_elements(By.CSS_SELECTOR, f"#pages button[data-alert='{alert}']"), 150, 0.5, f"{alert} paged")
    before()
    until(click, 10, what="the ack clicked")
    return until(lambda: "acknowledged" in (said := driver.find_element(By.ID, "said").text) and said, 30, what="the ack's answer")


def shot(driver, name: str, tmp_path: Path) -> None:
    where = Path(os.environ.get("STORMLAB_SCREENSHOTS") or tmp_path)
    where.mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(where / name))


def spki(cert: str) -> str:
    """The certificate's public key's SHA-256, base64: what Chromium pins (--ignore-certificate-errors-spki-list)."""
    der = ssl.PEM_cert_to_DER_cert(Path(cert).read_text())
    key = subprocess.run(["openssl", "x509", "-inform", "der", "-pubkey", "-noout"], input=der, capture_output=True, check=True).stdout
    spki_der = subprocess.run(["openssl", "pkey", "-pubin", "-outform", "der"], input=key, capture_output=True, check=True).stdout
    return base64.b64encode(hashlib.sha256(spki_der).digest()).decode()


def answer(url: str, cert: str, token: str | None = None, host: str | None = None) -> int:
    """The status a page answers a script on the class's network (the room's certificate pinned)."""
    context = ssl.create_default_context(cafile=cert)
    headers = ({"Authorization": f"Bearer {token}"} if token else {}) | ({"Host": host} if host else {})
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=10, context=context) as got:
            return got.status
    except urllib.error.HTTPError as refused:
        return refused.code


@pytest.fixture
def class_laptop():
    """The class's laptop where the test may make one (root), else None: the room on loopback."""
    if can_make_a_laptop() is not None:
        yield None
        return
    with laptop() as made:
        yield made


@pytest.mark.timeout(420)
def test_two_teams_storm_one_plays_the_runbook_in_the_browser_the_other_never_knows(tmp_path, monkeypatch, capsys, class_laptop):
    home = (tmp_path / "state").resolve()
    monkeypatch.setenv("STORMLAB_STATE_DIR", str(home))
    console = None
    where: Laptop | None = class_laptop
    reachable, pinned = [], []
    if where is not None:  # the room on the host's end of the laptop's link, over TLS; the browser pins its certificate
        tls = reach.make_certificate(tmp_path / "tls", [where.host_ip])
        reachable = ["--listen", where.host_ip, "--tls-cert", tls.cert, "--tls-key", tls.key]
        pinned = [f"--ignore-certificate-errors-spki-list={spki(tls.cert)}"]
    try:
        # The browser first: its start-up takes both cores for seconds, and two labs of 400 nodes at
        # speed 2 starting under it can fall into a herd they never leave (seen here: 0/400 serving).
        with chromium(extra=pinned, on=where) as d:
            assert main(["room", "up", "--teams", "2", "--scenario", str(SCENARIO), "--speed", "1", *reachable]) == 0
            out = capsys.readouterr().out
            assert "room: 2 teams of 400 nodes at speed 1" in out
            card = room.read_card()
            a, b = (Path(card["teams"][t]) for t in ("team-1", "team-2"))
            argv = [sys.executable, "-m", "stormlab.cli", "room", "console", "--port", "0"]
            console = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, env=os.environ.copy())
            assert console.stdout is not None
            url = console.stdout.readline().split()[3]  # "the room's console: http://127.0.0.1:PORT/ (…)"
            join_url = console.stdout.readline().split()[-1]  # "the join page to project …: URL/join#token=JOIN_TOKEN"
            if where is not None:
                assert f"the room's pages are served on {where.host_ip}; the players' links use https://{where.host_ip}" in out, out
                assert url.startswith(f"https://{where.host_ip}:"), url
            # the facilitator waits for the room to settle (every team's customers served) before the game
            settled = lambda: (seen := readings(card)) and len(seen) == 2 and all((e or 0.0) < 0.01 for e, _, _ in seen.values())  # noqa: E731
            until(settled, 60, 2, "the room settled")
            # the facilitator starts the game in both labs from the console, with her token
            d.get(f"{url}#token={room.facilitator_token()}")
            d.find_element(By.ID, "start").click()
            until(lambda: "start: done" in d.find_element(By.ID, "said").text, 30, what="the game started")
            assert main(["room", "play"]) == 1  # one game at a time
            assert "a game is on" in capsys.readouterr().err
            room.wait_for_desks()
            links = {team: room.player_links(lab) for team, lab in (("team-1", a), ("team-2", b))}
            if where is not None:
                # what a script on the class's network gets: a team's token reads its own game only, none without
                # it; a page addressed under another name (DNS rebinding) is refused
                mine, theirs = (links[t]["database"].split("/play#token=") for t in ("team-1", "team-2"))
                assert links["team-1"]["database"].startswith(f"https://{where.host_ip}:")
                assert answer(f"{mine[0]}/game.json", tls.cert, mine[1]) == 200
                assert answer(f"{theirs[0]}/game.json", tls.cert, mine[1]) == 401
                assert answer(f"{mine[0]}/game.json", tls.cert) == 401
                assert answer(f"{mine[0]}/play", tls.cert, host="rebound.example") == 421
                # the facilitator projects the join page with the join token: every seat of both teams as a claim code,
                # no role's token on the screen, and the join token gone from the address bar
                assert room.facilitator_token() not in join_url
                d.get(join_url)
                until(
                    lambda: len(d.find_elements(By.CSS_SELECTOR, "#teams figure svg")) == 2 * len(links["team-1"]), 30, 0.5, "the join page"
                )
                assert "#" not in d.current_url and "token=" not in d.find_element(By.ID, "teams").text
                # team 1's database on-call scans her seat's code and takes the seat: her console; the seat is hers
                team_1 = next(
                    s for s in d.find_elements(By.CSS_SELECTOR, "#teams section") if s.find_element(By.TAG_NAME, "h2").text == "team-1"
                )
                seat = next(f for f in team_1.find_elements(By.TAG_NAME, "figure") if f.find_element(By.TAG_NAME, "b").text == "database")
                d.get(seat.find_element(By.TAG_NAME, "code").text)
                d.find_element(By.CSS_SELECTOR, "form button").click()
                until(lambda: "team-1 · database on-call" in d.find_element(By.ID, "who").text, 30, what="her console, from her seat")

            # team 1's database on-call opens her console with her token: her role, her forms
            d.get(links["team-1"]["database"])
            until(lambda: "team-1 · database on-call" in d.find_element(By.ID, "who").text, 30, what="her console")
            assert len(d.find_elements(By.CSS_SELECTOR, "#moves form")) == len(players.moves_for("database"))
            until(lambda: len(d.find_elements(By.CSS_SELECTOR, "#monitoring tr")) == len(monitoring.WATCHED), 10, 0.5, "her monitoring")
            assert "No dashboards" in d.find_element(By.ID, "dashboards").text  # a local lab has no Grafana: it says so

            def storming() -> bool:
                seen = readings(card)
                return all((seen[t][0] or 0.0) > 0.3 for t in ("team-1", "team-2"))

            until(storming, 120, 2.0, "both teams' customers failing")  # both met the blip, both storm
            said = ack(d, "RetryStorm", before=lambda: shot(d, "players-console.png", tmp_path))
            assert said.startswith("done: acknowledged RetryStorm"), said

            # a move with another role's token, or another team's, is refused and moves nothing (while the game is on:
            # its desk goes with it)
            d.get(links["team-1"]["queues"])
            until(lambda: "queues on-call" in d.find_element(By.ID, "who").text, 30, what="the queues' console")
            assert "pause-metadata" not in {f.get_attribute("data-move") for f in d.find_elements(By.CSS_SELECTOR, "#moves form")}
            status, body = d.execute_async_script(
                """const done = arguments[arguments.length - 1];
                fetch("/moves", {method: "POST", headers: {...auth, "Content-Type": "application/json"},
                                 body: JSON.stringify({action: "pause-metadata", args: {}, as: "queues"})})
                  .then(async r => done([r.status, await r.json()]));"""
            )
            assert status == 403 and "database on-call's move" in body["message"], body
            d.get(links["team-2"]["database"].replace(roles.current(b)["desk"], roles.current(a)["desk"]))
            until(lambda: "not a role's in this game" in d.find_element(By.ID, "who").text, 30, what="team 2's token refused")

            # the executive's inject (at 40 s of the game): on her console as a page, in her CLI's look, on
            # the runner's lines; she answers it as it asks, a status post naming the tables
            d.get(links["team-1"]["database"])
            until(lambda: d.find_elements(By.CSS_SELECTOR, "#pages button[data-alert='exec-asks']"), 60, 0.5, "the inject")
            assert "An executive asks" in until(lambda: text(d, "pages"), 10, what="her pages")
            monkeypatch.setenv("STORMLAB_STATE_DIR", str(a))
            capsys.readouterr()
            assert main(["ops", "--as", "database", "status"]) == 0
            assert "waiting for your ack: exec-asks: An executive asks" in capsys.readouterr().out
            monkeypatch.setenv("STORMLAB_STATE_DIR", str(home))
            [told] = [e for e in room.events(a / room.GAME_LOG) if e["event"] == "inject"]
            assert told["name"] == "exec-asks" and told["to"] == "database"
            said = submit(d, "post to the status page", text="Customers of catalog and orders see errors in us-east; investigating.")
            assert said.startswith("done: posted"), said

            # an inject typed live: at the console to team 1's database, at the CLI to all of team 2
            d.get(f"{url}#token={room.facilitator_token()}")
            form = d.find_element(By.ID, "inject")
            Select(form.find_element(By.NAME, "team")).select_by_visible_text("team-1")
            Select(form.find_element(By.NAME, "to")).select_by_visible_text("database")
            form.find_element(By.NAME, "message").send_keys("The incident call starts: acknowledge when you have the bridge.")
            form.find_element(By.TAG_NAME, "button").click()
            until(lambda: '"team-1":{"name":"live-1"' in d.find_element(By.ID, "said").text, 30, what="the live inject sent")
            assert main(["room", "inject", "--team", "team-2", "--to", "team", "Who is the incident commander?"]) == 0
            assert "team-2: sent live-1" in capsys.readouterr().out

            # the facilitator holds the game: her console says so, a move on the lab is refused, an ack is not;
            # then the game goes on (at the CLI)
            d.find_element(By.ID, "hold").click()
            until(lambda: "hold: done" in d.find_element(By.ID, "said").text, 30, what="the game held")
            d.get(links["team-1"]["database"])
            until(lambda: d.find_element(By.ID, "held").is_displayed(), 10, 0.5, "ON HOLD on her console")
            said = submit(d, "pause-metadata")
            assert said.startswith("refused (409): the facilitator holds the game: pause-metadata waits"), said
            said = ack(d, "live-1")
            assert said.startswith("done: acknowledged live-1"), said
            assert main(["room", "continue"]) == 0
            out = capsys.readouterr().out
            assert "team-1: on at" in out and "team-2: on at" in out, out
            until(lambda: not d.find_element(By.ID, "held").is_displayed(), 10, 0.5, "ON HOLD gone")
            b_through: list[tuple[float | None, int, list[str]]] = []  # team 2's readings through team 1's moves
            said = submit(d, "pause-metadata", duration="2m")
            assert said.startswith("done: pause-metadata"), said
            b_through += [readings(card)["team-2"] for _ in range(3)]
            said = submit(d, "set-capacity", cores="64", duration="5m")
            assert said.startswith("done: capacity"), said  # the admin path is quiet with the fleet held back
            said = submit(d, "resume", staged="5", every="5s")
            assert said.startswith("done: resume-metadata"), said

            def recovered() -> bool:
                b_through.append(readings(card)["team-2"])
                return room.game_state()["team-1"]["outcome"] == "passed"

            until(recovered, 150, 2.0, "team 1's game won")

            # the facilitator's page: both curves, and the leaderboard with team 1 first
            d.get(f"{url}#token={room.facilitator_token()}")  # a reachable room's readings show with her token only
            until(lambda: "team-1 yes" in text(d, "leaderboard"), 20, what="the leaderboard")
            board = until(lambda: text(d, "leaderboard"), 10, what="the leaderboard read").splitlines()
            assert board[1].startswith("1 team-1 yes") and board[2].startswith("2 team-2 not yet"), board
            assert len(d.find_elements(By.CSS_SELECTOR, "#teams polyline")) == 2
            shot(d, "facilitator-console.png", tmp_path)  # team 1 recovered, team 2 in the storm

        assert main(["room", "end"]) == 0
        out = capsys.readouterr().out
        assert "team-1: passed" in out and "team-2: interrupted" in out, out
        debrief = (home / "room" / "debrief.html").read_text()  # the room's debrief: both teams side by side
        assert "<th>team-1</th><th>team-2</th>" in debrief and "<td>recovered</td><td>yes</td><td>no</td>" in debrief
        # team 1's journal and score: the ack and the three moves, each as the database on-call
        [run] = (home / "room" / "games" / "team-1").glob("*/journal.json")
        played = json.loads(run.read_text())
        assert all(p["ok"] and p["role"] == "database" for p in played["player_actions"])  # the refused moves are not in it
        made = [p["action"] for p in played["player_actions"]]
        assert made == ["ack", "status", "post-status", "ack", "pause-metadata", "set-capacity", "resume"], made
        assert played["score"]["recovered"] and played["score"]["actions_taken"] == 3
        assert played["roles"]["database"]["moves"] == 3
        inject, live = played["injects"]  # fired within 2 s of its time (40 s of the game, at speed 1), answered, scored
        assert inject["at_s"] == 40.0 and 0 <= inject["fired_s"] - inject["at_s"] <= 2.0, inject
        assert inject["answered"] and played["status_page"]["impact_named"]
        assert live["name"] == "live-1" and live["at_s"] is None and live["answered"] and live["answer_s"] < 60
        assert played["score"]["injects_answered"] == played["score"]["injects_fired"] == 2
        assert played["roles"]["database"]["acks"] == 2
        [held] = played["holds"]  # the hold, on the game's clock: after the inject at 20 s, before the moves
        assert held["at_s"] > inject["fired_s"] and held["held_s"] > 0 and not held["on"], held
        assert all(p["t"] >= held["at_s"] for p in played["player_actions"][-3:])
        # team 2's: nothing of team 1's reached it
        assert not [e for e in journal.read_journal(b) if e.get("role") or e.get("fault") in RUNBOOK]
        [run_b] = (home / "room" / "games" / "team-2").glob("*/journal.json")
        played_b = json.loads(run_b.read_text())
        assert played_b["player_actions"] == [] and played_b["score"]["injects_answered"] == 0
        # and its customers stormed on through team 1's moves wherever the host did not shape the reading (a starved
        # loadgen counts next to nothing: seen here, 584 ms late), some reading saying so unless the host shaped the whole
        # run; its fleet stayed up, unless the host shaped team 2's run (its game's own verdict, or a reading's): two labs
        # of 400 nodes and a browser on 2 cores have starved team 2's into 0/400 serving
        judged = [error for error, _, invalid in b_through if not invalid and error is not None]
        assert all(error > 0.3 for error in judged), (host_shaped(b_through), b_through)
        assert judged or not played_b["validity"]["valid"], (host_shaped(b_through), played_b["validity"], b_through)
        shaped = not played_b["validity"]["valid"] or any(invalid for _, _, invalid in b_through)
        assert all(serving >= 300 or shaped for _, serving, _ in b_through), (host_shaped(b_through), played_b["validity"], b_through)
        assert len(played_b["holds"]) == 1  # the hold was the room's: every team's game stood still
        assert [(i["name"], i["to"], i["answered"]) for i in played_b["injects"]] == [
            ("exec-asks", "database", False),
            ("live-1", "team", False),
        ]
    finally:
        if console is not None:
            console.terminate()
            console.communicate(timeout=30)
        monkeypatch.setenv("STORMLAB_STATE_DIR", str(home))
        main(["room", "down"])
