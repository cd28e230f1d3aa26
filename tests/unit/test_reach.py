"""How players reach a game's pages: --listen and --public-url read, the links made from them, and
the Host check that refuses a request addressed to another name (DNS rebinding)."""

import asyncio

import aiohttp
import pytest
from aiohttp import web

from stormcore.errors import LabError, UsageError
from stormlab.responder import reach
from stormlab.responder.reach import Reach


def test_by_default_the_pages_are_on_loopback_and_the_links_say_so():
    r = Reach()
    assert r.local and r.url(8123) == "http://127.0.0.1:8123"
    assert r.hosts() == {"127.0.0.1", "localhost", "::1"}


@pytest.mark.parametrize(
    ("listen", "public", "url", "host"),
    [
        ("192.168.1.20", None, "http://192.168.1.20:9000", "192.168.1.20"),
        ("0.0.0.0", "http://203.0.113.7", "http://203.0.113.7:9000", "203.0.113.7"),
        ("10.0.0.5", "http://Class.Example.org/", "http://class.example.org:9000", "class.example.org"),
        ("fd00::5", None, "http://[fd00::5]:9000", "fd00::5"),
        ("::", "http://[fd00::5]", "http://[fd00::5]:9000", "fd00::5"),
    ],
)
def test_a_reachable_room_s_links_use_the_address_the_players_reach(listen, public, url, host):
    r = Reach.given(listen, public)
    assert not r.local and r.url(9000) == url
    assert host in r.hosts() and "127.0.0.1" in r.hosts()
    assert Reach.of(r.record()) == r
    handed = dict(zip(r.argv()[::2], r.argv()[1::2], strict=True))  # what a team's runner is handed
    assert Reach.given(handed["--listen"], handed.get("--public-url")) == r


@pytest.mark.parametrize(
    ("listen", "public", "said"),
    [
        ("class.local", None, "an address of this host"),
        ("300.1.1.1", None, "an address of this host"),
        ("0.0.0.0", None, "say which address the players use with --public-url"),
        ("::", None, "--public-url"),
        ("10.0.0.5", "ftp://x", "scheme and host"),
        ("10.0.0.5", "http://x:8080", "no port"),
        ("10.0.0.5", "http://x/room", "no path"),
        ("10.0.0.5", "http://user:pw@x", "no path, query or user"),
        ("10.0.0.5", "http://x:notaport", "no port"),
        ("10.0.0.5", "http://", "scheme and host"),
    ],
)
def test_an_address_or_url_that_cannot_serve_a_class_is_refused_saying_why(listen, public, said):
    with pytest.raises(UsageError, match=said.replace("(", r"\(")):
        Reach.given(listen, public)


@pytest.mark.parametrize(
    ("header", "name"),
    [("127.0.0.1:8080", "127.0.0.1"), ("LOCALHOST", "localhost"), ("[::1]:80", "::1"), ("[fd00::5]", "fd00::5"), ("x.org", "x.org")],
)
def test_the_name_in_a_host_header_is_read_without_its_port(header, name):
    assert reach.host_of(header) == name


def test_a_page_refuses_a_request_addressed_to_another_name_and_serves_its_own():
    async def main() -> None:
        async def ok(request: web.Request) -> web.Response:
            return web.json_response({"ok": True})

        served = web.Application()
        served.router.add_get("/", ok)
        page = await reach.start(served, Reach(), 0, "console", "--port")
        url = page.url
        try:
            async with aiohttp.ClientSession() as http:
                for host, status in (
                    (None, 200),
                    ("localhost:1", 200),
                    ("evil.example:80", 421),
                    ("", 421),
                    ("127.0.0.1.evil.example", 421),
                ):
                    headers = {} if host is None else {"Host": host}
                    async with http.get(url + "/", headers=headers) as answer:
                        assert answer.status == status, host
                        if status == 421:
                            assert (await answer.json())["error"] == "misdirected"
        finally:
            await page.runner.cleanup()

    asyncio.run(main())


def test_a_port_that_cannot_be_had_names_the_flag_that_picks_another():
    async def main() -> None:
        first = await reach.start(web.Application(), Reach(), 0, "console", "--port")
        try:
            with pytest.raises(LabError, match=r"the console cannot listen on 127.0.0.1:\d+: .* \(--port picks another\)"):
                await reach.start(web.Application(), Reach(), int(first.url.rsplit(":", 1)[1]), "console", "--port")
        finally:
            await first.runner.cleanup()

    asyncio.run(main())


@pytest.fixture(scope="module")
def certificate(tmp_path_factory):
    """A certificate the room makes for itself, for 127.0.0.1 and its loopback names."""
    return reach.make_certificate(tmp_path_factory.mktemp("tls"), Reach().hosts())


def test_a_room_s_own_certificate_is_for_its_names_with_a_private_key_and_a_fingerprint(certificate):
    import os
    import ssl
    import subprocess

    assert oct(os.stat(certificate.key).st_mode & 0o777) == "0o600"
    text = subprocess.run(["openssl", "x509", "-in", certificate.cert, "-noout", "-text"], capture_output=True, text=True).stdout
    assert "IP Address:127.0.0.1" in text and "DNS:localhost" in text
    fingerprint = certificate.fingerprint()
    assert len(fingerprint.split(":")) == 32 and fingerprint == fingerprint.upper()
    said = subprocess.run(["openssl", "x509", "-in", certificate.cert, "-noout", "-fingerprint", "-sha256"], capture_output=True, text=True)
    assert said.stdout.strip().endswith(fingerprint)  # what openssl (and a browser) shows
    assert isinstance(certificate.context(), ssl.SSLContext)


def test_over_tls_the_links_say_https_and_this_host_s_programs_get_a_loopback_port_of_their_own(certificate):
    import ssl

    where = Reach("127.0.0.1", None, certificate)
    assert not where.local and where.url(9) == "https://127.0.0.1:9"
    assert Reach.of(where.record()) == where and "--tls-cert" in where.argv()

    async def main() -> None:
        async def ok(request: web.Request) -> web.Response:
            return web.json_response({"scheme": request.scheme})

        served = web.Application()
        served.router.add_get("/", ok)
        page = await reach.start(served, where, 0, "desk", "--desk-port")
        try:
            assert page.url.startswith("https://127.0.0.1:") and page.local_url.startswith("http://127.0.0.1:")
            assert page.url.rsplit(":", 1)[1] != page.local_url.rsplit(":", 1)[1]
            pinned = ssl.create_default_context(cafile=certificate.cert)  # the player who checked the fingerprint
            async with aiohttp.ClientSession() as http:
                async with http.get(page.url + "/", ssl=pinned) as answer:
                    assert answer.status == 200 and (await answer.json())["scheme"] == "https"
                async with http.get(page.local_url + "/") as answer:
                    assert answer.status == 200 and (await answer.json())["scheme"] == "http"
                with pytest.raises(aiohttp.ClientConnectorCertificateError):
                    await http.get(page.url + "/")  # an unknown certificate is not trusted by default
                async with http.get(page.url + "/", ssl=pinned, headers={"Host": "rebound.example"}) as answer:
                    assert answer.status == 421
        finally:
            await page.runner.cleanup()

    asyncio.run(main())


@pytest.mark.parametrize(
    ("cert", "key", "said"),
    [("x.pem", None, "go together"), ("missing.pem", "missing-key.pem", "not a certificate and its key")],
)
def test_a_certificate_that_cannot_serve_is_refused_before_anything_starts(tmp_path, cert, key, said):
    with pytest.raises(UsageError, match=said):
        Reach.given("127.0.0.1", None, tls_cert=cert and str(tmp_path / cert), tls_key=key and str(tmp_path / key))


def test_a_public_url_must_say_the_scheme_the_pages_are_served_in(certificate):
    with pytest.raises(UsageError, match="should start https://"):
        Reach("10.0.0.5", "http://class.example.org", certificate)


def test_a_compose_game_s_desk_takes_alertmanager_s_pages_in_plain_http_while_its_players_use_tls(certificate, tmp_path):
    """On compose the stack's Alertmanager posts to the desk's port on the host's bridge, in plain http;
    the players' pages are served where --listen says, over TLS, on a port of their own."""
    import ssl

    from stormlab.responder import desk_web
    from stormlab.responder.desk import Desk
    from stormlab.responder.runbook import Ops

    token = "t" * 32
    (tmp_path / ".env").write_text(f"STORMLAB_TOKEN={token}\n")
    book = Desk(tmp_path, title="the 2015 storm", team="blue")
    ops = Ops({"directory": str(tmp_path), "components": {}}, journal=book.journal)
    page = {"alerts": [{"status": "firing", "labels": {"alertname": "RetryStorm", "role": "database", "severity": "critical"},
                        "annotations": {"summary": "15% of storage nodes are disqualified"}}]}  # fmt: skip

    async def main() -> None:
        where = Reach("127.0.0.1", None, certificate)
        async with desk_web.serving(book, ops, where, 0, token, alerts=("127.0.0.1", 0)) as served:
            assert served.url.startswith("https://") and served.plain_url and served.plain_url.startswith("http://127.0.0.1:")
            assert len({u.rsplit(":", 1)[1] for u in (served.url, served.local_url, served.plain_url)}) == 3
            auth = {"Authorization": f"Bearer {token}"}
            async with aiohttp.ClientSession() as http:
                async with http.post(served.plain_url + "/alertmanager", json=page, headers=auth) as answer:
                    assert answer.status == 200 and (await answer.json()) == {"recorded": 1}
                async with http.post(
                    served.plain_url + "/alertmanager", json=page, headers=auth | {"Host": "stormlab-desk:8709"}
                ) as answer:
                    assert answer.status == 200  # the name the stack's containers post to
                pinned = ssl.create_default_context(cafile=certificate.cert)
                async with http.get(served.url + "/status.json", ssl=pinned, headers=auth) as answer:
                    assert answer.status == 200 and len((await answer.json())["pages"]) == 2

    asyncio.run(main())
