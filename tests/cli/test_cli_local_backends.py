"""Which local-backend processes ``plnt up`` keeps: every applied local PlntBackend, and
every backend a desired release or an observed record names (PlntBackends read from a
Kubernetes API are not in the stack's store; a deleted backend, or a release whose desired
record is gone, keeps its process until its runners are torn down)."""

import asyncio
from collections.abc import Callable

from plnt_cli.local_backends import LocalBackendsWatch, backends_to_run
from plnt_common.bus.bus import Bus
from plnt_common.releases import desired_key, observed_key


def test_applied_backends_and_those_records_name_get_a_process() -> None:
    assert backends_to_run(applied={"east"}, with_releases=set()) == {"east"}
    assert backends_to_run(applied=set(), with_releases={"gpu-cluster-01"}) == {"gpu-cluster-01"}
    assert backends_to_run(applied={"east"}, with_releases={"west", ""}) == {"east", "west"}
    assert backends_to_run(applied=set(), with_releases=set()) == set()


async def until(check: Callable[[], bool], what: str, timeout_s: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not check():
        assert asyncio.get_running_loop().time() < deadline, f"not within {timeout_s}s: {what}"
        await asyncio.sleep(0.05)


async def test_a_release_being_torn_down_keeps_its_backend_until_its_observed_record_goes(
    nats_url: str,
) -> None:
    """With PlntBackends read from a Kubernetes API, only the records name a backend: the
    process must outlive the desired record, or it is stopped in the middle of stopping
    the runner and leaves the runner's observed record behind."""
    bus = await Bus.open(nats_url, service="test")
    watch = LocalBackendsWatch(nats_url)
    watch.start()
    try:
        desired = desired_key("agents", "agents-review-responder-g2")
        observed = observed_key("agents", "agents-review-responder-g2")
        await bus.releases.put(desired, b'{"backend_name": "gpu-cluster-01"}')
        await bus.releases.put(observed, b'{"backend_name": "gpu-cluster-01"}')
        await until(lambda: watch.with_releases() == {"gpu-cluster-01"}, "the records are seen")

        await bus.releases.delete(desired)
        # a later write to the same watch: once it is seen, the deletion was seen too
        await bus.releases.put(desired_key("agents", "other-g1"), b'{"backend_name": "west"}')
        await until(lambda: "west" in watch.with_releases(), "a later record is seen")
        assert watch.with_releases() == {"gpu-cluster-01", "west"}

        await bus.releases.delete(observed)
        await until(lambda: watch.with_releases() == {"west"}, "the observed record's removal")
    finally:
        watch.stop()
        await bus.close()
