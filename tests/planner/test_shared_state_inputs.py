"""A shared-state config, mutated field by field: a model or bad input, never a crash; the ledger's
shared charges under random interleavings always return to baseline with exact residency."""

from __future__ import annotations

import copy
import json
import random

import pytest

from csa_plan.planner.errors import BadInput
from csa_plan.planner.layout import StateClass
from csa_plan.planner.ledger import Ledger, SharedStateError
from csa_plan.planner.loaders.model_files import from_hf_config
from csa_plan.planner.plan import PlanOptions, plan_model

from helpers import ROOT

PRESET = json.loads((ROOT / "planner" / "presets" / "deepseek-v4.1-flash.json").read_text())
FIELDS = ("kv_source_layer_ids", "index_source_layer_ids", "candidate_source_layer_id", "candidate_topk_blocks",
          "candidate_block_size", "compress_ratios", "index_topk", "engram_layer_ids", "engram_num_embeddings",
          "engram_head_dim", "num_nextn_predict_layers", "sliding_window")
VALUES = (None, -1, 0, 1, 2, 3, 7, 128, 2**62, 2**64, 1.5, True, "2", [], [0], [2, 8], [8, 2], [2, 2], [40],
          [-1], [True], [[2]], {"a": 1}, [0, 0, 2] + [1] * 40, [4] * 43, [2] * 43)


def test_mutated_configs_load_or_are_bad_input():
    rng = random.Random(42)
    for _ in range(1000):
        cfg = copy.deepcopy(PRESET)
        text = cfg["text_config"]
        for field in rng.sample(FIELDS, rng.randint(1, 2)):
            value = rng.choice(VALUES)
            if value is None:
                text.pop(field, None)
            else:
                text[field] = copy.deepcopy(value)
        try:
            spec = from_hf_config(cfg, source="mutant", name="mutant")
        except BadInput:
            continue
        try:
            plan = plan_model(spec, PlanOptions(max_seq_len=4096))
        except BadInput:
            continue
        for layer in plan.layers:  # refused layers are never sized; admitted readers never hold source state
            if layer.refusals:
                assert layer.bytes is None
            elif layer.descriptor.mode is not None and layer.descriptor.mode.value == "reader":
                assert layer.bytes.compressed_bytes == layer.bytes.index_bytes == 0


def test_random_shared_charges_return_to_baseline():
    rng = random.Random(7)
    ledger = Ledger({0: 10_000, 1: 0})
    live: dict[tuple[int, int, int], list] = {}  # key -> [owner handle or None, reader handles, bytes]
    expected = {0: 0, 1: 0}
    for _ in range(3000):
        op = rng.random()
        key = (rng.randrange(4), rng.randrange(2), rng.choice((2, 8, 20)))
        entry = live.get(key)
        if op < 0.3:
            size = rng.randrange(1, 3000)
            failures = ledger.charge_failures
            try:
                charge = ledger.try_charge_source(*key, {StateClass.COMPRESSED: size})
            except SharedStateError as exc:
                assert entry is not None and exc.refusal.type.value == "DoubleCount"
                assert ledger.charge_failures == failures + 1
                continue
            except Exception as exc:  # OutOfMemory: only device 0 has a limit
                assert key[1] == 0 and type(exc).__name__ == "OutOfMemoryError"
                continue
            assert entry is None
            live[key] = [charge, [], size]
            expected[key[1]] += size
        elif op < 0.6:
            try:
                ref = ledger.attach_reader(*key, reader=rng.randrange(40))
            except SharedStateError as exc:
                assert entry is None and exc.refusal.type.value == "UnaccountedReader"
                continue
            entry[1].append(ref)
        elif entry is not None:
            handles = ([entry[0]] if entry[0] is not None else []) + entry[1]
            h = rng.choice(handles)
            h.release()
            h.release()  # exactly once
            if h is entry[0]:
                entry[0] = None
            else:
                entry[1].remove(h)
            if entry[0] is None and not entry[1]:
                expected[key[1]] -= entry[2]
                del live[key]
        for device in (0, 1):
            assert ledger.resident_bytes(device) == expected[device]
        for k, e in live.items():
            assert ledger.source_holds(*k) == (e[0] is not None) + len(e[1])
    for e in list(live.values()):
        for h in ([e[0]] if e[0] is not None else []) + e[1]:
            h.release()
    assert ledger.at_baseline
