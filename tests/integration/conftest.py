"""Live labs for the integration tests: one factory that starts exactly the processes a test asks
for (the cascade's services only on request) and stops them after it, and the guard that fails a
test leaving a process of ours behind."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from chaos import catalog, client
from stormcore.auth import ensure_token, headers
from stormcore.labstate import running
from stormcore.settings import LabSettings
from stormlab.cli import main
from stormlab.engine import launcher
from tests.conftest import until

# Two racks of 20 nodes renewing every second, 20 customer requests a second: serving within a
# few seconds, on any host.
SMALL: dict[str, Any] = {"racks": 2, "nodes_per_rack": 20, "renewal_period_s": 1.0, "customer_rate": 20}


@dataclass
class Lab:
    """A running lab: its state (``stormlab status`` reads the same) and how to talk to it."""

    state: dict[str, Any]
    directory: Path

    @property
    def token(self) -> str:
        return ensure_token(self.directory)

    @property
    def auth(self) -> dict[str, str]:
        return headers(self.token)

    def url(self, name: str) -> str:
        return str(self.state["supervisor_url"] if name == "supervisor" else self.state["components"][name]["url"])

    def status(self, name: str) -> dict[str, Any]:
        return client.call("GET", f"{self.url(name)}/status", self.token)

    def lease(self, body: dict[str, Any]) -> dict[str, Any]:
        """A lease (a JSON body as the holder takes it) from the process that holds its fault."""
        return client.call("POST", f"{self.url(catalog.FAULTS[body['fault']].holder)}/faults", self.token, body)

    def stop(self) -> None:
        """Stop it now (the fixture stops what is left after the test)."""
        assert launcher.down(self.directory)

    def serving(self) -> bool:
        racks = [self.status(n) for n in self.state["components"] if n.startswith("rack-")]
        return all(r["nodes_serving"] == r["nodes_total"] for r in racks)


@pytest.fixture
def lab(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., Lab]]:
    """``lab(cascade=(), cli=False, serving=True, settings=None, external=None, **changes)``: a lab of ``settings``
    (or of SMALL's, with ``changes``) with the cascade's services named in ``cascade`` (and ``external``'s racks run by
    their commands), its state directory the
    test's own (STORMLAB_STATE_DIR, so the CLI acts on it), started by the launcher, or by
    ``stormlab up`` with ``cli``; once every node serves unless ``serving=False``. Stopped after
    the test, whatever it did."""
    started: list[Path] = []

    def start(
        cascade: tuple[str, ...] = (),
        cli: bool = False,
        serving: bool = True,
        settings: LabSettings | None = None,
        external: dict[int, str] | None = None,
        **changes: Any,
    ) -> Lab:
        directory = (tmp_path / f"state-{len(started)}").resolve()
        monkeypatch.setenv("STORMLAB_STATE_DIR", str(directory))
        settings = settings or LabSettings(**SMALL | changes)
        started.append(directory)
        if cli:
            code = main(["up", "--base-port", "0", "--cascade", ",".join(cascade) or "none", *flags(settings)])
            assert code == 0, f"`stormlab up` exited {code}; its logs end: {logs_tail(directory)}"
            state = running(directory)
        else:
            state = launcher.up(settings, base_port=0, directory=directory, cascade=cascade, external=external)
        assert state, "the lab did not come up"
        lab = Lab(state, directory)
        if serving:
            until(lab.serving, limit_s=30, what="every node serving")
        return lab

    yield start
    for directory in started:
        state = running(directory)
        pids = [c["pid"] for c in state["components"].values()] + [state["supervisor_pid"]] if state else []
        launcher.down(directory)
        leftovers = [pid for pid in pids if pid and alive(pid)]  # its children too, not only the supervisor
        assert leftovers == [], f"processes of the lab left behind: {leftovers}"
        rules = launcher.kernel_links_of(directory)
        assert rules is None or not rules.present(), f"the lab's rules left in the kernel: {rules.nat}, {rules.cut}"


def logs_tail(directory: Path, lines: int = 8) -> str:
    """The last lines of each of a lab's logs (why it did not come up)."""
    logs = sorted((directory / "logs").glob("*.log"))
    return " || ".join(f"{log.name}: " + " | ".join(log.read_text(errors="replace").splitlines()[-lines:]) for log in logs)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    status = Path(f"/proc/{pid}/status")
    return status.exists() and "zombie" not in status.read_text()


def flags(settings: LabSettings) -> list[str]:
    """A lab's settings as `stormlab up` takes them (every one as --set, but racks and nodes)."""
    out = ["--racks", str(settings.racks), "--nodes-per-rack", str(settings.nodes_per_rack)]
    env = settings.to_env()
    default = LabSettings().to_env()
    for key, value in env.items():
        name = key.removeprefix("STORMLAB_").lower()
        if value != default[key] and name not in ("racks", "nodes_per_rack", "speed"):
            out += ["--set", f"{name}={value}"]
    return out + (["--speed", f"{settings.speed:g}"] if settings.speed != 1 else [])


def _children() -> set[int]:
    me = str(os.getpid())
    kids = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[1] == me and fields[0] != "Z":
            kids.add(int(stat.parent.name))
    return kids


@pytest.fixture(autouse=True)
def no_process_left_behind():
    """Fail a test that leaves a process of ours running (a lab not torn down)."""
    before = _children()
    yield
    leaked = _children() - before
    assert not leaked, f"processes left running: {sorted(leaked)}"


def side_by_side(stories: dict[str, Coroutine[Any, Any, Any]]) -> dict[str, Any]:
    """Each named story told at once in one loop (two labs' outages, say); their results by name."""

    async def told() -> dict[str, Any]:
        return dict(zip(stories, await asyncio.gather(*stories.values()), strict=True))

    return asyncio.run(told())
