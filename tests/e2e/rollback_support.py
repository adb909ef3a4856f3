"""Helpers of the rollback and guard e2e tests: a run rolled out at two versions."""

import copy
from pathlib import Path
from typing import Any

from stack_support import Client
from test_e2e_canary_steps import ready_stable

STABLE, NEXT = "1.0.0-g1", "2.0.0-g2"


def second_version(document: dict[str, Any], **spec: Any) -> dict[str, Any]:
    changed = copy.deepcopy(document)
    changed["spec"]["workflow"]["ref"] = changed["spec"]["workflow"]["ref"].replace(
        "@1.0.0", "@2.0.0"
    )
    changed["spec"].update(spec)
    return changed


async def two_versions(
    client: Client, registry: Path, name: str, *, canary_steps: Any = None, **spec: Any
) -> dict[str, Any]:
    """1.0.0 Ready, then 2.0.0 applied with ``spec`` and Ready; the 2.0.0 document."""
    document = await ready_stable(client, registry, name, canary_steps=canary_steps)
    changed = second_version(document, **spec)
    await client.apply(changed)
    await client.wait_phase(name, "Ready", generation=2)
    return changed
