"""The watcher's Kubernetes source against the API emulator: list then watch, bookmarks,
410 recovery, reconnects, finalizers and status with conflict retries, and Events."""

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kube_support import GROUP, RUNS, VERSION, create_run, get_run, run_body
from kubernetes import client

from plnt_common.errors import Conflict, PlntError
from plnt_common.tasks import cancelled
from plnt_testkit.kube_emulator import EVENTS, WORKFLOW_RUNS, KubeEmulator
from plnt_watcher.adapters.kube_api import KubernetesRejected, KubernetesUnavailable, connect
from plnt_watcher.adapters.kube_events import EventRecorder
from plnt_watcher.adapters.kubernetes_source import KubernetesSource, Seen, relist_changes

Change = tuple[str, str, dict[str, Any] | None]
MERGE = "application/merge-patch+json"
FINALIZER = "plnt.work/saga"


class Collector:
    """Drains ``source.watch()`` on a task, restarting it on errors as ResourceLoop does."""

    def __init__(self, source: KubernetesSource) -> None:
        self.source = source
        self.changes: list[Change] = []
        self.errors: list[Exception] = []
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> "Collector":
        self._task = asyncio.create_task(self._run())
        return self

    async def __aexit__(self, *_: object) -> None:
        assert self._task is not None
        await cancelled(self._task)

    async def _run(self) -> None:
        while True:
            try:
                async for change in self.source.watch():
                    self.changes.append(change)
            except PlntError as exc:
                self.errors.append(exc)
                await asyncio.sleep(0.1)

    def names(self, start: int = 0) -> list[tuple[str, str | None]]:
        """(name, resourceVersion or None for gone) of every change from ``start``."""
        return [
            (name, body["metadata"]["resourceVersion"] if body else None)
            for _, name, body in self.changes[start:]
        ]

    async def wait_for(self, check: Callable[[], bool], *, timeout_s: float = 5.0) -> None:
        deadline = asyncio.get_running_loop().time() + timeout_s
        while not check():
            if asyncio.get_running_loop().time() > deadline:
                raise AssertionError(f"timed out; changes so far: {self.names()}")
            await asyncio.sleep(0.02)


@pytest.fixture
def api(kubeconfig: Path) -> Any:
    return connect(kubeconfig=str(kubeconfig), context="", user_agent="plnt-watcher/test")


@pytest.fixture
def source(api: Any) -> KubernetesSource:
    recorder = EventRecorder(api=api, instance="test", request_timeout_s=5)
    return KubernetesSource(api=api, watch_timeout_s=30, request_timeout_s=5, recorder=recorder)


async def in_thread(function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Blocking client calls off the test's loop."""
    return await asyncio.to_thread(function, *args, **kwargs)


def bump_label(emulator: KubeEmulator, name: str) -> Callable[[], object]:
    """A concurrent writer, run inside the server between a client's read and write:
    each call sets label ``bump`` to the next number."""
    count = iter(range(1, 1000))
    return lambda: emulator.store.patch(
        WORKFLOW_RUNS,
        "default",
        name,
        {"metadata": {"labels": {"bump": str(next(count))}}},
        content_type=MERGE,
    )


def conflicts(emulator: KubeEmulator, suffix: str) -> int:
    return sum(
        1 for s in emulator.served() if s.status == 409 and s.path.split("?")[0].endswith(suffix)
    )


# --- relist diff (pure) -------------------------------------------------------------------


def item(name: str, uid: str, version: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "default", "uid": uid, "resourceVersion": version}
    }


@pytest.mark.parametrize(
    ("seen", "items", "everything", "expected"),
    [
        ({}, [item("a", "u1", "1")], False, [("a", "1")]),
        ({("default", "a"): Seen("u1", "1")}, [item("a", "u1", "1")], False, []),
        ({("default", "a"): Seen("u1", "1")}, [item("a", "u1", "1")], True, [("a", "1")]),
        ({("default", "a"): Seen("u1", "1")}, [item("a", "u1", "5")], False, [("a", "5")]),
        ({("default", "a"): Seen("u1", "1")}, [], False, [("a", None)]),
        (
            {("default", "a"): Seen("u1", "1")},
            [item("a", "u2", "7")],
            False,
            [("a", None), ("a", "7")],
        ),
        (
            {("default", "b"): Seen("u1", "1"), ("default", "a"): Seen("u2", "2")},
            [item("a", "u2", "2"), item("c", "u3", "3")],
            False,
            [("b", None), ("c", "3")],
        ),
    ],
    ids=[
        "new-object-is-reported",
        "unchanged-object-is-not-repeated-after-410",
        "a-fresh-watch-reports-everything",
        "changed-object-is-reported",
        "vanished-object-is-a-deletion",
        "same-name-new-uid-is-a-deletion-then-a-creation",
        "deletions-come-before-changes",
    ],
)
def test_relist_changes(
    seen: dict[tuple[str, str], Seen],
    items: list[dict[str, Any]],
    everything: bool,
    expected: list[tuple[str, str | None]],
) -> None:
    changes = relist_changes(seen, items, everything=everything)
    assert [
        (name, body["metadata"]["resourceVersion"] if body else None) for _, name, body in changes
    ] == expected


# --- list and watch -----------------------------------------------------------------------


async def test_lists_existing_runs_then_streams_creations_changes_and_deletions(
    source: KubernetesSource, objects: client.CustomObjectsApi
) -> None:
    await in_thread(create_run, objects, "a")
    await in_thread(create_run, objects, "b")
    async with Collector(source) as seen:
        await seen.wait_for(lambda: len(seen.changes) == 2)
        await in_thread(create_run, objects, "c")
        await in_thread(
            objects.patch_namespaced_custom_object,
            GROUP,
            VERSION,
            "default",
            RUNS,
            "a",
            {"spec": {"workflow": {"ref": "demo@2.0.0"}}},
        )
        await in_thread(
            objects.delete_namespaced_custom_object, GROUP, VERSION, "default", RUNS, "b"
        )
        await seen.wait_for(lambda: len(seen.changes) == 5)

    assert [name for name, _ in seen.names()] == ["a", "b", "c", "a", "b"]
    namespace, name, body = seen.changes[3]
    assert (namespace, name) == ("default", "a")
    assert body is not None and body["metadata"]["generation"] == 2
    assert seen.changes[4] == ("default", "b", None)
    assert seen.errors == []


async def test_only_the_configured_namespace_is_watched(
    api: Any, objects: client.CustomObjectsApi
) -> None:
    source = KubernetesSource(api=api, namespace="team-a", watch_timeout_s=30, request_timeout_s=5)
    body = run_body("x")
    await in_thread(objects.create_namespaced_custom_object, GROUP, VERSION, "team-b", RUNS, body)
    await in_thread(objects.create_namespaced_custom_object, GROUP, VERSION, "team-a", RUNS, body)
    async with Collector(source) as seen:
        await seen.wait_for(lambda: len(seen.changes) == 1)
        await in_thread(
            objects.create_namespaced_custom_object,
            GROUP,
            VERSION,
            "team-b",
            RUNS,
            {**body, "metadata": {"name": "y"}},
        )
        await in_thread(
            objects.create_namespaced_custom_object,
            GROUP,
            VERSION,
            "team-a",
            RUNS,
            {**body, "metadata": {"name": "z"}},
        )
        await seen.wait_for(lambda: len(seen.changes) == 2)
        await asyncio.sleep(0.3)

    assert [(ns, name) for ns, name, _ in seen.changes] == [("team-a", "x"), ("team-a", "z")]


async def test_a_bookmark_moves_the_resume_point_so_a_reconnect_needs_no_relist(
    source: KubernetesSource, objects: client.CustomObjectsApi, api: Any, emulator: KubeEmulator
) -> None:
    await in_thread(create_run, objects, "a")
    async with Collector(source) as seen:
        await seen.wait_for(lambda: len(seen.changes) == 1)
        # Another type's write moves the global version; only a bookmark tells the source.
        await in_thread(
            client.CoordinationV1Api(api).create_namespaced_lease,
            "default",
            {"metadata": {"name": "other"}, "spec": {}},
        )
        await asyncio.sleep(0.6)  # a few bookmark intervals
        emulator.compact()  # a watch from before the lease write would now get 410
        assert emulator.close_watches() == 1
        await asyncio.sleep(0.3)
        await in_thread(create_run, objects, "b")
        await seen.wait_for(lambda: len(seen.changes) == 2)

    lists = [s for s in emulator.served() if s.method == "GET" and "watch" not in s.path]
    assert len(lists) == 1, lists
    assert [name for name, _ in seen.names()] == ["a", "b"]


async def test_a_watch_that_ends_is_resumed_without_losing_changes(
    api: Any, objects: client.CustomObjectsApi, emulator: KubeEmulator
) -> None:
    source = KubernetesSource(api=api, watch_timeout_s=1, request_timeout_s=5)
    async with Collector(source) as seen:
        await asyncio.sleep(1.5)  # the first watch request timed out and was resumed
        await in_thread(create_run, objects, "late")
        await seen.wait_for(lambda: len(seen.changes) == 1)
        # the first watch ended at its 1 s timeout (a watch is served once it ends) and
        # another is open: resumed, without listing again
        ended = [s for s in emulator.served() if "watch=" in s.path]
        assert len(ended) >= 1, emulator.served()
        assert len(emulator.open_watches("workflowruns")) == 1
    lists = [s for s in emulator.served() if s.method == "GET" and "watch" not in s.path]
    assert len(lists) == 1, lists
    assert seen.names()[0][0] == "late"
    assert seen.errors == []


async def test_a_forced_410_mid_watch_relists_and_loses_no_change_or_deletion(
    source: KubernetesSource, objects: client.CustomObjectsApi, emulator: KubeEmulator
) -> None:
    for name in ("a", "b", "c", "same"):
        await in_thread(create_run, objects, name)
    async with Collector(source) as seen:
        await seen.wait_for(lambda: len(seen.changes) == 4)
        old_c = await in_thread(get_run, objects, "c")
        emulator.stall_watches()  # from here the open watch hears nothing
        await in_thread(
            objects.delete_namespaced_custom_object, GROUP, VERSION, "default", RUNS, "b"
        )
        await in_thread(
            objects.delete_namespaced_custom_object, GROUP, VERSION, "default", RUNS, "c"
        )
        await in_thread(create_run, objects, "c")  # same name, new object
        await in_thread(
            objects.patch_namespaced_custom_object,
            GROUP,
            VERSION,
            "default",
            RUNS,
            "a",
            {"spec": {"workflow": {"ref": "demo@3.0.0"}}},
        )
        await in_thread(create_run, objects, "d")
        assert emulator.force_gone() == 1
        await seen.wait_for(lambda: len(seen.changes) == 10)
        await in_thread(create_run, objects, "e")  # and the source watches on
        await seen.wait_for(lambda: len(seen.changes) == 11)
        await asyncio.sleep(0.3)  # nothing further may come

    assert len(seen.changes) == 11 and seen.changes[10][1] == "e"
    after = seen.changes[4:10]
    # deletions first, then every listed object again (an informer's resync: the
    # consumer compares each run's status with its projection), unchanged ones included
    assert [(name, body is None) for _, name, body in after] == [
        ("b", True),
        ("c", True),
        ("a", False),
        ("c", False),
        ("d", False),
        ("same", False),
    ]
    assert after[2][2] is not None and after[2][2]["metadata"]["generation"] == 2
    assert after[3][2] is not None and after[3][2]["metadata"]["uid"] != old_c["metadata"]["uid"]


async def test_a_deletion_while_the_server_was_away_is_reported_after_reconnect(
    source: KubernetesSource, objects: client.CustomObjectsApi, emulator: KubeEmulator
) -> None:
    await in_thread(create_run, objects, "a")
    await in_thread(create_run, objects, "b")
    async with Collector(source) as seen:
        await seen.wait_for(lambda: len(seen.changes) == 2)
        emulator.stall_watches()
        await in_thread(
            objects.delete_namespaced_custom_object, GROUP, VERSION, "default", RUNS, "a"
        )
        emulator.compact()
        emulator.restart()  # connections cut: the watch breaks with an error, not a 410
        await seen.wait_for(lambda: ("default", "a", None) in seen.changes)

    assert seen.changes.count(("default", "a", None)) == 1


# --- finalizers ---------------------------------------------------------------------------


async def test_add_finalizer_retries_a_409_and_keeps_the_concurrent_change(
    source: KubernetesSource, objects: client.CustomObjectsApi, emulator: KubeEmulator
) -> None:
    await in_thread(create_run, objects, "a")
    emulator.before("PATCH", "/workflowruns/a", bump_label(emulator, "a"))

    await source.add_finalizer(namespace="default", name="a", finalizer=FINALIZER)

    meta = (await in_thread(get_run, objects, "a"))["metadata"]
    assert meta["finalizers"] == [FINALIZER]
    assert meta["labels"] == {"bump": "1"}
    assert conflicts(emulator, "/workflowruns/a") == 1


async def test_add_finalizer_leaves_present_deleting_and_missing_objects_alone(
    source: KubernetesSource, objects: client.CustomObjectsApi
) -> None:
    await in_thread(create_run, objects, "a", finalizers=["other"])
    await in_thread(objects.delete_namespaced_custom_object, GROUP, VERSION, "default", RUNS, "a")

    await source.add_finalizer(namespace="default", name="a", finalizer=FINALIZER)
    await source.add_finalizer(namespace="default", name="missing", finalizer=FINALIZER)

    assert (await in_thread(get_run, objects, "a"))["metadata"]["finalizers"] == ["other"]


async def test_releasing_the_last_finalizer_of_a_deleting_run_removes_it_despite_a_409(
    source: KubernetesSource, objects: client.CustomObjectsApi, emulator: KubeEmulator
) -> None:
    await in_thread(create_run, objects, "a", finalizers=[FINALIZER])
    await in_thread(objects.delete_namespaced_custom_object, GROUP, VERSION, "default", RUNS, "a")
    emulator.before("PATCH", "/workflowruns/a", bump_label(emulator, "a"))

    await source.release_finalizer(namespace="default", name="a", finalizer=FINALIZER)
    await source.release_finalizer(
        namespace="default", name="a", finalizer=FINALIZER
    )  # gone: no-op

    with pytest.raises(client.ApiException) as raised:
        await in_thread(get_run, objects, "a")
    assert raised.value.status == 404
    assert conflicts(emulator, "/workflowruns/a") == 1


async def test_a_run_that_keeps_changing_ends_in_conflict(
    api: Any, objects: client.CustomObjectsApi, emulator: KubeEmulator
) -> None:
    source = KubernetesSource(api=api, watch_timeout_s=30, request_timeout_s=5, conflict_attempts=3)
    await in_thread(create_run, objects, "a")
    emulator.before("PATCH", "/workflowruns/a", bump_label(emulator, "a"), times=3)

    with pytest.raises(Conflict):
        await source.add_finalizer(namespace="default", name="a", finalizer=FINALIZER)
    assert conflicts(emulator, "/workflowruns/a") == 3


# --- status and events --------------------------------------------------------------------


async def test_write_status_uses_the_subresource_and_retries_a_409(
    source: KubernetesSource, objects: client.CustomObjectsApi, emulator: KubeEmulator
) -> None:
    await in_thread(create_run, objects, "a")
    emulator.before("PUT", "/workflowruns/a/status", bump_label(emulator, "a"))
    status = {"phase": "Pulling", "observedGeneration": 1, "sagaId": "default.a.1.1"}

    assert await source.write_status(namespace="default", name="a", status=status)

    body = await in_thread(get_run, objects, "a")
    assert body["status"] == status
    assert body["metadata"]["generation"] == 1
    assert body["metadata"]["labels"] == {"bump": "1"}
    assert conflicts(emulator, "/workflowruns/a/status") == 1


async def test_write_status_of_a_missing_run_returns_false(source: KubernetesSource) -> None:
    assert (
        await source.write_status(namespace="default", name="gone", status={"phase": "Ready"})
        is False
    )


async def test_each_phase_change_is_recorded_as_an_event_about_the_run(
    source: KubernetesSource, objects: client.CustomObjectsApi, emulator: KubeEmulator
) -> None:
    created = await in_thread(create_run, objects, "a")
    for status in (
        {"phase": "Pending"},
        {"phase": "Pulling", "observedGeneration": 1},
        {"phase": "Pulling", "observedGeneration": 1, "message": "still pulling"},
        {"phase": "Failed", "observedGeneration": 1, "message": "spec not found"},
    ):
        assert await source.write_status(namespace="default", name="a", status=status)

    events = emulator.objects(EVENTS, "default")
    assert [(e["reason"], e["type"]) for e in events] == [
        ("Pending", "Normal"),
        ("Pulling", "Normal"),
        ("Failed", "Warning"),
    ]
    involved = events[-1]["involvedObject"]
    assert involved["kind"] == "WorkflowRun" and involved["apiVersion"] == "plnt.work/v1"
    assert (involved["name"], involved["uid"]) == ("a", created["metadata"]["uid"])
    assert events[-1]["message"] == "phase Pulling -> Failed: spec not found"
    assert events[-1]["reportingComponent"] == "plnt.work/watcher"


async def test_a_status_write_still_succeeds_when_the_event_cannot_be_recorded(
    api: Any, objects: client.CustomObjectsApi, emulator: KubeEmulator
) -> None:
    recorder = EventRecorder(api=api, instance="test", request_timeout_s=5)
    source = KubernetesSource(api=api, watch_timeout_s=30, request_timeout_s=5, recorder=recorder)
    await in_thread(create_run, objects, "a")
    emulator.store.types = tuple(t for t in emulator.store.types if t != EVENTS)  # events: 404

    assert await source.write_status(namespace="default", name="a", status={"phase": "Pending"})
    assert (await in_thread(get_run, objects, "a"))["status"] == {"phase": "Pending"}


# --- configuration and a missing CRD ------------------------------------------------------


def test_connect_without_any_kubeconfig_or_cluster_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kubernetes.config import kube_config

    monkeypatch.setattr(kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", str(tmp_path / "none"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(KubernetesUnavailable, match="no usable Kubernetes configuration"):
        connect(kubeconfig="", context="", user_agent="test")


def test_the_default_kubeconfig_location_is_used_when_none_is_given(
    kubeconfig: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kubernetes.config import kube_config

    monkeypatch.setattr(kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", str(kubeconfig))
    api = connect(kubeconfig="", context="", user_agent="test")
    listed = client.CustomObjectsApi(api).list_cluster_custom_object(GROUP, VERSION, RUNS)
    assert listed["items"] == []


async def test_a_cluster_without_the_crd_is_reported_as_such(tmp_path: Path) -> None:
    with KubeEmulator(types=(EVENTS,), crds=()) as bare:
        api = connect(
            kubeconfig=str(bare.write_kubeconfig(tmp_path / "kc")), context="", user_agent="t"
        )
        source = KubernetesSource(api=api, watch_timeout_s=30, request_timeout_s=5)
        with pytest.raises(KubernetesRejected, match="is the CRD installed"):
            await anext(source.watch())
