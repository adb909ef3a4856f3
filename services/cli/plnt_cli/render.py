"""How the CLI prints objects: kubectl-like tables, or the object as JSON or YAML."""

import json
from datetime import UTC, datetime
from typing import Any

import yaml

from plnt_common.status import ConditionType


def age(timestamp: str | None, *, now: datetime | None = None) -> str:
    if not timestamp:
        return "-"
    then = datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
    seconds = int(((now or datetime.now(UTC)) - then).total_seconds())
    if seconds < 120:
        return f"{max(seconds, 0)}s"
    if seconds < 7200:
        return f"{seconds // 60}m"
    if seconds < 172800:
        return f"{seconds // 3600}h"
    return f"{seconds // 86400}d"


def table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [
        max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)
    ]
    lines = ["   ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    lines += [
        "   ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows
    ]
    return "\n".join(lines)


def workflowrun_rows(objects: list[dict[str, Any]]) -> str:
    rows = []
    for body in objects:
        status = body.get("status") or {}
        canary = status.get("canary") or {}
        percent = canary.get("trafficPercent") or 0
        rows.append(
            [
                body["metadata"]["name"],
                status.get("phase", "Pending"),
                serving(status),
                status.get("revision") or "-",
                f"{percent}%" if canary.get("revision") else "-",
                canary.get("step") or "-",
                serving_backends(status),
                status.get("endpoint") or "-",
                age(body["metadata"].get("creationTimestamp")),
            ]
        )
    return table(
        ["NAME", "PHASE", "SERVING", "REVISION", "CANARY", "STEP", "BACKENDS", "ENDPOINT", "AGE"],
        rows,
    )


def serving_backends(status: dict[str, Any]) -> str:
    """The backends of status.placement in state Serving, comma-separated; "-" for none
    (as kubectl's BACKENDS column, from the same entries)."""
    names = [
        entry.get("backend", "")
        for entry in status.get("placement") or ()
        if isinstance(entry, dict) and entry.get("state") == "Serving"
    ]
    return ",".join(n for n in names if n) or "-"


def serving(status: dict[str, Any]) -> str:
    """``True``, ``False (<reason>)`` from the live Serving condition; ``-`` without one."""
    for condition in status.get("conditions") or ():
        if condition.get("type") == ConditionType.SERVING.value:
            if condition.get("status") == "True":
                return "True"
            return f"False ({condition.get('reason') or 'Unknown'})"
    return "-"


def backend_rows(objects: list[dict[str, Any]], *, now: datetime | None = None) -> str:
    """One row per backend and GPU class: FREE over every node, LARGEST free on one node
    (what one runner pod can get), AGE of that observation; ``-`` before the first."""
    rows = []
    for body in objects:
        spec = body["spec"]
        llm = spec.get("llm") or {}
        observed = {c["gpuClass"]: c for c in (body.get("status") or {}).get("capacity") or []}
        for gpu_class in sorted(spec.get("gpuClasses") or {}) or ["-"]:
            seen = observed.get(gpu_class)
            rows.append(
                [
                    body["metadata"]["name"],
                    spec["type"],
                    gpu_class,
                    str(seen["free"]) if seen else "-",
                    str(seen["largestFreeOnOneNode"]) if seen else "-",
                    age(seen["observedAt"], now=now) if seen else "-",
                    llm.get("model") or "offline",
                ]
            )
    return table(["NAME", "TYPE", "GPU CLASS", "FREE", "LARGEST", "AGE", "LLM"], rows)


def as_document(body: dict[str, Any], fmt: str) -> str:
    if fmt == "json":
        return json.dumps(body, indent=2)
    return yaml.safe_dump(body, sort_keys=False).rstrip()


def as_list(bodies: list[dict[str, Any]], fmt: str) -> str:
    listing = {"apiVersion": "v1", "kind": "List", "items": bodies}
    return as_document(listing, fmt)
