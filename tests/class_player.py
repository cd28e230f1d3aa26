"""A player's machine in a class: run inside a network namespace of the test's own (`ip netns exec
NS python -m tests.class_player …`), it reaches the room only through the host's veth address, over
TLS with the room's certificate pinned, as a student's laptop would after checking the fingerprint.

It opens the facilitator's console (every team shows with her token), team A's database on-call's
console (acks her RetryStorm page, pauses the metadata service from her form), and asks, as a
script on the same machine would: team B's game with team A's token (refused), and any page under
a foreign Host header (refused). It prints one JSON object of what it saw and exits 0; a step that
does not happen within its time is an exit 1 with the step named."""

from __future__ import annotations

import argparse
import json
import ssl
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

from selenium.common.exceptions import StaleElementReferenceException, WebDriverException
from selenium.webdriver.common.by import By

from tests.browser import chromium


def until(check: Callable[[], Any], limit_s: float, what: str) -> Any:
    deadline = time.monotonic() + limit_s
    while True:
        try:
            result = check()
        except (StaleElementReferenceException, WebDriverException):
            result = None
        if result:
            return result
        if time.monotonic() > deadline:
            raise SystemExit(json.dumps({"failed": what}))
        time.sleep(0.5)


def status_of(url: str, context: ssl.SSLContext, token: str | None = None, host: str | None = None) -> int:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    if host:
        headers["Host"] = host
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=10, context=context) as answer:
            return answer.status
    except urllib.error.HTTPError as exc:
        return exc.code


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--cert", required=True, help="the room's certificate, pinned")
    p.add_argument("--spki", required=True, help="its public key's SHA-256, base64, for Chromium")
    p.add_argument("--console", required=True, help="the facilitator's console with her token in the fragment")
    p.add_argument("--player", required=True, help="team A's database on-call's link")
    p.add_argument("--other-desk", required=True, help="team B's desk (its base URL)")
    args = p.parse_args()
    context = ssl.create_default_context(cafile=args.cert)
    context.check_hostname = False  # pinned: the room's own certificate is the only one trusted
    token_a = args.player.split("#token=", 1)[1]
    desk_a = args.player.split("/play", 1)[0]
    saw: dict[str, Any] = {
        "other_team_s_game_with_my_token": status_of(f"{args.other_desk}/game.json", context, token_a),
        "my_team_s_game_with_my_token": status_of(f"{desk_a}/game.json", context, token_a),
        "my_team_s_game_without_a_token": status_of(f"{desk_a}/game.json", context),
        "a_foreign_host": status_of(f"{desk_a}/play", context, host="rebound.example"),
    }
    with chromium(extra=[f"--ignore-certificate-errors-spki-list={args.spki}"]) as d:
        d.get(args.console)
        saw["console_teams"] = until(
            lambda: all(t in d.find_element(By.ID, "room").text for t in ("team-1", "team-2")), 60, "the console's teams"
        )
        d.get(args.player)
        saw["who"] = until(lambda: "database on-call" in (who := d.find_element(By.ID, "who").text) and who, 60, "her console")
        until(lambda: d.find_elements(By.CSS_SELECTOR, "#pages button[data-alert='RetryStorm']"), 180, "RetryStorm paged")
        until(lambda: d.find_element(By.CSS_SELECTOR, "#pages button[data-alert='RetryStorm']").click() or True, 10, "the ack clicked")
        saw["ack"] = until(lambda: "acknowledged" in (said := d.find_element(By.ID, "said").text) and said, 30, "the ack's answer")
        form = d.find_element(By.CSS_SELECTOR, "form[data-move='pause-metadata']")
        form.find_element(By.NAME, "duration").send_keys("2m")
        form.find_element(By.TAG_NAME, "button").click()
        saw["pause"] = until(lambda: "pause-metadata" in (said := d.find_element(By.ID, "said").text) and said, 60, "the pause's answer")
    print(json.dumps(saw), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
