"""The puller's decisions, as pure functions: no I/O, no nats, no boto3, no clock.

What it decides: whether a saga step runs at all (``saga_gate``), whether the fetched
bytes are the pinned ones and a valid Workflow of the referenced name and version,
whether the named backend can serve the run, and which outcome event an error leads to
(``failure_for``, ``failure_after_exhaustion``). What it does not do: fetch, store or
publish anything; ``handlers`` act on these answers.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from plnt_common.code_archive import check_archive
from plnt_common.errors import (
    BackendNotAllowed,
    BackendUnavailable,
    CodeInvalid,
    IntegrityMismatch,
    PlntError,
    PullSecretInvalid,
    RegistryUnavailable,
    SignatureInvalid,
    SignatureMissing,
    SpecInvalid,
)
from plnt_common.events import BackendChoice, RunFailed, RunSnapshot, SpecPulled
from plnt_common.label_selector import describe, selects
from plnt_common.releases import revision_label
from plnt_common.resources import PlacementEntry, PlntBackendSpec, Verify
from plnt_common.signatures import KeyInvalid, parse_public_key
from plnt_common.signatures import verify as verify_minisign
from plnt_common.status import Phase, Reason
from plnt_common.workflow import CodeArchive, Workflow, parse_workflow, spec_digest

PHASE = Phase.PULLING.value
"""The phase every failure of this step reports."""

FAILS_AT_ONCE = frozenset(
    {
        Reason.SPEC_INVALID,
        Reason.INTEGRITY_MISMATCH,
        Reason.SPEC_NOT_FOUND,
        Reason.BACKEND_UNAVAILABLE,
        Reason.CODE_INVALID,
        Reason.SIGNATURE_MISSING,
        Reason.SIGNATURE_INVALID,
        Reason.PULL_SECRET_INVALID,
        Reason.BACKEND_NOT_ALLOWED,
    }
)
"""Errors no retry can fix: the run (or the registry's content) must change first."""


@dataclass(frozen=True)
class Ignore:
    """Publish nothing and ack: the event needs no answer."""

    why: str


def saga_gate(*, ended: bool, superseded: bool) -> Ignore | RunFailed | None:
    """What to do before pulling, from the observed saga state; None means pull.

    Takes booleans rather than ``plnt_common.saga.SagaState`` because that module imports
    nats, and this one must stay free of I/O libraries even indirectly.
    """
    if ended:
        return Ignore("the saga already ended")
    if superseded:
        # The newer saga pulls its own spec; this one must end so it never installs.
        return RunFailed(
            reason=Reason.SUPERSEDED,
            message="superseded by a newer generation of the run before its spec was pulled",
            phase=PHASE,
        )
    return None


def verify_signature(*, raw: bytes, signature: bytes | None, verify: Verify | None) -> None:
    """Nothing when the run trusts any spec (``verify`` None) or ``signature`` is a valid
    minisign signature of ``raw`` by one of ``verify.publicKeys``.

    Raises ``SignatureMissing`` when there is no signature, ``SignatureInvalid`` when it is
    malformed, by another key, or of other bytes.
    """
    if verify is None:
        return
    if signature is None:
        raise SignatureMissing(
            "the run requires a signature (verify.publicKeys) and the spec has none "
            "(workflow.yaml.minisig)"
        )
    try:
        keys = [
            parse_public_key(key, what="a verify.publicKeys entry") for key in verify.public_keys
        ]
    except KeyInvalid as exc:  # the CRD's pattern admits it; only its bytes can be wrong
        raise SignatureInvalid(str(exc)) from None
    verify_minisign(raw, signature_file=signature, keys=keys)


def verify_integrity(*, raw: bytes, pinned: str | None) -> str:
    """The digest of ``raw``; raises ``IntegrityMismatch`` naming both when a pin differs."""
    actual = spec_digest(raw)
    if pinned is not None and pinned != actual:
        raise IntegrityMismatch(
            f"integrityHash pins {pinned}, but the fetched spec's digest is {actual}"
        )
    return actual


def validate_spec(*, raw: bytes, name: str, version: str) -> Workflow:
    """The Workflow in ``raw``, which must be valid and declare exactly ``name@version``.

    Raises ``SpecInvalid`` naming the problem. The name/version check stops a registry
    path that holds another workflow (a copy-paste, a moved file) from being rolled out
    under the wrong revision.
    """
    workflow = parse_workflow(raw)
    declared = f"{workflow.metadata.name}@{workflow.metadata.version}"
    if declared != f"{name}@{version}":
        raise SpecInvalid(f"the spec declares {declared}, but the run references {name}@{version}")
    return workflow


def verify_code(*, data: bytes, code: CodeArchive, ref: str) -> None:
    """Raise ``CodeInvalid`` unless ``data`` is the archive ``code`` pins: its digest, a
    gzip tar, every member a file or directory that stays inside the archive's root."""
    check_archive(data, digest=code.digest, name=f"code archive {code.archive} of {ref}")


def code_missing(error: Exception, *, code: CodeArchive, ref: str) -> CodeInvalid:
    """The ``CodeInvalid`` a registry's answer about the archive file becomes: the spec pins
    code that cannot be fetched (absent, unreadable or over the size bound)."""
    return CodeInvalid(f"code archive {code.archive} of {ref} cannot be fetched: {error}")


def pull_secret_unreadable(*, name: str, namespace: str) -> PullSecretInvalid:
    """The refusal of a run naming a pull secret when the puller has no Kubernetes access
    (the embedded mode): there is no Secret to read, and pulling without the credentials
    the run asked for would ignore part of its spec."""
    return PullSecretInvalid(
        f"the run names pull secret {namespace}/{name}, but this puller has no Kubernetes "
        "access to read Secrets (PLNT_PULLER_BACKENDS=embedded); give the registry's "
        "credentials to the puller's docker config (PLNT_PULLER_OCI_DOCKER_CONFIG) and "
        "drop spec.workflow.pullSecret, or run the puller with backends=kubernetes"
    )


def check_backend(
    *, name: str, backend: PlntBackendSpec | None, gpu_class: str | None
) -> PlntBackendSpec:
    """The backend if it exists and offers ``gpu_class``; raises ``BackendUnavailable``.

    Only the run's own ``spec.backend.gpuClass`` is checked: it is what the installer
    schedules on, while the Workflow's ``requirements`` describe what the spec was
    written for.
    """
    if backend is None:
        raise BackendUnavailable(f"PlntBackend {name!r} not found")
    if gpu_class is not None and gpu_class not in backend.gpu_classes:
        offered = ", ".join(sorted(backend.gpu_classes)) or "none"
        raise BackendUnavailable(
            f"PlntBackend {name!r} does not offer gpuClass {gpu_class!r} (offered: {offered})"
        )
    return backend


def check_namespace_allowed(
    *, name: str, backend: PlntBackendSpec, namespace: str, labels: Mapping[str, str]
) -> None:
    """Nothing when ``backend.allowedNamespaces`` is absent or selects ``labels`` (the run's
    namespace's); raises ``BackendNotAllowed`` naming the selector and the namespace.

    In the embedded mode namespaces have no labels: a selector with any requirement that
    empty labels do not meet refuses every run there.
    """
    chosen = backend.allowed_namespaces
    if chosen is None or selects(chosen, labels):
        return
    shown = ",".join(f"{k}={v}" for k, v in sorted(labels.items())) or "no labels"
    raise BackendNotAllowed(
        f"PlntBackend {name!r} allows namespaces selected by allowedNamespaces "
        f"{describe(chosen)!r}; namespace {namespace!r} ({shown}) is not one of them"
    )


def check_image_allowed(*, name: str, backend: PlntBackendSpec, image: str) -> None:
    """Nothing when ``backend.allowedImages`` is absent or a prefix of ``image``; raises
    ``BackendNotAllowed`` naming the prefixes and the image."""
    prefixes = backend.allowed_images
    if prefixes is None or any(image.startswith(prefix) for prefix in prefixes):
        return
    raise BackendNotAllowed(
        f"PlntBackend {name!r} allows images starting with allowedImages "
        f"{', '.join(prefixes) or '(none)'}; the workflow's runtime.image {image!r} does not"
    )


def spec_pulled(
    *,
    run: RunSnapshot,
    digest: str,
    workflow: Workflow,
    chosen: Sequence[BackendChoice],
    skipped: Sequence[PlacementEntry] = (),
) -> SpecPulled:
    """The success event: the run as requested plus what the pull established; ``chosen``:
    the acceptable backends in order (at least one)."""
    first, *fallbacks = chosen
    return SpecPulled(
        run=run,
        spec_digest=digest,
        workflow_name=workflow.metadata.name,
        workflow_version=workflow.metadata.version,
        revision=revision_label(workflow.metadata.version, run.generation),
        backend_name=first.backend_name,
        backend=first.backend,
        fallbacks=tuple(fallbacks),
        passed_over=tuple(skipped),
    )


def _reason_of(error: PlntError) -> Reason | None:
    try:
        return Reason(error.reason)
    except ValueError:  # a PlntError whose reason the status vocabulary does not know
        return None


def failure_for(error: BaseException, *, ref: str) -> RunFailed | None:
    """``run.failed`` for an error no retry can fix; None means retry (NAK with back-off).

    Anything else, retryable or unexpected, goes back to the consumer, which retries it
    and, once attempts run out, asks ``failure_after_exhaustion``.
    """
    if not isinstance(error, PlntError) or error.retryable:
        return None
    reason = _reason_of(error)
    if reason not in FAILS_AT_ONCE:
        return None
    return RunFailed(reason=reason, message=f"cannot pull {ref}: {error}", phase=PHASE)


def failure_after_exhaustion(error: BaseException, *, ref: str, attempts: int) -> RunFailed:
    """``run.failed`` once deliveries ran out; names the last error, never drops it."""
    reason = (
        Reason.REGISTRY_UNAVAILABLE
        if isinstance(error, RegistryUnavailable)
        else Reason.DELIVERY_EXHAUSTED
    )
    detail = str(error) or type(error).__name__
    return RunFailed(
        reason=reason,
        message=f"gave up pulling {ref} after {attempts} attempts: {detail}",
        phase=PHASE,
    )
