"""Pure decisions of the local backend over observed facts: start, adopt, restart, stop, give up.

Every function here maps values to a verdict: no processes, files, clocks, sockets or NATS.
The supervisor observes (is the pid alive? did /healthz answer? what is desired?), asks
these functions, and acts through adapters. Timing and waiting are not decided here
beyond computing a delay.
"""

import hashlib
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from plnt_common.releases import (
    DESIRED_PREFIX,
    OBSERVED_PREFIX,
    DesiredRelease,
    ObservedRelease,
    ReleasePhase,
)
from plnt_common.workflow import spec_digest
from plnt_local_backend.launch import LaunchFingerprint

_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
"""A DNS-1123 label: what namespaces and release names are, and safe as a directory name."""


@dataclass(frozen=True, order=True)
class ReleaseKey:
    """Identity of one release: its namespace and release name."""

    namespace: str
    release: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.release}"


def parse_release_key(key: str, *, prefix: str) -> ReleaseKey | None:
    """``<prefix>.<namespace>.<release>`` -> ``ReleaseKey``; None for any other key.

    Names must be DNS-1123 labels: they become directory names, so a key such as
    ``desired.ns.a/b`` (legal in NATS KV) must not reach the file system.
    """
    parts = key.split(".")
    if len(parts) != 3 or parts[0] != prefix:
        return None
    namespace, release = parts[1], parts[2]
    if not (_LABEL.match(namespace) and _LABEL.match(release)):
        return None
    return ReleaseKey(namespace=namespace, release=release)


def parse_desired_key(key: str) -> ReleaseKey | None:
    return parse_release_key(key, prefix=DESIRED_PREFIX)


def parse_observed_key(key: str) -> ReleaseKey | None:
    return parse_release_key(key, prefix=OBSERVED_PREFIX)


def launch_fingerprint(desired: DesiredRelease) -> LaunchFingerprint:
    """What of ``desired`` decides how its runner starts (not its role, not its saga)."""
    return LaunchFingerprint(
        spec_digest=desired.spec_digest,
        revision=desired.revision,
        workflow_name=desired.workflow_name,
        replicas=desired.replicas,
        gpu_class=desired.gpu_class,
        gpu_count=desired.gpu_count,
        llm=desired.llm,
    )


def spec_matches(*, digest: str, raw: bytes) -> bool:
    """True unless ``digest`` is a ``sha256:`` address that ``raw`` does not hash to.

    Object names in other schemes cannot be checked here and are trusted.
    """
    if not digest.startswith("sha256:"):
        return True
    return spec_digest(raw) == digest


# --- adoption at start-up -------------------------------------------------------------


@dataclass(frozen=True)
class FoundRunner:
    """What a pid file left by an earlier local-backend turned out to be."""

    alive: bool
    """The pid exists and is not a zombie."""
    group_leader: bool
    """The pid leads its own process group, as every runner does (own session)."""
    healthy: bool
    """GET /healthz on the recorded URL answered 200."""


class Adoption(StrEnum):
    ADOPT = "adopt"
    """Keep the live runner as this release's process instead of starting a duplicate."""
    KILL = "kill"
    """Ours, but not wanted: not desired any more, or alive without answering /healthz."""
    FORGET = "forget"
    """Dead, or the pid now belongs to some other process: drop the pid file, signal nothing."""


def adoption(*, desired: bool, found: FoundRunner) -> Adoption:
    """Decide what to do with a runner found on disk when supervision (re)starts."""
    if not (found.alive and found.group_leader):
        # A reused pid that is not a group leader cannot be a runner we started: never kill it.
        return Adoption.FORGET
    if desired and found.healthy:
        return Adoption.ADOPT
    return Adoption.KILL


# --- the steady state -----------------------------------------------------------------


@dataclass(frozen=True)
class RunnerView:
    """The supervisor's runner as decisions see it."""

    fingerprint: LaunchFingerprint
    ready: bool
    """/healthz answered since launch (or at adoption)."""


@dataclass(frozen=True)
class Failure:
    """The release gave up; it stays Failed while its desired record names the same launch."""

    fingerprint: LaunchFingerprint
    saga_id: str
    message: str
    reason: str = ""
    """A status reason when the cause has one (``CodeInvalid``, ``DependenciesFailed``)."""


def failure_applies(failure: Failure, desired: DesiredRelease) -> bool:
    """Only a different launch or a new saga revives a Failed release.

    A redelivered install of the same saga rewrites the same record; retrying for it would
    make ``wait_ready`` of that saga see Starting again instead of its verdict.
    """
    return failure.fingerprint == launch_fingerprint(desired) and failure.saga_id == desired.saga_id


def restored_failure(
    *, observed: ObservedRelease | None, desired: DesiredRelease | None
) -> Failure | None:
    """The failure an earlier local-backend reported for this very desired record, if any.

    Kept across a restart of the local-backend, so Failed means "until the desired record
    changes" rather than "until the next restart". The observed record carries revision
    and saga, not the whole fingerprint: those two identify the launch well enough.
    """
    if observed is None or desired is None or observed.phase is not ReleasePhase.FAILED:
        return None
    if (observed.saga_id, observed.revision) != (desired.saga_id, desired.revision):
        return None
    return Failure(
        fingerprint=launch_fingerprint(desired),
        saga_id=desired.saga_id,
        message=observed.message,
        reason=observed.reason,
    )


class Step(StrEnum):
    TEAR_DOWN = "tear_down"
    """Not desired: stop the runner, remove its directory, delete the observed record."""
    HOLD_FAILED = "hold_failed"
    """Gave up on this launch: report Failed and wait for a new desired record."""
    START = "start"
    """Nothing runs: fetch the spec and launch a runner (after any restart delay)."""
    REPLACE = "replace"
    """The runner serves another launch (spec, revision, LLM...): stop it first."""
    AWAIT_READY = "await_ready"
    """Launched, /healthz not answered yet."""
    SERVE = "serve"
    """Ready: report it and watch the process."""


def next_step(
    *, desired: DesiredRelease | None, failure: Failure | None, runner: RunnerView | None
) -> Step:
    """The one thing to do next for a release; ``runner`` is None when no live process is held."""
    if desired is None:
        return Step.TEAR_DOWN
    if runner is not None and runner.fingerprint != launch_fingerprint(desired):
        return Step.REPLACE
    if failure is not None and failure_applies(failure, desired):
        return Step.HOLD_FAILED
    if runner is None:
        return Step.START
    return Step.SERVE if runner.ready else Step.AWAIT_READY


# --- restarts -------------------------------------------------------------------------


def failures_in_a_row(*, previous: int, served_s: float | None, reset_after_s: float) -> int:
    """Failures in a row counting this one; ``served_s`` is how long the runner was Ready.

    A runner that served at least ``reset_after_s`` crashed after a healthy life, not in a
    crash loop: its exit starts a new streak.
    """
    if served_s is not None and served_s >= reset_after_s:
        return 1
    return previous + 1


def should_restart(*, failures_in_a_row: int, max_restarts: int) -> bool:
    """Restart until ``max_restarts`` restarts in a row have failed too."""
    return failures_in_a_row <= max_restarts


def restart_delay(*, failures_in_a_row: int, initial_s: float, max_s: float) -> float:
    """Exponential back-off: ``initial_s`` after one failure, doubling, at most ``max_s``."""
    exponent = max(0, failures_in_a_row - 1)
    # Cap the exponent too: 2.0 ** 2000 overflows a float.
    return min(max_s, initial_s * 2.0 ** min(exponent, 64))


def preferred_port(*, last_url: str, failures_in_a_row: int) -> int | None:
    """The port to start on again, so routes need not move: the last runner's, unless
    starting there already failed (then any free port)."""
    if failures_in_a_row > 1 or not last_url:
        return None
    port = last_url.rsplit(":", 1)[-1]
    return int(port) if port.isdigit() and 0 < int(port) < 65536 else None


# --- what is reported -----------------------------------------------------------------


def observed(
    *,
    key: ReleaseKey,
    desired: DesiredRelease,
    phase: ReleasePhase,
    url: str = "",
    pid: int = 0,
    restarts: int = 0,
    message: str = "",
    reason: str = "",
) -> ObservedRelease:
    """The observed record of ``key``: the saga and revision of ``desired``, which is what
    ``wait_ready`` matches. Names come from the key, the identity the installer wrote."""
    return ObservedRelease(
        namespace=key.namespace,
        release=key.release,
        run_name=desired.run_name,
        revision=desired.revision,
        saga_id=desired.saga_id,
        phase=phase,
        url=url,
        pid=pid,
        restarts=restarts,
        message=message,
        reason=reason,
        backend_name=desired.backend_name,
    )


def serves(*, backend: str | None, backend_name: str) -> bool:
    """Whether the process serving ``backend`` runs (or cleans up) a release installed onto
    ``backend_name``: its own only, so no release is run by two processes; a process without
    a backend (the single-process mode) runs every release."""
    return backend is None or backend_name == backend


# --- a workflow's own code -------------------------------------------------------------

PYTHON_NAMES = frozenset({"python", "python3"})
"""Entrypoint commands that mean "the code environment's interpreter"."""

_PIP_NAMING = (
    re.compile(r"No matching distribution found for (\S+)"),
    re.compile(r"Could not find a version that satisfies the requirement (\S+)"),
    re.compile(r"Failed building wheel for (\S+)"),
    re.compile(r"Failed to build (\S+)"),
    re.compile(r"Cannot install (.+?) because these package versions have conflicting"),
    re.compile(r"Invalid requirement: '?([^'\s]+)"),
)
"""pip's ways of naming the requirement it could not install, in the order they are tried."""


def env_name(*, digest: str, requirements: Sequence[str], constraints: str, python: str) -> str:
    """The directory name of a code environment: the code's digest (hex) and a short hash of
    what else makes the environment, so a change to the requirements, to plnt's pinned
    packages or to the interpreter gets an environment of its own."""
    made_of = "\n".join([*requirements, "--", constraints, "--", python])
    return f"{digest.removeprefix('sha256:')}-{hashlib.sha256(made_of.encode()).hexdigest()[:12]}"


def pip_install_args(*, constraints_file: str, requirements: Sequence[str]) -> list[str]:
    """The arguments after ``python -m pip`` that install ``requirements`` against plnt's
    pinned packages. The user's pip configuration (files, ``PIP_*``) applies as usual."""
    return [
        "install",
        "--disable-pip-version-check",
        "--no-input",
        "--constraint",
        constraints_file,
        *requirements,
    ]


def failed_requirement(*, output: str, requirements: Sequence[str]) -> str:
    """The requirement pip could not install, read from its output: the user's own string
    when pip names one of them (or a dependency's name when it names another); every
    requirement when the output names none."""
    by_name: dict[str, str] = {}
    for text in requirements:
        try:
            by_name[canonicalize_name(Requirement(text).name)] = text
        except InvalidRequirement:
            continue
    for pattern in _PIP_NAMING:
        found = pattern.search(output)
        if found is None:
            continue
        named = found.group(1).strip("'\".,")
        name = re.split(r"[\s\[<>=!~;@(]", named, maxsplit=1)[0]
        return by_name.get(canonicalize_name(name), named)
    return ", ".join(requirements)


def pip_failure(*, output: str, requirements: Sequence[str], exit_code: int) -> str:
    """The message of ``DependenciesFailed``: the requirement, then pip's own last error."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("ERROR:")]
    detail = errors[-1] if errors else f"pip exited with code {exit_code}"
    kept = [
        line.removeprefix(_CONSTRAINT).strip() for line in lines if line.startswith(_CONSTRAINT)
    ]
    if kept:
        detail += f" (plnt keeps {', '.join(kept)})"
    return (
        f"pip could not install {failed_requirement(output=output, requirements=requirements)}: "
        f"{detail[:500]}"
    )


_CONSTRAINT = "The user requested (constraint)"
"""How pip quotes a constraints file's line in a conflict: plnt's pinned packages."""


def requirements_count(count: int) -> str:
    return f"{count} requirement" if count == 1 else f"{count} requirements"


def entrypoint_command(entrypoint: str, *, python: str) -> list[str]:
    """``runtime.entrypoint`` as argv, ``python`` (or ``python3``) meaning the code
    environment's interpreter; raises ``ValueError`` for an empty or unbalanced command."""
    argv = shlex.split(entrypoint)
    if not argv:
        raise ValueError("runtime.entrypoint is empty")
    if argv[0] in PYTHON_NAMES:
        argv[0] = python
    return argv


def last_lines(text: str, *, count: int = 5, max_chars: int = 600) -> str:
    """The last ``count`` non-empty lines of ``text``, joined with " | ", the end kept when
    longer than ``max_chars``."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    joined = " | ".join(lines[-count:])
    return joined if len(joined) <= max_chars else "…" + joined[-max_chars:]
