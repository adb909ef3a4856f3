"""``s3://bucket[/prefix]`` registries through boto3 (AWS S3, MinIO, moto).

Downloads ``<prefix>/<name>/<version>/workflow.yaml`` (or a file beside it) with a
blocking boto3 client run in a worker thread. Connection errors, 5xx answers and
throttling are retried a bounded number of times inside botocore (standard mode:
jittered exponential back-off), with connect and read timeouts, before the pull fails
as ``RegistryUnavailable`` and the consumer's slower redelivery back-off takes over. It
does not list buckets, follow redirects across regions, or cache.
"""

import asyncio
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from plnt_common.errors import RegistryUnavailable, SpecInvalid, SpecNotFound
from plnt_common.oci import Logins
from plnt_common.workflow import MAX_SPEC_BYTES
from plnt_puller.adapters.locations import fetch_signature_beside, refuse_logins, spec_path
from plnt_puller.ports import SPEC_FILE

if TYPE_CHECKING:  # the stubs are a dev dependency; at run time the client is untyped
    from mypy_boto3_s3 import S3Client

MISSING_CODES = frozenset({"NoSuchKey", "NoSuchBucket", "NotFound", "404"})
"""The registry answered: the object (or its bucket) is not there."""

DENIED_CODES = frozenset({"AccessDenied", "AllAccessDisabled", "403"})
"""S3 answers 403 for a missing key when the caller may not list the bucket, so a denial
is reported like a missing spec, with a hint at the credentials."""

TRANSIENT_CODES = frozenset(
    {
        # throttling, which botocore already retried
        "SlowDown",
        "Throttling",
        "ThrottlingException",
        "RequestLimitExceeded",
        "TooManyRequestsException",
        "RequestThrottled",
        "RequestTimeout",
        # credentials that may be rotated or refreshed before the next delivery
        "ExpiredToken",
        "TokenRefreshRequired",
        "InvalidAccessKeyId",
        "SignatureDoesNotMatch",
        "RequestTimeTooSkewed",
    }
)


class S3Registry:
    """Implements ``ports.Registry`` for ``s3://`` URLs with one shared boto3 client."""

    def __init__(
        self,
        *,
        endpoint_url: str | None = None,
        region: str = "us-east-1",
        max_attempts: int = 3,
        connect_timeout_s: float = 5.0,
        read_timeout_s: float = 30.0,
        max_connections: int = 10,
        max_bytes: int = MAX_SPEC_BYTES,
    ) -> None:
        config = Config(
            region_name=region,
            connect_timeout=connect_timeout_s,
            read_timeout=read_timeout_s,
            retries={"total_max_attempts": max_attempts, "mode": "standard"},
            # One connection per concurrent pull, so no pull waits for another's socket.
            max_pool_connections=max_connections,
            # MinIO and moto serve buckets under the path, not as virtual hosts.
            s3={"addressing_style": "path" if endpoint_url else "auto"},
        )
        # boto3 clients are thread-safe (sessions are not): one client, many threads.
        self._client: S3Client = boto3.session.Session().client(
            "s3", endpoint_url=endpoint_url, config=config
        )
        self._max_bytes = max_bytes

    async def fetch(
        self,
        *,
        registry: str,
        name: str,
        version: str,
        file: str = SPEC_FILE,
        max_bytes: int | None = None,
        logins: Logins | None = None,
    ) -> bytes:
        """The file's bytes; raises ``SpecNotFound``, ``SpecInvalid`` (size) or
        ``RegistryUnavailable`` once botocore's retries are spent; ``PullSecretInvalid``
        for ``logins`` (S3 credentials come from the AWS chain, not from runs)."""
        refuse_logins(logins, registry=registry)
        bucket, key = _locate(registry, spec_path(name=name, version=version, file=file))
        bound = self._max_bytes if max_bytes is None else max_bytes
        return await asyncio.to_thread(self._download, bucket, key, bound)

    async def fetch_signature(
        self, *, registry: str, name: str, version: str, logins: Logins | None = None
    ) -> bytes | None:
        """``workflow.yaml.minisig`` beside the spec, None when it is not there."""
        refuse_logins(logins, registry=registry)
        return await fetch_signature_beside(self, url=registry, name=name, version=version)

    def _download(self, bucket: str, key: str, bound: int) -> bytes:
        url = f"s3://{bucket}/{key}"
        try:
            response = self._client.get_object(Bucket=bucket, Key=key)
        except ClientError as exc:
            raise _client_error(url, exc) from None
        except BotoCoreError as exc:  # no connection, timeouts, no credentials
            raise RegistryUnavailable(f"{url}: S3 did not answer ({_describe(exc)})") from None
        body = response["Body"]
        try:
            size = int(response.get("ContentLength", 0))
            if size > bound:
                raise SpecInvalid(_too_big(url, size, bound))
            # One byte more than allowed: catches a wrong or missing Content-Length too.
            data = body.read(bound + 1)
        except (BotoCoreError, OSError) as exc:  # the connection broke mid-download
            raise RegistryUnavailable(f"{url}: download failed ({_describe(exc)})") from None
        finally:
            body.close()
        if len(data) > bound:
            raise SpecInvalid(_too_big(url, len(data), bound))
        return data


def _locate(registry: str, relative: str) -> tuple[str, str]:
    parts = urlsplit(registry)
    if parts.scheme != "s3" or not parts.netloc:
        raise SpecNotFound(f"{registry} is not an s3://bucket[/prefix] registry")
    prefix = parts.path.strip("/")
    return parts.netloc, f"{prefix}/{relative}" if prefix else relative


def _client_error(url: str, exc: ClientError) -> Exception:
    error: Any = exc.response.get("Error", {})
    code = str(error.get("Code", ""))
    message = str(error.get("Message", "")) or code
    status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0))
    if code in MISSING_CODES or status == 404:
        what = "bucket" if code == "NoSuchBucket" else "spec"
        return SpecNotFound(f"{url} not found ({what} missing: {code or status})")
    if code in DENIED_CODES or status == 403:
        return SpecNotFound(
            f"{url} may not be read (access denied): the spec may be missing, "
            "or the puller's credentials may not read it"
        )
    if code in TRANSIENT_CODES or status >= 500 or status == 429:
        return RegistryUnavailable(f"{url}: S3 answered {code or status} ({message})")
    return SpecNotFound(f"{url}: S3 refused the download with {code or status} ({message})")


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def _too_big(url: str, size: int, bound: int) -> str:
    return f"{url} is {size} bytes, over the {bound}-byte bound"
