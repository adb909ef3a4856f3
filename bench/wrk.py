"""Saturation throughput with wrk: POST bodies from a Lua script, pinned to the load core.

``saturate`` runs a short warm-up, then the measured run, and returns requests/s and
the count of answers that were not 2xx (a proxy that sheds load must not look fast by
answering errors quickly). ``wrk_binary`` is None when wrk is not installed.
"""

import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from bench.procs import LOAD_CPU, cpus_available

SCRIPT = """\
wrk.method = "POST"
wrk.body = '{"review": "Great service but slow parking"}'
wrk.headers["Content-Type"] = "application/json"
"""


@dataclass(frozen=True)
class Throughput:
    requests_per_s: float
    non_2xx: int
    errors: int


def wrk_binary() -> str | None:
    return shutil.which("wrk")


def wrk_version() -> str:
    binary = wrk_binary()
    if binary is None:
        return "wrk not installed"
    result = subprocess.run([binary, "--version"], capture_output=True, text=True)
    return (result.stdout or result.stderr).split(" [")[0].strip()


def saturate(
    url: str, *, tmp: Path, seconds: int, connections: int, warmup_s: int = 2
) -> Throughput:
    """Drive ``url`` with ``connections`` kept-alive connections from one wrk thread."""
    binary = wrk_binary()
    if binary is None:
        raise FileNotFoundError("wrk is not installed")
    script = tmp / "post.lua"
    script.write_text(SCRIPT)
    pin = ["taskset", "-c", str(LOAD_CPU)] if cpus_available() and shutil.which("taskset") else []

    def run(duration: int) -> str:
        argv = [*pin, binary, "-t1", f"-c{connections}", f"-d{duration}s", "-s", str(script), url]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=duration + 30)
        if done.returncode != 0:
            raise RuntimeError(f"wrk failed: {done.stderr.strip() or done.stdout.strip()}")
        return done.stdout

    if warmup_s:
        run(warmup_s)
    out = run(seconds)
    rate = re.search(r"Requests/sec:\s+([\d.]+)", out)
    if rate is None:
        raise RuntimeError(f"cannot read wrk's output:\n{out}")
    non_2xx = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    errors = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    return Throughput(
        requests_per_s=float(rate.group(1)),
        non_2xx=int(non_2xx.group(1)) if non_2xx else 0,
        errors=sum(int(n) for n in errors.groups()) if errors else 0,
    )
