"""Nodes and pods of one cluster, listed page by page: what GPU capacity is computed from.

Two list calls per round (nodes; pods of every namespace not yet terminated, by the
``status.phase`` field selector the API server supports), paginated with ``limit`` and
``continue`` as the watcher lists, so a large cluster is never read in one response.
Bodies stay raw JSON: the capacity arithmetic reads a few fields only.
"""

import asyncio
import functools
import json
from collections.abc import Callable
from typing import Any

from kubernetes import client

from plnt_common.errors import KubernetesUnavailable
from plnt_common.kube_errors import TRANSPORT_ERRORS, api_error
from plnt_installer.adapters.kube_errors import INSTALLER_ERRORS

PAGE_SIZE = 500
REQUEST_TIMEOUT_S = 10.0
NOT_TERMINATED = "status.phase!=Succeeded,status.phase!=Failed"


class KubeCapacityReader:
    """Lists a cluster's nodes and non-terminated pods through one ``ApiClient``."""

    def __init__(self, *, api: client.ApiClient, page_size: int = PAGE_SIZE) -> None:
        self._core = client.CoreV1Api(api)
        self._page_size = page_size

    async def nodes_and_pods(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """Raises ``KubernetesUnavailable`` (retryable) when the API does not answer and
        ``BackendUnavailable`` when it refuses (e.g. nodes are forbidden)."""
        nodes = await self._list_all("listing nodes", self._core.list_node)
        pods = await self._list_all(
            "listing pods",
            self._core.list_pod_for_all_namespaces,
            field_selector=NOT_TERMINATED,
        )
        return nodes, pods

    async def _list_all(
        self, doing: str, method: Callable[..., Any], **kwargs: Any
    ) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        token = ""
        while True:
            paging: dict[str, Any] = {"limit": self._page_size}
            if token:
                paging["_continue"] = token
            page = await self._read(doing, method, **kwargs, **paging)
            items.extend(page.get("items") or [])
            token = (page.get("metadata") or {}).get("continue") or ""
            if not token:
                return items

    async def _read(self, doing: str, method: Callable[..., Any], **kwargs: Any) -> dict[str, Any]:
        call = functools.partial(
            method, _preload_content=False, _request_timeout=REQUEST_TIMEOUT_S, **kwargs
        )
        try:
            response = await asyncio.to_thread(call)
        except TRANSPORT_ERRORS as exc:
            raise api_error(exc, doing=doing, kinds=INSTALLER_ERRORS) from None
        try:
            parsed = json.loads(response.data)
        except ValueError:
            raise KubernetesUnavailable(f"{doing}: the API sent no JSON") from None
        return parsed if isinstance(parsed, dict) else {}
