"""Lease leader election: the pure rules, then two electors against the API emulator."""

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest

from plnt_testkit.kube_emulator import LEASES, KubeEmulator
from plnt_watcher.adapters.kube_api import KubernetesUnavailable, connect
from plnt_watcher.adapters.lease import KubernetesLeaseStore
from plnt_watcher.leader import LeaderElector, LeaseRecord, claim, may_take

NOW = datetime(2030, 1, 1, tzinfo=UTC)
DURATION_S, RENEW_DEADLINE_S, RETRY_S = 2.0, 1.2, 0.2


# --- pure rules ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("current", "observed_at", "now", "expected"),
    [
        (None, 0.0, 0.0, True),
        (LeaseRecord(holder="", duration_s=15), 0.0, 0.0, True),
        (LeaseRecord(holder="me", duration_s=15), 0.0, 0.0, True),
        (LeaseRecord(holder="other", duration_s=15), 100.0, 114.9, False),
        (LeaseRecord(holder="other", duration_s=15), 100.0, 115.0, True),
    ],
    ids=[
        "no-lease-yet",
        "released-lease",
        "own-lease-is-renewed",
        "held-by-another-within-its-duration",
        "held-by-another-whose-claim-has-not-changed-for-its-duration",
    ],
)
def test_may_take(
    current: LeaseRecord | None, observed_at: float, now: float, expected: bool
) -> None:
    assert may_take(current, identity="me", observed_at=observed_at, now=now) is expected


def test_taking_over_counts_a_transition_and_renewing_does_not() -> None:
    theirs = LeaseRecord(
        holder="other", duration_s=15, acquired_at=NOW, renewed_at=NOW, transitions=3, version="9"
    )
    taken = claim(theirs, identity="me", duration_s=10, now=NOW)
    renewed = claim(taken, identity="me", duration_s=10, now=NOW.replace(year=2031))

    assert (taken.holder, taken.transitions, taken.acquired_at, taken.version) == (
        "me",
        4,
        NOW,
        "9",
    )
    assert (renewed.transitions, renewed.acquired_at) == (4, NOW)
    assert renewed.renewed_at == NOW.replace(year=2031)


def test_timing_must_keep_the_leader_stepping_down_before_the_lease_expires() -> None:
    with pytest.raises(ValueError, match="retry period < renew deadline < duration"):
        LeaderElector(
            store=None,  # type: ignore[arg-type]
            identity="x",
            lease_duration_s=5,
            renew_deadline_s=5,
            retry_period_s=1,
        )


# --- against the emulator -----------------------------------------------------------------


class FlakyStore:
    """A LeaseStore whose calls fail while ``cut`` is set, like a partitioned replica."""

    def __init__(self, inner: KubernetesLeaseStore) -> None:
        self.inner = inner
        self.cut = False

    def _check(self) -> None:
        if self.cut:
            raise KubernetesUnavailable("partitioned")

    async def get(self) -> LeaseRecord | None:
        self._check()
        return await self.inner.get()

    async def create(self, record: LeaseRecord) -> LeaseRecord:
        self._check()
        return await self.inner.create(record)

    async def update(self, record: LeaseRecord) -> LeaseRecord:
        self._check()
        return await self.inner.update(record)


class Replica:
    """One elector whose leader body records when it runs."""

    def __init__(self, name: str, kubeconfig: Path) -> None:
        api = connect(kubeconfig=str(kubeconfig), context="", user_agent=f"plnt-watcher/{name}")
        self.store = FlakyStore(
            KubernetesLeaseStore(
                api=api, name="plnt-watcher", namespace="default", request_timeout_s=5
            )
        )
        self.elector = LeaderElector(
            store=self.store,
            identity=name,
            lease_duration_s=DURATION_S,
            renew_deadline_s=RENEW_DEADLINE_S,
            retry_period_s=RETRY_S,
        )
        self.name = name
        self.running = False
        self.terms = 0
        self.stop = asyncio.Event()
        self.task: asyncio.Task[None] | None = None

    async def _lead(self) -> None:
        self.running, self.terms = True, self.terms + 1
        try:
            await asyncio.Event().wait()
        finally:
            self.running = False

    def start(self) -> None:
        self.task = asyncio.create_task(self.elector.run(self.stop, self._lead))

    async def halt(self) -> None:
        self.stop.set()
        assert self.task is not None
        await asyncio.wait_for(self.task, 10)


@pytest.fixture
async def replicas(kubeconfig: Path) -> AsyncIterator[tuple[Replica, Replica]]:
    pair = (Replica("replica-a", kubeconfig), Replica("replica-b", kubeconfig))
    for replica in pair:
        replica.start()
    yield pair
    for replica in pair:
        replica.stop.set()
        if replica.task is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(replica.task, 10)


async def watch_leaders(
    pair: tuple[Replica, Replica], until: Callable[[], bool], *, timeout_s: float
) -> None:
    """Wait for ``until``, failing at once if both replicas ever run the body together."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not until():
        assert not (pair[0].running and pair[1].running), "two leaders at once"
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.02)


async def never_two_leaders(pair: tuple[Replica, Replica], *, seconds: float) -> None:
    """Sample for ``seconds``, failing if both replicas ever run the body together."""
    deadline = asyncio.get_running_loop().time() + seconds
    while asyncio.get_running_loop().time() < deadline:
        assert not (pair[0].running and pair[1].running), "two leaders at once"
        await asyncio.sleep(0.02)


def holder(emulator: KubeEmulator) -> str:
    leases = emulator.objects(LEASES, "default")
    return str(leases[0]["spec"].get("holderIdentity") or "") if leases else ""


def one_leader(pair: tuple[Replica, Replica]) -> Replica | None:
    running = [r for r in pair if r.running]
    return running[0] if len(running) == 1 else None


async def test_two_electors_make_exactly_one_leader_that_holds_the_lease(
    replicas: tuple[Replica, Replica], emulator: KubeEmulator
) -> None:
    await watch_leaders(replicas, lambda: one_leader(replicas) is not None, timeout_s=5)
    leader = one_leader(replicas)
    assert leader is not None
    await never_two_leaders(replicas, seconds=DURATION_S * 1.5)  # renewals keep it

    assert one_leader(replicas) is leader and leader.terms == 1
    assert holder(emulator) == leader.name
    assert leader.elector.leading
    lease = emulator.objects(LEASES, "default")[0]
    assert lease["spec"]["leaseDurationSeconds"] == int(DURATION_S)


async def test_a_leader_that_stops_renewing_steps_down_and_the_follower_takes_over(
    replicas: tuple[Replica, Replica], emulator: KubeEmulator
) -> None:
    await watch_leaders(replicas, lambda: one_leader(replicas) is not None, timeout_s=5)
    leader = one_leader(replicas)
    assert leader is not None
    follower = next(r for r in replicas if r is not leader)

    cut_at = asyncio.get_running_loop().time()
    leader.store.cut = True
    await watch_leaders(replicas, lambda: not leader.running, timeout_s=5)
    stepped_down_after = asyncio.get_running_loop().time() - cut_at
    await watch_leaders(replicas, lambda: follower.running, timeout_s=10)
    taken_after = asyncio.get_running_loop().time() - cut_at

    assert stepped_down_after < DURATION_S  # before anyone else may start
    assert taken_after >= DURATION_S - RETRY_S  # not before the lease could expire
    assert holder(emulator) == follower.name
    lease = emulator.objects(LEASES, "default")[0]
    assert lease["spec"]["leaseTransitions"] == 1

    leader.store.cut = False  # back from the partition: it stays a follower
    await never_two_leaders(replicas, seconds=DURATION_S)
    assert follower.running and not leader.running


async def test_a_leader_that_stops_cleanly_releases_so_the_follower_takes_over_at_once(
    replicas: tuple[Replica, Replica], emulator: KubeEmulator
) -> None:
    await watch_leaders(replicas, lambda: one_leader(replicas) is not None, timeout_s=5)
    leader = one_leader(replicas)
    assert leader is not None
    follower = next(r for r in replicas if r is not leader)

    stopped_at = asyncio.get_running_loop().time()
    await leader.halt()
    assert not leader.running
    await watch_leaders(replicas, lambda: follower.running, timeout_s=5)

    assert asyncio.get_running_loop().time() - stopped_at < DURATION_S
    assert holder(emulator) == follower.name


async def test_a_leader_that_finds_the_lease_taken_stops_at_once(
    replicas: tuple[Replica, Replica], emulator: KubeEmulator, kubeconfig: Path
) -> None:
    await watch_leaders(replicas, lambda: one_leader(replicas) is not None, timeout_s=5)
    leader = one_leader(replicas)
    assert leader is not None
    # An operator (or a replica that judged the lease expired) writes another holder.
    store = KubernetesLeaseStore(
        api=connect(kubeconfig=str(kubeconfig), context="", user_agent="intruder"),
        name="plnt-watcher",
        namespace="default",
        request_timeout_s=5,
    )
    current = await store.get()
    assert current is not None
    await store.update(claim(current, identity="intruder", duration_s=60, now=datetime.now(UTC)))

    await watch_leaders(replicas, lambda: not leader.running, timeout_s=RENEW_DEADLINE_S)
    await never_two_leaders(replicas, seconds=RETRY_S * 3)
    assert not any(r.running for r in replicas)
    assert holder(emulator) == "intruder"
