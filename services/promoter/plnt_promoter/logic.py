"""Pure promotion decisions over the route table; imports no I/O library."""

from collections.abc import Mapping
from datetime import datetime
from enum import StrEnum

from plnt_common.events import CanaryRef, SmokeVerdict
from plnt_common.releases import ObservedRelease, ReleasePhase, release_of_revision
from plnt_common.routes import BackendEndpoint, RouteEntry, RouteTarget
from plnt_common.saga import SagaState
from plnt_common.status import ServingReason


class Verdict(StrEnum):
    PROMOTE = "promote"
    """Move all traffic to the canary and end the saga Ready."""
    ALREADY_PROMOTED = "already-promoted"
    """A redelivery after promotion: publish run.ready again (deduplicated)."""
    RESTORE = "restore"
    """Take the canary out of the route and ask the installer to remove it."""
    WAIT = "wait"
    """The canary is not in the route yet: retry later."""
    IGNORE = "ignore"
    """The saga already ended: nothing to do."""


def endpoint_url(public_url: str, namespace: str, name: str) -> str:
    base = public_url.rstrip("/")
    if namespace == "default":
        return f"{base}/workflows/{name}/invoke"
    return f"{base}/namespaces/{namespace}/workflows/{name}/invoke"


def target(canary: CanaryRef, saga_id: str) -> RouteTarget:
    """The canary's route target; placed on several backends it lists one endpoint each."""
    endpoints = [
        BackendEndpoint(backend=copy.backend, url=copy.url, release=copy.release)
        for copy in canary.spread
    ]
    if endpoints:
        first = BackendEndpoint(backend=canary.backend, url=canary.url, release=canary.release)
        endpoints.insert(0, first)
    return RouteTarget(
        revision=canary.revision,
        url=canary.url,
        saga_id=saga_id,
        release=canary.release,
        endpoints=endpoints,
    )


def walk_of(canary: CanaryRef, steps: tuple[int, ...], entry: RouteEntry | None) -> tuple[str, ...]:
    """The backends a stepped canary on several of them walks, in order; () when its
    copies take the canary's share at once (one backend, no steps, no stable to judge
    beside: see ``canary_walk``). A walk the installer started (``canary.walk``) is
    followed as it was decided: its later copies are installed in turn."""
    if canary.walk:
        return canary.walk
    if not canary.spread or not steps_apply(steps, entry):
        return ()
    return (canary.backend, *(copy.backend for copy in canary.spread))


def copy_target(canary: CanaryRef, saga_id: str, backend: str) -> RouteTarget:
    """The route target of the canary's copy on ``backend`` alone."""
    copies = [(canary.backend, canary.url, canary.release)]
    copies += [(c.backend, c.url, c.release) for c in canary.spread]
    for on, url, release in copies:
        if on == backend:
            return RouteTarget(revision=canary.revision, url=url, saga_id=saga_id, release=release)
    raise ValueError(f"the canary has no copy on {backend!r}")


def walked_to(
    entry: RouteEntry | None, *, saga_id: str, copy: RouteTarget, weight: int, walk: list[str]
) -> RouteEntry | None:
    """The route with this saga's canary on ``copy`` at ``weight``; None (no write) when it
    is not this saga's, or is further on the walk already (a redelivered earlier step).
    ``walk``: the copies' releases in walk order. On the same copy weights only rise."""
    if entry is None or entry.canary is None or entry.canary.saga_id != saga_id:
        return None
    if entry.stable is None:
        return None
    at, to = walk.index(entry.canary.release), walk.index(copy.release)
    if to < at or (to == at and entry.canary_weight >= weight):
        return None
    return entry.model_copy(
        update={"canary": copy if to > at else entry.canary, "canary_weight": weight}
    )


def smoke_failure_message(verdict: SmokeVerdict) -> str:
    """Why the smoke test failed, naming the walked copy's backend (a contract miss on a
    spread canary names it already)."""
    reason = verdict.figures.reason
    if verdict.backend and not reason.startswith("on PlntBackend"):
        return f"on PlntBackend {verdict.backend}: {reason}"
    return reason


def walk_releases(canary: CanaryRef, saga_id: str, walk: tuple[str, ...]) -> list[str]:
    """The releases of the walk's copies installed so far, in walk order (a walked
    install installs them in that order, so the list is a prefix of the walk)."""
    installed = canary.copies()
    return [copy_target(canary, saga_id, b).release for b in walk if b in installed]


def segment_start(steps: tuple[int, ...], walk: tuple[str, ...], backend: str) -> int:
    """The first step (numbered across the walk) of ``backend``'s copy."""
    return walk.index(backend) * len(steps) + 1


def with_every_copy(entry: RouteEntry, canary: CanaryRef, saga_id: str) -> RouteEntry:
    """The route with the canary's target listing every copy again (a walk routed one)."""
    if not canary.spread or entry.canary is None or entry.canary.endpoints:
        return entry
    return entry.model_copy(update={"canary": target(canary, saga_id)})


def with_canary(
    entry: RouteEntry | None,
    *,
    namespace: str,
    name: str,
    canary: RouteTarget,
    traffic_percent: int,
    endpoint: str,
) -> RouteEntry | None:
    """Add the canary; it takes traffic only beside a stable revision, never unproven alone.

    None (no change) when this saga's canary was already restored (the restore won the
    race), already routed, or already promoted: a ``canary.installed`` redelivered after
    its saga moved on (a promoter killed before its ack) must not reset a stepped weight or
    put a promoted revision back as a canary beside itself.
    """
    if entry is not None and entry.restored_saga_id == canary.saga_id:
        return None
    if entry is not None and any(
        routed is not None
        and (routed.saga_id, routed.revision) == (canary.saga_id, canary.revision)
        for routed in (entry.canary, entry.stable)
    ):
        return None
    stable = entry.stable if entry else None
    return RouteEntry(
        namespace=namespace,
        name=name,
        endpoint=entry.endpoint if entry and entry.endpoint else endpoint,
        stable=stable,
        canary=canary,
        canary_weight=traffic_percent if stable is not None else 0,
    )


def decide_on_pass(state: SagaState, entry: RouteEntry | None, saga_id: str) -> Verdict:
    if state is SagaState.ENDED:
        return Verdict.IGNORE
    if state is SagaState.SUPERSEDED:
        return Verdict.RESTORE
    if entry is not None and entry.canary is not None and entry.canary.saga_id == saga_id:
        return Verdict.PROMOTE
    if entry is not None and entry.stable is not None and entry.stable.saga_id == saga_id:
        return Verdict.ALREADY_PROMOTED
    return Verdict.WAIT


def steps_apply(steps: tuple[int, ...], entry: RouteEntry | None) -> bool:
    """Stepped delivery needs steps and a stable revision to judge the canary beside.

    A first rollout has nothing else serving: it is promoted after the smoke test.
    """
    return bool(steps) and entry is not None and entry.stable is not None


def at_step_weight(entry: RouteEntry | None, *, saga_id: str, weight: int) -> RouteEntry | None:
    """The route with this saga's canary at ``weight``; None (no write) when it is not.

    Weights only rise within a saga (the steps ascend), so a redelivered earlier step can
    never pull a later step's weight back down.
    """
    if entry is None or entry.canary is None or entry.canary.saga_id != saga_id:
        return None
    if entry.stable is None or entry.canary_weight >= weight:
        return None
    return entry.model_copy(update={"canary_weight": weight})


def canary_is_routed(entry: RouteEntry | None, saga_id: str) -> bool:
    return entry is not None and entry.canary is not None and entry.canary.saga_id == saga_id


def promoted_by(entry: RouteEntry | None, saga_id: str) -> bool:
    """This saga's canary is the stable revision: its promotion is in the route."""
    return entry is not None and entry.stable is not None and entry.stable.saga_id == saga_id


def promoted(entry: RouteEntry, endpoint: str) -> RouteEntry:
    """All traffic on the canary, which becomes the stable revision."""
    return entry.model_copy(
        update={
            "stable": entry.canary,
            "canary": None,
            "canary_weight": 0,
            "endpoint": endpoint,
            "shadow": None,  # promoted while shadowing (promote --full): mirroring ends
        }
    )


def replaced(
    entry: RouteEntry, endpoint: str, canary: CanaryRef, lost: tuple[str, ...]
) -> RouteEntry:
    """A replacement's canary promoted: the stable's copies on the backends not ``lost``
    keep serving beside the new ones, in one target."""
    after = promoted(entry, endpoint)
    survivors = [
        e for e in (entry.stable.endpoints if entry.stable else []) if e.backend not in lost
    ]
    if not survivors or after.stable is None:
        return after
    new = after.stable.endpoints or [
        BackendEndpoint(backend=canary.backend, url=canary.url, release=canary.release)
    ]
    endpoints = [*survivors, *new]
    serving = [e for e in endpoints if e.serving]
    stable = after.stable.model_copy(
        update={"endpoints": endpoints, "url": (serving or endpoints)[0].url}
    )
    return after.model_copy(update={"stable": stable})


def without_canary(
    entry: RouteEntry | None, *, namespace: str, name: str, saga_id: str
) -> RouteEntry:
    """Canary weight back to 0 when the canary is this saga's; the stable is untouched.

    The saga is remembered as restored so a canary.installed handled late cannot re-add it.
    """
    current = entry or RouteEntry(namespace=namespace, name=name)
    if current.canary is not None and current.canary.saga_id == saga_id:
        current = current.model_copy(update={"canary": None, "canary_weight": 0})
    if current.shadow is not None and current.shadow.saga_id == saga_id:
        current = current.model_copy(update={"shadow": None})  # nothing left to mirror to
    return current.model_copy(update={"restored_saga_id": saga_id})


# --- routes follow what serves ----------------------------------------------------------


def followed(
    entry: RouteEntry, observed: Mapping[str, ObservedRelease], *, now: datetime
) -> RouteEntry:
    """``entry`` with each target at its release's observed address and readiness.

    ``observed``: the entry's namespace's observed records by release name. A target whose
    release reports nothing (or another revision) is left as it is: no news is not an
    outage, and a record of an earlier install must not move a newer route.
    """
    stable = entry.stable and _followed(entry, entry.stable, observed, now)
    canary = entry.canary and _followed(entry, entry.canary, observed, now)
    if stable == entry.stable and canary == entry.canary:
        return entry
    return entry.model_copy(update={"stable": stable, "canary": canary})


def stepped_back(before: RouteEntry, after: RouteEntry) -> list[str]:
    """Releases ``after`` marks not serving that ``before`` had serving (a target's, or one
    of its endpoints')."""
    down = []
    for old, new in ((before.stable, after.stable), (before.canary, after.canary)):
        if old is None or new is None:
            continue
        if old.serving and not new.serving:
            down.append(
                old.release or release_of_revision(before.namespace, before.name, old.revision)
            )
        down.extend(
            was.release
            for was, now in zip(old.endpoints, new.endpoints, strict=False)
            if was.serving and not now.serving and was.release not in down
        )
    return down


def _followed(
    entry: RouteEntry, target: RouteTarget, observed: Mapping[str, ObservedRelease], now: datetime
) -> RouteTarget:
    if target.endpoints:
        return _followed_endpoints(target, observed, now)
    release = target.release or release_of_revision(entry.namespace, entry.name, target.revision)
    update = _observed_update(release, target.revision, observed)
    if update is None:
        return target
    update["release"] = release
    if update["serving"] != target.serving:
        update["since"] = now
    return target.model_copy(update=update)


def _followed_endpoints(
    target: RouteTarget, observed: Mapping[str, ObservedRelease], now: datetime
) -> RouteTarget:
    """Each endpoint at its release's observed address and readiness; the target serves
    while any endpoint does, its ``url`` the first serving endpoint's (what a router that
    reads ``url`` alone calls)."""
    endpoints = []
    for endpoint in target.endpoints:
        update = _observed_update(endpoint.release, target.revision, observed)
        if update is not None:
            update.pop("message")
            endpoint = endpoint.model_copy(update=update)
        endpoints.append(endpoint)
    if endpoints == target.endpoints:
        return target
    serving = [e for e in endpoints if e.serving]
    changed: dict[str, object] = {
        "endpoints": endpoints,
        "url": (serving or endpoints)[0].url,
        "serving": bool(serving),
        "reason": "" if serving else endpoints[0].reason,
    }
    if bool(serving) != target.serving:
        changed["since"] = now
    return target.model_copy(update=changed)


def _observed_update(
    release: str, revision: str, observed: Mapping[str, ObservedRelease]
) -> dict[str, object] | None:
    """What the release's observed record says of a target at ``revision``: its address
    and readiness; None when it reports nothing (or another revision)."""
    seen = observed.get(release)
    if seen is None or seen.revision != revision:
        return None
    if seen.phase is ReleasePhase.READY and seen.url:
        return {"url": seen.url, "serving": True, "reason": "", "message": ""}
    failed = seen.phase is ReleasePhase.FAILED
    reason = ServingReason.RUNNER_FAILED if failed else ServingReason.RUNNER_STARTING
    return {"serving": False, "reason": seen.reason or reason, "message": seen.message}
