"""The straightforward replay: every admission and release charged through a real Ledger.

It exists to prove the fast path (``simulate.simulate``) right: both consume the same
``Scenario`` and must return equal ``SimResult``s (tests compare them exactly).
"""

from __future__ import annotations

import heapq
from collections import deque

from csa_plan.planner.layout import STATE_CLASSES, GroupBytes
from csa_plan.planner.ledger import Ledger, OutOfMemoryError
from csa_plan.planner.placement import Router
from csa_plan.planner.reserve.fast import DevicePeak, SimResult, summarize
from csa_plan.planner.reserve.decisions import Decisions
from csa_plan.planner.reserve.scenario import Outcome, Policy, Scenario, clock_overflow
from csa_plan.planner.clock import MAX_CLOCK_NS

def replay(scn: Scenario) -> tuple[SimResult, Ledger]:
    """Event by event through a real Ledger: one bundle charge per (request, device).

    Observables are sampled after every whole event (an admission of all of a
    request's bundles, a refusal, a release), so a refused request's momentary
    partial charges under --pp are not part of the committed peak.
    """
    import numpy as np

    placement, config = scn.config.placement, scn.config
    limit = config.limit_bytes
    ndev = placement.device_count
    ledger = Ledger({dev: limit for dev in range(ndev)})
    n = scn.requests
    arr = scn.arrival_ns.tolist()
    hold = scn.hold_ns.tolist()
    tier = scn.tier.tolist()
    upfront = scn.upfront.tolist()
    outcome = list(upfront)
    replica = [-1] * n
    admit = [-1] * n
    handles: dict[int, list] = {}
    ids: dict[int, int] = {}
    events = [(arr[i], 1, i) for i in range(n)]
    heapq.heapify(events)
    queue: deque[int] = deque()
    pointer = 0

    peak = [0] * ndev
    peak_ns = [0] * ndev
    at_peak = [GroupBytes()] * ndev
    byte_ns = [0] * ndev
    total_peak, total_peak_ns, total_at_peak = 0, 0, GroupBytes()
    class_max = [0] * len(STATE_CLASSES)
    in_flight = peak_in_flight = 0
    clock = arr[0] if n else 0

    def route() -> int:
        if placement.router is Router.ROUND_ROBIN or placement.dp == 1:
            return pointer
        loads = [sum(ledger.resident_bytes(dev) for dev in placement.replica_devices(r)) for r in range(placement.dp)]
        return loads.index(min(loads))

    running = [0] * placement.dp
    last_reason = [Outcome.OUT_OF_MEMORY.value]

    def admit_request(i: int, t: int) -> bool:
        nonlocal pointer, in_flight
        if t + hold[i] > MAX_CLOCK_NS:  # the same stop as the decision loops'
            raise clock_overflow(scn, i, t)
        r = route()
        if config.max_running and running[r] >= config.max_running:  # the engine's running-request cap
            last_reason[0] = Outcome.RUNNING_CAP.value
            return False
        last_reason[0] = Outcome.OUT_OF_MEMORY.value
        made = []
        try:
            for dev in placement.replica_devices(r):
                made.append(ledger.try_charge(ids[i], dev, scn.bundles[tier[i]][placement.stage_of(dev)]))
        except OutOfMemoryError:
            for h in made:
                h.release()
            return False
        handles[i] = made
        running[r] += 1
        replica[i], admit[i] = r, t
        pointer = (r + 1) % placement.dp
        heapq.heappush(events, (t + hold[i], 0, i))
        in_flight += 1
        return True

    def observe_now(t: int) -> None:
        nonlocal total_peak, total_peak_ns, total_at_peak, peak_in_flight
        for dev in range(ndev):
            level = ledger.resident_bytes(dev)
            if level > peak[dev]:
                peak[dev], peak_ns[dev], at_peak[dev] = level, t, ledger.resident_by_class(dev)
        total = ledger.resident_bytes()
        if total > total_peak:
            total_peak, total_peak_ns, total_at_peak = total, t, ledger.resident_by_class()
        for c, v in enumerate(ledger.resident_by_class().by_class().values()):
            class_max[c] = max(class_max[c], v)
        peak_in_flight = max(peak_in_flight, in_flight)

    while events:
        t, kind, i = heapq.heappop(events)
        for dev in range(ndev):
            byte_ns[dev] += ledger.resident_bytes(dev) * (t - clock)
        clock = t
        if kind == 0:
            for h in handles.pop(i):
                h.release()
            running[replica[i]] -= 1
            in_flight -= 1
            observe_now(t)
            more_releases = events and events[0][0] == t and events[0][1] == 0
            if config.policy is Policy.QUEUE and not more_releases:
                while queue and admit_request(queue[0], t):
                    queue.popleft()
                    observe_now(t)
            continue
        ids[i] = ledger.next_request_id()
        if upfront[i] != Outcome.ADMITTED.value:
            continue
        if config.policy is Policy.QUEUE and queue:
            queue.append(i)
        elif admit_request(i, t):
            outcome[i] = Outcome.ADMITTED.value
        elif config.policy is Policy.QUEUE:
            queue.append(i)
        else:
            outcome[i] = last_reason[0]
        observe_now(t)
    if queue:
        raise RuntimeError("replay ended with requests still queued")

    d = Decisions(np.array(outcome, dtype=np.int8), np.array(replica, dtype=np.int64), np.array(admit, dtype=np.int64))
    devices = tuple(DevicePeak(dev, ledger.get_limit(dev), peak[dev], peak_ns[dev], at_peak[dev], byte_ns[dev],
                               ledger.resident_by_class(dev)) for dev in range(ndev))
    span = (clock - arr[0]) if n else 0
    result = SimResult(**summarize(scn, d), devices=devices, peak_bytes=total_peak, peak_ns=total_peak_ns,
                       at_peak=total_at_peak, class_max=GroupBytes(*class_max), peak_in_flight=peak_in_flight,
                       span_ns=span, decisions=d)
    return result, ledger


