"""A real S3 API for tests: moto's server on a loopback port, in a thread of this process.

``moto_s3_server`` yields the endpoint URL to give boto3 (``endpoint_url=``) or the puller
(``PLNT_PULLER_S3_ENDPOINT_URL``). moto keeps its state per process, not per server, so
the state is reset on entry and on exit: every user starts with no buckets. Credentials
are not checked; any AWS key pair works. Not for production use.
"""

import logging
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager

from moto.server import ThreadedMotoServer

from plnt_common.nats_server import wait_for_port


@contextmanager
def moto_s3_server(*, host: str = "127.0.0.1") -> Iterator[str]:
    """Start moto's S3 server on a free port of ``host``; yields ``http://host:port``."""
    # werkzeug logs every request at INFO; tests want their own output, not moto's.
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    # Port 0: the kernel picks a free port at bind time, so two servers never race for one.
    server = ThreadedMotoServer(ip_address=host, port=0, verbose=False)
    server.start()
    try:
        bound_host, port = server.get_host_and_port()
        wait_for_port(port, host=bound_host)
        endpoint = f"http://{bound_host}:{port}"
        reset_moto(endpoint)
        yield endpoint
        reset_moto(endpoint)
    finally:
        server.stop()


def reset_moto(endpoint: str) -> None:
    """Forget every bucket and object moto holds (its state outlives a server)."""
    request = urllib.request.Request(f"{endpoint}/moto-api/reset", method="POST")
    with urllib.request.urlopen(request, timeout=10) as response:
        response.read()
