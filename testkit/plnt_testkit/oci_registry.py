"""A real OCI registry for tests: Debian's ``docker-registry`` (the CNCF distribution
registry) on a free loopback port, with a temporary filesystem store.

``oci_registry_server`` starts one, with basic auth from an htpasswd file when
``credentials`` are given, and stops it on exit. ``REGISTRY_BINARY`` is None when the
package is not installed (``.ci/run`` installs it); tests skip on that alone. The
htpasswd line is made by ``htpasswd -B`` (apache2-utils), bcrypt being the only hash the
registry accepts. Not for production use: plain HTTP, no TLS.
"""

import shutil
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from plnt_common.nats_server import free_port

REGISTRY_BINARY = shutil.which("docker-registry")
HTPASSWD_BINARY = shutil.which("htpasswd")
MISSING = "docker-registry is not installed (apt-get install docker-registry apache2-utils)"


@dataclass(frozen=True)
class OciRegistryServer:
    """A running registry: ``host`` is ``127.0.0.1:<port>``."""

    host: str
    credentials: tuple[str, str] | None

    def url(self, path: str = "microagents") -> str:
        """The ``oci://`` registry URL of ``path`` on this server."""
        return f"oci://{self.host}/{path}"


@contextmanager
def oci_registry_server(
    root: Path, *, credentials: tuple[str, str] | None = None
) -> Iterator[OciRegistryServer]:
    """Serve a registry storing under ``root``; raises RuntimeError with its log when it
    does not listen within 10 s."""
    if REGISTRY_BINARY is None:
        raise RuntimeError(MISSING)
    root.mkdir(parents=True, exist_ok=True)
    port = free_port()
    auth = ""
    if credentials is not None:
        auth = (
            f"auth:\n  htpasswd:\n    realm: plnt-tests\n    path: {_htpasswd(root, credentials)}\n"
        )
    config = root / "config.yml"
    config.write_text(
        "version: 0.1\n"
        "log:\n  level: warn\n  accesslog:\n    disabled: true\n"
        f"storage:\n  filesystem:\n    rootdirectory: {root / 'store'}\n"
        "  delete:\n    enabled: true\n"
        f"http:\n  addr: 127.0.0.1:{port}\n  secret: plnt-tests-only\n" + auth
    )
    log = root / "registry.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [REGISTRY_BINARY, "serve", str(config)], stdout=out, stderr=subprocess.STDOUT
        )
    try:
        _wait_until_serving(process, port, log)
        yield OciRegistryServer(host=f"127.0.0.1:{port}", credentials=credentials)
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _htpasswd(root: Path, credentials: tuple[str, str]) -> Path:
    if HTPASSWD_BINARY is None:
        raise RuntimeError("htpasswd is not installed (apt-get install apache2-utils)")
    user, password = credentials
    line = subprocess.run(
        [HTPASSWD_BINARY, "-Bbn", user, password], check=True, capture_output=True, text=True
    ).stdout.strip()
    path = root / "htpasswd"
    path.write_text(line + "\n")
    return path


def _wait_until_serving(process: subprocess.Popen[bytes], port: int, log: Path) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"docker-registry exited ({process.returncode}): {log.read_text()}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/", timeout=1):
                return
        except urllib.error.HTTPError:  # 401 with auth: it serves
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"docker-registry did not listen on {port} in 10 s: {log.read_text()}")
