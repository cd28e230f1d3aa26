"""The README's commands are the code's: every `stormlab …` it quotes parses with the CLI's own
parser (flags and values included), every `make …` names a Makefile target, every
`docker compose run --rm SERVICE …` names a compose service and parses with its entrypoint;
every page it links exists, and it stays a front door (300 lines at most). The pages of docs/
are held to the same parser (a placeholder such as `FAULT` or `…` aside)."""

import argparse
import re
import shlex
from pathlib import Path

import pytest
import yaml

from stormlab.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
TARGETS = set(re.findall(r"^([a-z][a-z0-9-]*):", (ROOT / "Makefile").read_text(), re.M))


def quoted(text: str) -> list[str]:
    """Every command the page shows: lines of its code blocks, and inline `code` spans."""
    blocks = [line for block in re.findall(r"```(?:sh)?\n(.*?)```", text, re.S) for line in block.splitlines()]
    inline = re.findall(r"`([^`\n]+)`", re.sub(r"```.*?```", "", text, flags=re.S))
    return [c.split("  #")[0].strip() for c in blocks + inline if c.strip()]


def words(command: str) -> list[str]:
    argv = shlex.split(command)
    return argv[1:] if argv[0].endswith("stormlab") else argv


STORMLAB = [c for c in quoted(README) if re.match(r"^(\.venv/bin/)?stormlab( |$)", c)]
MAKE = [c for c in quoted(README) if c.startswith("make ")]
COMPOSE_RUN = [c for c in quoted(README) if c.startswith("docker compose run --rm ")]


def test_the_readme_is_a_front_door():
    assert len(README.splitlines()) <= 300
    assert len(STORMLAB) >= 10 and len(MAKE) >= 5 and COMPOSE_RUN


def command_group(argv: list[str]) -> bool:
    """Whether ``argv`` names a group of commands (``chaos``, ``ops``), as prose speaks of one."""
    parser = build_parser()
    for name in argv:
        groups = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not groups or name not in groups[0].choices:
            return False
        parser = groups[0].choices[name]
    return any(isinstance(a, argparse._SubParsersAction) for a in parser._actions)


@pytest.mark.parametrize("command", STORMLAB)
def test_every_stormlab_command_the_readme_quotes_parses(command):
    argv = words(command)
    if argv in ([], ["--help"]) or command_group(argv):
        return
    build_parser().parse_args(argv)  # an unknown command, flag or value exits 2 here


PLACEHOLDER = re.compile(r"…|\||^[A-Z][A-Z_:\[\]]*$")  # `FAULT`, `N`, `a|b`, `…`: a shape, not a command
PAGES = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "deploy/k8s/README.md"]
DOCS = [
    (page.relative_to(ROOT).as_posix(), c)
    for page in PAGES
    for c in quoted(page.read_text())
    if re.match(r"^(\.venv/bin/)?stormlab( |$)", c)
]


@pytest.mark.parametrize("page, command", DOCS, ids=[f"{p}: {c}" for p, c in DOCS])
def test_every_stormlab_command_the_docs_quote_parses(page, command):
    argv = words(command)
    if argv in ([], ["--help"]) or command_group(argv) or any(PLACEHOLDER.search(w) for w in argv):
        return
    build_parser().parse_args(argv)


@pytest.mark.parametrize("command", MAKE)
def test_every_make_command_the_readme_quotes_is_a_target(command):
    argv = shlex.split(command)
    target = argv[1]
    assert target in TARGETS, target
    for extra in argv[2:]:
        if extra.startswith("ARGS="):  # passed on to the target's command
            assert target == "demo"
            build_parser().parse_args(["demo", *shlex.split(extra.removeprefix("ARGS="))])


@pytest.mark.parametrize("command", COMPOSE_RUN)
def test_every_compose_run_the_readme_quotes_is_a_service_and_parses(command):
    services = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    argv = shlex.split(command)[4:]  # docker compose run --rm SERVICE ARGS…
    service, rest = argv[0], argv[1:]
    entrypoint = services[service]["entrypoint"]
    assert entrypoint[0] == "stormlab"
    build_parser().parse_args([*entrypoint[1:], *rest])


def test_every_page_the_readme_links_exists():
    for link in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README):
        if not link.startswith("http"):
            assert (ROOT / link).exists(), link


def test_every_page_of_the_docs_is_in_their_index():
    index = (ROOT / "docs/README.md").read_text()
    pages = {p.name for p in (ROOT / "docs").glob("*.md")} - {"README.md"}
    assert {p for p in pages if f"({p})" not in index} == set()
