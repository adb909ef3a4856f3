"""The embedded resource store's writes against a real nats-server.

A store tries its own last write first instead of reading; these tests make that copy
stale on purpose (another store writes in between) and check nothing is lost.
"""

from plnt_common.bus.bus import Bus
from plnt_common.resource_store import ResourceStore
from plnt_common.resources import parse_resource

KIND = "WorkflowRun"
RUN = {
    "apiVersion": "plnt.work/v1",
    "kind": KIND,
    "metadata": {"name": "wf"},
    "spec": {"workflow": {"ref": "wf@1.0.0", "registry": "file:///r"}, "backend": {"cluster": "c"}},
}


async def test_a_write_over_a_stale_copy_keeps_what_another_writer_wrote(bus: Bus) -> None:
    mine, theirs = ResourceStore(bus), ResourceStore(bus)
    await mine.apply(parse_resource(RUN))
    await mine.update_status(KIND, "default", "wf", {"phase": "Pulling"})
    await theirs.add_finalizer(KIND, "default", "wf", "example.com/keep")
    await mine.update_status(KIND, "default", "wf", {"phase": "Installing"})
    stored = await theirs.get(KIND, "default", "wf")
    assert stored is not None
    assert stored.body["status"] == {"phase": "Installing"}
    assert stored.body["metadata"]["finalizers"] == ["example.com/keep"]


async def test_unchanged_is_judged_on_the_stored_object_not_the_copy(bus: Bus) -> None:
    mine, theirs = ResourceStore(bus), ResourceStore(bus)
    await mine.apply(parse_resource(RUN))
    await mine.update_status(KIND, "default", "wf", {"phase": "Pulling"})
    await theirs.update_status(KIND, "default", "wf", {"phase": "Failed"})
    # the same status as this store's copy, but not as the stored object: it is written
    await mine.update_status(KIND, "default", "wf", {"phase": "Pulling"})
    stored = await theirs.get(KIND, "default", "wf")
    assert stored is not None and stored.body["status"] == {"phase": "Pulling"}


async def test_a_copy_of_an_object_since_replaced_does_not_hide_the_new_one(bus: Bus) -> None:
    mine, theirs = ResourceStore(bus), ResourceStore(bus)
    first, _ = await mine.apply(parse_resource(RUN))
    await mine.update_status(KIND, "default", "wf", {"phase": "Ready"})
    assert await theirs.delete(KIND, "default", "wf") == "deleted"
    second, _ = await theirs.apply(parse_resource(RUN))
    assert second.metadata["uid"] != first.metadata["uid"]
    written = await mine.update_status(
        KIND, "default", "wf", {"phase": "Pulling"}, uid=second.metadata["uid"]
    )
    assert written is not None and written.body["status"] == {"phase": "Pulling"}


async def test_the_finalizer_and_a_first_status_go_in_one_write(bus: Bus) -> None:
    store = ResourceStore(bus)
    created, _ = await store.apply(parse_resource(RUN))
    await store.add_finalizer(
        KIND, "default", "wf", "plnt.work/saga", status_if_unset={"phase": "Pending"}
    )
    stored = await store.get(KIND, "default", "wf")
    assert stored is not None
    assert stored.revision == created.revision + 1
    assert stored.body["status"] == {"phase": "Pending"}
    assert stored.body["metadata"]["finalizers"] == ["plnt.work/saga"]


async def test_a_first_status_never_replaces_one_already_written(bus: Bus) -> None:
    store = ResourceStore(bus)
    await store.apply(parse_resource(RUN))
    await store.update_status(KIND, "default", "wf", {"phase": "Pulling"})
    await store.add_finalizer(
        KIND, "default", "wf", "plnt.work/saga", status_if_unset={"phase": "Pending"}
    )
    stored = await store.get(KIND, "default", "wf")
    assert stored is not None and stored.body["status"] == {"phase": "Pulling"}


async def test_list_returns_each_kind_by_namespace_with_its_resource_version(bus: Bus) -> None:
    store = ResourceStore(bus)
    await store.apply(parse_resource(RUN))
    other = {**RUN, "metadata": {"name": "wf", "namespace": "team-b"}}
    await store.apply(parse_resource(other))
    backend = {
        "apiVersion": "plnt.work/v1",
        "kind": "PlntBackend",
        "metadata": {"name": "laptop"},
        "spec": {"type": "local"},
    }
    await store.apply(parse_resource(backend))
    written = await store.update_status(KIND, "default", "wf", {"phase": "Pulling"})
    assert written is not None

    in_default = await store.list(KIND, "default")
    assert [(o.metadata["namespace"], o.metadata["name"]) for o in in_default] == [
        ("default", "wf")
    ]
    assert in_default[0].metadata["resourceVersion"] == str(written.revision)
    assert len(await store.list(KIND)) == 2
    assert [o.metadata["name"] for o in await store.list("PlntBackend")] == ["laptop"]
