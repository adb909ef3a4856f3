"""A runner written with Python's standard library only, meeting the runner contract v1
(docs/runner-contract.md): it echoes each invoke body back as its output, and answers in
the trace of the ``traceparent`` it is sent.

    PLNT_RUNNER_WORKFLOW_FILE=workflow.yaml PLNT_RUNNER_PORT=8181 python runner.py
    plnt runner check --run "python runner.py" --workflow workflow.yaml
"""

import json
import os
import re
import signal
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

HOST = os.environ.get("PLNT_RUNNER_HOST", "127.0.0.1")
PORT = int(os.environ.get("PLNT_RUNNER_PORT", "0"))
REVISION = os.environ.get("PLNT_RUNNER_REVISION", "")
with open(os.environ["PLNT_RUNNER_WORKFLOW_FILE"], encoding="utf-8") as spec:
    WORKFLOW = re.search(r"^\s+name:\s*(\S+)", spec.read(), re.MULTILINE).group(1)
# PLNT_RUNNER_LLM_BASE_URL, _MODEL and _API_KEY name an LLM; an echo calls none.
LOCK = threading.Lock()
CALLS: dict[str, list[float]] = {}  # status -> [count, seconds]


def record(status, seconds):
    with LOCK:
        figures = CALLS.setdefault(status, [0, 0.0])
        figures[0] += 1
        figures[1] += seconds


def metrics():
    lines = ["# TYPE plnt_invocations_total counter"]
    lines += ["# TYPE plnt_invocation_duration_seconds summary"]
    with LOCK:
        for status, (count, seconds) in CALLS.items():
            labels = f'{{workflow="{WORKFLOW}",revision="{REVISION}",status="{status}"}}'
            lines += [f"plnt_invocations_total{labels} {count}"]
            lines += [f"plnt_invocation_duration_seconds_count{labels} {count}"]
            lines += [f"plnt_invocation_duration_seconds_sum{labels} {seconds}"]
    return "\n".join(lines) + "\n"


TRACEPARENT = re.compile(r"00-([0-9a-f]{32})-[0-9a-f]{16}-([0-9a-f]{2})")


def continued(traceparent):
    """The caller's trace, with a span id of this runner's own (contract clause 8)."""
    match = TRACEPARENT.fullmatch((traceparent or "").strip())
    if match is None:
        return {}
    trace_id, flags = match.groups()
    return {"traceparent": f"00-{trace_id}-{os.urandom(8).hex()}-{flags}"}


def sse(event, data):
    return f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()


class Handler(BaseHTTPRequestHandler):
    timeout = 30  # an idle client does not hold a thread, nor the shutdown, for longer

    def do_GET(self):
        if self.path == "/healthz":
            self.answer(200, json.dumps({"status": "ok"}).encode(), "application/json")
        elif self.path == "/metrics":
            self.answer(200, metrics().encode(), "text/plain; version=0.0.4")
        else:
            self.answer(404, json.dumps({"error": f"no {self.path}"}).encode(), "application/json")

    def do_POST(self):
        started = time.perf_counter()
        self.trace = continued(self.headers.get("traceparent"))
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        if self.path != "/invoke" or not isinstance(body, dict):
            record("invalid", 0.0)
            error = {"error": "send a JSON object to POST /invoke"}
            return self.answer(422, json.dumps(error).encode(), "application/json")
        words = len(json.dumps(body).split())
        usage = {"prompt_tokens": words, "completion_tokens": words, "total_tokens": 2 * words}
        result = {"output": {"echo": body}, "reply": None, "usage": usage}
        if "text/event-stream" in self.headers.get("Accept", ""):
            events = sse("step", {"step": "echo", "output": body}) + sse("result", result)
            self.answer(200, events, "text/event-stream")
        else:
            tokens = {"x-plnt-tokens": f"{words},{words}"}
            self.answer(200, json.dumps(result).encode(), "application/json", tokens)
        record("ok", time.perf_counter() - started)

    def answer(self, status, data, content_type, headers=None):
        self.send_response(status)
        headers = {"Content-Type": content_type, **getattr(self, "trace", {}), **(headers or {})}
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("x-plnt-revision", REVISION)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


server = ThreadingHTTPServer((HOST, PORT), Handler)
server.daemon_threads = False  # server_close() joins the threads: calls in flight finish
signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown).start())
print(f"listening on http://{HOST}:{server.server_port}", flush=True)
server.serve_forever()  # returns once SIGTERM's shutdown() stops taking calls
server.server_close()
