"""A training room on docker compose: one compose project per team (``stormlab-team-1`` …), each the
whole stack of docker-compose.yml (its network, its volumes, its token, its Prometheus and
Alertmanager, Grafana when its image is here) on a block of host ports of its own, so that
nothing one team does reaches another. The room's card keeps each team's compose variables; the
team's runner, its chaos and its moves use them (``COMPOSE_PROJECT_NAME`` and the ``*_PORT``
variables are all `scenario run --backend docker`, `chaos` and `ops` need to find the team's stack).

Each team's ports: ``PORT_BASE + PORT_STRIDE * n`` and the offsets below (team 1: the metadata
service on 20020, loadgen 20022, … its desk 20029, Prometheus 20030, Alertmanager 20033, Grafana
20035), all on 127.0.0.1 but Grafana (``STORMLAB_BIND``). Alertmanager posts each team's pages to
that team's desk: the room writes the team's copy of alertmanager/ with the desk's port in it. The
desk takes them on the address containers reach the host at, in plain http; a room served to other
machines (``--listen``, ``--tls``) serves the team's players' pages on a port of its own (20031).
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import yaml

from stormcore import auth
from stormcore.errors import LabError, UsageError
from stormcore.settings import USER_POLICIES, LabSettings
from stormlab.engine import compose
from stormlab.engine.compose import DockerStack, docker_state, get_json
from stormlab.engine.reading import Reading
from stormlab.responder import roles

PORT_BASE = 20000
PORT_STRIDE = 20
# Each variable of docker-compose.yml that publishes a port, and the desk's (the team's runner), at its
# offset in the team's block.
OFFSETS = {
    "METADATA_PORT": 0,
    "LOADGEN_PORT": 2,
    "QUEUES_PORT": 4,
    "SCALING_PORT": 5,
    "CONSOLE_PORT": 6,
    "METRICS_PORT": 7,
    "DESK_PORT": 9,
    "PROMETHEUS_PORT": 10,
    "PLAY_PORT": 11,
    "ALERTMANAGER_PORT": 13,
    "GRAFANA_PORT": 15,
}
RUNNERS_PORTS = ("DESK_PORT", "PLAY_PORT")  # the team's runner's, on this host: no compose variable
DESK_IN_CONFIG = "stormlab-desk:8709"  # where alertmanager/alertmanager.yml posts the pages (one stack's desk)
COMPOSE_FILE = compose.ROOT / "docker-compose.yml"
ALERTMANAGER_DIR = compose.ROOT / "alertmanager"
LAB_SERVICES = ("metadata", "rack", "loadgen", "queues", "scaling", "console", "metrics", "prometheus", "alertmanager")
UP_TIMEOUT_S = 600.0
SETTLED = 0.01  # a team's stack is up once its customers fail less than this
KEPT = ("STORMLAB_IMAGE", "STORMLAB_BASE_IMAGE", "STORMLAB_BIND")  # of this process's STORMLAB_ variables, what a team's stack takes


def project(team: str) -> str:
    return f"stormlab-{team}"


def ports(number: int) -> dict[str, int]:
    """Team ``number``'s (1, 2, …) block of host ports, by variable."""
    base = PORT_BASE + PORT_STRIDE * number
    return {name: base + offset for name, offset in OFFSETS.items()}


def carried() -> set[str]:
    """The lab's settings docker-compose.yml passes to its services (its ``x-lab-env``): a room on
    compose can give its labs these and no others."""
    return {k for k in yaml.safe_load(COMPOSE_FILE.read_text())["x-lab-env"] if k.startswith("STORMLAB_") and "TOKEN" not in k}


def variables(team: str, number: int, settings: LabSettings, team_dir: Path) -> dict[str, str]:
    """The compose variables of a team's stack: its project, its ports, its Alertmanager's files,
    the lab's settings compose carries. A setting it cannot carry is refused (UsageError)."""
    wanted, default, passed = settings.to_env(), LabSettings().replace(seed=settings.seed).to_env(), carried()
    lost = sorted(k for k, v in wanted.items() if k not in passed and default.get(k) != v)
    if lost:
        raise UsageError(
            f"docker-compose.yml does not pass {', '.join(lost)} to its services: a room on compose runs the "
            f"settings it carries ({', '.join(sorted(passed))}); run this room with --backend local"
        )
    if settings.retry_policy.startswith(USER_POLICIES):
        raise UsageError(
            f"--retry-policy {settings.retry_policy.partition(':')[2]}: a policy of yours lives on this host, and a "
            "compose stack's racks run the image's code: run this room with --backend local"
        )
    out = {k: v for k, v in wanted.items() if k in passed}
    out |= {k: str(v) for k, v in ports(number).items() if k not in RUNNERS_PORTS}
    return out | {"COMPOSE_PROJECT_NAME": project(team), "STORMLAB_ALERTMANAGER_DIR": str(team_dir / "alertmanager")}


def alertmanager_config(text: str, desk_port: int) -> str:
    """The stack's Alertmanager configuration with every page posted to the team's desk's port."""
    if DESK_IN_CONFIG not in text:
        raise LabError(f"alertmanager/alertmanager.yml no longer posts to {DESK_IN_CONFIG}: the room cannot route a team's pages")
    return text.replace(DESK_IN_CONFIG, f"stormlab-desk:{desk_port}")


def play_port(team_env: Mapping[str, str]) -> int:
    """The port of the team's players' pages when the room is served to other machines (or over TLS)."""
    return int(team_env["METADATA_PORT"]) - OFFSETS["METADATA_PORT"] + OFFSETS["PLAY_PORT"]


def desk_port(team_env: Mapping[str, str]) -> int:
    """The team's desk's port (its runner serves it; the team's Alertmanager posts there)."""
    return int(team_env["METADATA_PORT"]) - OFFSETS["METADATA_PORT"] + OFFSETS["DESK_PORT"]


def environment(team_env: Mapping[str, str], team_dir: Path) -> dict[str, str]:
    """What a command acting on the team's stack runs with: this process's environment (the
    images .env names, PATH …), the team's compose variables, its state directory and token."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("STORMLAB_") or k in KEPT}
    env |= dict(team_env) | {"STORMLAB_STATE_DIR": str(team_dir), "STORMLAB_COMPOSE_PROJECT": team_env["COMPOSE_PROJECT_NAME"]}
    token = auth.read_token(team_dir / ".env")
    return env | ({auth.ENV: token} if token else {})


def run(team_env: Mapping[str, str], team_dir: Path, *args: str, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(
            [*compose.compose_cmd(), *args],
            cwd=compose.ROOT,
            env=environment(team_env, team_dir),
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        raise LabError(f"{team_env['COMPOSE_PROJECT_NAME']}: `{' '.join(args)}` did not end within {timeout:g}s") from None
    except FileNotFoundError:
        raise LabError("a room on compose needs Docker: neither `docker compose` nor `docker-compose` is installed here") from None


def check_ports(number: int) -> None:
    """Refuses (LabError) a team whose ports another program holds, before anything starts."""
    for name, port in ports(number).items():
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                raise LabError(
                    f"port {port} (team {number}'s {name}) is taken on this host: a room on compose gives team n "
                    f"the {PORT_STRIDE} ports from {PORT_BASE} + {PORT_STRIDE}n"
                ) from None


def image_here(name: str) -> bool:
    try:
        return subprocess.run(["docker", "image", "inspect", name], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def grafana_image() -> str:
    """The image compose starts Grafana from: ``GRAFANA_IMAGE``, else .env's, else Grafana's own."""
    env_file = compose.ROOT / ".env"
    lines = env_file.read_text().splitlines() if env_file.exists() else []
    pinned = [line.split("=", 1)[1].strip() for line in lines if line.startswith("GRAFANA_IMAGE=")]
    return os.environ.get("GRAFANA_IMAGE") or (pinned[0] if pinned else "grafana/grafana")


def up_team(team: str, team_env: Mapping[str, str], team_dir: Path, say: Callable[[str], None]) -> None:
    """Start a team's stack and wait until its customers are served; its token into the team's
    directory (``.env``), where every stormlab command acting on the team finds it."""
    team_dir.mkdir(parents=True, exist_ok=True)
    config = team_dir / "alertmanager"
    config.mkdir(exist_ok=True)
    config.chmod(0o755)  # Alertmanager runs as nobody
    (config / "alertmanager.yml").write_text(alertmanager_config((ALERTMANAGER_DIR / "alertmanager.yml").read_text(), desk_port(team_env)))
    (config / "alertmanager.yml").chmod(0o644)
    services, grafana = list(LAB_SERVICES), grafana_image()
    if image_here(grafana):
        services.append("grafana")
    else:
        say(f"  {team}: Grafana's image ({grafana}) is not on this host: no dashboards (`docker pull` it first to have them)")
    done = run(team_env, team_dir, "up", "-d", *services, timeout=UP_TIMEOUT_S)
    if done.returncode != 0:
        raise LabError(f"{project(team)}: `up` exited {done.returncode}: {(done.stderr or done.stdout).strip()[-800:]}")
    deadline = time.monotonic() + UP_TIMEOUT_S
    while not (token := read_stack_token(team_env, team_dir)):
        if time.monotonic() > deadline:
            raise LabError(f"{project(team)}: its metadata service did not give its token within {UP_TIMEOUT_S:g}s")
        time.sleep(2.0)
    roles.write_private(team_dir / ".env", f"{auth.ENV}={token}\n")
    while not serving(team_env):
        if time.monotonic() > deadline:
            raise LabError(f"{project(team)}: its customers still failed ({SETTLED:.0%} or more) {UP_TIMEOUT_S:g}s after its start")
        time.sleep(2.0)


def up_teams(teams: Mapping[str, tuple[Mapping[str, str], Path]], say: Callable[[str], None]) -> None:
    """Every team's stack started at once (``teams``: each team's variables and directory); the
    first failure is raised once every start has ended."""
    with ThreadPoolExecutor(max_workers=len(teams)) as pool:
        starts = [pool.submit(up_team, team, env, where, say) for team, (env, where) in teams.items()]
    for start in starts:
        start.result()


def read_stack_token(team_env: Mapping[str, str], team_dir: Path) -> str:
    """The token the team's stack generated ("" until its metadata service answers)."""
    asked = {k: v for k, v in environment(team_env, team_dir).items() if k != auth.ENV}  # the stack's, not one written before
    return compose.compose_token(asked)


def serving(team_env: Mapping[str, str]) -> bool:
    """Whether the team's customers are served: its loadgen answers, and under 1% of its requests
    of the last 10 s failed (a stack just up fails some while its racks learn their tables)."""
    status = get_json(f"http://127.0.0.1:{team_env['LOADGEN_PORT']}/status")
    ratio = status.get("customer_error_ratio") if isinstance(status, dict) else None
    return isinstance(ratio, int | float) and ratio < SETTLED


def state(team_env: Mapping[str, str], team_dir: Path) -> dict[str, Any] | None:
    """The team's stack as `ops` and the observers see it, or None if its metadata service does not answer."""
    if get_json(f"http://127.0.0.1:{team_env['METADATA_PORT']}/status") is None:
        return None
    return docker_state(team_dir, environment(team_env, team_dir))


async def sample(team_env: Mapping[str, str], team_dir: Path) -> Reading:
    """The team's reading, as `stormlab status --backend docker` takes it (the racks from Prometheus)."""
    return await DockerStack(team_dir, environment(team_env, team_dir)).sample()


HALTED = re.compile(r"halted (\d+) fault")


def halt(team_env: Mapping[str, str], team_dir: Path) -> tuple[int, list[str]]:
    """Every fault and move lease in the team's stack ended now (the chaos container's `halt`): how
    many, and what did not answer."""
    done = run(team_env, team_dir, "run", "--rm", "chaos", "halt")
    found = HALTED.search(done.stdout)
    said = [line.removeprefix("stormlab: ") for line in done.stderr.splitlines() if line.startswith("stormlab: ")]
    if done.returncode != 0 and not said:
        said = [(done.stderr or done.stdout).strip()[-300:] or f"exit {done.returncode}"]
    return (int(found.group(1)) if found else 0), said


def stack_up(team_env: Mapping[str, str], team_dir: Path) -> bool:
    """Whether the team's stack has containers (running, or frozen by a fault): it has something to halt."""
    return bool(run(team_env, team_dir, "ps", "-q", timeout=60).stdout.strip())


def down_team(team_env: Mapping[str, str], team_dir: Path) -> bool:
    """The team's stack removed with its volumes (its token, its data): whether it was there."""
    had = stack_up(team_env, team_dir)
    done = run(team_env, team_dir, "down", "-v", "--remove-orphans", timeout=UP_TIMEOUT_S)
    if done.returncode != 0:
        raise LabError(f"{team_env['COMPOSE_PROJECT_NAME']}: `down` exited {done.returncode}: {done.stderr.strip()[-500:]}")
    (team_dir / ".env").unlink(missing_ok=True)
    return had
