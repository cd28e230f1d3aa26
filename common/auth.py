"""The lab's token: admin and chaos control endpoints require ``Authorization: Bearer TOKEN``.

The token comes from ``STORMLAB_TOKEN``; ``stormlab up`` generates one into ``.env`` in the
state directory the first time and passes it to every component.
"""

from __future__ import annotations

import base64
import hmac
import os
import secrets
from collections.abc import Callable
from pathlib import Path

from aiohttp import web

from common.web import json_error

ENV = "STORMLAB_TOKEN"
PROTECTED = ("/admin", "/faults")


def ensure_token(directory: Path) -> str:
    """The token in force: the environment's, else the state directory's .env, else a new one."""
    if os.environ.get(ENV):
        return os.environ[ENV]
    env_file = directory / ".env"
    found = read_token(env_file)
    if found:
        return found
    token = secrets.token_urlsafe(24)
    directory.mkdir(parents=True, exist_ok=True)
    env_file.touch(mode=0o600)
    with env_file.open("a") as f:
        f.write(f"{ENV}={token}\n")
    return token


def read_token(env_file: Path) -> str | None:
    """``STORMLAB_TOKEN=…`` from an env file (the state directory's, or the compose project's)."""
    if env_file.exists():
        for line in env_file.read_text().splitlines():
            if line.startswith(f"{ENV}="):
                return line.split("=", 1)[1].strip()
    return None


def headers(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def token_middleware(token: str) -> Callable:
    expected = f"Bearer {token}".encode()

    @web.middleware
    async def require_token(request: web.Request, handler: Callable) -> web.StreamResponse:
        if request.path.startswith(PROTECTED):
            given = request.headers.get("Authorization", "").encode()
            if not token or not hmac.compare_digest(given, expected):
                return json_error(401, "unauthorized", f"{request.path} needs the lab token ({ENV}) as a Bearer token")
        return await handler(request)

    return require_token


def from_env() -> str:
    return os.environ.get(ENV, "")


def grafana_auth() -> str | None:
    """The Authorization header for Grafana's annotation API: ``STORMLAB_GRAFANA_TOKEN`` (a
    service-account token), else ``STORMLAB_GRAFANA_USER`` (default admin) and ``STORMLAB_GRAFANA_PASSWORD``."""
    token = os.environ.get("STORMLAB_GRAFANA_TOKEN")
    if token:
        return f"Bearer {token}"
    password = os.environ.get("STORMLAB_GRAFANA_PASSWORD")
    if password:
        user = os.environ.get("STORMLAB_GRAFANA_USER", "admin")
        return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
    return None
