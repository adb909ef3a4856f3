"""The emulator's HTTP face: Kubernetes API paths, verbs, list and watch streams.

Paths ``/api/v1/...`` (core) and ``/apis/<group>/<version>/...``, namespaced
(``namespaces/<ns>/<plural>[/<name>[/status]]``) and cluster-wide (``<plural>[/<name>]``,
which for a namespaced type lists or watches every namespace). Verbs: list, watch, get,
create, update, patch, delete, and get/update/patch of ``status``. Watches stream one JSON
event per line, send BOOKMARKs when asked to, end at ``timeoutSeconds``, and report a
too-old ``resourceVersion`` as an ERROR event carrying a 410 Status on a 200 response,
as the real server does. A watch with ``sendInitialEvents=true`` (kubectl's watch list)
starts with an ADDED event per object and a BOOKMARK annotated
``k8s.io/initial-events-end``.

Also served, for kubectl: discovery and OpenAPI v3 (``discovery``), Tables for lists,
gets and watches asked for with ``Accept: application/json;as=Table;v=v1;g=meta.k8s.io``
(``tables``), ``/version``, ``/healthz`` and ``/readyz``. Writes take ``fieldManager``
(else the User-Agent names the manager) and ``fieldValidation`` (``Strict``, ``Warn`` or
``Ignore``; ``Warn`` when absent, as the API server defaults it) and answer what the
schema dropped or defaulted as ``Warning: 299`` headers. Request bodies are JSON only: a
protobuf or CBOR body gets 415, which makes client-go retry the request in JSON.
``dryRun``, server-side apply, ``deletecollection`` and aggregated discovery are not
served. Authentication is not checked.
"""

import asyncio
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from aiohttp import web

from plnt_testkit.kube_emulator import discovery, paging, tables
from plnt_testkit.kube_emulator.faults import Fault
from plnt_testkit.kube_emulator.managed_fields import manager_name
from plnt_testkit.kube_emulator.schema import FieldValidation
from plnt_testkit.kube_emulator.selectors import parse_selectors
from plnt_testkit.kube_emulator.store import ObjectStore, Write
from plnt_testkit.kube_emulator.types import ApiError, ResourceType
from plnt_testkit.kube_emulator.watch_hub import Closed, Expired, Subscription, WatchEvent

logger = logging.getLogger(__name__)
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
    at: float = field(default_factory=time.monotonic)
    """When it was answered (time.monotonic), for tests that time a client's waits."""


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


VERSION = {
    "major": "1",
    "minor": "37",
    "gitVersion": "v1.37.0-plnt-emulator",
    "platform": "linux/amd64",
}
FIELD_VALIDATIONS: tuple[FieldValidation, ...] = ("Strict", "Warn", "Ignore")
JSON_MEDIA = ("application/json", "application/merge-patch+json", "application/json-patch+json")
STRATEGIC = "application/strategic-merge-patch+json"
INITIAL_EVENTS_END = "k8s.io/initial-events-end"


def _json(
    body: dict[str, Any], status: int = 200, *, warnings: list[str] | None = None
) -> web.Response:
    response = web.json_response(body, status=status)
    for text in warnings or ():
        escaped = text.replace("\\", "\\\\").replace('"', '\\"')
        response.headers.add("Warning", f'299 - "{escaped}"')
    return response


def _write(request: web.Request) -> Write:
    """Who writes and how strictly, from the query and the User-Agent."""
    given = request.query.get("fieldValidation")
    if given is not None and given not in FIELD_VALIDATIONS:
        raise ApiError(
            400,
            "BadRequest",
            f'invalid fieldValidation directive: "{given}"; valid values are '
            '"Strict", "Warn" and "Ignore"',
        )
    field_validation: FieldValidation = "Warn"
    for value in FIELD_VALIDATIONS:
        if value == given:
            field_validation = value
    manager = manager_name(request.query.get("fieldManager"), request.headers.get("User-Agent", ""))
    return Write(manager=manager, field_validation=field_validation)


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
        self.faults: list[Fault] = []
        self.log: list[Served] = []

    def app(self) -> web.Application:
        app = web.Application(client_max_size=8 * 1024 * 1024)
        app.router.add_get("/version", self._version)
        app.router.add_get("/healthz", self._ok)
        app.router.add_get("/readyz", self._ok)
        app.router.add_route("*", "/{tail:.*}", self.handle)
        return app

    async def _version(self, request: web.Request) -> web.Response:
        return _json(VERSION)

    async def _ok(self, request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def handle(self, request: web.Request) -> web.StreamResponse:
        for hook in list(self.hooks):
            if hook.wants(request.method, request.path):
                hook.action()
        fault = next((f for f in self.faults if f.wants(request.method, request.path)), None)
        response: web.StreamResponse
        try:
            if fault is not None:
                refused = _json(fault.status(), fault.code)
                if fault.retry_after_s is not None:
                    refused.headers["Retry-After"] = str(fault.retry_after_s)
                response = refused
            else:
                response = self._describe(request) or await self._dispatch(request)
        except ApiError as err:
            response = _json(err.status(), err.code)
        except Exception as exc:  # an emulator bug: say which, in the Status kubectl prints
            logger.exception("kube emulator: %s %s failed", request.method, request.path_qs)
            error = ApiError(500, "InternalError", f"emulator error: {exc!r}")
            response = _json(error.status(), 500)
        self.log.append(Served(request.method, request.path_qs, response.status))
        return response

    def _describe(self, request: web.Request) -> web.StreamResponse | None:
        """Discovery and OpenAPI answers; None for every other path."""
        if request.method != "GET":
            return None
        parts = [p for p in request.path.split("/") if p]
        types = self.store.types
        crds = [v for vs in self.store.served_crds().values() for v in vs]
        document: dict[str, Any] | None = None
        if parts == ["api"]:
            document = discovery.api_versions(request.host)
        elif parts == ["apis"]:
            document = discovery.api_groups(types)
        elif parts == ["api", "v1"]:
            document = discovery.resource_list(types, "v1")
        elif len(parts) == 2 and parts[0] == "apis":
            document = discovery.api_group(types, parts[1])
        elif len(parts) == 3 and parts[0] == "apis":
            document = discovery.resource_list(types, f"{parts[1]}/{parts[2]}")
        elif parts == ["openapi", "v3"]:
            document = discovery.openapi_root(types, crds)
        elif parts[:2] == ["openapi", "v3"]:
            group_version = "/".join(parts[3:])
            document = discovery.openapi_document(types, group_version, crds)
        elif parts[:1] == ["openapi"]:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        else:
            return None
        if document is None:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        return _json(document)

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
        if method in ("POST", "PUT", "PATCH"):
            self._check_media(request, patch=method == "PATCH")
        if name is None:
            if method == "GET":
                return await self._list_or_watch(request, rtype, namespace)
            if method == "POST" and (namespace or not rtype.namespaced):
                write = _write(request)
                created = self.store.create(
                    rtype, namespace, await self._body(request), write=write
                )
                return self._answer(request, rtype, created, 201, write)
        elif method == "GET":
            return self._answer(request, rtype, self.store.get(rtype, namespace, name), 200)
        elif method == "PUT":
            write = _write(request)
            body = await self._body(request)
            updated = self.store.update(
                rtype, namespace, name, body, subresource=subresource, write=write
            )
            return self._answer(request, rtype, updated, 200, write)
        elif method == "PATCH":
            write = _write(request)
            patched = self.store.patch(
                rtype,
                namespace,
                name,
                await self._body(request, any_json=True),
                content_type=request.headers.get("Content-Type", ""),
                subresource=subresource,
                write=write,
            )
            return self._answer(request, rtype, patched, 200, write)
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
    def _check_media(request: web.Request, *, patch: bool) -> None:
        """415 for a body that is not JSON (protobuf, CBOR, apply-patch YAML).

        client-go answers a 415 by sending the request again as JSON."""
        media = request.headers.get("Content-Type", "application/json").split(";")[0].strip()
        accepted = JSON_MEDIA + ((STRATEGIC,) if patch else ())
        if media.lower() not in accepted:
            raise ApiError(
                415,
                "UnsupportedMediaType",
                f"the body of the request was in an unknown format - accepted media types "
                f"include: {', '.join(accepted)}",
            )

    def _answer(
        self,
        request: web.Request,
        rtype: ResourceType,
        body: dict[str, Any],
        status: int,
        write: Write | None = None,
    ) -> web.Response:
        warnings = write.warnings if write else None
        if tables.wants_table(request.headers.get("Accept", "")):
            table = tables.table(
                rtype,
                [body],
                resource_version=body["metadata"].get("resourceVersion", ""),
                include_object=request.query.get("includeObject", "Metadata"),
            )
            return _json(table, status, warnings=warnings)
        return _json(body, status, warnings=warnings)

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
                labels=query.get("labelSelector"),
                fields=query.get("fieldSelector"),
                group=rtype.group,
                plural=rtype.plural,
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
        if query.get("sendInitialEvents"):
            raise ApiError.invalid(
                rtype, "", "sendInitialEvents: Forbidden: sendInitialEvents is forbidden for list"
            )
        items, version = self.store.list_objects(rtype, namespace, match)
        items, list_meta = paging.page(
            items,
            version,
            limit=query.get("limit"),
            token=query.get("continue"),
            compacted=self.store.watches.compacted,
        )
        version = int(list_meta["resourceVersion"])
        if tables.wants_table(request.headers.get("Accept", "")):
            return _json(
                tables.table(
                    rtype,
                    items,
                    resource_version=str(version),
                    include_object=query.get("includeObject", "Metadata"),
                )
            )
        return _json(
            {
                "apiVersion": rtype.api_version,
                "kind": f"{rtype.kind}List",
                "metadata": list_meta,
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
        initial_events = _truthy(query.get("sendInitialEvents"))
        if initial_events:
            self._check_watch_list(subscription.rtype, query)
            since = 0  # the current state, which is never older than what was asked
        as_table = tables.wants_table(request.headers.get("Accept", ""))
        response = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        try:
            backlog = self.store.subscribe(subscription, since=since)
        except ApiError as err:
            await self._send(response, {"type": "ERROR", "object": err.status()})
            return response
        sender = _Sender(response, query.get("includeObject", "Metadata") if as_table else None)
        try:
            position = since
            for event in backlog:
                await sender.event(event)
                position = max(position, event.resource_version)
            if initial_events:
                mark = self._bookmark(subscription.rtype)
                mark["object"]["metadata"]["annotations"] = {INITIAL_EVENTS_END: "true"}
                await self._send(response, mark)
                position = self.store.resource_version
            await self._stream(request, sender, subscription, timeout_s, query, position)
        except ConnectionError:
            pass  # the client went away; nothing left to tell it
        finally:
            self.store.watches.remove(subscription)
        return response

    @staticmethod
    def _check_watch_list(rtype: ResourceType, query: Any) -> None:
        """A watch list needs bookmarks and ``resourceVersionMatch=NotOlderThan``."""
        if not _truthy(query.get("allowWatchBookmarks")):
            raise ApiError.invalid(
                rtype,
                "",
                "allowWatchBookmarks: Forbidden: sendInitialEvents requires setting "
                "allowWatchBookmarks to true",
            )
        if query.get("resourceVersionMatch") != "NotOlderThan":
            raise ApiError.invalid(
                rtype,
                "",
                "resourceVersionMatch: Forbidden: sendInitialEvents requires setting "
                "resourceVersionMatch to NotOlderThan",
            )

    async def _stream(
        self,
        request: web.Request,
        sender: "_Sender",
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
                    await self._send(sender.response, self._bookmark(subscription.rtype))
                    position = self.store.resource_version
                    next_bookmark = loop.time() + self.bookmark_interval_s
                continue
            if isinstance(item, Expired):
                error = ApiError.gone(position, self.store.watches.compacted)
                await self._send(sender.response, {"type": "ERROR", "object": error.status()})
                return
            if isinstance(item, Closed):
                return
            await sender.event(item)
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

    @staticmethod
    async def _send(response: web.StreamResponse, event: dict[str, Any]) -> None:
        await _send_line(response, event)


async def _send_line(response: web.StreamResponse, event: dict[str, Any]) -> None:
    await response.write(json.dumps(event, separators=(",", ":")).encode() + b"\n")


class _Sender:
    """Writes a watch's events, as objects or (``include_object`` given) as Tables whose
    column definitions come with the first event only, as the API server sends them."""

    def __init__(self, response: web.StreamResponse, include_object: str | None) -> None:
        self.response = response
        self.include_object = include_object
        self.headers_sent = False

    async def event(self, event: WatchEvent) -> None:
        body = event.object
        if self.include_object is not None:
            body = tables.table(
                event.rtype,
                [event.object],
                resource_version=str(event.resource_version),
                include_object=self.include_object,
                headers=not self.headers_sent,
            )
            self.headers_sent = True
        await _send_line(self.response, {"type": event.type, "object": body})
