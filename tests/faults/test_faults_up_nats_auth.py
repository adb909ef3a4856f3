"""``plnt up`` with ``PLNT_NATS_TOKEN`` (or a user and password) set: its own nats-server asks
every client for it, its services present it (they inherit the environment), a run deploys,
and a client without it is refused."""

import asyncio
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from test_faults_nats_supervised import deploy, read_until
from test_faults_up_lifecycle import spawn_up, wait_until_gone

from plnt_cli.supervisor import embedded_nats_auth
from plnt_common.bus.auth import NatsAuthSettings
from plnt_common.bus.connection import connect
from plnt_common.errors import BusMisconfigured, BusUnavailable
from plnt_common.nats_server import ClientAuth

TOKEN = "s3cret-token-for-the-test"


def plnt(*argv: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "plnt_cli", *argv], env=env, capture_output=True, text=True
    )


def test_a_token_guards_plnt_up_s_nats_and_a_run_deploys_through_it(
    tmp_path: Path, registry: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mark = uuid.uuid4().hex
    monkeypatch.setenv("PLNT_NATS_TOKEN", TOKEN)
    up = spawn_up(tmp_path, mark)
    try:
        lines = read_until(up, "plnt is up", timeout_s=90)
        url = lines[-1].split("NATS ")[1].split(",")[0]
        lines += read_until(up, "NATS asks every client", timeout_s=5)
        assert "NATS asks every client for PLNT_NATS_TOKEN, as set in this environment" in lines
        # every service authenticated: the run goes through watcher, puller, installer,
        # smoke and promoter, and the router serves it
        phases = asyncio.run(deploy(url, registry, "guarded"))
        assert phases == {"guarded": "Ready"}
        env = dict(os.environ, PLNT_HOME=str(tmp_path / "home"), PLNT_NATS_URL=url)
        listed = plnt("get", "wr", env=env)
        assert listed.returncode == 0 and "guarded" in listed.stdout, listed
        env.pop("PLNT_NATS_TOKEN")
        refused = plnt("get", "wr", env=env)
        assert refused.returncode != 0
        assert "refused plnt's credentials" in refused.stderr, refused.stderr
        monkeypatch.delenv("PLNT_NATS_TOKEN")
        with pytest.raises(BusUnavailable, match="refused plnt's credentials"):
            asyncio.run(connect(url, name="no-token"))
    finally:
        up.send_signal(signal.SIGTERM)
        up.communicate(timeout=30)
    assert wait_until_gone(mark, timeout_s=5) == []
    config = (tmp_path / "data" / "nats" / "nats-server.conf").stat()
    assert config.st_mode & 0o077 == 0  # the token is on disk for its owner only


def test_plnt_up_refuses_what_its_own_nats_cannot_ask_for_in_one_line(tmp_path: Path) -> None:
    creds = tmp_path / "user.creds"
    creds.write_text("-----BEGIN NATS USER JWT-----\n")
    env = dict(os.environ, PLNT_HOME=str(tmp_path / "home"), PLNT_NATS_CREDS=str(creds))
    done = plnt("up", "--data-dir", str(tmp_path / "data"), env=env)
    assert done.returncode != 0
    assert done.stderr.strip().splitlines()[-1].startswith("plnt: PLNT_NATS_CREDS needs a NATS")
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("settings", "problem"),
    [
        ({"tls_ca": __file__}, "PLNT_NATS_TLS_*"),
        ({"token": 'with"quote'}, "without quotes or backslashes"),
        ({"user": "u"}, "PLNT_NATS_USER and PLNT_NATS_PASSWORD go together"),
        ({"token": "t", "user": "u", "password": "p"}, "give one way to authenticate"),
    ],
)
def test_embedded_auth_names_the_setting_it_cannot_serve(
    settings: dict[str, str], problem: str
) -> None:
    with pytest.raises(BusMisconfigured, match=problem.replace("*", r"\*")):
        embedded_nats_auth(NatsAuthSettings(**settings))  # type: ignore[arg-type]


def test_embedded_auth_is_the_token_or_the_user_and_password() -> None:
    assert embedded_nats_auth(NatsAuthSettings()) is None
    assert embedded_nats_auth(NatsAuthSettings(token="t")) == ClientAuth(token="t")  # type: ignore[arg-type]
    assert embedded_nats_auth(
        NatsAuthSettings(user="u", password="p")  # type: ignore[arg-type]
    ) == ClientAuth(user="u", password="p")
