"""The HTTP API's secure options on Ray: ``http_auth="all"`` (every read and the status page
need the token; a browser opens ``/?token=`` once and gets an HttpOnly cookie), HTTPS from a
given certificate (``http_tls``), and ``http_host`` deciding where it listens (127.0.0.1
unless asked). Checked with urllib against the certificate as the only trusted CA, and in
headless Chromium that trusts only this certificate's key."""
import asyncio
import base64
import datetime
import hashlib
import ipaddress
import json
import os
import socket
import ssl
import urllib.error
import urllib.request
from urllib.parse import urlsplit

import pytest

from .. import cdp

pytest_plugins = ["tests.ray_fixtures"]

from raygroups.actors import Group  # noqa: E402

HOST = "127.0.0.2"  # not the node's address: only there because http_host asks for it


def self_signed(tmp) -> tuple:
    """A certificate for ``HOST`` and its key (PEM files), and the key's SPKI hash."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "raygroups test")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address(HOST))]), critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = tmp / "cert.pem", tmp / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    os.chmod(key_path, 0o600)
    spki = key.public_key().public_bytes(serialization.Encoding.DER,
                                         serialization.PublicFormat.SubjectPublicKeyInfo)
    return str(cert_path), str(key_path), base64.b64encode(hashlib.sha256(spki).digest()).decode()


@pytest.fixture(scope="module")
def tls(tmp_path_factory):
    return self_signed(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
def group(ray_session, tls):
    g = Group.launch(f"t-https-{os.getpid()}", members=3, timeout=60, http_host=HOST,
                     http_auth="all", http_tls=tls[:2])
    yield g
    g.shutdown()


def get(url: str, cafile: str, token=None) -> tuple:
    ctx = ssl.create_default_context(cafile=cafile)
    req = urllib.request.Request(url)
    if token is not None:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=30, context=ctx) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def test_https_on_the_asked_address_with_the_token_on_every_read(group, tls):
    urls = group.status_urls()
    token = group.http_token()
    assert len(urls) == 3
    for url in urls.values():
        parts = urlsplit(url)
        assert parts.scheme == "https" and parts.hostname == HOST
        for path in ("", "membership/size", "membership/nodes", "membership/views",
                     "membership/status"):
            status, body = get(url + path, tls[0])
            assert status == 401, (path, status)
            assert token.encode() not in body
            assert get(url + path, tls[0], token="wrong")[0] == 401
            status, body = get(url + path, tls[0], token=token)
            assert status == 200, (path, status)
        assert json.loads(get(url + "membership/size", tls[0], token)[1])["size"] == 3
        with socket.socket() as s:  # nothing listens on the node's own address for it
            assert s.connect_ex(("127.0.0.1", parts.port)) != 0
        with pytest.raises((urllib.error.URLError, ConnectionError)):  # no plain HTTP
            urllib.request.urlopen(f"http://{HOST}:{parts.port}/membership/size", timeout=10)


@pytest.mark.skipif(not cdp.available(),
                    reason=f"no Chromium at {cdp.CHROMIUM} (Debian: apt-get install chromium)")
def test_the_status_page_opens_with_the_token_once_then_by_cookie(group, tls):
    url = next(iter(group.status_urls().values()))
    token = group.http_token()
    rows = "document.querySelectorAll('#members tbody tr').length"

    async def main():
        async with cdp.Chromium(flags=(f"--ignore-certificate-errors-spki-list={tls[2]}",)) \
                as page:
            await page.goto(url)
            assert "unauthorized" in await page.eval("document.body.textContent")
            await page.goto(url + "?token=" + token)
            await page.wait_for(f"{rows} === 3")
            assert await page.eval("location.search") == "", "the token left the address bar"
            assert token not in await page.eval("document.cookie"), "the cookie is HttpOnly"
            await page.goto(url)  # the cookie alone, from now on
            await page.wait_for(f"{rows} === 3")
    asyncio.run(main())


def test_bad_http_options_are_typed_errors(ray_session):
    with pytest.raises(ValueError, match="http_auth"):
        Group.launch("never", members=1, http_auth="some")
    with pytest.raises(ValueError, match="http_tls"):
        Group.launch("never", members=1, http_tls=("only-a-cert.pem",))
