"""compose.yaml, checked without Docker: it parses, references only services, volumes and
configs it defines, runs every plnt service from the repository's Dockerfile, and sets
only PLNT_* variables that the services' settings classes read."""

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from plnt_chart_kit import REPO, settings_env_names
from pydantic_settings import BaseSettings

from plnt_cli.serve import SERVICES
from plnt_console.settings import ConsoleSettings
from plnt_installer.settings import InstallerSettings
from plnt_local_backend.settings import LocalBackendSettings
from plnt_promoter.settings import PromoterSettings
from plnt_puller.settings import PullerSettings
from plnt_router.settings import RouterSettings
from plnt_smoke.settings import SmokeSettings
from plnt_watcher.settings import WatcherSettings

COMPOSE = REPO / "compose.yaml"
SETTINGS: dict[str, type[BaseSettings]] = {
    "watcher": WatcherSettings,
    "puller": PullerSettings,
    "installer": InstallerSettings,
    "smoke": SmokeSettings,
    "promoter": PromoterSettings,
    "router": RouterSettings,
    "local-backend": LocalBackendSettings,
    "console": ConsoleSettings,
}
# The runner is started by the local-backend, one process per release, not by compose.
COMPOSED_SERVICES = sorted(set(SERVICES) - {"runner"})
TOP_LEVEL = {"name", "services", "volumes", "configs", "networks", "secrets"}
DEPENDS_CONDITIONS = {"service_started", "service_healthy", "service_completed_successfully"}


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())
    return document


def _env(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment", {})
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {key: str(value) for key, value in env.items()}


def test_top_level_keys_are_compose_spec_keys(compose: dict[str, Any]) -> None:
    unknown = {key for key in compose if key not in TOP_LEVEL and not key.startswith("x-")}
    assert unknown == set()
    assert compose["name"] == "plnt"


def test_depends_on_names_defined_services_with_valid_conditions(compose: dict[str, Any]) -> None:
    services = compose["services"]
    for name, service in services.items():
        depends = service.get("depends_on", {})
        if isinstance(depends, list):
            depends = {dep: {"condition": "service_started"} for dep in depends}
        for dep, spec in depends.items():
            assert dep in services, f"{name} depends on undefined {dep}"
            assert dep != name
            assert spec["condition"] in DEPENDS_CONDITIONS, (name, dep)
            if spec["condition"] == "service_healthy":
                assert "healthcheck" in services[dep], f"{name} waits for {dep} to be healthy"
            if spec["condition"] == "service_completed_successfully":
                assert services[dep].get("restart") == "no", f"{dep} is a job; it must not restart"


def test_depends_on_has_no_cycles(compose: dict[str, Any]) -> None:
    services = compose["services"]
    edges = {name: set(service.get("depends_on", {})) for name, service in services.items()}
    for name, service in services.items():
        mode = service.get("network_mode", "")
        if mode.startswith("service:"):
            edges[name].add(mode.removeprefix("service:"))
    done: set[str] = set()

    def visit(node: str, stack: tuple[str, ...]) -> None:
        assert node not in stack, f"dependency cycle: {' -> '.join((*stack, node))}"
        if node in done:
            return
        for nxt in edges[node]:
            visit(nxt, (*stack, node))
        done.add(node)

    for name in services:
        visit(name, ())


def test_network_mode_shares_a_defined_service_and_publishes_nothing_itself(
    compose: dict[str, Any],
) -> None:
    services = compose["services"]
    shared = {n: s["network_mode"] for n, s in services.items() if "network_mode" in s}
    assert shared, "router and smoke share the local-backend's network namespace"
    for name, mode in shared.items():
        owner = mode.removeprefix("service:")
        assert mode.startswith("service:") and owner in services, name
        assert "ports" not in services[name] and "networks" not in services[name], name
        assert owner in services[name].get("depends_on", {}), name


def test_volumes_and_configs_are_defined_and_bind_mounts_exist(compose: dict[str, Any]) -> None:
    named_volumes = set(compose.get("volumes") or {})
    configs = set(compose.get("configs") or {})
    used: set[str] = set()
    for name, service in compose["services"].items():
        for mount in service.get("volumes", []):
            source = mount.split(":", 1)[0] if isinstance(mount, str) else mount["source"]
            if source.startswith((".", "/")):
                assert (REPO / source).resolve().exists(), f"{name}: bind mount {source} missing"
            else:
                assert source in named_volumes, f"{name}: volume {source} is not defined"
                used.add(source)
        for config in service.get("configs", []):
            source = config if isinstance(config, str) else config["source"]
            assert source in configs, f"{name}: config {source} is not defined"
    assert used == named_volumes, f"unused volumes: {named_volumes - used}"


def test_every_plnt_service_runs_from_the_dockerfile(compose: dict[str, Any]) -> None:
    services = compose["services"]
    for name in COMPOSED_SERVICES:
        service = services[name]
        assert service["build"]["context"] == "."
        assert (REPO / service["build"].get("dockerfile", "Dockerfile")).is_file()
        assert service["command"] == ["serve", name]
    plnt_services = {n for n, s in services.items() if "build" in s}
    assert plnt_services == set(COMPOSED_SERVICES)


@pytest.mark.parametrize("name", COMPOSED_SERVICES)
def test_plnt_env_vars_are_settings_of_the_service(compose: dict[str, Any], name: str) -> None:
    env = _env(compose["services"][name])
    known = settings_env_names(SETTINGS[name])
    plnt_vars = {key for key in env if key.startswith("PLNT_")}
    assert plnt_vars - set(known) == set(), f"{name} does not read {plnt_vars - set(known)}"
    assert env["PLNT_NATS_URL"] == "nats://nats:4222"
    assert env["PLNT_ROUTER_PUBLIC_URL"] == "http://localhost:8080"


def test_router_listens_on_8080_published_by_its_network_owner(compose: dict[str, Any]) -> None:
    services = compose["services"]
    router = services["router"]
    env = _env(router)
    assert env["PLNT_ROUTER_PORT"] == "8080"
    assert env["PLNT_ROUTER_HOST"] == "0.0.0.0"
    owner = router["network_mode"].removeprefix("service:")
    assert "127.0.0.1:8080:8080" in services[owner]["ports"]


def test_nats_runs_jetstream_with_fsync_always_from_a_mounted_config(
    compose: dict[str, Any],
) -> None:
    nats = compose["services"]["nats"]
    (mounted,) = nats["configs"]
    assert nats["command"][-2:] == ["--config", mounted["target"]]
    conf = compose["configs"][mounted["source"]]["content"]
    jetstream = re.search(r"jetstream\s*\{(.*?)\}", conf, re.S)
    assert jetstream, "the config enables JetStream"
    settings = dict(
        line.split(":", 1)
        for line in map(str.strip, jetstream.group(1).splitlines())
        if ":" in line
    )
    assert settings["sync_interval"].strip() == "always"
    store_dir = settings["store_dir"].strip()
    assert any(m.endswith(f":{store_dir}") for m in nats["volumes"]), "the store is on a volume"
    assert "4222:4222" in nats["ports"]


def test_puller_reads_the_registry_from_minio(compose: dict[str, Any]) -> None:
    services = compose["services"]
    env = _env(services["puller"])
    assert env["PLNT_PULLER_S3_ENDPOINT_URL"] == "http://minio:9000"
    assert env["AWS_ACCESS_KEY_ID"] == _env(services["minio"])["MINIO_ROOT_USER"]
    assert env["AWS_SECRET_ACCESS_KEY"] == _env(services["minio"])["MINIO_ROOT_PASSWORD"]
    # the setup job uploads the example registry the example WorkflowRun points at
    example = yaml.safe_load((REPO / "examples" / "workflowrun.yaml").read_text())
    bucket = example["spec"]["workflow"]["registry"].removeprefix("s3://").split("/")[0]
    setup = services["minio-setup"]
    assert f"local/{bucket}" in " ".join(setup["command"])
    sources = {Path(m.split(":")[0]) for m in setup["volumes"]}
    assert Path("examples/registry") in sources


def test_watcher_uses_the_embedded_store_without_kubernetes(compose: dict[str, Any]) -> None:
    assert _env(compose["services"]["watcher"])["PLNT_WATCHER_SOURCE"] == "embedded"
