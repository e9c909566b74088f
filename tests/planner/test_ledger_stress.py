"""Ledger stress: 8 threads, 100,000 operations, several limited devices.

Charges are released by their own thread or handed to another thread; some charge
contexts end in an exception. Nothing may pass a limit, no update may be lost, the
peak only grows, and the ledger ends at its baseline.
"""

from __future__ import annotations

import queue
import random
import threading

from csa_plan.planner.layout import GroupBytes
from csa_plan.planner.ledger import Ledger, OutOfMemoryError

THREADS = 8
OPS_PER_THREAD = 12_500  # 100,000 operations in all
LIMITS = {0: 10_000, 1: 25_000, 2: 5_000, 3: 0}  # device 3 is unlimited


class Boom(Exception):
    pass


def test_ledger_stress():
    ledger = Ledger(limits=LIMITS)
    handoff: queue.SimpleQueue = queue.SimpleQueue()
    stats_lock = threading.Lock()
    stats = {"charged": 0, "released": 0, "refused": 0, "booms": 0, "charged_bytes": 0}
    violations: list[str] = []
    stop = threading.Event()

    def watcher() -> None:
        last_peak = 0
        while not stop.is_set():
            for device, limit in LIMITS.items():
                resident = ledger.resident_bytes(device)
                if limit and resident > limit:
                    violations.append(f"device {device}: {resident} > {limit}")
            peak = ledger.peak_bytes()
            if peak < last_peak:
                violations.append(f"peak went down {last_peak} -> {peak}")
            last_peak = peak

    def worker(seed: int) -> None:
        rng = random.Random(seed)
        mine: list = []
        local = dict.fromkeys(stats, 0)
        for _ in range(OPS_PER_THREAD):
            action = rng.random()
            if action < 0.45:
                device = rng.randrange(4)
                size = GroupBytes(compressed_bytes=rng.randrange(0, 900), scratch_bytes=rng.randrange(1, 200))
                try:
                    charge = ledger.try_charge(rng.randrange(50), device, size)
                except OutOfMemoryError as exc:
                    assert exc.refusal.type.value == "OutOfMemory"
                    local["refused"] += 1
                    continue
                local["charged"] += 1
                local["charged_bytes"] += size.total_bytes
                if rng.random() < 0.3:
                    handoff.put(charge)  # another thread will release it
                else:
                    mine.append(charge)
            elif action < 0.55:
                device = rng.randrange(4)
                try:
                    with ledger.try_charge(rng.randrange(50), device, GroupBytes(carry_bytes=rng.randrange(1, 300))):
                        local["charged"] += 1
                        local["released"] += 1
                        if rng.random() < 0.5:
                            raise Boom()
                except Boom:
                    local["booms"] += 1
                except OutOfMemoryError:
                    local["refused"] += 1
            elif action < 0.8 and mine:
                charge = mine.pop(rng.randrange(len(mine)))
                charge.release()
                charge.release()  # second release is a no-op
                local["released"] += 1
            else:
                try:
                    charge = handoff.get_nowait()
                except queue.Empty:
                    continue
                charge.release()
                local["released"] += 1
        for charge in mine:
            charge.release()
            local["released"] += 1
        with stats_lock:
            for k, v in local.items():
                stats[k] += v

    watch = threading.Thread(target=watcher)
    watch.start()
    threads = [threading.Thread(target=worker, args=(seed,)) for seed in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    while True:  # release what was handed off but never picked up
        try:
            handoff.get_nowait().release()
            stats["released"] += 1
        except queue.Empty:
            break
    stop.set()
    watch.join()

    assert violations == []
    assert stats["charged"] > 10_000 and stats["refused"] > 1_000 and stats["booms"] > 100
    assert stats["charged"] == stats["released"]
    assert ledger.charge_failures == stats["refused"]
    assert ledger.resident_bytes() == 0 and ledger.active_group_count == 0
    assert ledger.at_baseline
    assert ledger.resident_by_class() == GroupBytes()
    for device, limit in LIMITS.items():
        assert ledger.resident_bytes(device) == 0
        if limit:
            assert 0 < ledger.peak_bytes(device) <= limit
    assert ledger.peak_bytes() <= sum(LIMITS.values()) + ledger.peak_bytes(3)
