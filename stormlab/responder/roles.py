"""Roles as identities: a token per on-call role, issued by the game-day runner when a game starts.

The runner writes each role's token into ``game/ROLE`` in the state directory (0600, in a 0700
folder) and prints them for the players, with ``game/game.json`` saying a game is on and where its
desk listens. While it is on, `stormlab ops` makes every move through the desk, as the role whose
token it carries: ``STORMLAB_ROLE_TOKEN`` (a player at another terminal or machine, handed the
token), else the file of the role named by ``--as`` (a player on the organiser's machine). The
desk checks the token, makes the move with the lab token and writes the journal itself; a move
without a role, or with a token the desk does not know, is refused (exit 2). When the game ends
the folder goes, and with it the tokens.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from stormcore import auth
from stormcore.errors import LabError, UsageError
from stormcore.procs import Child
from stormcore.roster import game_roles
from stormcore.settings import DEFAULT_PROFILE
from stormlab.responder.moves import ROLES

GAME = "game"
TOKEN_ENV = "STORMLAB_ROLE_TOKEN"


def game_dir(directory: Path) -> Path:
    return directory / GAME


def write_private(path: Path, text: str) -> None:
    """A file only its owner reads, written whole under a temporary name, then moved into place."""
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    tmp.replace(path)


def issue(
    directory: Path, desk_url: str, title: str, team: str = "", local_url: str | None = None, incident: str = DEFAULT_PROFILE
) -> dict[str, str]:
    """New tokens for every role of the incident's game, and the game's card (``desk_url``: what the
    players open; ``local_url``: where this host's programs reach the desk, when it differs); any
    earlier game's are gone."""
    folder = game_dir(directory)
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True, mode=0o700)
    tokens = {role: secrets.token_urlsafe(18) for role in game_roles(incident)}
    for role, token in tokens.items():
        write_private(folder / role, token + "\n")
    card = {"desk": desk_url, "desk_local": local_url or desk_url, "title": title, "team": team, **Child.of(os.getpid()).record()}
    write_private(folder / "game.json", json.dumps(card) + "\n")
    return tokens


def end(directory: Path) -> None:
    shutil.rmtree(game_dir(directory), ignore_errors=True)


def current(directory: Path) -> dict[str, Any] | None:
    """The game on now (its card), or None: no card, or its runner is gone (a card left by a
    runner that was killed does not hold the lab hostage)."""
    try:
        card = json.loads((game_dir(directory) / "game.json").read_text())
    except (OSError, ValueError):
        return None
    runner = Child.read(card)  # its pid and start time: a pid reused since is not the runner
    if runner is None or not runner.alive():
        return None
    return card if isinstance(card.get("desk"), str) else None


def local_desk(card: dict[str, Any]) -> str:
    """Where a program on this host reaches the game's desk (a card of before has only the players' URL)."""
    local = card.get("desk_local")
    return local if isinstance(local, str) else card["desk"]


def token_for(directory: Path, role: str) -> str:
    """The token this player moves with: STORMLAB_ROLE_TOKEN, else the role's file here."""
    if os.environ.get(TOKEN_ENV):
        return os.environ[TOKEN_ENV].strip()
    try:
        return (game_dir(directory) / role).read_text().strip()
    except OSError:
        raise UsageError(f"no token for the {role} role here: set {TOKEN_ENV} to the token the organiser gave you") from None


def move(card: dict[str, Any], role: str | None, token_dir: Path, action: str, args: dict[str, Any]) -> dict[str, Any]:
    """One move through the game's desk as ``role``; returns the desk's answer (``ok``, ``message``,
    ``exit_code``). No role, or a token the desk refuses: UsageError (exit 2)."""
    if role is None:
        raise UsageError(
            f"a team's game day is on ({card.get('title')}): make your moves as your role, "
            f"`stormlab ops --as ROLE {action} …` (roles: {', '.join(ROLES)}), with the token the organiser gave you"
        )
    token = token_for(token_dir, role)
    body = json.dumps({"action": action, "args": args, "as": role}).encode()
    desk = local_desk(card)
    req = urllib.request.Request(
        f"{desk}/moves", data=body, method="POST", headers={"Content-Type": "application/json"} | auth.headers(token)
    )
    try:
        with urllib.request.urlopen(req, timeout=120) as resp:
            answer = json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        try:
            message = json.loads(exc.read()).get("message", str(exc))
        except ValueError:
            message = str(exc)
        if exc.code >= 500:
            raise LabError(f"the desk failed ({exc.code}): {message}") from None
        raise UsageError(message) from None
    except OSError as exc:
        raise LabError(f"the game's desk at {desk} did not answer: {exc}") from None
    if not isinstance(answer, dict) or not isinstance(answer.get("message"), str):
        raise LabError(f"the desk's answer is not a move's: {answer!r}")
    return answer
