"""The lab's token: admin and chaos control endpoints require ``Authorization: Bearer TOKEN``.

The token comes from ``STORMLAB_TOKEN``, else from the file ``STORMLAB_TOKEN_FILE`` names.
``stormlab up`` generates one into ``.env`` in the state directory the first time and passes it
to every component; on compose, a one-shot ``secrets`` service generates it (and Grafana's admin
password) into a volume the first time the stack starts (``python -m stormcore.auth init DIR``).
A process refuses to start with a token anyone could guess: empty, short, or a published default.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import secrets
from collections.abc import Callable, Mapping
from pathlib import Path

from aiohttp import web

from stormcore.errors import LabError
from stormcore.web import json_error

ENV = "STORMLAB_TOKEN"
FILE_ENV = "STORMLAB_TOKEN_FILE"
PROTECTED = ("/admin", "/faults")
MIN_LENGTH = 16
PUBLISHED = frozenset({"stormlab-training-token", "changeme", "change-me", "secret", "token", "stormlab"})


class WeakToken(LabError):
    """No token, or one anyone could guess: the process does not start (exit code 1)."""


def ensure_token(directory: Path) -> str:
    """The token in force: the environment's, else the file ``STORMLAB_TOKEN_FILE`` names (the
    compose stack's), else the state directory's .env, else a new one."""
    if os.environ.get(ENV):
        return os.environ[ENV]
    if os.environ.get(FILE_ENV):
        try:
            return Path(os.environ[FILE_ENV]).read_text().strip()
        except OSError as exc:
            raise LabError(f"{FILE_ENV}: {exc}") from None
    return lab_token_in(directory)


def lab_token_in(directory: Path) -> str:
    """The token of the state directory ``directory``, whatever the environment says (a room's
    team lab has its own): its .env's, or a new one written there. The file is read once, whole:
    one there or not there, never "there but read as absent" (a new one appears whole, linked into
    place), so two first starts agree."""
    env_file = directory / ".env"
    try:
        text = env_file.read_text()
    except FileNotFoundError:
        directory.mkdir(parents=True, exist_ok=True)
        return write_new_token(env_file)
    found = token_in(text)
    if not found:
        raise LabError(f"{env_file} has no {ENV}= line: add one, or remove the file and a token is generated")
    return found


def write_new_token(path: Path) -> str:
    """A new token into the env file ``path``, which must not exist: written 0600 under a temporary name, then
    linked into place, so nobody reads a half-written file and two first starts agree (the
    loser reads the winner's token)."""
    token = secrets.token_urlsafe(24)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(f"{ENV}={token}\n")
        os.link(tmp, path)  # fails if another start got there first
    except FileExistsError:
        won = read_token(path)
        if not won:
            raise LabError(f"{path} appeared without a token") from None
        return won
    finally:
        tmp.unlink(missing_ok=True)
    return token


def read_token(env_file: Path) -> str | None:
    """``STORMLAB_TOKEN=…`` from an env file (the state directory's, or the compose project's)."""
    try:
        return token_in(env_file.read_text())
    except FileNotFoundError:
        return None


def token_in(text: str) -> str | None:
    for line in text.splitlines():
        if line.startswith(f"{ENV}="):
            return line.split("=", 1)[1].strip() or None
    return None


def headers(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def carries(authorization: str, token: str | None) -> bool:
    """Whether an Authorization header is ``Bearer`` ``token`` (compared in constant time; no token,
    nobody carries it). The one bearer check of the lab, its desks and its rooms."""
    given = authorization.encode("utf-8", "surrogatepass")  # a header of bytes that are not UTF-8 arrives as surrogates
    return bool(token) and hmac.compare_digest(given, f"Bearer {token}".encode())


def join_token(facilitator: str) -> str:
    """The token a room's projected join page is opened with: it shows the page (the free seats'
    claim codes) and can do nothing else; derived from the facilitator's, so nothing more is kept."""
    return hmac.new(facilitator.encode(), b"stormlab room: the join page, shown and nothing else", hashlib.sha256).hexdigest()


def whose(authorization: str, tokens: Mapping[str, str | None]) -> str | None:
    """The name whose token an Authorization header carries, or None; every token is compared, so
    the time says nothing of which (or whether one) matched."""
    found = None
    for name, token in tokens.items():
        if carries(authorization, token):
            found = name
    return found


def token_middleware(token: str) -> Callable:
    @web.middleware
    async def require_token(request: web.Request, handler: Callable) -> web.StreamResponse:
        if request.path.startswith(PROTECTED) and not carries(request.headers.get("Authorization", ""), token):
            return json_error(401, "unauthorized", f"{request.path} needs the lab token ({ENV}) as a Bearer token")
        return await handler(request)

    return require_token


def from_env() -> str:
    """The token this process enforces: ``STORMLAB_TOKEN``, else ``STORMLAB_TOKEN_FILE``'s content.
    Raises WeakToken rather than serve control endpoints anyone could call."""
    token = os.environ.get(ENV, "").strip()
    if not token and os.environ.get(FILE_ENV):
        try:
            token = Path(os.environ[FILE_ENV]).read_text().strip()
        except OSError as exc:
            raise WeakToken(f"{FILE_ENV}: {exc}") from None
    check_strength(token)
    return token


def check_strength(token: str) -> None:
    if not token:
        raise WeakToken(f"no lab token: set {ENV} or {FILE_ENV} (`stormlab up` and compose generate one)")
    if token.lower() in PUBLISHED or len(token) < MIN_LENGTH:
        raise WeakToken(f"the lab token is too easy to guess (a published default, or under {MIN_LENGTH} characters): generate one")


LAB_GROUP = 10001  # the group the lab's image runs its services as (the Dockerfile's stormlab user)
MODES = {"token": 0o640, "grafana-password": 0o644}  # the token: the lab's group only (Grafana mounts the volume too)


def init(directory: Path, group: int | None = None) -> list[str]:
    """Write a token and a Grafana admin password into ``directory`` unless they are there (the
    compose stack's first start); returns the names written. The token is readable by its owner
    and the lab's group only (``group``, default the image's; run as root, which the stack's
    secrets service is, it is given to that group), never by Grafana, which mounts the same
    volume for its password. An existing token is put back to that mode at every start."""
    directory.mkdir(parents=True, exist_ok=True)
    group = LAB_GROUP if group is None else group
    written = []
    for name, mode in MODES.items():
        path = directory / name
        if not path.exists() or not path.read_text().strip():
            tmp = directory / f".{name}.tmp"
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(secrets.token_urlsafe(24) + "\n")
            tmp.replace(path)
            written.append(name)
        if name == "token" and os.geteuid() == 0:
            os.chown(path, 0, group)
        path.chmod(mode)
    return written


def grafana_auth() -> str | None:
    """The Authorization header for Grafana's annotation API: ``STORMLAB_GRAFANA_TOKEN`` (a
    service-account token), else ``STORMLAB_GRAFANA_USER`` (default admin) and ``STORMLAB_GRAFANA_PASSWORD``."""
    token = os.environ.get("STORMLAB_GRAFANA_TOKEN")
    if token:
        return f"Bearer {token}"
    password = os.environ.get("STORMLAB_GRAFANA_PASSWORD")
    if not password and os.environ.get("STORMLAB_GRAFANA_PASSWORD_FILE"):
        try:
            password = Path(os.environ["STORMLAB_GRAFANA_PASSWORD_FILE"]).read_text().strip()
        except OSError:
            password = None
    if password:
        user = os.environ.get("STORMLAB_GRAFANA_USER", "admin")
        return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
    return None


if __name__ == "__main__":  # `python -m stormcore.auth init DIR`: the compose stack's secrets, once
    import sys

    if len(sys.argv) != 3 or sys.argv[1] != "init":
        sys.exit("usage: python -m stormcore.auth init DIR")
    made = init(Path(sys.argv[2]))
    print(f"secrets in {sys.argv[2]}: " + (f"generated {', '.join(made)}" if made else "already there"))
