"""GPU utilization from NVML, when ``pynvml`` (nvidia-ml-py) is installed and a GPU exists.

plnt does not depend on nvidia-ml-py: the import is guarded, and without it (or without a
GPU) ``GpuProbe.open`` returns None so ``plnt_gpu_utilization_ratio`` is never set at all.
"""

import importlib
from typing import Any

from plnt_common.logs import get_logger
from plnt_common.metrics import GPU_UTILIZATION

log = get_logger("plnt.runner.gpu")


class GpuProbe:
    """Samples every GPU's utilization into ``plnt_gpu_utilization_ratio{gpu}``."""

    def __init__(self, *, nvml: Any, handles: list[Any]) -> None:
        self._nvml = nvml
        self._handles = handles

    @classmethod
    def open(cls) -> "GpuProbe | None":
        """A probe over every visible GPU, or None without pynvml, a driver, or a GPU."""
        try:
            nvml = importlib.import_module("pynvml")
        except ImportError:
            return None
        try:
            nvml.nvmlInit()
            count = int(nvml.nvmlDeviceGetCount())
            handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        except Exception as exc:  # NVMLError has many subclasses: no driver, no device, ...
            log.info("gpu_metrics_unavailable", cause=str(exc))
            return None
        if not handles:
            nvml.nvmlShutdown()
            return None
        return cls(nvml=nvml, handles=handles)

    def sample(self) -> None:
        """Set the gauge from the current utilization; a failed read leaves the last value."""
        for index, handle in enumerate(self._handles):
            try:
                rates = self._nvml.nvmlDeviceGetUtilizationRates(handle)
            except Exception as exc:  # a GPU falling off the bus must not break /metrics
                log.warning("gpu_sample_failed", gpu=index, cause=str(exc))
                continue
            GPU_UTILIZATION.labels(gpu=str(index)).set(float(rates.gpu) / 100.0)

    def close(self) -> None:
        try:
            self._nvml.nvmlShutdown()
        except Exception as exc:
            log.debug("nvml_shutdown_failed", cause=str(exc))
