"""The keys every ``--json`` document shares, whatever command wrote it.

Older keys stay as they were (a reader of v1 keeps working); these were *added* so
that one reader can take any of the five documents the same way:

* ``model_info``: ``{"name", "source"}`` of the model the document is about (check,
  compare and simulate also keep their ``model`` object; run-gpu keeps ``model``, the
  string given on the command line; sweep has it per result, and at the top when the
  grid has one model).
* ``device_limit``: ``{"limit_bytes", "unlimited"}`` — ``limit_bytes`` is the ledger
  limit of one device in bytes, or null when there is none, and then ``unlimited`` is
  true. (The older keys write "unlimited" as ``limit_bytes: 0`` in simulate and
  run-gpu, and as ``memory: null`` / ``limit_bytes: null`` in check / compare.)
* ``wait_s`` / ``wait_ns``: the same keys (``p50``, ``p99``, ``max``; sweep results
  have ``p99`` only) in seconds and in integer nanoseconds; null when nothing waited
  or nothing was admitted.
"""

from __future__ import annotations

from typing import Any


def model_info(name: str, source: str) -> dict[str, Any]:
    return {"name": name, "source": source}


def device_limit(limit_bytes: int | None) -> dict[str, Any]:
    """``None`` and the older ``0`` both mean unlimited; a limit is always a positive byte count."""
    unlimited = limit_bytes is None or limit_bytes == 0
    return {"limit_bytes": None if unlimited else limit_bytes, "unlimited": unlimited}


def waits(p50_ns: int | None = None, p99_ns: int | None = None, max_ns: int | None = None, *,
          only_p99: bool = False) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(wait_s, wait_ns)``."""
    ns = {"p99": p99_ns} if only_p99 else {"p50": p50_ns, "p99": p99_ns, "max": max_ns}
    return {k: None if v is None else v / 1e9 for k, v in ns.items()}, ns
