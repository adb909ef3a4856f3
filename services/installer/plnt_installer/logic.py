"""Pure installer decisions: what to install, what to retire, how a failed saga ends.

Imports no I/O library; handlers observe, call these, then act through the port.
"""

import itertools

from plnt_common.events import EventType, SpecPulled
from plnt_common.projection import saga_order
from plnt_common.releases import (
    DesiredRelease,
    LlmConfig,
    ReleaseRole,
    release_name,
    spread_release_name,
)
from plnt_common.resources import PlacementEntry, PlntBackendSpec
from plnt_common.status import Reason

INSTALL_REASONS = frozenset({Reason.CODE_INVALID, Reason.DEPENDENCIES_FAILED})
"""Reasons a backend may give for a failed install instead of the generic InstallFailed."""


def desired_canary(data: SpecPulled, *, saga_id: str, spread: bool = False) -> DesiredRelease:
    """The canary on ``data.backend_name``. Its release name says the backend when it is
    a further copy of ``spec.placement.spread`` (``spread``) or the replacement of a lost
    copy: the generation's plain name is held on the lost backend."""
    run = data.run
    llm = data.backend.llm
    release = (
        spread_release_name(run.namespace, run.name, run.generation, data.backend_name)
        if spread or data.replacing()
        else release_name(run.namespace, run.name, run.generation)
    )
    return DesiredRelease(
        namespace=run.namespace,
        run_name=run.name,
        release=release,
        revision=data.revision,
        role=ReleaseRole.CANARY,
        saga_id=saga_id,
        spec_digest=data.spec_digest,
        workflow_name=data.workflow_name,
        replicas=max(1, run.spec.replicas.min),
        gpu_class=run.spec.backend.gpu_class,
        gpu_count=run.spec.backend.gpu_count,
        backend_name=data.backend_name,
        llm=LlmConfig(
            base_url=llm.base_url,
            model=llm.model,
            api_key_env=llm.api_key_env,
            input_price_per_mtok_usd=llm.input_price_per_mtok_usd or 0.0,
            output_price_per_mtok_usd=llm.output_price_per_mtok_usd or 0.0,
            structured_outputs=llm.structured_outputs,
        )
        if llm
        else LlmConfig(),
    )


def walk_placement(
    placement: tuple[PlacementEntry, ...], walk: tuple[str, ...]
) -> tuple[PlacementEntry, ...]:
    """The placement of a walk's start: each later backend still Installing, saying when
    the walk reaches it."""
    waits = {
        later: f"walk {index + 2}/{len(walk)}: installed once {earlier}'s steps pass"
        for index, (earlier, later) in enumerate(itertools.pairwise(walk))
    }
    return tuple(
        entry.model_copy(update={"reason": waits[entry.backend]})
        if entry.state == "Installing" and entry.backend in waits
        else entry
        for entry in placement
    )


def walk_reached(placement: tuple[PlacementEntry, ...], backend: str) -> tuple[PlacementEntry, ...]:
    """The placement once the walk installed ``backend``'s copy."""
    return tuple(
        entry.model_copy(update={"reason": ""})
        if entry.backend == backend and entry.state == "Installing"
        else entry
        for entry in placement
    )


def stable_revision(releases: list[DesiredRelease], *, excluding_saga: str = "") -> str:
    """The promoted revision still serving, if any."""
    for release in releases:
        if release.role is ReleaseRole.STABLE and release.saga_id != excluding_saga:
            return release.revision
    return ""


def retire_after_promotion(
    releases: list[DesiredRelease], *, promoted_saga: str
) -> list[DesiredRelease]:
    """Releases older than the promoted saga; a newer saga's canary in flight is kept."""
    promoted = saga_order(promoted_saga)
    return [r for r in releases if r.saga_id != promoted_saga and saga_order(r.saga_id) < promoted]


def after_promotion(
    releases: list[DesiredRelease],
    *,
    promoted_saga: str,
    previous_revision: str,
    keep: bool,
    replaced: tuple[str, ...] = (),
) -> tuple[list[DesiredRelease], DesiredRelease | None]:
    """(what to retire now, the previous stable kept at 0 % for a rollback, if ``keep``).
    A replacement (``replaced``: the backends whose copy was lost) retires only those
    copies: the older saga's copies on other backends keep serving beside it."""
    older = retire_after_promotion(releases, promoted_saga=promoted_saga)
    if replaced:
        older = [r for r in older if r.backend_name in replaced]
    kept = next((r for r in older if keep and r.revision == previous_revision), None)
    return [r for r in older if r is not kept], kept


def reverted_since(promoted_saga: str, latest_saga: str) -> bool:
    """A later attempt of the promoted saga's generation is recorded: a revert (or the
    deletion, which removes every release itself)."""
    generation, attempt = saga_order(promoted_saga)
    if not latest_saga:
        return False
    latest_generation, latest_attempt = saga_order(latest_saga)
    return latest_generation == generation and latest_attempt > attempt


def failure_terminal(stable: str) -> EventType:
    """A failed canary ends rolled back when a stable revision serves, else failed."""
    return EventType.RUN_ROLLED_BACK if stable else EventType.RUN_FAILED


def install_failure_reason(reported: str) -> Reason:
    """The reason of ``install.failed``: the backend's own when it is one the status
    vocabulary gives installs (the workflow's code or its requirements), else
    ``InstallFailed``."""
    try:
        reason = Reason(reported)
    except ValueError:
        return Reason.INSTALL_FAILED
    return reason if reason in INSTALL_REASONS else Reason.INSTALL_FAILED


def ready_timeout(
    backend: PlntBackendSpec, *, backend_name: str, cap_s: float | None
) -> tuple[float, str]:
    """How long a canary may take to serve, and where that figure comes from: the
    backend's ``spec.readyTimeout``, bounded by the installer's optional cap."""
    own = backend.ready_timeout_s
    if cap_s is not None and cap_s < own:
        return cap_s, f"PLNT_INSTALLER_READY_TIMEOUT_S ({cap_s:g}s, a cap below the backend's)"
    return own, f"spec.readyTimeout of PlntBackend {backend_name} ({backend.ready_timeout})"
