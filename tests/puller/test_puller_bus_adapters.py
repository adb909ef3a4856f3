"""The adapters over the bus against a real nats-server: spec store and the shared
backend catalog's store adapter."""

from collections.abc import AsyncIterator

import pytest
from puller_support import BACKEND, H100, backend_resource

from plnt_common.backend_catalog import KubernetesOnly, StoredBackends
from plnt_common.bus.bus import Bus
from plnt_common.errors import BackendUnavailable
from plnt_common.resource_store import ResourceStore, object_key
from plnt_common.workflow import spec_digest
from plnt_puller.adapters.spec_store import ObjectStoreSpecs


@pytest.fixture
async def bus(nats_url: str) -> AsyncIterator[Bus]:
    opened = await Bus.open(nats_url, service="test")
    yield opened
    await opened.close()


async def test_a_stored_spec_is_found_by_its_digest(bus: Bus) -> None:
    specs = ObjectStoreSpecs(js=bus.js)
    data = b"kind: Workflow\n"
    digest = spec_digest(data)
    assert await specs.contains(digest=digest) is False
    await specs.put(digest=digest, data=data)
    assert await specs.contains(digest=digest) is True
    assert (await bus.specs.get(digest)).data == data  # nats-py reads it (and checks it)


async def test_a_spec_larger_than_a_chunk_is_stored_whole(bus: Bus) -> None:
    data = bytes(range(256)) * 1000  # 256,000 bytes: two 128 KiB chunks
    await ObjectStoreSpecs(js=bus.js).put(digest=spec_digest(data), data=data)
    stored = await bus.specs.get(spec_digest(data))  # read the way runners read it
    assert stored.data == data
    assert (stored.info.chunks, stored.info.size) == (2, len(data))


async def test_a_deleted_spec_is_not_contained(bus: Bus) -> None:
    specs = ObjectStoreSpecs(js=bus.js)
    data = b"kind: Workflow\n"
    await specs.put(digest=spec_digest(data), data=data)
    await bus.specs.delete(spec_digest(data))  # nats-py leaves a deleted marker
    assert await specs.contains(digest=spec_digest(data)) is False


async def test_the_catalog_returns_an_applied_backend_and_none_for_others(nats_url: str) -> None:
    bus = await Bus.open(nats_url, service="test")
    try:
        store = ResourceStore(bus)
        await store.apply(backend_resource(BACKEND, (H100,)))
        catalog = StoredBackends(store=store)
        found = await catalog.get(BACKEND)
        assert found is not None
        assert found.type == "local"
        assert H100 in found.gpu_classes
        assert await catalog.get("unknown") is None
    finally:
        await bus.close()


async def test_the_catalog_reports_an_unreadable_backend_as_unavailable(nats_url: str) -> None:
    bus = await Bus.open(nats_url, service="test")
    try:
        # Written around the store's validation, as an old or foreign writer might.
        body = b'{"apiVersion":"plnt.work/v1","kind":"PlntBackend","metadata":{"name":"odd"},'
        body += b'"spec":{"type":"mainframe"}}'
        await bus.resources.put(object_key("PlntBackend", None, "odd"), body)
        with pytest.raises(BackendUnavailable, match="PlntBackend 'odd' is invalid: type"):
            await StoredBackends(store=ResourceStore(bus)).get("odd")
    finally:
        await bus.close()


async def test_the_catalog_lists_the_readable_backends_and_leaves_out_the_unreadable(
    bus: Bus,
) -> None:
    store = ResourceStore(bus)
    await store.apply(backend_resource(BACKEND, (H100,)))
    body = b'{"apiVersion":"plnt.work/v1","kind":"PlntBackend","metadata":{"name":"odd"},'
    body += b'"spec":{"type":"mainframe"}}'
    await bus.resources.put(object_key("PlntBackend", None, "odd"), body)

    listed = await StoredBackends(store=store).all()

    assert list(listed) == [BACKEND]
    assert listed[BACKEND] == await StoredBackends(store=store).get(BACKEND)
    assert await KubernetesOnly(StoredBackends(store=store)).all() == {}  # BACKEND is local
