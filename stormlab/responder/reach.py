"""How players reach a game's pages: where the servers listen and what the links say.

A room (or a single team's game) serves three kinds of page: the facilitator's console, each
team's desk and, on the desk, each player's console. By default they listen on 127.0.0.1, for
people who sit at the host. ``--listen ADDR`` serves them on an address of this host a class can
reach (an interface's address, or ``0.0.0.0`` / ``::`` for every interface), and the links the
room prints use it; ``--public-url`` names the scheme and host the players use instead when a
NAT or a proxy is in between (each page keeps its own port: forward them one to one).

Over TLS (``--tls-cert``/``--tls-key``, or ``--tls`` for a certificate the room makes for itself,
its SHA-256 fingerprint printed for the players to check against what their browser shows), every
page is served over https and the links say so.

A reachable page is also served on a port of loopback of its own, in plain http, for this host's
programs (the room's console reading each desk, ``ops --as ROLE`` from a terminal on the host): they
need neither the players' route through a NAT nor the room's certificate.

Every page also refuses a request whose Host header is not one of the names it is served under
(421): a page of another site, made to resolve to this host's address (DNS rebinding), cannot
read a console or post a move through the player's browser.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import ipaddress
import os
import shutil
import ssl
import subprocess
import urllib.parse
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Middleware

from stormcore.errors import LabError, UsageError
from stormcore.web import is_address, json_error

LOOPBACK = "127.0.0.1"
LOCAL_NAMES = frozenset({"127.0.0.1", "localhost", "::1"})  # the names a page on this host is always reached by from it
WILDCARDS = frozenset({"0.0.0.0", "::"})
DESK_NAME = "stormlab-desk"  # the name Alertmanager posts to the desk under, inside a stack (alertmanager/alertmanager.yml)


def parse_listen(text: str) -> str:
    """An address of this host to listen on: an IPv4 or IPv6 address (``0.0.0.0``/``::``: every
    interface). A name is refused: which of its addresses the servers bind would be a guess."""
    try:
        return str(ipaddress.ip_address(text.strip().strip("[]")))
    except ValueError:
        raise UsageError(
            f"--listen takes an address of this host (e.g. 192.168.1.20, or 0.0.0.0 for every interface), got {text!r}"
        ) from None


def parse_public_url(text: str) -> str:
    """The scheme and host players reach the pages by (``http://class.example.org``), without a
    path or a port: each page keeps its own port."""
    parts = urllib.parse.urlsplit(text.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageError(f"--public-url is a URL's scheme and host, e.g. http://203.0.113.7 or https://class.example.org; got {text!r}")
    if parts.path not in ("", "/") or parts.query or parts.fragment or parts.username or parts.password:
        raise UsageError(f"--public-url takes a scheme and host only (no path, query or user); got {text!r}")
    try:
        port = parts.port
    except ValueError:
        port = -1
    if port is not None:
        raise UsageError(f"--public-url takes no port: each page keeps its own, forwarded one to one; got {text!r}")
    return f"{parts.scheme}://{_bracketed(parts.hostname)}"


def _bracketed(host: str) -> str:
    return f"[{host}]" if ":" in host else host


@dataclass(frozen=True)
class Tls:
    """A certificate and its key (PEM files) the pages are served over https with."""

    cert: str
    key: str

    def context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        try:
            context.load_cert_chain(self.cert, self.key)
        except (OSError, ssl.SSLError) as exc:
            raise UsageError(f"--tls-cert {self.cert} / --tls-key {self.key}: not a certificate and its key ({exc})") from None
        return context

    def fingerprint(self) -> str:
        """The certificate's SHA-256 fingerprint as browsers show it (AB:CD:…)."""
        try:
            der = ssl.PEM_cert_to_DER_cert(Path(self.cert).read_text())
        except (OSError, ValueError) as exc:
            raise UsageError(f"--tls-cert {self.cert}: not a PEM certificate ({exc})") from None
        return ":".join(f"{b:02X}" for b in hashlib.sha256(der).digest())


def make_certificate(directory: Path, names: Iterable[str]) -> Tls:
    """A self-signed certificate for ``names`` (addresses and host names), valid 30 days, made with
    openssl into ``directory`` (the key 0600): for a room that has no certificate of its own."""
    if shutil.which("openssl") is None:
        raise LabError("--tls makes its certificate with openssl, which is not installed: install it, or give --tls-cert/--tls-key")
    directory.mkdir(parents=True, exist_ok=True)
    cert, key = directory / "tls-cert.pem", directory / "tls-key.pem"
    alt = ",".join(f"IP:{n}" if is_address(n) else f"DNS:{n}" for n in sorted(set(names)) if n not in WILDCARDS)
    key.unlink(missing_ok=True)
    os.close(os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))  # the key is never readable by others, even for an instant
    argv = ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "30",
            "-subj", "/CN=stormlab room", "-addext", f"subjectAltName={alt}", "-keyout", str(key), "-out", str(cert)]  # fmt: skip
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise LabError(f"openssl could not make the room's certificate: {exc}") from None
    if done.returncode != 0:
        raise LabError(f"openssl could not make the room's certificate: {done.stderr.strip()[-300:]}")
    return Tls(str(cert), str(key))


@dataclass(frozen=True)
class Reach:
    """Where a game's pages listen and the base their links are made from."""

    listen: str = LOOPBACK
    public_url: str | None = None
    tls: Tls | None = None

    def __post_init__(self) -> None:
        scheme = "https" if self.tls else "http"
        if self.listen in WILDCARDS and self.public_url is None:
            raise UsageError(
                f"--listen {self.listen} serves every interface: say which address the players use with --public-url "
                f"(e.g. --public-url {scheme}://192.168.1.20)"
            )
        if self.public_url and not self.public_url.startswith(f"{scheme}://"):
            raise UsageError(f"the pages are served over {scheme}: --public-url should start {scheme}://, got {self.public_url}")

    @classmethod
    def given(
        cls, listen: str | None, public_url: str | None, default: str = LOOPBACK, tls_cert: str | None = None, tls_key: str | None = None
    ) -> Reach:
        """From the command line's --listen, --public-url, --tls-cert and --tls-key (any may be absent)."""
        if bool(tls_cert) != bool(tls_key):
            raise UsageError("--tls-cert and --tls-key go together: the certificate and its private key")
        tls = Tls(str(Path(tls_cert).resolve()), str(Path(tls_key).resolve())) if tls_cert and tls_key else None
        if tls is not None:
            tls.context()  # a pair that cannot serve is refused now, not when the first page starts
        return cls(parse_listen(listen) if listen else default, parse_public_url(public_url) if public_url else None, tls)

    @classmethod
    def of(cls, record: dict[str, Any] | None) -> Reach:
        """From a room's card (:meth:`record`); a card of before has none: loopback."""
        record = record or {}
        tls = Tls(record["tls_cert"], record["tls_key"]) if record.get("tls_cert") and record.get("tls_key") else None
        return cls(str(record.get("listen") or LOOPBACK), record.get("public_url"), tls)

    def record(self) -> dict[str, str | None]:
        tls = {"tls_cert": self.tls.cert, "tls_key": self.tls.key} if self.tls else {}
        return {"listen": self.listen, "public_url": self.public_url} | tls

    def argv(self) -> list[str]:
        """The flags that hand this reach to a child (a team's runner)."""
        argv = ["--listen", self.listen, *(["--public-url", self.public_url] if self.public_url else [])]
        return argv + (["--tls-cert", self.tls.cert, "--tls-key", self.tls.key] if self.tls else [])

    @property
    def local(self) -> bool:
        """Served on loopback only, in plain http: nobody but this host reaches it, as before rooms were reachable."""
        if self.tls is not None or self.listen in WILDCARDS:
            return False
        return self.listen == "localhost" or (is_address(self.listen) and ipaddress.ip_address(self.listen).is_loopback)

    def url(self, port: int) -> str:
        """The address a player opens for the page on ``port``."""
        base = self.public_url or f"{'https' if self.tls else 'http'}://{_bracketed(self.listen)}"
        return f"{base}:{port}"

    def base(self) -> str:
        """The scheme and host of every link (each page adds its port)."""
        return self.url(0).rsplit(":", 1)[0]

    def hosts(self) -> frozenset[str]:
        """The names a request's Host header may carry: loopback's, the address listened on, and
        the public URL's host."""
        names = set(LOCAL_NAMES)
        if self.listen not in WILDCARDS:
            names.add(self.listen)
        if self.public_url:
            names.add((urllib.parse.urlsplit(self.public_url).hostname or "").lower())
        return frozenset(names)


def add_arguments(p: argparse.ArgumentParser, what: str, make: bool = False) -> None:
    """--listen, --public-url, --tls-cert and --tls-key (and with ``make``, --tls) on ``p``, for ``what``."""
    p.add_argument(
        "--listen",
        help=f"the address of this host {what} listen on, for players on their own machines (an interface's address, "
        "or 0.0.0.0 for every interface with --public-url; default 127.0.0.1: this host only)",
    )
    p.add_argument(
        "--public-url",
        help="the scheme and host the printed links use when a NAT or proxy is in between (e.g. http://203.0.113.7; each page "
        "keeps its own port; default: the --listen address)",
    )
    p.add_argument("--tls-cert", help="serve over https with this certificate (PEM; with --tls-key) (default: none, plain http)")
    p.add_argument("--tls-key", help="the private key of --tls-cert (PEM) (default: none)")
    if make:
        p.add_argument(
            "--tls",
            action="store_true",
            help="serve over https with a certificate the room makes for itself (openssl, 30 days); its fingerprint is "
            "printed for the players to check against what their browser shows",
        )


def from_args(args: argparse.Namespace, default: str = LOOPBACK) -> Reach:
    """The reach the command line asks for (a --tls certificate is made later, where it is kept)."""
    if getattr(args, "tls", False):
        if args.tls_cert or args.tls_key:
            raise UsageError("--tls makes a certificate: drop it to serve with --tls-cert/--tls-key")
        if args.public_url and not args.public_url.strip().startswith("https://"):
            raise UsageError(f"the pages are served over https: --public-url should start https://, got {args.public_url}")
    return Reach.given(args.listen, args.public_url, default, args.tls_cert, args.tls_key)


def with_certificate(where: Reach, directory: Path) -> Reach:
    """``where`` served over https with a certificate made for its names into ``directory``."""
    return dataclasses.replace(where, tls=make_certificate(directory, where.hosts()))


def host_of(header: str) -> str:
    """The name in a Host header, without its port (``[::1]:8080`` -> ``::1``), lowercased."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[1 : header.find("]")] if "]" in header else header
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


def host_check(allowed: Iterable[str]) -> Middleware:
    """A middleware that answers 421 to a request addressed to a name the page is not served under."""
    names = frozenset(name.lower() for name in allowed)

    @web.middleware
    async def check(request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> web.StreamResponse:
        if host_of(request.headers.get("Host", "")) not in names:
            return json_error(
                421,
                "misdirected",
                "this page is served under other names (a request addressed to another host is refused: DNS rebinding)",
            )
        return await handler(request)

    return check


@dataclass(frozen=True)
class Served:
    """A page being served: its runner (cleaned up to stop it), the URL players open, and the URL
    this host's own programs use (the same unless the page is reachable from other machines)."""

    runner: web.AppRunner
    url: str
    local_url: str
    plain_url: str | None = None  # the plain-http site asked for beside them (a compose stack's Alertmanager posts there)


async def start(
    served: web.Application,
    reach: Reach,
    port: int,
    what: str,
    flag: str,
    also: Iterable[str] = (),
    plain: tuple[str, int, str] | None = None,
) -> Served:
    """``served`` listening where ``reach`` says, with the Host check (``also``: more names it is
    served under), and when it is reachable from other machines on a loopback port too. A port that
    cannot be had is a LabError naming ``flag``, the option that picks another. ``plain``: (address,
    port, its option) of one more site in plain http whatever ``reach`` says: the address a compose
    stack's containers reach the host at, where its Alertmanager posts (over the host's own bridge)."""
    served.middlewares.append(host_check(reach.hosts() | set(also) | ({plain[0]} if plain else set())))
    context = reach.tls.context() if reach.tls else None
    runner = web.AppRunner(served, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, reach.listen, port, ssl_context=context)
    try:
        await site.start()
    except OSError as exc:
        await runner.cleanup()
        raise LabError(f"the {what} cannot listen on {_bracketed(reach.listen)}:{port}: {exc.strerror} ({flag} picks another)") from None
    bound = runner.addresses[0][1] if runner.addresses else port
    plain_url = None
    if plain is not None:
        address, plain_port, plain_flag = plain
        try:
            await web.TCPSite(runner, address, plain_port).start()
        except OSError as exc:
            await runner.cleanup()
            raise LabError(
                f"the {what} cannot listen on {_bracketed(address)}:{plain_port}: {exc.strerror} ({plain_flag} picks another)"
            ) from None
        plain_url = f"http://{_bracketed(address)}:{runner.addresses[-1][1]}"
    if reach.local:
        return Served(runner, reach.url(bound), reach.url(bound), plain_url)
    loopback = web.TCPSite(runner, LOOPBACK, 0)
    try:
        await loopback.start()
    except OSError as exc:
        await runner.cleanup()
        raise LabError(f"the {what} cannot listen on loopback for this host's programs: {exc.strerror}") from None
    mine = runner.addresses[-1][1]  # the sites' sockets in the order they started: the loopback one last
    return Served(runner, reach.url(bound), f"http://{LOOPBACK}:{mine}", plain_url)
