"""The emulator's HTTP face: Kubernetes API paths, verbs, list and watch streams.

Paths ``/api/v1/...`` (core) and ``/apis/<group>/<version>/...``, namespaced
(``namespaces/<ns>/<plural>[/<name>[/status]]``) and cluster-wide (``<plural>[/<name>]``,
which for a namespaced type lists or watches every namespace). Verbs: list, watch, get,
create, update, patch, delete, and get/update/patch of ``status``. Watches stream one JSON
event per line, send BOOKMARKs when asked to, end at ``timeoutSeconds``, and report a
too-old ``resourceVersion`` as an ERROR event carrying a 410 Status on a 200 response,
as the real server does. Authentication is not checked.
"""

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from aiohttp import web

from plnt_testkit.kube_emulator.selectors import parse_selectors
from plnt_testkit.kube_emulator.store import ObjectStore
from plnt_testkit.kube_emulator.types import ApiError, ResourceType
from plnt_testkit.kube_emulator.watch_hub import Closed, Expired, Subscription, WatchEvent

TICK_S = 0.2
"""How often an idle watch checks whether its client went away."""
MIN_WAIT_S = 0.01


@dataclass(frozen=True)
class Served:
    """One answered request, for tests that count calls or conflicts."""

    method: str
    path: str
    """Path with query string."""
    status: int


@dataclass
class Hook:
    """Runs ``action`` on the server's loop just before matching requests are handled.

    Tests use it to interleave a concurrent write between a client's read and write.
    """

    method: str
    path_suffix: str
    action: Callable[[], object]
    times: int = 1

    def wants(self, method: str, path: str) -> bool:
        if self.times <= 0 or method != self.method or not path.endswith(self.path_suffix):
            return False
        self.times -= 1
        return True


def _json(body: dict[str, Any], status: int = 200) -> web.Response:
    return web.json_response(body, status=status)


def _truthy(value: str | None) -> bool:
    return (value or "").lower() in ("1", "true")


class ApiHandler:
    """Routes every request to the store; one instance per server."""

    def __init__(
        self, *, store: ObjectStore, bookmark_interval_s: float, default_watch_timeout_s: float
    ) -> None:
        self.store = store
        self.bookmark_interval_s = bookmark_interval_s
        self.default_watch_timeout_s = default_watch_timeout_s
        self.hooks: list[Hook] = []
        self.log: list[Served] = []

    def app(self) -> web.Application:
        app = web.Application(client_max_size=8 * 1024 * 1024)
        app.router.add_get("/version", self._version)
        app.router.add_get("/healthz", self._ok)
        app.router.add_get("/readyz", self._ok)
        app.router.add_route("*", "/{tail:.*}", self.handle)
        return app

    async def _version(self, request: web.Request) -> web.Response:
        return _json({"major": "1", "minor": "30", "gitVersion": "v1.30.0-plnt-emulator"})

    async def _ok(self, request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def handle(self, request: web.Request) -> web.StreamResponse:
        for hook in list(self.hooks):
            if hook.wants(request.method, request.path):
                hook.action()
        try:
            response = await self._dispatch(request)
        except ApiError as err:
            response = _json(err.status(), err.code)
        self.log.append(Served(request.method, request.path_qs, response.status))
        return response

    def _route(
        self, path: str
    ) -> tuple[ResourceType, str | None, str | None, Literal["status"] | None]:
        """(type, namespace, name, subresource) for a resource path; 404 otherwise."""
        parts = [p for p in path.split("/") if p]
        if parts[:2] == ["api", "v1"]:
            group, version, rest = "", "v1", parts[2:]
        elif len(parts) >= 3 and parts[0] == "apis":
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        namespace = None
        if len(rest) >= 3 and rest[0] == "namespaces":
            namespace, rest = rest[1], rest[2:]
        rtype = self.store.find_type(group=group, version=version, plural=rest[0]) if rest else None
        if rtype is None or len(rest) > 3 or (namespace and not rtype.namespaced):
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        name = rest[1] if len(rest) >= 2 else None
        subresource: Literal["status"] | None = None
        if len(rest) == 3:
            if rest[2] != "status" or not rtype.status_subresource:
                raise ApiError(404, "NotFound", "the server could not find the requested resource")
            subresource = "status"
        if name and rtype.namespaced and not namespace:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        return rtype, namespace, name, subresource

    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        rtype, namespace, name, subresource = self._route(request.path)
        if request.query.get("dryRun"):
            raise ApiError(400, "BadRequest", "dryRun is not supported by the emulator")
        method = request.method
        if name is None:
            if method == "GET":
                return await self._list_or_watch(request, rtype, namespace)
            if method == "POST" and (namespace or not rtype.namespaced):
                created = self.store.create(rtype, namespace, await self._body(request))
                return _json(created, 201)
        elif method == "GET":
            return _json(self.store.get(rtype, namespace, name))
        elif method == "PUT":
            body = await self._body(request)
            return _json(self.store.update(rtype, namespace, name, body, subresource=subresource))
        elif method == "PATCH":
            patched = self.store.patch(
                rtype,
                namespace,
                name,
                await self._body(request, any_json=True),
                content_type=request.headers.get("Content-Type", ""),
                subresource=subresource,
            )
            return _json(patched)
        elif method == "DELETE" and subresource is None:
            options = await self._body(request) if request.can_read_body else {}
            body, gone = self.store.delete(
                rtype, namespace, name, preconditions=options.get("preconditions")
            )
            if not gone:
                return _json(body)
            meta = body["metadata"]
            details = {"name": name, "group": rtype.group, "kind": rtype.plural}
            details["uid"] = meta.get("uid", "")
            return _json(
                {
                    "kind": "Status",
                    "apiVersion": "v1",
                    "metadata": {},
                    "status": "Success",
                    "details": details,
                }
            )
        raise ApiError(405, "MethodNotAllowed", f"{method} is not supported on {request.path}")

    @staticmethod
    async def _body(request: web.Request, *, any_json: bool = False) -> Any:
        try:
            body = json.loads(await request.read() or b"{}")
        except ValueError:
            raise ApiError(400, "BadRequest", "the request body is not valid JSON") from None
        if not any_json and not isinstance(body, dict):
            raise ApiError(400, "BadRequest", "the request body must be a JSON object")
        return body

    async def _list_or_watch(
        self, request: web.Request, rtype: ResourceType, namespace: str | None
    ) -> web.StreamResponse:
        query = request.query
        try:
            match = parse_selectors(
                labels=query.get("labelSelector"), fields=query.get("fieldSelector")
            )
        except ValueError as exc:
            raise ApiError(400, "BadRequest", str(exc)) from None
        if _truthy(query.get("watch")):
            subscription = Subscription(
                rtype=rtype,
                namespace=namespace,
                match=match,
                user_agent=request.headers.get("User-Agent", ""),
            )
            return await self._watch(request, subscription)
        items, version = self.store.list_objects(rtype, namespace, match)
        return _json(
            {
                "apiVersion": rtype.api_version,
                "kind": f"{rtype.kind}List",
                "metadata": {"resourceVersion": str(version)},
                "items": items,
            }
        )

    async def _watch(self, request: web.Request, subscription: Subscription) -> web.StreamResponse:
        query = request.query
        try:
            since = int(query.get("resourceVersion") or 0)
            timeout_s = float(query.get("timeoutSeconds") or self.default_watch_timeout_s)
        except ValueError:
            raise ApiError(
                400, "BadRequest", "resourceVersion and timeoutSeconds are numbers"
            ) from None
        response = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        try:
            backlog = self.store.subscribe(subscription, since=since)
        except ApiError as err:
            await self._send(response, {"type": "ERROR", "object": err.status()})
            return response
        try:
            position = since
            for event in backlog:
                await self._send_event(response, event)
                position = max(position, event.resource_version)
            await self._stream(request, response, subscription, timeout_s, query, position)
        except ConnectionError:
            pass  # the client went away; nothing left to tell it
        finally:
            self.store.watches.remove(subscription)
        return response

    async def _stream(
        self,
        request: web.Request,
        response: web.StreamResponse,
        subscription: Subscription,
        timeout_s: float,
        query: Any,
        position: int,
    ) -> None:
        """Send events until the deadline, an end sentinel or the client leaving.

        ``position`` is the newest version this client has been sent; a 410 names it.
        """
        loop = asyncio.get_running_loop()
        bookmarks = _truthy(query.get("allowWatchBookmarks"))
        deadline = loop.time() + timeout_s
        next_bookmark = loop.time() + self.bookmark_interval_s
        while True:
            now = loop.time()
            if now >= deadline:
                return
            wait = min(deadline - now, TICK_S)
            if bookmarks:
                wait = min(wait, max(MIN_WAIT_S, next_bookmark - now))
            try:
                # A zero timeout would never let get() run: keep every wait above zero.
                item = await asyncio.wait_for(
                    subscription.queue.get(), timeout=max(MIN_WAIT_S, wait)
                )
            except TimeoutError:
                if request.transport is None or request.transport.is_closing():
                    return
                quiet = subscription.queue.empty() and not subscription.stalled
                if bookmarks and quiet and loop.time() >= next_bookmark:
                    # Safe only when every event up to now was sent: the queue is empty.
                    await self._send(response, self._bookmark(subscription.rtype))
                    position = self.store.resource_version
                    next_bookmark = loop.time() + self.bookmark_interval_s
                continue
            if isinstance(item, Expired):
                error = ApiError.gone(position, self.store.watches.compacted)
                await self._send(response, {"type": "ERROR", "object": error.status()})
                return
            if isinstance(item, Closed):
                return
            await self._send_event(response, item)
            position = item.resource_version

    def _bookmark(self, rtype: ResourceType) -> dict[str, Any]:
        return {
            "type": "BOOKMARK",
            "object": {
                "kind": rtype.kind,
                "apiVersion": rtype.api_version,
                "metadata": {"resourceVersion": str(self.store.resource_version)},
            },
        }

    async def _send_event(self, response: web.StreamResponse, event: WatchEvent) -> None:
        await self._send(response, {"type": event.type, "object": event.object})

    @staticmethod
    async def _send(response: web.StreamResponse, event: dict[str, Any]) -> None:
        await response.write(json.dumps(event, separators=(",", ":")).encode() + b"\n")
