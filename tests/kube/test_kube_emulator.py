"""The Kubernetes API emulator keeps the server rules plnt depends on, seen through the
official client: generation, resourceVersion, status subresource, conflicts, finalizers,
list-then-watch, bookmarks and 410 Gone."""

import threading
import time
from pathlib import Path
from typing import Any

import pytest
from kube_support import (
    BACKENDS,
    GROUP,
    RUNS,
    VERSION,
    create_run,
    get_run,
    run_body,
    status_of,
    watch_events,
)
from kubernetes import client, config

from plnt_testkit.kube_emulator import KubeEmulator

Objects = client.CustomObjectsApi
MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"


def patch_run(objects: Objects, name: str, body: Any, content_type: str = MERGE) -> Any:
    return objects.patch_namespaced_custom_object(
        GROUP, VERSION, "default", RUNS, name, body, _content_type=content_type
    )


def replace_status(objects: Objects, body: dict[str, Any]) -> dict[str, Any]:
    result: dict[str, Any] = objects.replace_namespaced_custom_object_status(
        GROUP, VERSION, "default", RUNS, body["metadata"]["name"], body
    )
    return result


def rv(body: dict[str, Any]) -> int:
    return int(body["metadata"]["resourceVersion"])


# --- object metadata ---------------------------------------------------------------------


def test_create_sets_uid_creation_time_generation_one_and_drops_status(objects: Objects) -> None:
    body = {**run_body("a"), "status": {"phase": "Ready"}}
    created = objects.create_namespaced_custom_object(GROUP, VERSION, "default", RUNS, body)

    meta = created["metadata"]
    assert meta["generation"] == 1
    assert meta["uid"] and meta["creationTimestamp"].endswith("Z")
    assert meta["namespace"] == "default"
    assert rv(created) > 0
    assert "status" not in created


def test_resource_version_is_one_counter_over_every_type_and_grows_on_each_write(
    objects: Objects, api: client.ApiClient
) -> None:
    first = create_run(objects, "a")
    lease = client.CoordinationV1Api(api).create_namespaced_lease(
        "default", {"metadata": {"name": "l"}, "spec": {"holderIdentity": "x"}}
    )
    second = patch_run(objects, "a", {"metadata": {"labels": {"k": "v"}}})

    versions = [rv(first), int(lease.metadata.resource_version), rv(second)]
    assert versions == sorted(versions) and len(set(versions)) == 3


def test_generation_bumps_on_spec_change_only(objects: Objects) -> None:
    create_run(objects, "a")
    labelled = patch_run(objects, "a", {"metadata": {"labels": {"team": "x"}}})
    changed = patch_run(objects, "a", {"spec": {"workflow": {"ref": "demo@2.0.0"}}})

    assert labelled["metadata"]["generation"] == 1
    assert changed["metadata"]["generation"] == 2


def test_an_update_that_changes_nothing_keeps_the_resource_version(objects: Objects) -> None:
    created = create_run(objects, "a")
    again = objects.replace_namespaced_custom_object(GROUP, VERSION, "default", RUNS, "a", created)
    assert rv(again) == rv(created)


def test_generate_name_creates_a_unique_name(objects: Objects) -> None:
    body = run_body("")
    body["metadata"] = {"generateName": "run-"}
    created = objects.create_namespaced_custom_object(GROUP, VERSION, "default", RUNS, body)
    assert created["metadata"]["name"].startswith("run-") and len(created["metadata"]["name"]) > 4


# --- status subresource -------------------------------------------------------------------


def test_status_writes_change_only_status_and_never_the_generation(objects: Objects) -> None:
    created = create_run(objects, "a")
    sneaky = {**created, "spec": {"workflow": {"ref": "evil@9.9.9"}}, "status": {"phase": "Ready"}}
    sneaky["metadata"] = {**created["metadata"], "labels": {"sneaky": "yes"}}

    written = replace_status(objects, sneaky)

    assert written["status"] == {"phase": "Ready"}
    assert written["spec"] == created["spec"]
    assert "labels" not in written["metadata"]
    assert written["metadata"]["generation"] == 1
    assert rv(written) > rv(created)


def test_main_resource_writes_ignore_status(objects: Objects) -> None:
    created = create_run(objects, "a")
    with_status = replace_status(objects, {**created, "status": {"phase": "Pulling"}})
    workflow = created["spec"]["workflow"]

    updated = objects.replace_namespaced_custom_object(
        GROUP,
        VERSION,
        "default",
        RUNS,
        "a",
        {
            **with_status,
            "spec": {**created["spec"], "workflow": {**workflow, "ref": "demo@2.0.0"}},
            "status": {"phase": "X"},
        },
    )

    assert updated["status"] == {"phase": "Pulling"}
    assert updated["metadata"]["generation"] == 2


def test_status_merge_patch_keeps_other_status_fields(objects: Objects) -> None:
    created = create_run(objects, "a")
    replace_status(objects, {**created, "status": {"phase": "Pulling", "message": "m"}})

    patched = objects.patch_namespaced_custom_object_status(
        GROUP, VERSION, "default", RUNS, "a", {"status": {"phase": "Ready"}}
    )

    assert patched["status"] == {"phase": "Ready", "message": "m"}
    assert patched["metadata"]["generation"] == 1


# --- optimistic concurrency ---------------------------------------------------------------


def test_a_stale_update_gets_409_conflict_with_a_status_object(objects: Objects) -> None:
    created = create_run(objects, "a")
    patch_run(objects, "a", {"metadata": {"labels": {"k": "v"}}})

    with pytest.raises(client.ApiException) as raised:
        replace_status(objects, {**created, "status": {"phase": "Ready"}})

    assert raised.value.status == 409
    status = status_of(raised.value)
    assert status["kind"] == "Status" and status["apiVersion"] == "v1"
    assert status["status"] == "Failure" and status["reason"] == "Conflict"
    assert status["code"] == 409
    assert status["details"] == {"name": "a", "group": GROUP, "kind": RUNS}
    assert "the object has been modified" in status["message"]


def test_a_patch_carrying_a_stale_resource_version_gets_409(objects: Objects) -> None:
    created = create_run(objects, "a")
    patch_run(objects, "a", {"metadata": {"labels": {"k": "v"}}})

    with pytest.raises(client.ApiException) as raised:
        patch_run(
            objects,
            "a",
            {
                "metadata": {
                    "resourceVersion": created["metadata"]["resourceVersion"],
                    "finalizers": ["f"],
                }
            },
        )
    assert raised.value.status == 409
    assert "finalizers" not in get_run(objects, "a")["metadata"]


def test_a_custom_resource_update_without_resource_version_is_invalid(objects: Objects) -> None:
    created = create_run(objects, "a")
    del created["metadata"]["resourceVersion"]
    with pytest.raises(client.ApiException) as raised:
        objects.replace_namespaced_custom_object(GROUP, VERSION, "default", RUNS, "a", created)
    assert raised.value.status == 422


def test_creating_an_existing_name_gets_409_already_exists(objects: Objects) -> None:
    create_run(objects, "a")
    with pytest.raises(client.ApiException) as raised:
        create_run(objects, "a")
    assert raised.value.status == 409
    assert status_of(raised.value)["reason"] == "AlreadyExists"


def test_a_missing_object_gets_404_with_a_status_object(objects: Objects) -> None:
    with pytest.raises(client.ApiException) as raised:
        get_run(objects, "nope")
    assert raised.value.status == 404
    assert status_of(raised.value)["message"] == 'workflowruns.plnt.work "nope" not found'


def test_a_body_namespace_that_differs_from_the_url_is_rejected(objects: Objects) -> None:
    with pytest.raises(client.ApiException) as raised:
        objects.create_namespaced_custom_object(
            GROUP, VERSION, "default", RUNS, run_body("a", namespace="other")
        )
    assert raised.value.status == 400


# --- patch formats ------------------------------------------------------------------------


def test_json_patch_adds_a_finalizer_with_a_resource_version_test(objects: Objects) -> None:
    created = create_run(objects, "a")
    patched = patch_run(
        objects,
        "a",
        [
            {
                "op": "test",
                "path": "/metadata/resourceVersion",
                "value": created["metadata"]["resourceVersion"],
            },
            {"op": "add", "path": "/metadata/finalizers", "value": ["plnt.work/saga"]},
        ],
        JSON_PATCH,
    )
    assert patched["metadata"]["finalizers"] == ["plnt.work/saga"]


def test_json_patch_whose_test_fails_changes_nothing_and_gets_422(objects: Objects) -> None:
    create_run(objects, "a")
    with pytest.raises(client.ApiException) as raised:
        patch_run(
            objects,
            "a",
            [
                {"op": "add", "path": "/metadata/labels", "value": {"k": "v"}},
                {"op": "test", "path": "/metadata/resourceVersion", "value": "0"},
            ],
            JSON_PATCH,
        )
    assert raised.value.status == 422
    assert "labels" not in get_run(objects, "a")["metadata"]


def test_json_patch_removes_one_finalizer_by_index(objects: Objects) -> None:
    create_run(objects, "a", finalizers=["x", "y"])
    patched = patch_run(
        objects, "a", [{"op": "remove", "path": "/metadata/finalizers/0"}], JSON_PATCH
    )
    assert patched["metadata"]["finalizers"] == ["y"]


def test_strategic_merge_patch_is_refused_for_custom_resources(objects: Objects) -> None:
    create_run(objects, "a")
    with pytest.raises(client.ApiException) as raised:
        patch_run(
            objects,
            "a",
            {"metadata": {"labels": {"k": "v"}}},
            "application/strategic-merge-patch+json",
        )
    assert raised.value.status == 415


def test_merge_patch_null_removes_a_field(objects: Objects) -> None:
    create_run(objects, "a", labels={"k": "v", "keep": "1"})
    patched = patch_run(objects, "a", {"metadata": {"labels": {"k": None}}})
    assert patched["metadata"]["labels"] == {"keep": "1"}


# --- finalizers and deletion --------------------------------------------------------------


def test_delete_with_finalizers_only_marks_and_the_last_removal_deletes(objects: Objects) -> None:
    create_run(objects, "a", finalizers=["plnt.work/saga"])

    objects.delete_namespaced_custom_object(GROUP, VERSION, "default", RUNS, "a")
    marked = get_run(objects, "a")
    assert marked["metadata"]["deletionTimestamp"]
    assert marked["metadata"]["finalizers"] == ["plnt.work/saga"]

    patch_run(
        objects,
        "a",
        {"metadata": {"resourceVersion": marked["metadata"]["resourceVersion"], "finalizers": []}},
    )
    with pytest.raises(client.ApiException) as raised:
        get_run(objects, "a")
    assert raised.value.status == 404


def test_no_finalizer_can_be_added_while_an_object_is_being_deleted(objects: Objects) -> None:
    create_run(objects, "a", finalizers=["x"])
    objects.delete_namespaced_custom_object(GROUP, VERSION, "default", RUNS, "a")
    with pytest.raises(client.ApiException) as raised:
        patch_run(objects, "a", {"metadata": {"finalizers": ["x", "y"]}})
    assert raised.value.status == 422


def test_delete_without_finalizers_removes_at_once(objects: Objects) -> None:
    create_run(objects, "a")
    answer = objects.delete_namespaced_custom_object(GROUP, VERSION, "default", RUNS, "a")
    assert answer["status"] == "Success"
    with pytest.raises(client.ApiException):
        get_run(objects, "a")


def test_delete_with_a_stale_uid_precondition_gets_409(objects: Objects) -> None:
    create_run(objects, "a")
    with pytest.raises(client.ApiException) as raised:
        objects.delete_namespaced_custom_object(
            GROUP, VERSION, "default", RUNS, "a", body={"preconditions": {"uid": "other"}}
        )
    assert raised.value.status == 409
    assert get_run(objects, "a")


# --- list and watch -----------------------------------------------------------------------


def test_list_reports_the_resource_version_it_is_as_of(objects: Objects) -> None:
    create_run(objects, "a")
    last = create_run(objects, "b")
    listed = objects.list_namespaced_custom_object(GROUP, VERSION, "default", RUNS)
    assert listed["metadata"]["resourceVersion"] == last["metadata"]["resourceVersion"]
    assert [i["metadata"]["name"] for i in listed["items"]] == ["a", "b"]
    assert listed["kind"] == "WorkflowRunList"


def test_watch_from_a_list_version_streams_only_later_changes(objects: Objects) -> None:
    create_run(objects, "before")
    version = objects.list_cluster_custom_object(GROUP, VERSION, RUNS)["metadata"][
        "resourceVersion"
    ]
    create_run(objects, "a", finalizers=["f"])
    patch_run(objects, "a", {"spec": {"workflow": {"ref": "demo@2.0.0"}}})
    objects.delete_namespaced_custom_object(GROUP, VERSION, "default", RUNS, "a")
    marked = get_run(objects, "a")
    patch_run(
        objects,
        "a",
        {
            "metadata": {
                "resourceVersion": marked["metadata"]["resourceVersion"],
                "finalizers": None,
            }
        },
    )

    events = watch_events(objects, resource_version=version, timeout_s=1)

    # Removing the last finalizer deletes in the same write: watchers see DELETED only.
    assert [e["type"] for e in events] == ["ADDED", "MODIFIED", "MODIFIED", "DELETED"]
    assert all(e["object"]["metadata"]["name"] == "a" for e in events)
    versions = [rv(e["object"]) for e in events]
    assert versions == sorted(versions) and versions[0] > int(version)


def test_watch_without_a_version_starts_with_every_object_added(objects: Objects) -> None:
    create_run(objects, "a")
    create_run(objects, "b")
    events = watch_events(objects, resource_version=None, count=2)
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [
        ("ADDED", "a"),
        ("ADDED", "b"),
    ]


def test_watch_streams_changes_live(objects: Objects) -> None:
    version = objects.list_cluster_custom_object(GROUP, VERSION, RUNS)["metadata"][
        "resourceVersion"
    ]
    timer = threading.Timer(0.3, lambda: create_run(objects, "late"))
    timer.start()
    events = watch_events(objects, resource_version=version, timeout_s=3, count=1)
    timer.join()
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [("ADDED", "late")]


def test_watch_sends_bookmarks_with_the_current_version_only_when_asked(
    objects: Objects, api: client.ApiClient
) -> None:
    create_run(objects, "a")
    # A write of another type moves the global version; the bookmark reports it.
    lease = client.CoordinationV1Api(api).create_namespaced_lease(
        "default", {"metadata": {"name": "l"}, "spec": {}}
    )
    version = objects.list_cluster_custom_object(GROUP, VERSION, RUNS)["metadata"][
        "resourceVersion"
    ]

    with_bookmarks = watch_events(objects, resource_version=version, bookmarks=True, timeout_s=1)
    without = watch_events(objects, resource_version=version, bookmarks=False, timeout_s=1)

    assert with_bookmarks and {e["type"] for e in with_bookmarks} == {"BOOKMARK"}
    mark = with_bookmarks[0]["object"]
    assert mark["kind"] == "WorkflowRun" and mark["apiVersion"] == "plnt.work/v1"
    assert mark["metadata"]["resourceVersion"] == lease.metadata.resource_version
    assert without == []


def test_watch_ends_at_its_timeout(objects: Objects) -> None:
    started = time.monotonic()
    watch_events(objects, resource_version="1", timeout_s=1)
    assert 0.9 < time.monotonic() - started < 3


def test_watch_from_a_version_older_than_the_history_window_gets_410(
    tmp_path: Path,
) -> None:
    with KubeEmulator(history_window=3) as small:
        api = config.new_client_from_config(
            config_file=str(small.write_kubeconfig(tmp_path / "kc"))
        )
        objects = client.CustomObjectsApi(api)
        first = create_run(objects, "a")
        for index in range(4):
            patch_run(objects, "a", {"metadata": {"labels": {"n": str(index)}}})

        events = watch_events(objects, resource_version=first["metadata"]["resourceVersion"])
        recent = watch_events(objects, resource_version=str(small.resource_version - 2), count=2)
        api.close()

    assert len(events) == 1 and events[0]["type"] == "ERROR"
    status = events[0]["object"]
    assert status["kind"] == "Status" and status["code"] == 410 and status["reason"] == "Expired"
    assert "too old resource version" in status["message"]
    assert [e["type"] for e in recent] == ["MODIFIED", "MODIFIED"]


def test_force_gone_ends_an_open_watch_with_410_and_old_versions_stay_gone(
    objects: Objects, emulator: KubeEmulator
) -> None:
    created = create_run(objects, "a")
    patch_run(objects, "a", {"metadata": {"labels": {"k": "v"}}})
    timer = threading.Timer(0.4, emulator.force_gone)
    timer.start()
    events = watch_events(
        objects, resource_version=created["metadata"]["resourceVersion"], timeout_s=5
    )
    timer.join()

    assert [e["type"] for e in events] == ["MODIFIED", "ERROR"]
    assert events[1]["object"]["code"] == 410
    again = watch_events(objects, resource_version=created["metadata"]["resourceVersion"])
    assert [e["object"]["code"] for e in again] == [410]
    current = watch_events(objects, resource_version=str(emulator.resource_version))
    assert current == []


def test_a_stalled_watch_misses_events_until_it_is_expired(
    objects: Objects, emulator: KubeEmulator
) -> None:
    version = objects.list_cluster_custom_object(GROUP, VERSION, RUNS)["metadata"][
        "resourceVersion"
    ]

    def stall_write_expire() -> None:
        emulator.stall_watches()
        create_run(objects, "missed")
        emulator.force_gone()

    timer = threading.Timer(0.3, stall_write_expire)
    timer.start()
    events = watch_events(objects, resource_version=version, bookmarks=True, timeout_s=5)
    timer.join()

    assert [e["type"] for e in events if e["type"] != "BOOKMARK"] == ["ERROR"]


def test_watch_honours_field_and_label_selectors(objects: Objects) -> None:
    create_run(objects, "a", labels={"team": "x"})
    create_run(objects, "b", labels={"team": "y"})
    by_name = watch_events(
        objects, resource_version=None, count=1, field_selector="metadata.name=b"
    )
    by_label = watch_events(objects, resource_version=None, count=1, label_selector="team in (x)")
    assert [e["object"]["metadata"]["name"] for e in by_name] == ["b"]
    assert [e["object"]["metadata"]["name"] for e in by_label] == ["a"]


def test_an_object_leaving_a_label_selector_is_deleted_for_that_watch(objects: Objects) -> None:
    create_run(objects, "a", labels={"team": "x"})
    version = objects.list_cluster_custom_object(GROUP, VERSION, RUNS)["metadata"][
        "resourceVersion"
    ]
    patch_run(objects, "a", {"metadata": {"labels": {"team": "y"}}})
    events = watch_events(objects, resource_version=version, count=1, label_selector="team=x")
    assert [e["type"] for e in events] == ["DELETED"]


# --- other types --------------------------------------------------------------------------


def test_plnt_backends_are_cluster_scoped(objects: Objects) -> None:
    body = {
        "apiVersion": "plnt.work/v1",
        "kind": "PlntBackend",
        "metadata": {"name": "gpu"},
        "spec": {"type": "local"},
    }
    created = objects.create_cluster_custom_object(GROUP, VERSION, BACKENDS, body)
    assert "namespace" not in created["metadata"]
    assert objects.get_cluster_custom_object(GROUP, VERSION, BACKENDS, "gpu")["spec"] == {
        "type": "local",
        "readyTimeout": "10m",  # the CRD's default
    }
    with pytest.raises(client.ApiException) as raised:
        objects.create_namespaced_custom_object(GROUP, VERSION, "default", BACKENDS, body)
    assert raised.value.status == 404


def test_leases_allow_unconditional_updates_and_conflict_on_stale_ones(
    api: client.ApiClient,
) -> None:
    leases = client.CoordinationV1Api(api)
    created = leases.create_namespaced_lease(
        "default", {"metadata": {"name": "l"}, "spec": {"holderIdentity": "a"}}
    )
    leases.replace_namespaced_lease(
        "l", "default", {"metadata": {"name": "l"}, "spec": {"holderIdentity": "b"}}
    )
    stale = {
        "metadata": {"name": "l", "resourceVersion": created.metadata.resource_version},
        "spec": {"holderIdentity": "c"},
    }
    with pytest.raises(client.ApiException) as raised:
        leases.replace_namespaced_lease("l", "default", stale)
    patched = leases.patch_namespaced_lease("l", "default", {"spec": {"leaseDurationSeconds": 5}})

    assert raised.value.status == 409
    assert patched.spec.holder_identity == "b" and patched.spec.lease_duration_seconds == 5
    assert patched.metadata.generation is None


def test_events_are_created_and_listed(api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    core.create_namespaced_event(
        "default",
        {
            "metadata": {"name": "a.1"},
            "involvedObject": {"kind": "WorkflowRun", "name": "a", "namespace": "default"},
            "reason": "Ready",
            "message": "phase Promoting -> Ready",
            "type": "Normal",
        },
    )
    listed = core.list_namespaced_event("default")
    assert [(e.reason, e.involved_object.name) for e in listed.items] == [("Ready", "a")]
