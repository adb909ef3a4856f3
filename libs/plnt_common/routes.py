"""The router table: one ``plnt-routes`` KV entry per workflow, written by the promoter.

Key: ``<namespace>.<name>``. The router watches the bucket and never reads it per request.
A target's url is the address its release is observed at: the promoter moves it, and
marks the target not serving, when the backend reports the runner restarted or down.
A target placed on several backends (``spread``) also lists one endpoint per backend; the
router splits the revision's calls across the serving ones. Without endpoints, ``url`` is
the one address, as before.
"""

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from plnt_common.shadow_pairs import ShadowRoute


class BackendEndpoint(BaseModel):
    """Where one backend serves a revision (one per backend the runner is placed on)."""

    model_config = ConfigDict(frozen=True)

    backend: str = Field(description="PlntBackend serving this copy.", examples=["gpu-east"])
    url: str = Field(
        description="Base URL of the runner on that backend.",
        examples=["http://127.0.0.1:39001"],
    )
    serving: bool = Field(
        default=True, description="False while that backend reports the runner down or Lost."
    )
    release: str = Field(
        default="",
        description="Release on that backend, whose observed address and readiness the "
        "endpoint follows.",
    )
    reason: str = Field(
        default="", description="Why the runner there is not serving; empty when it is."
    )


class RouteTarget(BaseModel):
    """One revision the router may send a call to."""

    model_config = ConfigDict(frozen=True)

    revision: str = Field(
        description="Revision label, echoed in x-plnt-revision.", examples=["1.2.0-g1"]
    )
    url: str = Field(
        description="Base URL of the runner serving this revision.",
        examples=["http://127.0.0.1:39001"],
    )
    saga_id: str = Field(default="", description="Saga that installed this revision.")
    release: str = Field(
        default="",
        description="Release serving this revision, whose observed address the url follows.",
        examples=["review-responder-g1"],
    )
    serving: bool = Field(
        default=True, description="False while the backend reports the runner down."
    )
    reason: str = Field(
        default="", description="Why the runner is not serving (a status Reason); empty when it is."
    )
    message: str = Field(default="", description="What the backend said about the runner.")
    since: datetime | None = Field(
        default=None, description="When ``serving`` last changed (None: since it was routed)."
    )
    endpoints: list[BackendEndpoint] = Field(
        default_factory=list,
        description=(
            "One per backend the revision runs on; the router splits calls across the serving"
            " ones. Empty: ``url`` is the only address."
        ),
    )

    def __hash__(self) -> int:
        # Frozen models hash their fields; the endpoint list is hashed as a tuple.
        fields = self.__dict__ | {"endpoints": tuple(self.endpoints)}
        return hash(tuple(fields.values()))

    def serving_endpoints(self) -> list[BackendEndpoint]:
        """The addresses calls may go to: the serving endpoints, or ``url`` alone (backend
        name empty) when the target lists none."""
        if not self.endpoints:
            return [BackendEndpoint(backend="", url=self.url)]
        return [endpoint for endpoint in self.endpoints if endpoint.serving]


class RouteEntry(BaseModel):
    """Stable and canary of one workflow; ``canary_weight`` percent of calls go to the canary."""

    model_config = ConfigDict(frozen=True)

    namespace: str
    name: str
    endpoint: str = Field(default="", description="Public URL consumers call.")
    stable: RouteTarget | None = None
    canary: RouteTarget | None = None
    canary_weight: int = Field(default=0, ge=0, le=100)
    restored_saga_id: str = Field(
        default="",
        description="Newest saga whose canary was taken out; its late canary is never routed.",
    )
    shadow: ShadowRoute | None = Field(
        default=None, description="While set, a share of calls is mirrored to the canary."
    )

    def has_ready_target(self) -> bool:
        return self.stable is not None or (self.canary is not None and self.canary_weight > 0)

    def serving_only(self) -> "RouteEntry":
        """The entry as calls see it: a target whose runner is down (on every backend it
        lists) is left out (its share goes to the other one; with neither, nothing is ready)."""
        stable = self.stable if _can_serve(self.stable) else None
        canary = self.canary if _can_serve(self.canary) else None
        if stable is self.stable and canary is self.canary:
            return self
        weight = self.canary_weight if canary is not None else 0
        return self.model_copy(update={"stable": stable, "canary": canary, "canary_weight": weight})


def _can_serve(target: RouteTarget | None) -> bool:
    """Serving, and (when it lists backends) serving on at least one of them."""
    return target is not None and target.serving and bool(target.serving_endpoints())


def route_key(namespace: str, name: str) -> str:
    return f"{namespace}.{name}"
