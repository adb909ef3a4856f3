"""Fixtures of the Kubernetes tier: an API emulator per test and clients pointed at it."""

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client, config

from plnt_testkit.kube_emulator import KubeEmulator

# The end-to-end helpers (file registry, run and backend documents) are shared with
# tests/e2e; appended, not prepended, so nothing here is shadowed.
E2E_DIR = Path(__file__).resolve().parents[1] / "e2e"
if str(E2E_DIR) not in sys.path:
    sys.path.append(str(E2E_DIR))


@pytest.fixture
def emulator() -> Iterator[KubeEmulator]:
    with KubeEmulator(bookmark_interval_s=0.2) as server:
        yield server


@pytest.fixture
def kubeconfig(emulator: KubeEmulator, tmp_path: Path) -> Path:
    return emulator.write_kubeconfig(tmp_path / "kubeconfig")


@pytest.fixture
def api(kubeconfig: Path) -> Iterator[client.ApiClient]:
    api_client = config.new_client_from_config(config_file=str(kubeconfig))
    yield api_client
    api_client.close()


@pytest.fixture
def objects(api: client.ApiClient) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api)
