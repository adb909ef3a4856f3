"""The puller's settings: ``PLNT_PULLER_*`` variables on top of the shared ``PLNT_*`` ones.

Read once at start-up by ``app.main``; nothing else in the puller reads the environment.
S3 credentials are not settings: boto3 finds them along the standard AWS chain
(``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``, ``AWS_PROFILE``, web identity, instance
metadata), so no secret ever sits in a plnt variable. OCI registry credentials come from a
docker ``config.json`` (``oci_docker_config``), for the same reason, and, with
``backends=kubernetes``, from the ``kubernetes.io/dockerconfigjson`` Secret a run names
(``spec.workflow.pullSecret``), read through the same Kubernetes client.
"""

import os
from typing import Annotated, Literal

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from plnt_common.settings import CommonSettings


class PullerSettings(CommonSettings):
    """Where the puller finds PlntBackends, how it reaches S3 registries, how hard it retries."""

    model_config = SettingsConfigDict(env_prefix="PLNT_PULLER_", extra="ignore")

    s3_endpoint_url: str | None = Field(
        default=None,
        description=(
            "S3 API endpoint for s3:// registries that are not AWS (MinIO, moto), e.g. "
            "http://minio:9000; unset means AWS. When set, path-style addressing is used."
        ),
        examples=["http://127.0.0.1:9000"],
    )
    s3_region: str = Field(default="us-east-1", description="Region of the S3 client.")
    s3_max_attempts: int = Field(
        default=3,
        ge=1,
        le=10,
        description=(
            "Attempts per S3 request (the first one included) for connection errors, "
            "5xx answers and throttling, with botocore's jittered back-off between them."
        ),
    )
    oci_insecure_registries: tuple[str, ...] = Field(
        default=(),
        description=(
            "oci:// registries (host:port, or host for every port) reached over plain HTTP; "
            "loopback hosts always are, every other one only over HTTPS. As JSON in the "
            "environment, e.g. '[\"registry.lan:5000\"]'."
        ),
        examples=[["registry.lan:5000"]],
    )
    oci_docker_config: str = Field(
        # Read here, where settings are read: DOCKER_CONFIG is docker's own variable.
        default_factory=lambda: os.environ.get("DOCKER_CONFIG", ""),
        description=(
            "Directory of the docker config.json holding oci:// registry credentials "
            "(auths.<host>.auth), as DOCKER_CONFIG names it (its default); empty: ~/.docker."
        ),
    )
    oci_max_attempts: int = Field(
        default=3,
        ge=1,
        le=10,
        description=(
            "Attempts per OCI registry request (the first one included) for connection "
            "errors, timeouts, 429 and 5xx answers, with back-off between them."
        ),
    )
    connect_timeout_s: float = Field(
        default=5.0,
        gt=0,
        description="Longest wait for a connection to the S3 endpoint or an OCI registry.",
    )
    read_timeout_s: float = Field(
        default=30.0,
        gt=0,
        description="Longest wait for the S3 endpoint or an OCI registry between two reads.",
    )
    max_attempts: int = Field(
        default=6,
        ge=1,
        description=(
            "Deliveries of one run.requested before the puller gives up and publishes "
            "run.failed (RegistryUnavailable or DeliveryExhausted)."
        ),
    )
    retry_backoff_s: tuple[Annotated[float, Field(ge=0)], ...] = Field(
        default=(0.25, 0.5, 1.0, 2.0, 5.0, 10.0),
        min_length=1,
        description=(
            "Delay before redelivery after a retryable failure, per attempt; the last one "
            "repeats. As JSON in the environment, e.g. '[1, 5, 30]'."
        ),
    )
    concurrency: int = Field(default=16, ge=1, description="Events handled at once per replica.")

    # --- PlntBackends ---------------------------------------------------------------------
    backends: Literal["embedded", "kubernetes"] = Field(
        default="embedded",
        description="Where PlntBackends are read from: the plnt-resources store of the "
        "embedded mode, or the Kubernetes API (cluster-scoped plntbackends.plnt.work), which "
        "also serves the pull secrets runs name; the embedded mode refuses runs naming one.",
    )
    kubeconfig: str = Field(
        default="",
        description="With backends=kubernetes: path of a kubeconfig file; empty = standard "
        "resolution: the KUBECONFIG variable or ~/.kube/config, else the in-cluster service "
        "account.",
    )
