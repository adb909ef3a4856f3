"""Whether a canary fits its gpuClass's declared ``capacity``: a pure decision.

``PlntBackend.spec.gpuClasses.<class>.capacity`` is how many GPUs of the class plnt's own
releases on that backend may hold at once; 0 (the default) means "not declared" and is not
enforced. A release holds ``gpuCount`` GPUs per replica at its minimum replica count (what
it is installed with; an autoscaler growing it later is not foreseen here). A run's stable
and canary both count while both run. Other workloads on the cluster are not seen: the
capacity is plnt's share, not the cluster's.
"""

from collections.abc import Iterable

from plnt_common.releases import DesiredRelease
from plnt_common.resources import PlntBackendSpec


def gpus_held(release: DesiredRelease) -> int:
    return release.gpu_count * release.replicas


def capacity_refusal(
    *,
    canary: DesiredRelease,
    held: Iterable[DesiredRelease],
    backend_name: str,
    backend: PlntBackendSpec,
) -> str | None:
    """Why ``canary`` may not be installed beside ``held`` (every plnt release on the
    backend); None when it fits, or its class declares no capacity.

    ``canary`` itself in ``held`` (a redelivered install) is not counted twice.
    """
    gpu_class = canary.gpu_class
    needed = gpus_held(canary)
    declared = backend.gpu_classes.get(gpu_class) if gpu_class else None
    if declared is None or declared.capacity == 0 or needed == 0:
        return None
    in_use = sum(
        gpus_held(release)
        for release in held
        if release.gpu_class == gpu_class
        and (release.namespace, release.release) != (canary.namespace, canary.release)
    )
    free = max(0, declared.capacity - in_use)
    if needed <= free:
        return None
    return (
        f"PlntBackend {backend_name!r} gpuClass {gpu_class!r}: the canary needs {needed} "
        f"GPUs ({canary.gpu_count} x {canary.replicas} replicas), {free} of capacity "
        f"{declared.capacity} are free ({in_use} held by plnt's releases)"
    )
