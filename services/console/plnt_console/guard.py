"""Who may use the console: loopback by default, a token everywhere else."""

import hmac
import ipaddress
from collections.abc import Awaitable, Callable

from aiohttp import web
from aiohttp.typedefs import Middleware

from plnt_common.errors import PlntError

COOKIE = "plnt_console_token"
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback addresses (127.0.0.0/8, ::1)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_bind(host: str, token: str) -> None:
    """Raises ``PlntError`` (one line) for a non-loopback ``host`` without a token."""
    if not is_loopback(host) and not token:
        raise PlntError(
            f"the console refuses to listen on {host} without a token: "
            "set PLNT_CONSOLE_TOKEN (or listen on 127.0.0.1)"
        )


def presented_token(request: web.Request) -> str:
    """The token a request carries: bearer header, ``?token=`` or the console's cookie."""
    header = request.headers.get("Authorization", "")
    if header.startswith("Bearer "):
        return header.removeprefix("Bearer ").strip()
    return request.query.get("token") or request.cookies.get(COOKIE, "")


def token_middleware(token: str) -> Middleware:
    """Refuses (401, JSON) every request but ``/healthz`` that lacks ``token``; sets the
    cookie when the token came in the query, so the page's own requests carry it."""

    @web.middleware
    async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
        if not token or request.path == "/healthz":
            return await handler(request)
        given = presented_token(request)
        if not hmac.compare_digest(given.encode(), token.encode()):
            return web.json_response(
                {"error": "this console needs its token (PLNT_CONSOLE_TOKEN): open ?token=…"},
                status=401,
            )
        response = await handler(request)
        if request.query.get("token") and not response.prepared:
            response.set_cookie(COOKIE, given, httponly=True, samesite="Strict")
        return response

    return guard
