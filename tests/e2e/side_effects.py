"""Count what the stack's processes did, from their Prometheus counters.

Each process of a stack started with ``counting_env(dir)`` keeps its metrics in files of
``dir`` (prometheus_client's multiprocess mode), which outlive the process: the counts
sum over every replica and over every process a SIGKILL ended.
"""

from collections import Counter
from pathlib import Path

from prometheus_client import CollectorRegistry
from prometheus_client.multiprocess import MultiProcessCollector

MULTIPROCESS_DIR_ENV = "PROMETHEUS_MULTIPROC_DIR"


def counting_env(directory: Path) -> dict[str, str]:
    directory.mkdir(parents=True, exist_ok=True)
    return {MULTIPROCESS_DIR_ENV: str(directory)}


def counters(directory: Path, sample: str, label: str) -> Counter[tuple[str, str]]:
    """``sample``'s totals by (service, ``label``) over every process that ever ran."""
    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=str(directory))
    totals: Counter[tuple[str, str]] = Counter()
    for metric in registry.collect():
        for found in metric.samples:
            if found.name == sample:
                totals[(found.labels["service"], found.labels[label])] += int(found.value)
    return totals


def side_effects(directory: Path) -> Counter[tuple[str, str]]:
    """``plnt_side_effects_total`` by (service, effect)."""
    return counters(directory, "plnt_side_effects_total", "effect")


def step_runs(directory: Path) -> Counter[tuple[str, str]]:
    """``plnt_saga_step_runs_total`` by (service, step): handler bodies run to completion."""
    return counters(directory, "plnt_saga_step_runs_total", "step")


def side_effects_since(
    directory: Path, before: Counter[tuple[str, str]]
) -> dict[tuple[str, str], int]:
    """The side effects counted since ``before`` was read, those that happened only."""
    done = side_effects(directory)
    done.subtract(before)
    return {key: n for key, n in done.items() if n}


ONE_READY_SAGA = {
    ("watcher", "saga_request"): 1,
    ("puller", "spec_store"): 1,
    ("installer", "canary_install"): 1,
    ("local-backend", "runner_start"): 1,
    ("smoke", "smoke_run"): 1,
    ("promoter", "route_write"): 2,  # the canary's share, then the promotion
    ("promoter", "terminal_claim"): 1,
}
"""The side effects of one saga promoted straight after its smoke test: each once."""
