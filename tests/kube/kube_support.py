"""Helpers for the Kubernetes tier: WorkflowRun bodies and reading raw watch streams."""

import json
from typing import Any

from kubernetes import client
from kubernetes.watch.watch import iter_resp_lines

GROUP, VERSION, RUNS, BACKENDS = "plnt.work", "v1", "workflowruns", "plntbackends"


def run_body(name: str, *, ref: str = "demo@1.0.0", **metadata: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "WorkflowRun",
        "metadata": {"name": name, **metadata},
        "spec": {
            "workflow": {"ref": ref, "registry": "file:///tmp/registry"},
            "backend": {"cluster": "local"},
        },
    }


def create_run(objects: client.CustomObjectsApi, name: str, **metadata: Any) -> dict[str, Any]:
    created: dict[str, Any] = objects.create_namespaced_custom_object(
        GROUP, VERSION, "default", RUNS, run_body(name, **metadata)
    )
    return created


def get_run(objects: client.CustomObjectsApi, name: str) -> dict[str, Any]:
    found: dict[str, Any] = objects.get_namespaced_custom_object(
        GROUP, VERSION, "default", RUNS, name
    )
    return found


def watch_events(
    objects: client.CustomObjectsApi,
    *,
    resource_version: str | None,
    timeout_s: int = 1,
    bookmarks: bool = False,
    count: int | None = None,
    **selectors: str,
) -> list[dict[str, Any]]:
    """The raw events of one watch request, until ``count`` arrived or it timed out."""
    response = objects.list_cluster_custom_object(
        GROUP,
        VERSION,
        RUNS,
        watch=True,
        resource_version=resource_version,
        allow_watch_bookmarks=bookmarks,
        timeout_seconds=timeout_s,
        _preload_content=False,
        **selectors,
    )
    events: list[dict[str, Any]] = []
    try:
        for line in iter_resp_lines(response):
            if line:
                events.append(json.loads(line))
            if count is not None and len(events) >= count:
                break
    finally:
        response.close()
        response.release_conn()
    return events


def status_of(exc: client.ApiException) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(exc.body)
    return body
