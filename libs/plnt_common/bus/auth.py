"""How every plnt process authenticates to NATS and encrypts the connection.

``PLNT_NATS_CREDS`` (a creds file), ``PLNT_NATS_USER`` with ``PLNT_NATS_PASSWORD``, or
``PLNT_NATS_TOKEN``: one way at most. ``PLNT_NATS_TLS_CA`` verifies the server;
``PLNT_NATS_TLS_CERT`` with ``PLNT_NATS_TLS_KEY`` is the client's certificate for servers
that verify clients. The chart mounts them from Secrets. Half a setting (a user without
a password, a certificate without its key, a file that is not there) is refused naming
the setting; secrets never reach a log line.
"""

import ssl
from pathlib import Path
from typing import Any

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from plnt_common.errors import BusMisconfigured


class NatsAuthSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="PLNT_NATS_", extra="ignore")

    creds: Path | None = Field(default=None, description="A NATS creds file (JWT and seed).")
    user: str | None = None
    password: SecretStr | None = None
    token: SecretStr | None = None
    tls_ca: Path | None = Field(default=None, description="CA bundle that checks the server.")
    tls_cert: Path | None = Field(default=None, description="The client's certificate.")
    tls_key: Path | None = Field(default=None, description="The client certificate's key.")


def connect_options(settings: NatsAuthSettings | None = None) -> dict[str, Any]:
    """nats-py ``connect`` keyword arguments from the settings; raises ``BusMisconfigured``."""
    s = settings or NatsAuthSettings()
    ways = [
        name
        for name, given in (
            ("PLNT_NATS_CREDS", s.creds),
            ("PLNT_NATS_USER", s.user),
            ("PLNT_NATS_TOKEN", s.token),
        )
        if given
    ]
    if len(ways) > 1:
        raise BusMisconfigured(f"{' and '.join(ways)} are set: give one way to authenticate")
    if (s.user is None) != (s.password is None):
        raise BusMisconfigured("PLNT_NATS_USER and PLNT_NATS_PASSWORD go together")
    if (s.tls_cert is None) != (s.tls_key is None):
        raise BusMisconfigured("PLNT_NATS_TLS_CERT and PLNT_NATS_TLS_KEY go together")
    for name, path in (
        ("PLNT_NATS_CREDS", s.creds),
        ("PLNT_NATS_TLS_CA", s.tls_ca),
        ("PLNT_NATS_TLS_CERT", s.tls_cert),
        ("PLNT_NATS_TLS_KEY", s.tls_key),
    ):
        if path is not None and not path.is_file():
            raise BusMisconfigured(f"{name}: no file at {path}")
    options: dict[str, Any] = {}
    if s.creds is not None:
        options["user_credentials"] = str(s.creds)
    if s.user is not None and s.password is not None:
        options["user"] = s.user
        options["password"] = s.password.get_secret_value()
    if s.token is not None:
        options["token"] = s.token.get_secret_value()
    if s.tls_ca is not None or s.tls_cert is not None:
        options["tls"] = _tls_context(s)
    return options


def _tls_context(s: NatsAuthSettings) -> ssl.SSLContext:
    try:
        context = ssl.create_default_context(cafile=str(s.tls_ca) if s.tls_ca else None)
        if s.tls_cert is not None and s.tls_key is not None:
            context.load_cert_chain(str(s.tls_cert), str(s.tls_key))
    except (ssl.SSLError, OSError) as exc:
        raise BusMisconfigured(f"PLNT_NATS_TLS_*: {exc}") from None
    return context
