"""What the emulator answers kubectl and returns as a real API server does: managedFields,
CRDs served and withdrawn, discovery, OpenAPI v3, fieldValidation, Tables, field
selectors, watch lists and non-JSON bodies.

Plain HTTP (``requests``) where kubectl's request shape matters, the official client where
plnt's does.
"""

import json
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import requests
from kube_support import GROUP, RUNS, VERSION, create_run, get_run, run_body
from kubernetes import client

from plnt_testkit.kube_emulator import KubeEmulator

Objects = client.CustomObjectsApi
TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"
KUBECTL_AGENT = "kubectl/v1.37.1 (linux/amd64) kubernetes/abcdef0"
RUNS_PATH = f"/apis/{GROUP}/{VERSION}/namespaces/default/{RUNS}"
CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
WIDGETS = "/apis/example.com/v1/namespaces/default/widgets"


def widget_crd(*, columns: bool = False) -> dict[str, Any]:
    version: dict[str, Any] = {
        "name": "v1",
        "served": True,
        "storage": True,
        "subresources": {"status": {}},
        "schema": {
            "openAPIV3Schema": {
                "type": "object",
                "properties": {
                    "spec": {
                        "type": "object",
                        "properties": {"size": {"type": "integer", "default": 1}},
                    },
                    "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                },
            }
        },
    }
    if columns:
        version["additionalPrinterColumns"] = [
            {"name": "Size", "type": "integer", "jsonPath": ".spec.size"}
        ]
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com",
            "scope": "Namespaced",
            "names": {
                "plural": "widgets",
                "singular": "widget",
                "kind": "Widget",
                "shortNames": ["wd"],
                "categories": ["toys"],
            },
            "versions": [version],
        },
    }


class Http:
    """Requests to the emulator as kubectl sends them."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.session = requests.Session()
        self.session.headers["User-Agent"] = KUBECTL_AGENT

    def __call__(
        self, method: str, path: str, body: Any = None, **headers: str
    ) -> requests.Response:
        return self.session.request(
            method,
            self.url + path,
            data=json.dumps(body) if body is not None else None,
            headers={"Content-Type": "application/json", **headers},
            timeout=10,
        )

    def json(self, method: str, path: str, body: Any = None, **headers: str) -> Any:
        response = self(method, path, body, **headers)
        assert response.ok, f"{method} {path}: {response.status_code} {response.text}"
        return response.json()


@pytest.fixture
def http(emulator: KubeEmulator) -> Iterator[Http]:
    session = Http(emulator.url)
    yield session
    session.session.close()


def resources(http: Http, group_version: str) -> dict[str, dict[str, Any]]:
    prefix = "/api" if group_version == "v1" else "/apis"
    listed = http.json("GET", f"{prefix}/{group_version}")
    return {entry["name"]: entry for entry in listed["resources"]}


# --- objects as a real server returns them ------------------------------------------------


def test_every_write_records_its_field_manager_in_managed_fields(
    objects: Objects, http: Http
) -> None:
    created = create_run(objects, "a")  # the Python client: no fieldManager
    http.json(
        "PATCH",
        f"{RUNS_PATH}/a?fieldManager=kubectl-label",
        {"metadata": {"labels": {"team": "x"}}},
        **{"Content-Type": "application/merge-patch+json"},
    )
    http.json(
        "PATCH",
        f"{RUNS_PATH}/a/status",
        {"status": {"phase": "Pending"}},
        **{"Content-Type": "application/merge-patch+json", "User-Agent": "plnt-watcher/host-1"},
    )

    entries = {m["manager"]: m for m in get_run(objects, "a")["metadata"]["managedFields"]}
    assert created["metadata"]["managedFields"][0]["manager"] == "OpenAPI-Generator"
    assert set(entries) == {"OpenAPI-Generator", "kubectl-label", "plnt-watcher"}
    for entry in entries.values():
        assert entry["operation"] == "Update" and entry["fieldsType"] == "FieldsV1"
        assert entry["apiVersion"] == f"{GROUP}/{VERSION}" and entry["time"].endswith("Z")
    assert "f:workflow" in entries["OpenAPI-Generator"]["fieldsV1"]["f:spec"]
    assert entries["kubectl-label"]["fieldsV1"] == {
        "f:metadata": {"f:labels": {".": {}, "f:team": {}}}
    }
    assert entries["plnt-watcher"]["subresource"] == "status"
    assert entries["plnt-watcher"]["fieldsV1"] == {"f:status": {".": {}, "f:phase": {}}}
    assert "subresource" not in entries["kubectl-label"]


def test_a_field_changed_by_another_manager_moves_to_it_and_a_no_op_keeps_everything(
    objects: Objects, http: Http
) -> None:
    create_run(objects, "a")
    merge = {"Content-Type": "application/merge-patch+json"}
    http.json(
        "PATCH", f"{RUNS_PATH}/a?fieldManager=first", {"spec": {"replicas": {"max": 3}}}, **merge
    )
    moved = http.json(
        "PATCH", f"{RUNS_PATH}/a?fieldManager=second", {"spec": {"replicas": {"max": 4}}}, **merge
    )
    again = http.json(
        "PATCH", f"{RUNS_PATH}/a?fieldManager=third", {"spec": {"replicas": {"max": 4}}}, **merge
    )

    owners = {m["manager"]: m["fieldsV1"] for m in moved["metadata"]["managedFields"]}
    assert "first" not in owners  # it owned nothing else
    assert owners["second"] == {"f:spec": {"f:replicas": {"f:max": {}}}}
    assert again["metadata"]["managedFields"] == moved["metadata"]["managedFields"]
    assert again["metadata"]["resourceVersion"] == moved["metadata"]["resourceVersion"]


def test_generation_moves_on_spec_changes_only(objects: Objects, http: Http) -> None:
    created = create_run(objects, "a")
    merge = {"Content-Type": "application/merge-patch+json"}
    labelled = http.json("PATCH", f"{RUNS_PATH}/a", {"metadata": {"labels": {"a": "b"}}}, **merge)
    status = http.json("PATCH", f"{RUNS_PATH}/a/status", {"status": {"phase": "Ready"}}, **merge)
    changed = http.json("PATCH", f"{RUNS_PATH}/a", {"spec": {"replicas": {"max": 2}}}, **merge)

    assert created["metadata"]["generation"] == 1
    assert created["metadata"]["uid"] and created["metadata"]["creationTimestamp"]
    assert [labelled["metadata"]["generation"], status["metadata"]["generation"]] == [1, 1]
    assert changed["metadata"]["generation"] == 2
    assert int(changed["metadata"]["resourceVersion"]) > int(status["metadata"]["resourceVersion"])


def test_namespaces_are_cluster_scoped_objects_and_default_exists(http: Http) -> None:
    created = http.json("POST", "/api/v1/namespaces", {"metadata": {"name": "agents"}})
    listed = http.json("GET", "/api/v1/namespaces")

    assert created["status"] == {"phase": "Active"}
    assert created["metadata"]["labels"] == {"kubernetes.io/metadata.name": "agents"}
    assert {"default", "agents"} <= {n["metadata"]["name"] for n in listed["items"]}
    assert http("GET", "/api/v1/namespaces/x/namespaces").status_code == 404


# --- CRDs ------------------------------------------------------------------------------------


def test_a_crd_applied_is_served_in_discovery_and_deleting_it_withdraws_its_objects(
    http: Http,
) -> None:
    assert http("GET", WIDGETS).status_code == 404
    crd = http.json("POST", CRD_PATH, widget_crd())
    widget = http.json("POST", WIDGETS, {"metadata": {"name": "w"}, "spec": {}})

    assert {c["type"]: c["status"] for c in crd["status"]["conditions"]}["Established"] == "True"
    assert widget["spec"] == {"size": 1}  # the schema's default
    served = resources(http, "example.com/v1")
    assert served["widgets"]["shortNames"] == ["wd"]
    assert served["widgets"]["categories"] == ["toys"]
    assert served["widgets/status"]["verbs"] == ["get", "patch", "update"]
    groups = http.json("GET", "/apis")["groups"]
    assert "example.com" in {g["name"] for g in groups}

    assert http("DELETE", f"{CRD_PATH}/widgets.example.com").ok
    assert http("GET", WIDGETS).status_code == 404
    assert http("GET", "/apis/example.com/v1").status_code == 404
    assert "example.com" not in {g["name"] for g in http.json("GET", "/apis")["groups"]}


def test_deleting_a_crd_without_objects_stops_serving_it_at_once(http: Http) -> None:
    http.json("POST", CRD_PATH, widget_crd())
    assert http("GET", WIDGETS).ok

    deleted = http.json("DELETE", f"{CRD_PATH}/widgets.example.com")

    assert deleted["status"] == "Success"
    assert http("GET", WIDGETS).status_code == 404
    assert http("GET", f"{CRD_PATH}/widgets.example.com").status_code == 404
    assert "widgets" not in resources(http, "apiextensions.k8s.io/v1")  # just the CRDs
    assert http("GET", "/apis/example.com/v1").status_code == 404


def test_deleting_a_crd_ends_the_open_watches_of_its_type(
    http: Http, emulator: KubeEmulator
) -> None:
    http.json("POST", CRD_PATH, widget_crd())
    with ThreadPoolExecutor(1) as pool:
        watch = pool.submit(watch_lines, http, f"{WIDGETS}?watch=true&timeoutSeconds=30")
        deadline = time.monotonic() + 5
        while not emulator.open_watches("widgets") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert emulator.open_watches("widgets"), "the watch did not open"
        started = time.monotonic()
        http.json("DELETE", f"{CRD_PATH}/widgets.example.com")
        assert watch.result(timeout=10) == []

    assert time.monotonic() - started < 5
    assert emulator.open_watches("widgets") == []


def test_a_crd_being_deleted_waits_for_its_objects_finalizers_and_refuses_new_objects(
    http: Http,
) -> None:
    http.json("POST", CRD_PATH, widget_crd())
    http.json("POST", WIDGETS, {"metadata": {"name": "held", "finalizers": ["x/y"]}})

    marked = http.json("DELETE", f"{CRD_PATH}/widgets.example.com")
    refused = http("POST", WIDGETS, {"metadata": {"name": "late"}})
    held = http.json("GET", f"{WIDGETS}/held")
    http.json(
        "PATCH",
        f"{WIDGETS}/held",
        {"metadata": {"finalizers": None}},
        **{"Content-Type": "application/merge-patch+json"},
    )

    assert marked["metadata"]["deletionTimestamp"]
    assert "customresourcecleanup.apiextensions.k8s.io" in marked["metadata"]["finalizers"]
    assert refused.status_code == 405 and "terminating" in refused.json()["message"]
    assert held["metadata"]["deletionTimestamp"]
    assert http("GET", f"{CRD_PATH}/widgets.example.com").status_code == 404
    assert http("GET", WIDGETS).status_code == 404


def test_a_crd_whose_name_is_not_plural_dot_group_is_refused_naming_the_field(
    http: Http,
) -> None:
    crd = widget_crd()
    crd["metadata"]["name"] = "gadgets.example.com"

    refused = http("POST", CRD_PATH, crd)

    assert refused.status_code == 422
    assert refused.json()["details"]["causes"][0]["field"] == "metadata.name"


# --- discovery and OpenAPI ----------------------------------------------------------------


def test_discovery_names_the_project_types_as_the_crds_declare_them(http: Http) -> None:
    assert http.json("GET", "/api")["versions"] == ["v1"]
    served = resources(http, f"{GROUP}/{VERSION}")
    core = resources(http, "v1")

    runs, backends = served["workflowruns"], served["plntbackends"]
    assert (runs["kind"], runs["namespaced"], runs["shortNames"]) == ("WorkflowRun", True, ["wr"])
    assert runs["categories"] == ["plnt"] and backends["categories"] == ["plnt"]
    assert backends["namespaced"] is False and "workflowruns/status" in served
    assert {"namespaces", "events"} <= set(core)
    assert core["namespaces"]["shortNames"] == ["ns"]
    # an aggregated discovery request gets the legacy document, which kubectl falls back to
    aggregated = http(
        "GET",
        "/apis",
        Accept="application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList",
    )
    assert aggregated.json()["kind"] == "APIGroupList"
    assert aggregated.headers["Content-Type"].startswith("application/json")


def test_openapi_v3_has_each_crd_schema_and_the_field_validation_parameter(
    http: Http,
) -> None:
    root = http.json("GET", "/openapi/v3")["paths"]
    document = http.json("GET", root[f"apis/{GROUP}/{VERSION}"]["serverRelativeURL"])

    schema = document["components"]["schemas"]["work.plnt.v1.WorkflowRun"]
    assert schema["x-kubernetes-group-version-kind"] == [
        {"group": GROUP, "version": VERSION, "kind": "WorkflowRun"}
    ]
    assert "workflow" in schema["properties"]["spec"]["properties"]
    one = document["paths"][f"{RUNS_PATH.replace('default', '{namespace}')}/{{name}}"]
    assert one["patch"]["x-kubernetes-group-version-kind"]["kind"] == "WorkflowRun"
    assert "fieldValidation" in {p["name"] for p in one["parameters"] if p["in"] == "query"}
    assert "api/v1" in root and "apis/apiextensions.k8s.io/v1" in root


def test_the_openapi_hash_changes_with_the_crds(http: Http) -> None:
    before = http.json("GET", "/openapi/v3")["paths"]
    http.json("POST", CRD_PATH, widget_crd())
    after = http.json("GET", "/openapi/v3")["paths"]

    assert "apis/example.com/v1" not in before and "apis/example.com/v1" in after
    assert before[f"apis/{GROUP}/{VERSION}"] == after[f"apis/{GROUP}/{VERSION}"]
    assert http("GET", "/openapi/v3/apis/nothing.example/v1").status_code == 404


# --- field validation -------------------------------------------------------------------------


def test_strict_validation_refuses_an_unknown_field_naming_it(http: Http) -> None:
    body = run_body("a")
    body["spec"]["colour"] = "blue"

    refused = http("POST", f"{RUNS_PATH}?fieldValidation=Strict", body)

    assert refused.status_code == 400
    assert 'unknown field "spec.colour"' in refused.json()["message"]


@pytest.mark.parametrize(
    ("query", "warned"),
    [("", True), ("?fieldValidation=Warn", True), ("?fieldValidation=Ignore", False)],
    ids=["absent-is-warn", "warn", "ignore"],
)
def test_an_unknown_field_is_dropped_with_a_warning_unless_ignored(
    http: Http, query: str, warned: bool
) -> None:
    body = run_body("a")
    body["spec"]["colour"] = "blue"

    created = http("POST", f"{RUNS_PATH}{query}", body)

    assert created.status_code == 201
    assert "colour" not in created.json()["spec"]
    warning = created.headers.get("Warning", "")
    assert (warning.startswith("299 - ") and "spec.colour" in warning) == warned, warning


def test_an_unknown_field_validation_directive_is_a_bad_request(http: Http) -> None:
    refused = http("POST", f"{RUNS_PATH}?fieldValidation=Loose", run_body("a"))

    assert refused.status_code == 400 and "fieldValidation" in refused.json()["message"]


def test_a_cel_rule_refusal_is_a_422_whose_causes_carry_the_message(http: Http) -> None:
    body = run_body("a")
    body["spec"]["replicas"] = {"min": 3, "max": 1}

    refused = http("POST", RUNS_PATH, body)

    assert refused.status_code == 422
    messages = [c["message"] for c in refused.json()["details"]["causes"]]
    assert any("replicas.min must not exceed replicas.max" in m for m in messages), messages


# --- Tables -----------------------------------------------------------------------------------


def test_a_table_of_workflow_runs_has_name_then_every_printer_column(
    objects: Objects, http: Http
) -> None:
    create_run(objects, "a")
    http.json(
        "PATCH",
        f"{RUNS_PATH}/a/status",
        {
            "status": {
                "phase": "Ready",
                "revision": "1.0.0-g1",
                "canary": {"trafficPercent": 0},
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "True",
                        "reason": "Succeeded",
                        "message": "",
                        "lastTransitionTime": "2026-12-01T00:00:00Z",
                    },
                    {
                        "type": "Serving",
                        "status": "False",
                        "reason": "NoReadyPods",
                        "message": "",
                        "lastTransitionTime": "2026-12-01T00:00:00Z",
                    },
                ],
                "placement": [
                    {"backend": "gpu-west", "state": "Skipped", "reason": "NoCapacity: full"},
                    {"backend": "gpu-east", "state": "Serving", "replicas": 1},
                ],
            }
        },
        **{"Content-Type": "application/merge-patch+json"},
    )

    table = http.json("GET", RUNS_PATH, Accept=TABLE)
    one = http.json("GET", f"{RUNS_PATH}/a?includeObject=Object", Accept=TABLE)

    names = [c["name"] for c in table["columnDefinitions"]]
    assert names == [
        "Name", "Phase", "Revision", "Canary %", "Step", "Serving", "Backends", "Endpoint", "Age",
    ]  # fmt: skip
    cells = table["rows"][0]["cells"]
    assert cells[:6] == ["a", "Ready", "1.0.0-g1", 0, None, "False"]
    assert cells[6] == "gpu-east"  # the filter keeps the Serving entries only
    assert cells[8].endswith("s")  # an age, as the server renders date columns
    assert table["rows"][0]["object"]["kind"] == "PartialObjectMetadata"
    assert one["rows"][0]["object"]["spec"]["workflow"]["ref"] == "demo@1.0.0"


def test_built_in_tables_have_the_server_columns(objects: Objects, http: Http) -> None:
    created = create_run(objects, "a")
    http.json("POST", "/api/v1/namespaces/default/events", event_about(created, "Pending"))

    namespaces = http.json("GET", "/api/v1/namespaces", Accept=TABLE)
    events = http.json("GET", "/api/v1/namespaces/default/events", Accept=TABLE)

    assert [c["name"] for c in namespaces["columnDefinitions"]] == ["Name", "Status", "Age"]
    assert namespaces["rows"][0]["cells"][:2] == ["default", "Active"]
    shown = [c["name"] for c in events["columnDefinitions"] if c["priority"] == 0]
    assert shown == ["Last Seen", "Type", "Reason", "Object", "Message"]
    assert events["rows"][0]["cells"][1:4] == ["Normal", "Pending", "workflowrun/a"]
    assert events["rows"][0]["cells"][0].endswith(("s", "m", "h", "d"))  # an age


# --- field selectors, watch lists, bodies ---------------------------------------------------


def event_about(run: dict[str, Any], reason: str) -> dict[str, Any]:
    meta = run["metadata"]
    return {
        "metadata": {"generateName": f"{meta['name']}."},
        "involvedObject": {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "WorkflowRun",
            "namespace": "default",
            "name": meta["name"],
            "uid": meta["uid"],
        },
        "reason": reason,
        "eventTime": "2026-12-04T09:32:12.650372Z",  # a MicroTime, as the watcher writes
        "message": f"phase -> {reason}",
        "type": "Normal",
        "source": {"component": "plnt-watcher"},
    }


def test_events_are_found_by_involved_object_as_kubectl_describe_asks(
    objects: Objects, http: Http
) -> None:
    a, b = create_run(objects, "a"), create_run(objects, "b")
    for run in (a, b):
        http.json("POST", "/api/v1/namespaces/default/events", event_about(run, "Pending"))
    selector = (
        f"involvedObject.name=a,involvedObject.namespace=default,"
        f"involvedObject.kind=WorkflowRun,involvedObject.uid={a['metadata']['uid']}"
    )

    found = http.json("GET", f"/api/v1/namespaces/default/events?fieldSelector={selector}")
    by_source = http.json("GET", "/api/v1/events?fieldSelector=source=plnt-watcher,reason=Pending")
    refused = http("GET", f"{RUNS_PATH}?fieldSelector=involvedObject.name=a")

    assert [e["involvedObject"]["name"] for e in found["items"]] == ["a"]
    assert len(by_source["items"]) == 2
    assert refused.status_code == 400 and "field label not supported" in refused.json()["message"]


def watch_lines(http: Http, path: str) -> list[dict[str, Any]]:
    """The events of a watch request until it ends (it is given a short timeout)."""
    with http.session.get(http.url + path, stream=True, timeout=10) as response:
        assert response.ok, response.text
        return [json.loads(line) for line in response.iter_lines() if line]


def test_a_watch_list_sends_the_matching_objects_then_a_bookmark_ending_them(
    objects: Objects, http: Http
) -> None:
    create_run(objects, "a")
    create_run(objects, "b")
    query = (
        "watch=true&sendInitialEvents=true&allowWatchBookmarks=true"
        "&resourceVersionMatch=NotOlderThan&fieldSelector=metadata.name%3Da&timeoutSeconds=1"
    )

    events = watch_lines(http, f"{RUNS_PATH}?{query}")

    assert [e["type"] for e in events[:2]] == ["ADDED", "BOOKMARK"]
    assert events[0]["object"]["metadata"]["name"] == "a"
    assert events[1]["object"]["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}
    assert all(e["type"] == "BOOKMARK" for e in events[1:])


def test_a_watch_list_without_bookmarks_is_refused_so_clients_fall_back(http: Http) -> None:
    refused = http("GET", f"{RUNS_PATH}?watch=true&sendInitialEvents=true")

    assert refused.status_code == 422


def test_a_table_watch_sends_column_definitions_with_the_first_event_only(
    objects: Objects, http: Http
) -> None:
    create_run(objects, "a")
    create_run(objects, "b")

    with http.session.get(
        f"{http.url}{RUNS_PATH}?watch=true&timeoutSeconds=1",
        headers={"Accept": TABLE},
        stream=True,
        timeout=10,
    ) as response:
        events = [json.loads(line) for line in response.iter_lines() if line]

    tables = [e["object"] for e in events]
    assert [t["kind"] for t in tables] == ["Table", "Table"]
    assert tables[0]["columnDefinitions"] and not tables[1]["columnDefinitions"]
    assert tables[1]["rows"][0]["cells"][0] == "b"


def test_a_protobuf_body_gets_415_naming_the_json_types(http: Http) -> None:
    refused = http(
        "POST",
        "/api/v1/namespaces",
        None,
        **{"Content-Type": "application/vnd.kubernetes.protobuf"},
    )

    assert refused.status_code == 415
    assert "application/json" in refused.json()["message"]
