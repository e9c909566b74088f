"""The ledger: the single accounting authority for state-group bytes (CONTRACT §3).

It owns byte counts, never cursors or memory. A charge is one per-class byte
record for one group, or for one (request, device) bundle. ``try_charge`` checks
and charges under one lock and fails closed: a refused charge mutates nothing but
``charge_failures``, so the caller can refuse before allocating anything. Limits
are per device in bytes; 0 means unlimited, which still accounts everything.
All state is per instance: two ledgers never see each other's charges.

Shared compressed state (cross-layer sharing, DeepSeek-V4.1-style): a kv source's state is
charged once per (request, device) with ``try_charge_source``; its readers ``attach_reader``
to that one charge and hold it; the bytes are debited when the owner's handle and the last
reader's handle are both released. A second charge of the same source for the same
(request, device) is a typed DoubleCount, and a reader with no live source charge is a typed
UnaccountedReader: there is no second path on which a reader's view of the state could be
charged again or not at all. Both fail closed like OutOfMemory (only ``charge_failures`` moves).

Documented range: every per-class byte count, every charge's total and every limit is
an integer in 0 .. 2^64 - 1 (``errors.U64_LIMIT``); anything else is a ``ValueError``
(a programming error: inputs are checked long before they reach the ledger). A
``Charge``'s request, device and bytes are read-only: the release always debits the
key the charge was made under.
"""

from __future__ import annotations

import threading
from typing import Mapping

from csa_plan.planner.errors import CsaPlanError, ExitCode
from csa_plan.planner.errors import U64_LIMIT
from csa_plan.planner.layout import STATE_CLASSES, GroupBytes, StateClass
from csa_plan.planner.refusals import Refusal, RefusalType

_FIELDS: tuple[str, ...] = tuple(f"{c.value}_bytes" for c in STATE_CLASSES)
_N = len(_FIELDS)


class OutOfMemoryError(CsaPlanError):
    """A fail-closed refusal; ``refusal`` is the typed OutOfMemory record."""

    exit_code = ExitCode.REFUSED

    def __init__(self, refusal: Refusal) -> None:
        super().__init__(refusal.message)
        self.refusal = refusal


class SharedStateError(CsaPlanError):
    """A refused shared-state charge or attachment; ``refusal`` is the typed DoubleCount / UnaccountedReader."""

    exit_code = ExitCode.REFUSED

    def __init__(self, refusal: Refusal) -> None:
        super().__init__(refusal.message)
        self.refusal = refusal


def _counts(charge_bytes: GroupBytes | Mapping[StateClass, int]) -> tuple[int, ...]:
    """Per-class byte counts in STATE_CLASSES order; negative or non-integer is a programming error."""
    if isinstance(charge_bytes, GroupBytes):
        values = tuple(getattr(charge_bytes, name) for name in _FIELDS)
    elif isinstance(charge_bytes, Mapping):
        unknown = [k for k in charge_bytes if not isinstance(k, StateClass)]
        if unknown:
            raise ValueError(f"charge keys must be StateClass members, got {unknown!r}")
        values = tuple(charge_bytes.get(c, 0) for c in STATE_CLASSES)
    else:
        raise TypeError(f"charge bytes must be GroupBytes or a StateClass mapping, got {type(charge_bytes).__name__}")
    for v in values:
        if isinstance(v, bool) or not isinstance(v, int):
            raise ValueError(f"charge bytes must be integers, got {v!r}")
        if not 0 <= v < U64_LIMIT:
            raise ValueError(f"charge bytes must be in 0 .. 2^64 - 1, got {v}")
    if sum(values) >= U64_LIMIT:
        raise ValueError(f"a charge must total below 2^64 bytes, got {sum(values)}")
    return values


def _group(values: list[int] | tuple[int, ...]) -> GroupBytes:
    return GroupBytes(*values)


class Charge:
    """The handle of one successful charge: releases its bytes exactly once.

    Use it as a context manager (or call ``release``) after the memory it accounts
    has been freed; a second release is a harmless no-op, so every exit path may
    release without bookkeeping of its own.
    """

    __slots__ = ("_ledger", "_request", "_device", "_bytes", "_values", "_released", "_source")

    def __init__(self, ledger: "Ledger", request: int, device: int, values: tuple[int, ...]) -> None:
        self._ledger = ledger
        self._request = request
        self._device = device
        self._values = values
        self._bytes = _group(values)
        self._released = False
        self._source: int | None = None  # the kv source layer of a shared-state charge

    # The key a charge was made under is fixed: the release must debit the same (request, device).
    @property
    def request(self) -> int:
        return self._request

    @property
    def device(self) -> int:
        return self._device

    @property
    def bytes(self) -> GroupBytes:
        return self._bytes

    @property
    def released(self) -> bool:
        return self._released

    @property
    def total_bytes(self) -> int:
        return sum(self._values)

    def release(self) -> None:
        self._ledger._release(self)

    def __enter__(self) -> "Charge":
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def __repr__(self) -> str:
        state = "released" if self.released else "live"
        return f"Charge(request={self.request}, device={self.device}, total_bytes={self.total_bytes}, {state})"


class ReaderRef:
    """A reader's hold on its source's one charge: released exactly once (context manager)."""

    __slots__ = ("_ledger", "_key", "reader", "_released")

    def __init__(self, ledger: "Ledger", key: tuple[int, int, int], reader: int) -> None:
        self._ledger = ledger
        self._key = key
        self.reader = reader
        self._released = False

    @property
    def source(self) -> int:
        return self._key[2]

    @property
    def released(self) -> bool:
        return self._released

    def release(self) -> None:
        self._ledger._unref_reader(self)

    def __enter__(self) -> "ReaderRef":
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


class Ledger:
    """Check-then-charge accounting per device, per class and per (request, device)."""

    def __init__(self, limits: Mapping[int, int] | None = None) -> None:
        self._lock = threading.Lock()
        self._limits: dict[int, int] = {}
        for device, limit in (limits or {}).items():
            self._limits[device] = self._checked_limit(limit)
        self._device_class: dict[int, list[int]] = {}
        self._device_total: dict[int, int] = {}
        self._total = 0
        self._by_key: dict[tuple[int, int], list[int]] = {}  # per-class counts, then live charge count
        self._peak_device: dict[int, int] = {}
        self._peak_total = 0
        self._failures = 0
        self._active = 0
        self._next_id = 0
        self._sources: dict[tuple[int, int, int], list] = {}  # (request, device, source) -> [charge, holds]

    @staticmethod
    def _checked_limit(limit: int) -> int:
        if isinstance(limit, bool) or not isinstance(limit, int):
            raise ValueError(f"limit must be an integer number of bytes, got {limit!r}")
        if not 0 <= limit < U64_LIMIT:
            raise ValueError(f"limit must be in 0 .. 2^64 - 1 (0 = unlimited), got {limit}")
        return limit

    # -- ids and limits --------------------------------------------------------------

    def next_request_id(self) -> int:
        """Monotonic per ledger, starting at 0; never reused."""
        with self._lock:
            rid = self._next_id
            self._next_id += 1
            return rid

    def get_limit(self, device: int) -> int:
        with self._lock:
            return self._limits.get(device, 0)

    def set_limit(self, device: int, limit_bytes: int) -> None:
        """A new limit applies to later charges; live charges are never revoked."""
        limit = self._checked_limit(limit_bytes)
        with self._lock:
            self._limits[device] = limit

    # -- charging --------------------------------------------------------------------

    def try_charge(self, request: int, device: int, charge_bytes: GroupBytes | Mapping[StateClass, int]) -> Charge:
        """Charge one group or bundle, or raise OutOfMemoryError having changed only charge_failures."""
        values = _counts(charge_bytes)
        with self._lock:
            return self._charge_locked(request, device, values)

    def _charge_locked(self, request: int, device: int, values: tuple[int, ...]) -> Charge:
        needed = sum(values)
        resident = self._device_total.get(device, 0)
        limit = self._limits.get(device, 0)
        if limit and resident + needed > limit:
            self._failures += 1
            remaining = max(limit - resident, 0)
            raise OutOfMemoryError(Refusal(
                type=RefusalType.OUT_OF_MEMORY,
                layer=None,
                field="bytes",
                expected=str(remaining),
                actual=str(needed),
                message=(f"request {request} on device {device}: OutOfMemory: needs {needed} bytes, "
                         f"limit {limit} bytes, resident {resident} bytes, remaining {remaining} bytes"),
            ))
        per_class = self._device_class.get(device)
        if per_class is None:
            per_class = self._device_class[device] = [0] * _N
        key = (request, device)
        mine = self._by_key.get(key)
        if mine is None:
            mine = self._by_key[key] = [0] * (_N + 1)
        for i, v in enumerate(values):
            per_class[i] += v
            mine[i] += v
        mine[_N] += 1
        resident += needed
        self._device_total[device] = resident
        self._total += needed
        if resident > self._peak_device.get(device, 0):
            self._peak_device[device] = resident
        if self._total > self._peak_total:
            self._peak_total = self._total
        self._active += 1
        return Charge(self, request, device, values)

    def _release(self, charge: Charge) -> None:
        if charge._ledger is not self:
            raise ValueError("charge belongs to another ledger")
        with self._lock:
            if charge._released:
                return
            charge._released = True
            if charge._source is not None:
                self._drop_hold((charge._request, charge._device, charge._source))
                return
            self._debit_locked(charge)

    def _debit_locked(self, charge: Charge) -> None:
        device, values = charge._device, charge._values
        needed = sum(values)
        per_class = self._device_class[device]
        key = (charge._request, device)
        mine = self._by_key[key]
        for i, v in enumerate(values):
            per_class[i] -= v
            mine[i] -= v
        mine[_N] -= 1
        if mine[_N] == 0:
            del self._by_key[key]
        self._device_total[device] -= needed
        self._total -= needed
        self._active -= 1

    # -- shared compressed state -----------------------------------------------------

    def try_charge_source(self, request: int, device: int, source: int,
                          charge_bytes: GroupBytes | Mapping[StateClass, int]) -> Charge:
        """Charge a kv source's state once for (request, device): a second live charge of the same
        source is refused as DoubleCount, before anything changes but ``charge_failures``."""
        values = _counts(charge_bytes)
        key = (request, device, source)
        with self._lock:
            if key in self._sources:
                self._failures += 1
                raise SharedStateError(Refusal(
                    type=RefusalType.DOUBLE_COUNT, layer=source, field="source", expected="one charge per "
                    "(request, device, source)", actual="a second charge",
                    message=(f"request {request} on device {device}: DoubleCount: the state of kv source {source} "
                             "is already charged; its readers attach to that charge (attach_reader)")))
            charge = self._charge_locked(request, device, values)
            charge._source = source
            self._sources[key] = [charge, 1]
            return charge

    def attach_reader(self, request: int, device: int, source: int, reader: int) -> ReaderRef:
        """A reader layer's hold on its source's live charge; with none, a typed UnaccountedReader."""
        key = (request, device, source)
        with self._lock:
            if key not in self._sources:
                self._failures += 1
                raise SharedStateError(Refusal(
                    type=RefusalType.UNACCOUNTED_READER, layer=reader, field="source", expected=f"a live charge "
                    f"of kv source {source}", actual="none",
                    message=(f"request {request} on device {device}: UnaccountedReader: layer {reader} reads kv "
                             f"source {source}, whose state is not charged")))
            self._sources[key][1] += 1
            return ReaderRef(self, key, reader)

    def _unref_reader(self, ref: ReaderRef) -> None:
        if ref._ledger is not self:
            raise ValueError("reader belongs to another ledger")
        with self._lock:
            if ref._released:
                return
            ref._released = True
            self._drop_hold(ref._key)

    def _drop_hold(self, key: tuple[int, int, int]) -> None:
        """One hold (the owner's or a reader's) ends; the last one debits the source's bytes."""
        entry = self._sources[key]
        entry[1] -= 1
        if entry[1] == 0:
            del self._sources[key]
            self._debit_locked(entry[0])

    def source_holds(self, request: int, device: int, source: int) -> int:
        """Live holds (owner and readers) on one source's charge; 0 when it is not resident."""
        with self._lock:
            entry = self._sources.get((request, device, source))
            return entry[1] if entry else 0

    # -- observability ---------------------------------------------------------------

    def resident_bytes(self, device: int | None = None) -> int:
        with self._lock:
            return self._total if device is None else self._device_total.get(device, 0)

    def resident_by_class(self, device: int | None = None) -> GroupBytes:
        with self._lock:
            if device is not None:
                return _group(self._device_class.get(device, [0] * _N))
            sums = [0] * _N
            for per_class in self._device_class.values():
                for i, v in enumerate(per_class):
                    sums[i] += v
            return _group(sums)

    def resident_for(self, request: int, device: int) -> GroupBytes:
        with self._lock:
            mine = self._by_key.get((request, device))
            return _group(mine[:_N]) if mine else GroupBytes()

    def peak_bytes(self, device: int | None = None) -> int:
        """Monotonic high-water mark of resident bytes (all devices together, or one)."""
        with self._lock:
            return self._peak_total if device is None else self._peak_device.get(device, 0)

    def devices(self) -> tuple[int, ...]:
        """Every device that has a limit or has ever been charged."""
        with self._lock:
            return tuple(sorted(set(self._limits) | set(self._device_total)))

    @property
    def charge_failures(self) -> int:
        with self._lock:
            return self._failures

    @property
    def active_group_count(self) -> int:
        """Live charges (groups or bundles) not yet released."""
        with self._lock:
            return self._active

    @property
    def at_baseline(self) -> bool:
        """Nothing resident and nothing live: what teardown must return to."""
        with self._lock:
            return self._total == 0 and self._active == 0 and not self._by_key and not self._sources
