"""charts/plnt's dashboards, alerts and scraping: the Grafana dashboard ConfigMap, the
PrometheusRule (checked and unit-tested with promtool), the PodMonitor / ServiceMonitor
(their selectors evaluated against the rendered pods), and every metric name a panel or
a rule reads checked against the metrics plnt's code registers."""

import functools
import importlib
import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import helm_python
import pytest
import yaml
from plnt_chart_kit import (
    PLNT_CHART,
    REPO,
    RUNNER_CHART,
    one,
    render,
    select,
    selector_matches,
    validate_any,
    with_router_keys,
)
from prometheus_client import REGISTRY

NAMESPACE = "plnt-system"
SERVICES = ("watcher", "puller", "installer", "smoke", "promoter", "router")
DASHBOARD = PLNT_CHART / "dashboards" / "plnt.json"
RULES_UNIT_TESTS = Path(__file__).resolve().parent / "promtool" / "plnt_rules_test.yaml"
# Series Prometheus itself writes for every target, not plnt's code.
PROMETHEUS_SERIES = frozenset({"up"})
EVERYTHING_ON = {
    "grafana": {"dashboards": {"enabled": True}},
    "prometheusRule": {"enabled": True},
    "podMonitor": {"enabled": True},
}


# ---- what the code registers -------------------------------------------------------------

METRIC_DEFINITION = re.compile(r"\b(Counter|Gauge|Histogram|Summary|Info|Enum)\(\s*\"")
SUFFIXES = {
    "counter": ("_total", "_created"),
    "histogram": ("_bucket", "_count", "_sum", "_created"),
    "gaugehistogram": ("_bucket", "_gcount", "_gsum"),
    "summary": ("", "_count", "_sum", "_created"),
    "gauge": ("",),
    "info": ("_info",),
    "stateset": ("",),
    "unknown": ("",),
}


def metric_modules() -> list[str]:
    """Every module under libs/ and services/ that defines a metric, e.g. plnt_common.metrics."""
    modules = []
    for path in sorted([*(REPO / "libs").rglob("*.py"), *(REPO / "services").rglob("*.py")]):
        if METRIC_DEFINITION.search(path.read_text()):
            parts = path.with_suffix("").parts
            start = next(i for i, part in enumerate(parts) if part.startswith("plnt_"))
            modules.append(".".join(parts[start:]))
    return modules


@functools.cache
def registered_series() -> frozenset[str]:
    """Every series name the registry can expose once the metric modules are imported:
    a counter's ``_total``, a histogram's ``_bucket``/``_count``/``_sum``, ..."""
    for module in metric_modules():
        importlib.import_module(module)
    names: set[str] = set()
    for family in REGISTRY.collect():
        names.update(family.name + suffix for suffix in SUFFIXES[family.type])
        names.update(sample.name for sample in family.samples)
    return frozenset(names)


# ---- metric names in PromQL --------------------------------------------------------------

PROMQL_KEYWORDS = frozenset(
    {"by", "without", "on", "ignoring", "group_left", "group_right", "offset", "bool"}
    | {"and", "or", "unless", "inf", "nan"}
)


def promql_metric_names(expr: str) -> set[str]:
    """The metric names an expression reads (functions, labels, keywords left out)."""
    label_values = re.fullmatch(r"\s*label_values\((.*),\s*\w+\s*\)\s*", expr, re.S)
    if label_values:  # a Grafana variable's query: the metric is the first argument
        expr = label_values.group(1)
    expr = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # string literals
    expr = re.sub(r"\{[^}]*\}", " ", expr)  # label matchers
    expr = re.sub(r"\[[^\]]*\]", " ", expr)  # range selectors
    expr = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", expr)
    words = re.findall(r"(?<![\w$.])([a-zA-Z_:][a-zA-Z0-9_:]*)\b(?!\s*\()", expr)
    return {word for word in words if word.lower() not in PROMQL_KEYWORDS}


@pytest.mark.parametrize(
    ("expr", "names"),
    [
        (
            'sum by (workflow, le) (rate(plnt_a_bucket{workflow=~"$workflow"}[$__rate_interval]))',
            {"plnt_a_bucket"},
        ),
        ("histogram_quantile(0.95, sum by (le) (rate(plnt_b_bucket[5m]))) > 3", {"plnt_b_bucket"}),
        ("(x unless x offset 30m) * 1 or increase(y[30m]) >= 1", {"x", "y"}),
        ('label_values(plnt_c_total{workflow=~".+/.+"}, workflow)', {"plnt_c_total"}),
        ('max by (job) (up{job="a"}) == 0 or absent(up{job="a"})', {"up"}),
    ],
    ids=["labels-and-range", "quantile", "unless-offset", "grafana-variable", "up-absent"],
)
def test_promql_metric_names_finds_the_metrics_an_expression_reads(
    expr: str, names: set[str]
) -> None:
    assert promql_metric_names(expr) == names


def test_the_registry_holds_the_contract_metrics_with_their_suffixes() -> None:
    assert "plnt_common.metrics" in metric_modules()
    series = registered_series()
    assert {"plnt_invocations_total", "plnt_invocation_duration_seconds_bucket"} <= series
    assert {"plnt_queue_depth", "plnt_deploy_duration_seconds_count"} <= series
    assert "plnt_invocations" not in series  # a counter is read as <name>_total


# ---- the dashboard -------------------------------------------------------------------------


@functools.cache
def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return loaded


def panels() -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    for panel in dashboard()["panels"]:
        found.append(panel)
        found.extend(panel.get("panels", []))  # a collapsed row keeps its panels inside
    return found


def test_dashboard_is_valid_json_whose_every_panel_has_a_title_and_the_datasource_variable() -> (
    None
):
    board = dashboard()
    assert board["uid"] and board["title"]
    ids = [panel["id"] for panel in panels()]
    assert len(ids) == len(set(ids)), f"panel ids repeat: {ids}"
    for panel in panels():
        title = panel.get("title")
        assert title, f"panel {panel['id']} has no title"
        assert panel.get("datasource") == {"type": "prometheus", "uid": "${datasource}"}, title
        assert panel.get("targets"), f"panel {title!r} has no query"
        for target in panel["targets"]:
            assert target["datasource"] == panel["datasource"], title
            assert target["expr"].strip(), f"panel {title!r} has an empty query"


def test_dashboard_has_datasource_workflow_and_revision_variables() -> None:
    variables = {var["name"]: var for var in dashboard()["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    for name in ("workflow", "revision"):
        assert variables[name]["type"] == "query"
        assert variables[name]["datasource"]["uid"] == "${datasource}"
    # "All" keeps to the router's <namespace>/<name> workflows: a runner's bare-named
    # series of the same call would count it twice.
    assert variables["workflow"]["allValue"] == ".+/.+"
    calls = [p for p in panels() if "plnt_invocations_total" in json.dumps(p["targets"])]
    assert calls, "no panel shows calls"
    for panel in calls:
        for target in panel["targets"]:
            assert 'workflow=~"$workflow"' in target["expr"], panel["title"]
            assert 'revision=~"$revision"' in target["expr"], panel["title"]


def test_dashboard_covers_rollouts_calls_spend_queue_and_gpus() -> None:
    read = {
        name
        for panel in panels()
        for t in panel["targets"]
        for name in promql_metric_names(t["expr"])
    }
    assert {
        "plnt_deploy_duration_seconds_count",
        "plnt_saga_step_runs_total",
        "plnt_saga_step_duration_seconds_bucket",
        "plnt_saga_step_duration_seconds_count",
        "plnt_invocations_total",
        "plnt_invocation_duration_seconds_bucket",
        "plnt_llm_tokens_total",
        "plnt_llm_cost_usd_total",
        "plnt_queue_depth",
        "plnt_gpu_utilization_ratio",
    } <= read


def test_every_metric_a_dashboard_panel_reads_is_registered_by_the_code() -> None:
    known = registered_series() | PROMETHEUS_SERIES
    unknown = [
        f"panel {panel['title']!r}: {name}"
        for panel in panels()
        for target in panel["targets"]
        for name in sorted(promql_metric_names(target["expr"]) - known)
    ]
    unknown += [
        f"variable {var['name']!r}: {name}"
        for var in dashboard()["templating"]["list"]
        if var["type"] == "query"
        for name in sorted(promql_metric_names(var["definition"]) - known)
    ]
    assert not unknown, "metrics no plnt code registers:\n" + "\n".join(unknown)


def test_dashboard_configmap_carries_the_sidecar_label_and_the_dashboard_file() -> None:
    docs = render(PLNT_CHART, with_router_keys(EVERYTHING_ON), namespace=NAMESPACE)
    configmap = one(docs, "ConfigMap", "plnt-dashboard")
    validate_any(configmap)
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert configmap["metadata"]["namespace"] == NAMESPACE
    assert json.loads(configmap["data"]["plnt.json"]) == dashboard()


def test_dashboard_label_namespace_and_annotations_come_from_values() -> None:
    values = {
        "grafana": {
            "dashboards": {
                "enabled": True,
                "label": "grafana.com/dashboard",
                "labelValue": "plnt",
                "namespace": "monitoring",
                "annotations": {"grafana_folder": "plnt"},
            }
        }
    }
    configmap = one(render(PLNT_CHART, with_router_keys(values)), "ConfigMap", "plnt-dashboard")
    assert configmap["metadata"]["labels"]["grafana.com/dashboard"] == "plnt"
    assert "grafana_dashboard" not in configmap["metadata"]["labels"]
    assert configmap["metadata"]["namespace"] == "monitoring"
    assert configmap["metadata"]["annotations"] == {"grafana_folder": "plnt"}


def test_dashboards_rules_and_monitors_are_off_by_default() -> None:
    docs = render(PLNT_CHART, with_router_keys())
    kinds = {doc["kind"] for doc in docs}
    assert not kinds & {"PrometheusRule", "PodMonitor", "ServiceMonitor", "ConfigMap"}


# ---- the alerts ------------------------------------------------------------------------------


def rule_groups(values: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    docs = render(
        PLNT_CHART, with_router_keys({"prometheusRule": {"enabled": True}, **(values or {})})
    )
    groups: list[dict[str, Any]] = one(docs, "PrometheusRule")["spec"]["groups"]
    return groups


def alerting_rules(values: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    return [rule for group in rule_groups(values) for rule in group["rules"]]


def test_every_alert_has_a_severity_a_summary_a_description_and_a_for() -> None:
    rules = alerting_rules()
    assert {rule["alert"] for rule in rules} == {
        "PlntSagaFailed",
        "PlntSagaStepErrors",
        "PlntDeadLetters",
        "PlntLatencyP95High",
        "PlntRouterQueueSaturated",
        "PlntServiceDown",
    }
    for rule in rules:
        assert rule["labels"]["severity"] in {"warning", "critical"}, rule["alert"]
        assert rule["annotations"]["summary"] and rule["annotations"]["description"]
        assert re.fullmatch(r"[0-9]+[smh]", rule["for"]), rule["alert"]


def test_every_metric_a_rule_reads_is_registered_by_the_code() -> None:
    known = registered_series() | PROMETHEUS_SERIES
    unknown = [
        f"alert {rule['alert']}: {name}"
        for rule in alerting_rules()
        for name in sorted(promql_metric_names(rule["expr"]) - known)
    ]
    assert not unknown, "metrics no plnt code registers:\n" + "\n".join(unknown)


def test_alert_thresholds_windows_and_severities_come_from_values() -> None:
    values = {
        "prometheusRule": {
            "enabled": True,
            "latencyP95": {
                "thresholdSeconds": 2.5,
                "window": "10m",
                "for": "15m",
                "severity": "critical",
            },
            "queueSaturation": {"ratio": 0.5, "for": "2m", "severity": "warning"},
        },
        "router": {"maxQueue": 100},
    }
    rules = {rule["alert"]: rule for rule in alerting_rules(values)}
    latency = rules["PlntLatencyP95High"]
    assert latency["expr"].endswith("[10m]))) > 2.5")
    assert (latency["for"], latency["labels"]["severity"]) == ("15m", "critical")
    assert rules["PlntRouterQueueSaturated"]["expr"].endswith("> 50")
    assert rules["PlntRouterQueueSaturated"]["for"] == "2m"


def test_a_disabled_service_gets_no_down_alert() -> None:
    rules = alerting_rules({"smoke": {"enabled": False}})
    down = {rule["labels"]["service"] for rule in rules if rule["alert"] == "PlntServiceDown"}
    assert down == set(SERVICES) - {"smoke"}


def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.skip("promtool is not installed: Debian's `prometheus` package ships it")
    return path


def write_rules(directory: Path) -> Path:
    """The chart's default rules as a Prometheus rule file (what the operator loads)."""
    path = directory / "plnt-rules.yaml"
    path.write_text(yaml.safe_dump({"groups": rule_groups()}, sort_keys=False))
    return path


def run_promtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [promtool(), *args], capture_output=True, text=True, timeout=60, check=False
    )


def test_rendered_rules_pass_promtool_check_rules(tmp_path: Path) -> None:
    result = run_promtool("check", "rules", str(write_rules(tmp_path)))
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(alerting_rules())} rules found" in result.stdout


def test_each_alert_fires_on_its_series_and_not_below_its_threshold(tmp_path: Path) -> None:
    """promtool's unit tests (tests/charts/promtool/plnt_rules_test.yaml): per alert the
    series that fire it, with its labels and annotations, and series that do not."""
    write_rules(tmp_path)
    unit_tests = tmp_path / RULES_UNIT_TESTS.name
    unit_tests.write_text(RULES_UNIT_TESTS.read_text())
    result = run_promtool("test", "rules", str(unit_tests))
    assert result.returncode == 0, result.stdout + result.stderr
    tested = set(re.findall(r"alertname: (\w+)", RULES_UNIT_TESTS.read_text()))
    assert tested == {rule["alert"] for rule in alerting_rules()}, "an alert has no unit test"


# ---- scraping --------------------------------------------------------------------------------


def control_plane_pods(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {
            "service": deployment["metadata"]["labels"]["app.kubernetes.io/component"],
            "namespace": deployment["metadata"]["namespace"],
            "labels": deployment["spec"]["template"]["metadata"]["labels"],
            "ports": {
                port["name"]: port["containerPort"]
                for container in deployment["spec"]["template"]["spec"]["containers"]
                for port in container.get("ports", [])
            },
        }
        for deployment in select(docs, "Deployment")
    ]


def runner_pod_labels() -> dict[str, str]:
    """A runner pod as the installer installs it (plnt-runner), in the same namespace."""
    values = {"workflowRun": {"name": "review-responder"}, "revision": "1.2.0-g3"}
    deployment = one(
        render(RUNNER_CHART, values, namespace=NAMESPACE, release="plnt-rr-g3"), "Deployment"
    )
    labels: dict[str, str] = deployment["spec"]["template"]["metadata"]["labels"]
    return labels


def relabelled_job(endpoint: dict[str, Any], pod_labels: dict[str, str]) -> str:
    """The job Prometheus gives a target after the endpoint's relabelings (replace)."""
    (rule,) = [r for r in endpoint["relabelings"] if r.get("targetLabel") == "job"]
    (source,) = rule["sourceLabels"]
    label = source.removeprefix("__meta_kubernetes_pod_label_")
    value = next(v for k, v in pod_labels.items() if re.sub(r"[^a-zA-Z0-9_]", "_", k) == label)
    job: str = rule["replacement"].replace("$1", value)
    return job


def down_alert_jobs() -> dict[str, str]:
    """service -> the job its PlntServiceDown alert watches."""
    return {
        rule["labels"]["service"]: re.search(r'up\{job="([^"]+)"', rule["expr"]).group(1)  # type: ignore[union-attr]
        for rule in alerting_rules()
        if rule["alert"] == "PlntServiceDown"
    }


@pytest.mark.parametrize("metrics_port", [9090, 9464], ids=["default-port", "router-port-moved"])
def test_pod_monitor_scrapes_every_service_pod_on_its_metrics_port(metrics_port: int) -> None:
    values = with_router_keys({**EVERYTHING_ON, "router": {"metricsPort": metrics_port}})
    docs = render(PLNT_CHART, values, namespace=NAMESPACE)
    monitor = one(docs, "PodMonitor")
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    assert (endpoint["port"], endpoint["path"]) == ("metrics", "/metrics")
    pods = control_plane_pods(docs)
    assert {pod["service"] for pod in pods} == set(SERVICES)
    jobs = down_alert_jobs()
    for pod in pods:
        assert selector_matches(monitor["spec"]["selector"], pod["labels"]), pod["service"]
        assert endpoint["port"] in pod["ports"], f"{pod['service']} has no metrics port"
        # the job the target gets is the one the service's down alert watches
        assert relabelled_job(endpoint, pod["labels"]) == jobs[pod["service"]]
    router = next(pod for pod in pods if pod["service"] == "router")
    assert router["ports"]["metrics"] == metrics_port != router["ports"]["http"]
    assert not selector_matches(monitor["spec"]["selector"], runner_pod_labels())


def test_service_monitor_scrapes_every_service_pod_through_a_headless_metrics_service() -> None:
    values = with_router_keys({"serviceMonitor": {"enabled": True, "labels": {"release": "kps"}}})
    docs = render(PLNT_CHART, values, namespace=NAMESPACE)
    monitor = one(docs, "ServiceMonitor")
    assert monitor["metadata"]["labels"]["release"] == "kps"
    selector = monitor["spec"]["selector"]
    services = [
        s for s in select(docs, "Service") if selector_matches(selector, s["metadata"]["labels"])
    ]
    # the headless metrics Service, never the router's public one
    assert [s["metadata"]["name"] for s in services] == ["plnt-metrics"]
    (metrics,) = services
    validate_any(metrics)
    assert metrics["spec"]["clusterIP"] == "None"
    (port,) = metrics["spec"]["ports"]
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] == port["name"]
    jobs = down_alert_jobs()
    pod_selector = {"matchLabels": metrics["spec"]["selector"]}
    for pod in control_plane_pods(docs):
        assert selector_matches(pod_selector, pod["labels"]), pod["service"]
        assert port["targetPort"] in pod["ports"], f"{pod['service']} has no metrics port"
        assert relabelled_job(endpoint, pod["labels"]) == jobs[pod["service"]]
    assert not selector_matches(pod_selector, runner_pod_labels())


def test_monitor_interval_labels_and_extra_relabelings_come_from_values() -> None:
    extra = {"sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": "node"}
    values = {
        "podMonitor": {
            "enabled": True,
            "interval": "15s",
            "scrapeTimeout": "10s",
            "labels": {"release": "kps"},
            "relabelings": [extra],
        }
    }
    monitor = one(render(PLNT_CHART, with_router_keys(values)), "PodMonitor")
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    assert (endpoint["interval"], endpoint["scrapeTimeout"]) == ("15s", "10s")
    assert endpoint["relabelings"][0]["targetLabel"] == "job"  # the chart's first
    assert endpoint["relabelings"][-1] == extra
    assert monitor["metadata"]["labels"]["release"] == "kps"


def test_both_monitors_at_once_are_refused_with_a_message() -> None:
    values = with_router_keys(
        {"podMonitor": {"enabled": True}, "serviceMonitor": {"enabled": True}}
    )
    with pytest.raises(helm_python.HelmRenderError, match="each pod would be scraped twice"):
        render(PLNT_CHART, values)


@pytest.mark.parametrize(
    "values",
    [
        {"prometheusRule": {"latencyP95": {"window": "5 minutes"}}},
        {"prometheusRule": {"queueSaturation": {"ratio": 2}}},
        {"prometheusRule": {"sagaFailed": {"threshold": 0}}},
        {"prometheusRule": {"serviceDown": {"severity": ""}}},
        {"podMonitor": {"interval": "often"}},
        {"grafana": {"dashboards": {"label": "not a label"}}},
        {"serviceMonitor": {"enable": True}},
    ],
    ids=["window", "ratio", "threshold", "severity", "interval", "label", "typo"],
)
def test_values_schema_rejects_bad_observability_values(values: dict[str, Any]) -> None:
    with pytest.raises(helm_python.HelmValuesError):
        render(PLNT_CHART, with_router_keys(values))
