"""BENCHMARK FIXTURE: a runner stand-in that answers ``POST /invoke`` at once.

One process serves every release of the instant backend, each under
``/revisions/<revision>``, and keeps the runner contract (docs/runner-contract.md) there:
the smoke step checks it before its budget test.
"""

import json
import sys

from aiohttp import web

USAGE = {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}


async def invoke(request: web.Request) -> web.StreamResponse:
    revision = request.match_info["revision"]
    try:
        body = json.loads(await request.read())
    except ValueError:
        body = None
    if not isinstance(body, dict):
        return web.json_response(
            {"error": "send a JSON object"}, status=422, headers={"x-plnt-revision": revision}
        )
    result = {"output": {"reply": "instant"}, "reply": "instant", "usage": USAGE}
    if "text/event-stream" not in request.headers.get("Accept", ""):
        return web.json_response(
            result, headers={"x-plnt-revision": revision, "x-plnt-tokens": "0,0"}
        )
    stream = web.StreamResponse(
        headers={"Content-Type": "text/event-stream", "x-plnt-revision": revision}
    )
    await stream.prepare(request)
    await stream.write(f"event: result\ndata: {json.dumps(result)}\n\n".encode())
    await stream.write_eof()
    return stream


async def healthz(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


async def metrics(request: web.Request) -> web.Response:
    return web.Response(
        text="# TYPE plnt_invocations_total counter\n"
        "# TYPE plnt_invocation_duration_seconds histogram\n"
    )


def main() -> None:
    app = web.Application()
    app.router.add_post("/revisions/{revision}/invoke", invoke)
    app.router.add_get("/revisions/{revision}/healthz", healthz)
    app.router.add_get("/revisions/{revision}/metrics", metrics)
    web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), print=None, access_log=None)


if __name__ == "__main__":
    main()
