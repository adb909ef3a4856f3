"""``python -m bench --only placement``: the installer's placement decision over many
backends, its throughput over three, and concurrent placements never overcommitting.

In this process, against a real nats-server: ``InstallerHandlers.place`` (the choice over a
run's acceptable backends in order, each backend's capacity read from ``plnt-capacity``
and its GPUs booked by compare-and-set) with the real local capacity source and store.
`local` backends declare their GPUs, so the figures are plnt's own work; a Kubernetes
backend adds the API server's list calls (at most once per 10 s per backend, by the
capacity observer, not per placement).
"""

import asyncio
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import cast

from bench.stats import percentile
from bench.table import Row, render
from plnt_common import subjects
from plnt_common.bus.bus import Bus
from plnt_common.bus.consumer import Delivery
from plnt_common.events import (
    BackendChoice,
    Envelope,
    EventType,
    RunSnapshot,
    SpecPulled,
    new_event,
)
from plnt_common.nats_server import NatsServer, free_port
from plnt_common.resources import PlntBackendSpec, WorkflowRunSpec
from plnt_installer.adapters.capacity_sources import LocalCapacitySource
from plnt_installer.adapters.capacity_store import CapacityStore
from plnt_installer.adapters.local_releases import LocalReleaseBackend
from plnt_installer.handlers import InstallerHandlers
from plnt_installer.placement import Placements

DECISION_TARGET_S = 1.0
RATE_TARGET = 100.0
CONCURRENCY = 16
"""Events one installer replica handles at once (its consumer's default)."""
SPEC = WorkflowRunSpec.model_validate(
    {
        "workflow": {"ref": "review-responder@1.2.0", "registry": "file:///registry"},
        "backend": {"gpuClass": "a100", "gpuCount": 1},
        "placement": {"backends": ["b00"]},
    }
)


class _Deferred:
    deferred = False

    def defer(self, seconds: float) -> None:
        self.deferred = True


def _backend(capacity: int) -> PlntBackendSpec:
    return PlntBackendSpec.model_validate(
        {
            "type": "local",
            "gpuClasses": {"a100": {"resourceName": "nvidia.com/gpu", "capacity": capacity}},
        }
    )


def _pulled(name: str, choices: list[BackendChoice]) -> Envelope:
    first, *rest = choices
    data = SpecPulled(
        run=RunSnapshot(namespace="default", name=name, generation=1, spec=SPEC),
        spec_digest="sha256:" + "0" * 64,
        workflow_name="review-responder",
        workflow_version="1.2.0",
        revision="1.2.0-g1",
        backend_name=first.backend_name,
        backend=first.backend,
        fallbacks=tuple(rest),
    )
    return new_event(
        EventType.SPEC_PULLED,
        data,
        namespace="default",
        name=name,
        sagaid=f"default.{name}.1.1",
        generation=1,
        source="bench",
    )


async def _place(handlers: InstallerHandlers, event: Envelope) -> tuple[str, float]:
    """The backend the run was placed on ("" when Pending) and the decision's seconds."""
    handed = _Deferred()
    started = time.perf_counter()
    placed = await handlers.place(event, event.payload(), cast(Delivery, handed))
    took = time.perf_counter() - started
    return ("" if placed is None else placed[0][0].backend_name), took


def _handlers(bus: Bus, placements: Placements) -> InstallerHandlers:
    return InstallerHandlers(
        bus=bus,
        backends={"local": LocalReleaseBackend(bus)},
        ready_timeout_s=10,
        uninstall_timeout_s=10,
        placements=placements,
    )


async def _book(bus: Bus) -> CapacityStore:
    return CapacityStore(await bus.js.key_value(subjects.CAPACITY_BUCKET))


async def placement_rows(tmp: Path, *, decisions: int = 50, rate_runs: int = 300) -> list[Row]:
    server = NatsServer(store_dir=tmp / "nats", port=free_port()).start()
    try:
        bus = await Bus.open(server.url, service="bench")
        try:
            book = await _book(bus)
            sources = {"local": LocalCapacitySource(nc=bus.nc)}
            handlers = _handlers(bus, Placements(sources=sources, book=book))
            return [
                await _decision_row(handlers, decisions),
                await _rate_row(handlers, rate_runs),
                await _overcommit_row(handlers, book),
            ]
        finally:
            await bus.close()
    finally:
        server.stop()


async def _decision_row(handlers: InstallerHandlers, decisions: int) -> Row:
    """50 backends, the first 49 full (their one GPU booked), the last with room: every
    decision reads all 50 and books on the last."""
    full = _backend(1)
    names = [f"d{i:02d}" for i in range(50)]
    for index, name in enumerate(names[:-1]):
        await _place(
            handlers, _pulled(f"filler-{index}", [BackendChoice(backend_name=name, backend=full)])
        )
    roomy = BackendChoice(backend_name=names[-1], backend=_backend(decisions))
    choices = [BackendChoice(backend_name=n, backend=full) for n in names[:-1]] + [roomy]
    seconds = []
    for index in range(decisions):
        where, took = await _place(handlers, _pulled(f"decided-{index}", choices))
        if where != names[-1]:
            raise RuntimeError(f"placement bench: run {index} placed on {where!r}, not {names[-1]}")
        seconds.append(took)
    p50, p99 = percentile(seconds, 0.5), percentile(seconds, 0.99)
    return Row.check(
        f"placement decision over 50 backends, 49 full ({decisions} runs one after another)",
        f"p50 {p50 * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms",
        "each: 50 capacity reads, a booking by compare-and-set",
        f"p99 ≤ {DECISION_TARGET_S:g} s",
        p99 <= DECISION_TARGET_S,
    )


async def _rate_row(handlers: InstallerHandlers, runs: int) -> Row:
    """Runs placed over three backends with room for all, as fast as one installer takes
    them: ``CONCURRENCY`` at a time (its consumer's default)."""
    choices = [BackendChoice(backend_name=f"r{i}", backend=_backend(runs)) for i in range(3)]
    slots = asyncio.Semaphore(CONCURRENCY)

    async def one(index: int) -> tuple[str, float]:
        rotated = choices[index % 3 :] + choices[: index % 3]
        async with slots:
            return await _place(handlers, _pulled(f"rate-{index}", rotated))

    started = time.perf_counter()
    placed = await asyncio.gather(*(one(i) for i in range(runs)))
    elapsed = time.perf_counter() - started
    if any(where == "" for where, _ in placed):
        raise RuntimeError("placement bench: a run with room left was made Pending")
    rate = runs / elapsed
    return Row.check(
        f"placements per second, {runs} over 3 backends, {CONCURRENCY} at a time (one installer)",
        f"{rate:,.0f}/s ({elapsed:.2f} s)",
        "MultiKueue publishes 97 to 102 jobs/s",
        f"≥ {RATE_TARGET:g}/s",
        rate >= RATE_TARGET,
    )


async def _overcommit_row(handlers: InstallerHandlers, book: CapacityStore) -> Row:
    """50 runs at once over 3 backends with 10 GPUs each: exactly 30 booked."""
    capacity = 10
    choices = [BackendChoice(backend_name=f"o{i}", backend=_backend(capacity)) for i in range(3)]
    placed = await asyncio.gather(
        *(_place(handlers, _pulled(f"over-{i}", choices)) for i in range(50))
    )
    booked = Counter(where for where, _ in placed if where)
    held = {}
    for choice in choices:
        reservations, _ = await book.reservations(choice.backend_name)
        held[choice.backend_name] = sum(r.gpus for r in reservations)
    over = sum(1 for count in held.values() if count > capacity)
    placed_count = sum(booked.values())
    spread = ", ".join(f"{name} {count}" for name, count in sorted(booked.items()))
    return Row.check(
        "50 runs at once on 3 backends of 10 GPUs: placed, Pending, overcommitted backends",
        f"{placed_count} placed ({spread}), {50 - placed_count} Pending, {over} overcommitted",
        "bookings per backend by compare-and-set",
        "0 overcommitted",
        over == 0 and placed_count == 3 * capacity,
    )


def placement_section() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        rows = asyncio.run(placement_rows(Path(tmp)))
    print(render("Placement", rows) + "\n")
