"""The adapters over the bus against a real nats-server: spec store and backend catalog."""

import pytest
from puller_support import BACKEND, H100, backend_resource

from plnt_common import subjects
from plnt_common.bus.bus import Bus
from plnt_common.bus.object_batch import object_stream
from plnt_common.errors import BackendUnavailable
from plnt_common.resource_store import ResourceStore, object_key
from plnt_common.workflow import spec_digest
from plnt_puller.adapters.backend_catalog import StoredBackends
from plnt_puller.adapters.spec_store import ObjectStoreSpecs


async def test_a_stored_spec_is_found_by_its_digest(nats_url: str) -> None:
    bus = await Bus.open(nats_url, service="test")
    try:
        specs = ObjectStoreSpecs(nc=bus.nc, store=bus.specs)
        data = b"kind: Workflow\n"
        digest = spec_digest(data)
        assert await specs.contains(digest=digest) is False
        await specs.put(digest=digest, data=data)
        assert await specs.contains(digest=digest) is True
        assert (await bus.specs.get(digest)).data == data
    finally:
        await bus.close()


async def test_a_spec_larger_than_a_chunk_is_stored_whole_in_one_batch(nats_url: str) -> None:
    bus = await Bus.open(nats_url, service="test")
    try:
        specs = ObjectStoreSpecs(nc=bus.nc, store=bus.specs)
        data = bytes(range(256)) * 1000  # 256,000 bytes: two 128 KiB chunks
        digest = spec_digest(data)
        stream = object_stream(subjects.SPECS_OBJECT_STORE)
        before = (await bus.js.stream_info(stream)).state.messages
        await specs.put(digest=digest, data=data)
        stored = await bus.specs.get(digest)  # read the way runners read it: nats-py
        assert stored.data == data
        assert stored.info.chunks == 2 and stored.info.size == len(data)
        assert (await bus.js.stream_info(stream)).state.messages == before + 3
    finally:
        await bus.close()


async def test_a_spec_is_stored_one_message_at_a_time_without_atomic_batches(
    nats_url: str,
) -> None:
    bus = await Bus.open(nats_url, service="test")
    try:
        stream = object_stream(subjects.SPECS_OBJECT_STORE)
        config = (await bus.js.stream_info(stream)).config
        config.allow_atomic = False  # as on a server before 2.12
        await bus.js.update_stream(config)
        assert not (await bus.js.stream_info(stream)).config.allow_atomic
        specs = ObjectStoreSpecs(nc=bus.nc, store=bus.specs)
        data = b"kind: Workflow\n"
        await specs.put(digest=spec_digest(data), data=data)
        assert (await bus.specs.get(spec_digest(data))).data == data
    finally:
        await bus.close()


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
