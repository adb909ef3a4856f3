"""The reference proxy: Debian's nginx, one worker, on a free loopback port in a temp dir.

``Nginx`` writes a config that proxies ``/workflows/<name>/invoke`` to the fast backend's
``/invoke`` the way an operator would tune it for this job (upstream keep-alive, HTTP/1.1
to the upstream, no access log, SSE not buffered) and runs ``nginx -g 'daemon off;'``
pinned to the system-under-test core. ``nginx_binary`` is None when nginx is not
installed; the harness then skips nginx's rows and says how to install it.
"""

import shutil
import subprocess
from pathlib import Path

from bench.procs import SUT_CPU, Child
from plnt_common.nats_server import free_port, wait_for_port

INSTALL_HINT = "apt-get update && apt-get install -y nginx wrk  (or: task bench:deps)"

CONFIG = """\
worker_processes 1;
daemon off;
pid {tmp}/nginx.pid;
error_log {tmp}/error.log warn;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    client_body_temp_path {tmp}/body;
    proxy_temp_path {tmp}/proxy;
    fastcgi_temp_path {tmp}/fastcgi;
    uwsgi_temp_path {tmp}/uwsgi;
    scgi_temp_path {tmp}/scgi;
    keepalive_requests 1000000;
    upstream backend {{
        server 127.0.0.1:{backend_port};
        keepalive 256;
        keepalive_requests 1000000;
    }}
    server {{
        listen 127.0.0.1:{port} reuseport backlog=4096;
        location ~ ^/workflows/[^/]+/invoke$ {{
            rewrite ^ /invoke break;
            proxy_pass http://backend;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
        }}
    }}
}}
"""


def nginx_binary() -> str | None:
    """nginx on PATH, or Debian's /usr/sbin/nginx (not on a non-root PATH); None if neither."""
    found = shutil.which("nginx")
    if found is None and Path("/usr/sbin/nginx").is_file():
        found = "/usr/sbin/nginx"
    return found


def nginx_version() -> str:
    binary = nginx_binary()
    if binary is None:
        return "nginx not installed"
    result = subprocess.run([binary, "-v"], capture_output=True, text=True)
    return (result.stderr or result.stdout).strip().removeprefix("nginx version: ")


class Nginx:
    """nginx proxying to ``127.0.0.1:backend_port``; ``url`` is its base URL once started."""

    def __init__(self, *, tmp: Path, backend_port: int) -> None:
        binary = nginx_binary()
        if binary is None:
            raise FileNotFoundError(f"nginx is not installed: {INSTALL_HINT}")
        self.port = free_port()
        self._tmp = tmp
        tmp.mkdir(parents=True, exist_ok=True)
        config = tmp / "nginx.conf"
        config.write_text(CONFIG.format(tmp=tmp, port=self.port, backend_port=backend_port))
        self._child = Child(
            [binary, "-p", str(tmp), "-e", str(tmp / "error.log"), "-c", str(config)],
            cpu=SUT_CPU,
            log=tmp / "stdout.log",
            wait_for_url=False,
        )
        self.url = f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> "Nginx":
        self._child.start()
        try:
            wait_for_port(self.port, timeout=5.0)
        except TimeoutError:
            self._child.stop()
            log = self._tmp / "error.log"
            detail = log.read_text()[-1000:] if log.is_file() else ""
            raise RuntimeError(f"nginx did not start: {detail}") from None
        return self

    def __exit__(self, *exc: object) -> None:
        # SIGTERM is nginx's fast shutdown: master and worker exit at once.
        self._child.stop()
