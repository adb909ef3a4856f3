"""BENCHMARK FIXTURE: a runner stand-in that answers ``POST /invoke`` at once."""

import sys

from aiohttp import web


async def invoke(request: web.Request) -> web.Response:
    await request.read()
    return web.json_response({"output": {"reply": "instant"}}, headers={"x-plnt-revision": "bench"})


def main() -> None:
    app = web.Application()
    app.router.add_post("/invoke", invoke)
    web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), print=None, access_log=None)


if __name__ == "__main__":
    main()
