"""``plnt get backends``: each backend's free GPUs per class from the plnt-capacity view."""

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml
from cli_support import plnt, write_yaml

from plnt_common import subjects
from plnt_common.bus.bus import Bus
from plnt_common.capacity import BackendCapacity, ClassCapacity


def backend(name: str, classes: dict[str, dict[str, object]]) -> dict[str, object]:
    return {
        "apiVersion": "plnt.work/v1",
        "kind": "PlntBackend",
        "metadata": {"name": name},
        "spec": {"type": "local", "gpuClasses": classes},
    }


async def observe(url: str, capacity: BackendCapacity) -> None:
    bus = await Bus.open(url, service="test")
    try:
        kv = await bus.js.key_value(subjects.CAPACITY_BUCKET)
        await kv.put(capacity.backend, capacity.model_dump_json(by_alias=True).encode())
    finally:
        await bus.close()


def test_get_backends_shows_free_largest_and_age_per_gpu_class(
    capfd: pytest.CaptureFixture[str], bus_url: str, tmp_path: Path
) -> None:
    gpu = {"resourceName": "nvidia.com/gpu", "capacity": 4}
    write_yaml(tmp_path / "a.yaml", backend("workstation", {"a100": gpu, "h100": gpu}))
    write_yaml(tmp_path / "b.yaml", backend("laptop", {}))
    assert plnt(capfd, "--nats", bus_url, "apply", "-f", str(tmp_path)).code == 0
    at = datetime.now(UTC) - timedelta(seconds=7)
    a100 = ClassCapacity(gpu_class="a100", free=3, largest_free_on_one_node=2, observed_at=at)
    seen = BackendCapacity(backend="workstation", observed_at=at, classes=(a100,))
    asyncio.run(observe(bus_url, seen))

    out = plnt(capfd, "--nats", bus_url, "get", "backends").out.splitlines()

    assert out[0].split() == ["NAME", "TYPE", "GPU", "CLASS", "FREE", "LARGEST", "AGE", "LLM"]
    rows = sorted(line.split() for line in out[1:])
    assert rows[0] == ["laptop", "local", "-", "-", "-", "-", "offline"]
    assert rows[1][:5] == ["workstation", "local", "a100", "3", "2"]
    assert rows[1][5] in ("7s", "8s", "9s")  # how old the observation is
    assert rows[2] == ["workstation", "local", "h100", "-", "-", "-", "offline"]

    listed = yaml.safe_load(plnt(capfd, "--nats", bus_url, "get", "backends", "-o", "yaml").out)
    by_name = {item["metadata"]["name"]: item for item in listed["items"]}
    [entry] = by_name["workstation"]["status"]["capacity"]
    assert (entry["gpuClass"], entry["free"], entry["largestFreeOnOneNode"]) == ("a100", 3, 2)
