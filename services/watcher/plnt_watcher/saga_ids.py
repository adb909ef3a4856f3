"""Saga ids the watcher opens: the first of a generation no earlier saga ended under."""

from plnt_common.bus.bus import Bus
from plnt_common.events import saga_id


async def free_saga_id(bus: Bus, namespace: str, name: str, generation: int, after: int = 0) -> str:
    """The first saga id of this generation, above attempt ``after``, no earlier saga has
    ended under.

    A run deleted and created again starts at generation 1; skipping claimed ids keeps
    its sagas from colliding with the earlier object's in ``plnt-sagas`` and dedup.
    """
    attempt = after + 1
    while await bus.saga_ended(saga_id(namespace, name, generation, attempt)):
        attempt += 1
    return saga_id(namespace, name, generation, attempt)
