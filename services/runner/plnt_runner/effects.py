"""The side-effect calls of one invocation, as the ``x-plnt-effects`` answer header lists
them: executed ones in a live call, intended ones in a shadow call.

Each is an ``EffectCall``: the tool's name and the sha256 of its input (the step input
``{"input", "steps", "with"}``) as canonical JSON, ``json.dumps(value, sort_keys=True,
separators=(",", ":"))`` encoded as UTF-8. A shadow call's list is compared with the
stable's by tool and input, never by result. Pure: no I/O here.
"""

import hashlib
import json
from typing import Any

from plnt_common.shadow_pairs import EffectCall

MAX_EFFECTS = 64
"""Calls listed at most; later ones are counted in ``dropped``, not listed. (A spec holds
at most 64 steps, each calling its tool once: plnt's runner meets the byte limit first.)"""
MAX_EFFECTS_BYTES = 6144
"""The list's JSON at most this long: HTTP clients refuse a header line over 8 KiB
(aiohttp: 8190 bytes), and a long tool name makes 64 entries longer than that."""


def input_sha256(value: Any) -> str:
    """sha256, hex, of ``value`` as canonical JSON."""
    canonical = json.dumps(value, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


class EffectLog:
    """Side-effect calls in the order they were made, capped at ``MAX_EFFECTS`` entries and
    ``MAX_EFFECTS_BYTES`` of JSON; the calls beyond are counted in ``dropped``."""

    def __init__(self) -> None:
        self.calls: list[EffectCall] = []
        self.dropped = 0
        self._json: list[str] = []
        self._bytes = 2  # the brackets

    def record(self, *, tool: str, tool_input: Any) -> EffectCall:
        """Note one call of ``tool`` with ``tool_input``; returns it (listed or not)."""
        call = EffectCall(tool=tool, input_sha256=input_sha256(tool_input))
        entry = json.dumps(call.model_dump(), separators=(",", ":"))
        size = len(entry.encode()) + (1 if self._json else 0)
        if len(self.calls) >= MAX_EFFECTS or self._bytes + size > MAX_EFFECTS_BYTES:
            self.dropped += 1
            return call
        self.calls.append(call)
        self._json.append(entry)
        self._bytes += size
        return call

    def as_list(self) -> list[dict[str, str]]:
        """The listed calls as plain dicts (an SSE event's ``effects``)."""
        return [call.model_dump() for call in self.calls]

    def header_value(self) -> str:
        """Compact JSON list: ``[{"tool":"crm.notify","input_sha256":"9f86..."}]``."""
        return "[" + ",".join(self._json) + "]"
