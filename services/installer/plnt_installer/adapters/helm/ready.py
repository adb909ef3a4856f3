"""A release's readiness, from its Deployment in the Kubernetes API (never ``helm --wait``).

Waiting polls without blocking the loop, bounded by the caller's timeout.
"""

import asyncio

from plnt_common.errors import InstallFailed, PlntError
from plnt_common.releases import ObservedRelease, ReleasePhase
from plnt_installer.adapters.helm.finding import Found, ReleaseFinder, Target, where
from plnt_installer.adapters.helm_values import release_url
from plnt_installer.readiness import judge
from plnt_installer.remediation import HelmStatus


async def wait_ready(
    finder: ReleaseFinder,
    target: Target,
    *,
    namespace: str,
    release: str,
    saga_id: str,
    timeout_s: float,
    poll_s: float,
) -> ObservedRelease:
    """Poll the Deployment until ready; ``InstallFailed`` naming what was observed."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    found = await finder.find(target, namespace=namespace, release=release)
    if found is None:
        raise InstallFailed(
            f"release {release} of namespace {namespace} is not installed on "
            f"PlntBackend {target.name}"
        )
    at = where(target, found.connection.namespace, release)
    if found.desired.saga_id != saga_id:
        raise InstallFailed(
            f"release {at} is desired by saga {found.desired.saga_id}, not {saga_id}"
        )
    if found.helm.status is HelmStatus.FAILED:
        raise InstallFailed(f"release {at} failed in Helm: {found.helm.description}")
    deployments = found.connection.deployments
    observed = "nothing observed"
    while True:
        try:
            state = await deployments.get(namespace=found.connection.namespace, name=release)
        except PlntError as exc:
            if not exc.retryable:  # e.g. forbidden: waiting longer cannot tell
                raise InstallFailed(f"release {at}: {exc}") from None
            observed = f"API unavailable: {exc}"  # keep polling until the deadline
        else:
            verdict = judge(state)
            observed = verdict.message
            if verdict.ready:
                return observed_release(found, ReleasePhase.READY, message=observed)
            if verdict.failed:
                raise InstallFailed(f"release {at} failed: {observed}")
        remaining = deadline - loop.time()
        if remaining <= 0:
            raise InstallFailed(f"release {at} was not ready after {timeout_s:g}s ({observed})")
        await asyncio.sleep(min(poll_s, remaining))


async def observe(found: Found) -> ObservedRelease:
    """What Helm and the Deployment say about ``found`` now."""
    status = found.helm.status
    if status is HelmStatus.FAILED:
        return observed_release(found, ReleasePhase.FAILED, message=found.helm.description)
    if status is not HelmStatus.DEPLOYED:
        return observed_release(found, ReleasePhase.STARTING, message=f"helm: {status.value}")
    state = await found.connection.deployments.get(
        namespace=found.connection.namespace, name=found.helm.name
    )
    verdict = judge(state)
    if verdict.ready:
        phase = ReleasePhase.READY
    else:
        phase = ReleasePhase.FAILED if verdict.failed else ReleasePhase.STARTING
    return observed_release(found, phase, message=verdict.message)


def observed_release(found: Found, phase: ReleasePhase, *, message: str) -> ObservedRelease:
    return ObservedRelease(
        namespace=found.desired.namespace,
        release=found.desired.release,
        run_name=found.desired.run_name,
        revision=found.desired.revision,
        saga_id=found.desired.saga_id,
        phase=phase,
        url=release_url(
            name=found.helm.name,
            namespace=found.connection.namespace,
            values=found.values,
            domain=found.target.service_domain,
        ),
        message=message,
    )
