"""One test per sentence of CONTRACT §3, plus the concurrency proof."""

from __future__ import annotations

import random
import threading

import pytest

from csa_plan.planner.layout import GroupBytes, StateClass
from csa_plan.planner.ledger import Charge, Ledger, OutOfMemoryError
from csa_plan.planner.refusals import RefusalType

CSA = GroupBytes(compressed_bytes=152_829_952, carry_bytes=65_536, index_bytes=17_825_792,
                 index_carry_bytes=16_384, dense_ring_bytes=74_624, scratch_bytes=1_675_264)
HCA = GroupBytes(compressed_bytes=4_775_936, carry_bytes=524_288, dense_ring_bytes=74_624, scratch_bytes=4_259_840)


def snapshot(ledger: Ledger, devices=(0, 1), requests=(0, 1, 2)) -> tuple:
    return (
        ledger.resident_bytes(), ledger.resident_by_class(), ledger.peak_bytes(), ledger.active_group_count,
        tuple((ledger.resident_bytes(d), ledger.resident_by_class(d), ledger.peak_bytes(d), ledger.get_limit(d))
              for d in devices),
        tuple(ledger.resident_for(r, d) for r in requests for d in devices),
    )


def test_charge_is_a_per_class_byte_record():
    ledger = Ledger()
    charge = ledger.try_charge(0, 0, CSA)
    assert charge.bytes == CSA
    assert ledger.resident_by_class(0) == CSA
    assert ledger.resident_bytes(0) == 172_487_552
    assert ledger.resident_by_class(0).by_class()[StateClass.INDEX] == 17_825_792


def test_charge_accepts_a_class_mapping_bundle():
    ledger = Ledger()
    bundle = {StateClass.COMPRESSED: 10, StateClass.SCRATCH: 5}
    charge = ledger.try_charge(3, 1, bundle)
    assert charge.bytes == GroupBytes(compressed_bytes=10, scratch_bytes=5)
    assert ledger.resident_for(3, 1) == GroupBytes(compressed_bytes=10, scratch_bytes=5)


def test_bundle_equals_sum_of_its_groups():
    grouped, bundled = Ledger(), Ledger()
    for _ in range(30):
        grouped.try_charge(0, 0, CSA)
    for _ in range(31):
        grouped.try_charge(0, 0, HCA)
    bundled.try_charge(0, 0, CSA.scaled(30) + HCA.scaled(31))
    assert grouped.resident_by_class(0) == bundled.resident_by_class(0)
    assert grouped.resident_bytes() == 30 * 172_487_552 + 31 * 9_634_688
    assert grouped.active_group_count == 61 and bundled.active_group_count == 1


def test_fail_closed_is_typed_and_mutates_only_charge_failures():
    ledger = Ledger({0: 200_000_000})
    ledger.try_charge(1, 0, CSA)
    ledger.try_charge(2, 1, HCA)
    before = snapshot(ledger)
    with pytest.raises(OutOfMemoryError) as info:
        ledger.try_charge(2, 0, HCA.scaled(3))
    refusal = info.value.refusal
    assert refusal.type is RefusalType.OUT_OF_MEMORY
    assert refusal.field == "bytes" and refusal.layer is None
    assert refusal.expected == str(200_000_000 - 172_487_552)
    assert refusal.actual == str(3 * 9_634_688)
    for word in ("request 2", "device 0", "needs 28904064", "limit 200000000", "resident 172487552"):
        assert word in refusal.message
    assert snapshot(ledger) == before
    assert ledger.charge_failures == 1


def test_exactly_at_the_limit_fits_one_byte_more_does_not():
    ledger = Ledger({0: 100})
    ledger.try_charge(0, 0, {StateClass.COMPRESSED: 60})
    ledger.try_charge(1, 0, {StateClass.CARRY: 40})
    with pytest.raises(OutOfMemoryError):
        ledger.try_charge(2, 0, {StateClass.SCRATCH: 1})
    assert ledger.resident_bytes(0) == 100 and ledger.charge_failures == 1


def test_limit_is_per_device():
    ledger = Ledger({0: 100, 1: 1000})
    with pytest.raises(OutOfMemoryError):
        ledger.try_charge(0, 0, {StateClass.COMPRESSED: 101})
    ledger.try_charge(0, 1, {StateClass.COMPRESSED: 101})
    assert ledger.resident_bytes(1) == 101 and ledger.resident_bytes(0) == 0


def test_unlimited_by_default_never_refuses_yet_accounts():
    ledger = Ledger()
    handles = [ledger.try_charge(r, r % 2, CSA.scaled(1000)) for r in range(50)]
    assert ledger.get_limit(0) == 0 and ledger.get_limit(7) == 0
    assert ledger.charge_failures == 0
    assert ledger.resident_bytes() == 50 * 1000 * 172_487_552
    assert ledger.resident_bytes(1) == 25 * 1000 * 172_487_552
    assert ledger.resident_by_class().index_bytes == 50 * 1000 * 17_825_792
    assert ledger.peak_bytes() == 50 * 1000 * 172_487_552
    assert ledger.active_group_count == 50
    for h in handles:
        h.release()
    assert ledger.at_baseline


def test_explicit_zero_limit_means_unlimited():
    ledger = Ledger({0: 0})
    ledger.try_charge(0, 0, CSA.scaled(10**6))
    assert ledger.charge_failures == 0


def test_release_exactly_once_and_second_release_is_a_noop():
    ledger = Ledger()
    keep = ledger.try_charge(0, 0, HCA)
    charge = ledger.try_charge(1, 0, CSA)
    charge.release()
    assert charge.released
    after_first = snapshot(ledger)
    charge.release()
    with charge:
        pass
    assert snapshot(ledger) == after_first
    assert ledger.resident_bytes() == HCA.total_bytes and ledger.active_group_count == 1
    keep.release()


def test_context_manager_releases_on_every_exit_path():
    ledger = Ledger()
    with ledger.try_charge(0, 0, CSA) as charge:
        assert isinstance(charge, Charge) and ledger.active_group_count == 1
    assert charge.released and ledger.at_baseline
    with pytest.raises(RuntimeError):
        with ledger.try_charge(0, 0, CSA):
            raise RuntimeError("allocation failed after the charge")
    assert ledger.at_baseline


def test_residency_is_isolated_per_request_and_device():
    ledger = Ledger()
    a = ledger.try_charge(1, 0, CSA)
    ledger.try_charge(1, 1, HCA)
    ledger.try_charge(2, 0, HCA)
    ledger.try_charge(2, 0, HCA)
    assert ledger.resident_for(1, 0) == CSA
    assert ledger.resident_for(1, 1) == HCA
    assert ledger.resident_for(2, 0) == HCA.scaled(2)
    assert ledger.resident_for(2, 1) == GroupBytes()
    a.release()
    assert ledger.resident_for(1, 0) == GroupBytes()
    assert ledger.resident_for(1, 1) == HCA and ledger.resident_for(2, 0) == HCA.scaled(2)


def test_teardown_returns_to_baseline():
    ledger = Ledger({0: 10**12, 1: 10**12})
    handles = [ledger.try_charge(r, d, CSA if d else HCA) for r in range(20) for d in (0, 1)]
    for h in reversed(handles):
        h.release()
    assert ledger.resident_bytes() == 0 and ledger.active_group_count == 0
    assert ledger.resident_by_class() == GroupBytes()
    assert all(ledger.resident_for(r, d) == GroupBytes() for r in range(20) for d in (0, 1))
    assert ledger.at_baseline
    assert ledger.peak_bytes() == 20 * (CSA.total_bytes + HCA.total_bytes)  # the peak survives teardown


def test_peak_is_a_monotonic_high_water_mark():
    ledger = Ledger()
    seen = []
    a = ledger.try_charge(0, 0, {StateClass.COMPRESSED: 50})
    seen.append(ledger.peak_bytes())
    b = ledger.try_charge(1, 1, {StateClass.COMPRESSED: 30})
    seen.append(ledger.peak_bytes())
    a.release()
    seen.append(ledger.peak_bytes())
    c = ledger.try_charge(2, 0, {StateClass.COMPRESSED: 10})
    seen.append(ledger.peak_bytes())
    b.release()
    c.release()
    seen.append(ledger.peak_bytes())
    assert seen == [50, 80, 80, 80, 80]
    assert ledger.peak_bytes(0) == 50 and ledger.peak_bytes(1) == 30


def test_active_group_count_counts_live_charges():
    ledger = Ledger()
    handles = [ledger.try_charge(0, 0, GroupBytes()) for _ in range(3)]
    assert ledger.active_group_count == 3
    handles[1].release()
    handles[1].release()
    assert ledger.active_group_count == 2


def test_get_and_set_limit_round_trip():
    ledger = Ledger({2: 500})
    assert ledger.get_limit(2) == 500 and ledger.get_limit(3) == 0
    ledger.set_limit(3, 1234)
    assert ledger.get_limit(3) == 1234
    ledger.try_charge(0, 3, {StateClass.CARRY: 1000})
    ledger.set_limit(3, 100)  # lowering below residency revokes nothing, refuses later charges
    assert ledger.resident_bytes(3) == 1000
    with pytest.raises(OutOfMemoryError):
        ledger.try_charge(1, 3, {StateClass.CARRY: 1})
    ledger.set_limit(3, 0)
    ledger.try_charge(1, 3, {StateClass.CARRY: 1})
    assert ledger.resident_bytes(3) == 1001


def test_request_ids_are_monotonic_per_instance():
    one, two = Ledger(), Ledger()
    ids = [one.next_request_id() for _ in range(5)]
    assert ids == [0, 1, 2, 3, 4]
    assert two.next_request_id() == 0  # instance state, never a global


def test_instances_do_not_share_state():
    one, two = Ledger({0: 10}), Ledger()
    one.try_charge(0, 0, {StateClass.CARRY: 10})
    assert two.resident_bytes() == 0 and two.get_limit(0) == 0 and two.peak_bytes() == 0
    with pytest.raises(ValueError):
        two._release(one.try_charge(1, 1, GroupBytes()))


@pytest.mark.parametrize("bad", [{StateClass.CARRY: -1}, GroupBytes(scratch_bytes=-5), {StateClass.CARRY: 1.5},
                                 {"carry": 3}, {StateClass.CARRY: True}])
def test_negative_or_malformed_bytes_are_programming_errors(bad):
    ledger = Ledger()
    with pytest.raises(ValueError):
        ledger.try_charge(0, 0, bad)
    assert ledger.charge_failures == 0 and ledger.at_baseline


@pytest.mark.parametrize("limit", [-1, 1.5, True])
def test_bad_limits_are_programming_errors(limit):
    with pytest.raises(ValueError):
        Ledger({0: limit})
    with pytest.raises(ValueError):
        Ledger().set_limit(0, limit)


def test_concurrent_charges_never_exceed_limit_lose_nothing_and_end_at_zero():
    threads_n, ops_per_thread = 8, 12_500  # 100,000 operations in all
    limit = 10_000
    ledger = Ledger({0: limit, 1: limit})
    counts = [[0, 0] for _ in range(threads_n)]  # successes, failures per thread
    over = []

    def worker(seed: int) -> None:
        rng = random.Random(seed)
        held: list[Charge] = []
        ok = fail = 0
        for _ in range(ops_per_thread):
            if held and rng.random() < 0.5:
                held.pop(rng.randrange(len(held))).release()
            else:
                device = rng.randrange(2)
                try:
                    held.append(ledger.try_charge(seed, device, {StateClass.COMPRESSED: rng.randrange(1, 700)}))
                    ok += 1
                except OutOfMemoryError:
                    fail += 1
                if ledger.resident_bytes(device) > limit:
                    over.append(device)
        for h in held:
            h.release()
            h.release()
        counts[seed] = [ok, fail]

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(threads_n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert over == []
    assert ledger.peak_bytes(0) <= limit and ledger.peak_bytes(1) <= limit
    assert ledger.charge_failures == sum(f for _, f in counts) > 0
    assert sum(s for s, _ in counts) > 0
    assert ledger.resident_bytes() == 0 and ledger.active_group_count == 0 and ledger.at_baseline
