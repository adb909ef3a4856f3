"""NATS credentials and TLS from PLNT_NATS_*: against a real nats-server that demands a
token, a user and password, or TLS; half a setting refused at start in one line."""

import asyncio
import datetime
import ipaddress
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from plnt_common.bus.connection import connect
from plnt_common.errors import BusMisconfigured, BusUnavailable
from plnt_common.nats_server import free_port
from plnt_testkit.configured_nats import configured_nats


def start_server(tmp_path: Path, settings: str) -> Iterator[str]:
    with configured_nats(tmp_path, settings) as url:
        yield url


@pytest.fixture
def token_server(tmp_path: Path) -> Iterator[str]:
    yield from start_server(tmp_path, 'authorization { token: "s3cret-token" }')


@pytest.fixture
def user_server(tmp_path: Path) -> Iterator[str]:
    yield from start_server(tmp_path, 'authorization { user: plnt, password: "pa55" }')


def _key_and_cert(
    tmp_path: Path, name: str, *, issuer: tuple[x509.Name, ec.EllipticCurvePrivateKey] | None
) -> tuple[Path, Path, x509.Name, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    issuer_name, issuer_key = issuer or (subject, key)
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + datetime.timedelta(hours=1))
    )
    if issuer is None:
        builder = builder.add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
    else:
        builder = builder.add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            False,
        )
    cert = builder.sign(issuer_key, hashes.SHA256())
    key_path, cert_path = tmp_path / f"{name}.key", tmp_path / f"{name}.crt"
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return key_path, cert_path, subject, key


@pytest.fixture
def tls_server(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    _, ca_cert, ca_name, ca_key = _key_and_cert(tmp_path, "ca", issuer=None)
    key, cert, _, _ = _key_and_cert(tmp_path, "server", issuer=(ca_name, ca_key))
    settings = f'tls {{ cert_file: "{cert}", key_file: "{key}" }}'
    for url in start_server(tmp_path, settings):
        yield url, ca_cert


async def test_a_token_is_sent_when_set_and_its_absence_is_refused(
    token_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(BusUnavailable, match="refused"):
        await connect(token_server)
    monkeypatch.setenv("PLNT_NATS_TOKEN", "s3cret-token")
    client = await connect(token_server)
    assert client.is_connected
    await client.close()


async def test_a_user_and_password_are_sent_and_a_wrong_password_is_refused(
    user_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PLNT_NATS_USER", "plnt")
    monkeypatch.setenv("PLNT_NATS_PASSWORD", "wrong")
    with pytest.raises(BusUnavailable) as refused:
        await connect(user_server)
    assert "wrong" not in str(refused.value)
    monkeypatch.setenv("PLNT_NATS_PASSWORD", "pa55")
    client = await connect(user_server)
    assert client.is_connected
    await client.close()


async def test_tls_verifies_the_server_with_the_given_ca(
    tls_server: tuple[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, ca = tls_server
    monkeypatch.setenv("PLNT_NATS_TLS_CA", str(ca))
    client = await connect(url)
    assert client.is_connected
    await client.close()


@pytest.fixture
def untrusted_ca(tmp_path: Path) -> Path:
    """A CA that signed nothing the server presents."""
    other = tmp_path / "other"
    other.mkdir()
    return _key_and_cert(other, "ca", issuer=None)[1]


@pytest.mark.parametrize("ca", ["untrusted", "none"])
async def test_a_server_certificate_the_client_does_not_trust_is_one_error_at_once(
    tls_server: tuple[str, Path], untrusted_ca: Path, monkeypatch: pytest.MonkeyPatch, ca: str
) -> None:
    """nats-py alone never returns from such a connect (its close waits for a socket the
    failed handshake gave away); without a CA the system's are used, and they fail too."""
    url, _ = tls_server
    if ca == "untrusted":
        monkeypatch.setenv("PLNT_NATS_TLS_CA", str(untrusted_ca))
    with pytest.raises(BusUnavailable) as refused:
        await asyncio.wait_for(connect(url), timeout=10)
    assert "the TLS handshake failed" in str(refused.value)
    assert "PLNT_NATS_TLS_CA" in str(refused.value)


def test_a_service_that_cannot_trust_the_server_stops_at_start_in_one_line(
    tls_server: tuple[str, Path], untrusted_ca: Path
) -> None:
    url, _ = tls_server
    served = subprocess.run(
        [sys.executable, "-m", "plnt_cli", "serve", "puller"],
        env={**os.environ, "PLNT_NATS_URL": url, "PLNT_NATS_TLS_CA": str(untrusted_ca)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert served.returncode != 0
    last = served.stderr.strip().splitlines()[-1]
    assert last.startswith(f"plnt: NATS at {url}: the TLS handshake failed"), served.stderr
    assert "Traceback" not in served.stderr


@pytest.mark.parametrize(
    ("env", "says"),
    [
        ({"PLNT_NATS_USER": "plnt"}, "PLNT_NATS_USER and PLNT_NATS_PASSWORD go together"),
        ({"PLNT_NATS_TOKEN": "t", "PLNT_NATS_USER": "u", "PLNT_NATS_PASSWORD": "p"}, "one way"),
        ({"PLNT_NATS_TLS_CERT": "/etc/hostname"}, "PLNT_NATS_TLS_CERT and PLNT_NATS_TLS_KEY"),
        ({"PLNT_NATS_CREDS": "/nonexistent/plnt.creds"}, "PLNT_NATS_CREDS: no file"),
    ],
    ids=["user-without-password", "two-ways", "cert-without-key", "missing-creds-file"],
)
def test_half_a_setting_stops_a_service_at_start_in_one_line(
    env: dict[str, str], says: str
) -> None:
    served = subprocess.run(
        [sys.executable, "-m", "plnt_cli", "serve", "puller"],
        env={**os.environ, "PLNT_NATS_URL": f"nats://127.0.0.1:{free_port()}", **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert served.returncode != 0
    lines = served.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0], served.stderr


def test_connect_options_refuse_without_touching_the_network() -> None:
    from plnt_common.bus.auth import NatsAuthSettings, connect_options

    with pytest.raises(BusMisconfigured, match="go together"):
        connect_options(NatsAuthSettings(user="plnt"))
    assert connect_options(NatsAuthSettings()) == {}
