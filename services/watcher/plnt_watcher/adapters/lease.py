"""The Lease the watcher replicas elect a leader with: coordination.k8s.io/v1, via the client.

It reads and writes one named Lease and maps it to ``LeaseRecord``; updates carry the
resourceVersion they read, so a concurrent writer makes them fail with ``Conflict``.
It does not decide who leads: ``leader.py`` does.
"""

from datetime import datetime
from typing import Any

from kubernetes import client

from plnt_common.errors import ResourceNotFound
from plnt_watcher.adapters.kube_api import call
from plnt_watcher.leader import LeaseRecord


class KubernetesLeaseStore:
    """``LeaseStore`` over one Lease object."""

    def __init__(
        self, *, api: client.ApiClient, name: str, namespace: str, request_timeout_s: float
    ) -> None:
        self._leases = client.CoordinationV1Api(api)
        self._name = name
        self._namespace = namespace
        self._timeout = float(request_timeout_s)

    async def get(self) -> LeaseRecord | None:
        try:
            lease = await call(
                self._leases.read_namespaced_lease,
                self._name,
                self._namespace,
                _request_timeout=self._timeout,
            )
        except ResourceNotFound:
            return None
        return _record(lease)

    async def create(self, record: LeaseRecord) -> LeaseRecord:
        lease = await call(
            self._leases.create_namespaced_lease,
            self._namespace,
            self._lease(record),
            _request_timeout=self._timeout,
        )
        return _record(lease)

    async def update(self, record: LeaseRecord) -> LeaseRecord:
        lease = await call(
            self._leases.replace_namespaced_lease,
            self._name,
            self._namespace,
            self._lease(record),
            _request_timeout=self._timeout,
        )
        return _record(lease)

    def _lease(self, record: LeaseRecord) -> client.V1Lease:
        return client.V1Lease(
            api_version="coordination.k8s.io/v1",
            kind="Lease",
            metadata=client.V1ObjectMeta(
                name=self._name,
                namespace=self._namespace,
                resource_version=record.version or None,
            ),
            spec=client.V1LeaseSpec(
                holder_identity=record.holder,
                # The API takes whole seconds; never round a short lease down to zero.
                lease_duration_seconds=max(1, round(record.duration_s)),
                acquire_time=record.acquired_at,
                renew_time=record.renewed_at,
                lease_transitions=record.transitions,
            ),
        )


def _record(lease: Any) -> LeaseRecord:
    spec = lease.spec or client.V1LeaseSpec()
    return LeaseRecord(
        holder=spec.holder_identity or "",
        duration_s=float(spec.lease_duration_seconds or 0),
        acquired_at=_as_datetime(spec.acquire_time),
        renewed_at=_as_datetime(spec.renew_time),
        transitions=int(spec.lease_transitions or 0),
        version=str(lease.metadata.resource_version or ""),
    )


def _as_datetime(value: Any) -> datetime | None:
    return value if isinstance(value, datetime) else None
