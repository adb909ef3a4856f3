"""``s3://bucket[/prefix]`` registries, written through boto3 (AWS S3, MinIO, moto).

Reaches S3 as the puller does: ``PLNT_PULLER_S3_ENDPOINT_URL`` (and its region) when set,
else boto3's own configuration (environment, ``~/.aws``, instance roles). Connection
errors are retried briefly inside botocore, then reported in one line; it does not create
buckets.
"""

from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

from plnt_cli.publish_targets import Progress
from plnt_common.errors import RegistryUnavailable, SpecNotFound
from plnt_puller.ports import SPEC_FILE
from plnt_puller.settings import PullerSettings

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

MAX_FILES = 16
"""A version holds a spec, its signature and one archive: more is not plnt's layout."""

CREDENTIAL_CODES = frozenset(
    {"InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken", "InvalidToken"}
)


class S3Target:
    """Implements ``PublishTarget`` for one ``s3://`` registry."""

    def __init__(self, registry: str) -> None:
        parts = urlsplit(registry)
        if parts.scheme != "s3" or not parts.netloc:
            raise SpecNotFound(f"{registry} is not an s3://bucket[/prefix] registry")
        self._registry = registry
        self._bucket = parts.netloc
        self._prefix = parts.path.strip("/")
        settings = PullerSettings()
        endpoint = settings.s3_endpoint_url
        config = Config(
            region_name=settings.s3_region,
            connect_timeout=5,
            read_timeout=60,
            retries={"total_max_attempts": 2, "mode": "standard"},
            s3={"addressing_style": "path" if endpoint else "auto"},
        )
        self._client: S3Client = boto3.session.Session().client(
            "s3", endpoint_url=endpoint, config=config
        )
        self._where = f"{registry} (endpoint {endpoint})" if endpoint else registry

    def _key(self, name: str, version: str, file: str = "") -> str:
        relative = f"{name}/{version}/{file}"
        return f"{self._prefix}/{relative}" if self._prefix else relative

    def published(self, *, name: str, version: str) -> dict[str, bytes] | None:
        """The objects under ``<prefix>/<name>/<version>/``, None when there are none."""
        folder = self._key(name, version)
        try:
            listing = self._client.list_objects_v2(
                Bucket=self._bucket, Prefix=folder, MaxKeys=MAX_FILES
            )
            files: dict[str, bytes] = {}
            for item in listing.get("Contents", []):
                file = item["Key"][len(folder) :]
                if file and "/" not in file:
                    body = self._client.get_object(Bucket=self._bucket, Key=item["Key"])["Body"]
                    files[file] = body.read()
        except (ClientError, BotoCoreError) as exc:
            raise self._error(exc, doing="read") from None
        return files or None

    def upload(
        self, *, name: str, version: str, files: dict[str, bytes], progress: Progress
    ) -> None:
        """Put every file, the spec last."""
        for file in sorted(files, key=lambda f: f == SPEC_FILE):
            data = files[file]
            progress(file, 0, len(data))
            try:
                self._client.put_object(
                    Bucket=self._bucket,
                    Key=self._key(name, version, file),
                    Body=data,
                    ContentType=_content_type(file),
                )
            except (ClientError, BotoCoreError) as exc:
                raise self._error(exc, doing="write") from None
            progress(file, len(data), len(data))

    def _error(self, exc: Exception, *, doing: str) -> Exception:
        if isinstance(exc, NoCredentialsError):
            return SpecNotFound(
                f"{self._where}: no AWS credentials found (set AWS_ACCESS_KEY_ID and "
                "AWS_SECRET_ACCESS_KEY, or a profile)"
            )
        if isinstance(exc, BotoCoreError):
            return RegistryUnavailable(
                f"{self._where}: S3 cannot be reached ({type(exc).__name__}: {exc})"
            )
        assert isinstance(exc, ClientError)
        error: Any = exc.response.get("Error", {})
        code = str(error.get("Code", ""))
        status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0))
        if code in CREDENTIAL_CODES:
            return SpecNotFound(f"{self._where}: S3 refused the credentials ({code})")
        if code == "NoSuchBucket":
            return SpecNotFound(f"{self._where}: bucket {self._bucket!r} does not exist")
        if code in ("AccessDenied", "403") or status == 403:
            return SpecNotFound(f"{self._where}: access denied: the credentials may not {doing} it")
        if status >= 500 or status == 429:
            return RegistryUnavailable(f"{self._where}: S3 answered {code or status}")
        return SpecNotFound(
            f"{self._where}: S3 refused to {doing} ({code or status}: {error.get('Message', '')})"
        )


def _content_type(file: str) -> str:
    if file.endswith((".yaml", ".yml")):
        return "application/yaml"
    if file.endswith(".minisig"):
        return "text/plain"
    return "application/gzip"
