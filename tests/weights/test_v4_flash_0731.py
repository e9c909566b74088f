"""DeepSeek-V4-Flash-0731: the preset, its DSpark draft layers and its tensor inventory.

The figures the inventory must meet were read from the published checkpoint by a public static check
(2026-08-13, revision 7872f01b; docs/deepseek-v4-0731.md): 72,317 tensors, of which the drafter's mtp.*
are 4,705 (2,304 I8 packed FP4, 2,329 F8_E8M0 scales, 25 F8_E4M3, 20 BF16, 27 F32) holding 10.863 GB.
None of them is an input of the inventory, which is built from the config alone.
"""

from __future__ import annotations

import collections
import json

from csa_plan.planner.loaders.model_files import load_model, preset_name
from csa_plan.planner.presets import read_preset
from csa_plan.planner.weights import deepseek_v4


def _inventory():
    return deepseek_v4.build(json.loads(read_preset("deepseek-v4-flash-0731.json")), "deepseek-v4-flash-0731")


def _tensors(inv, *, mtp_only: bool):
    for b, _, _ in inv.layout:
        for w in inv.blocks[b]:
            if mtp_only and not w.is_mtp:
                continue
            for t in (w.tensor, *w.scales):
                yield t, w.copies


def test_preset_and_hf_id_read_the_dspark_layers():
    assert preset_name("deepseek-ai/DeepSeek-V4-Flash-0731") == "deepseek-v4-flash-0731"
    spec = load_model("deepseek-v4-flash-0731")
    assert (spec.num_main_layers, spec.num_mtp_layers, len(spec.layers)) == (43, 3, 46)
    assert [d.compression_ratio for d in spec.layers[43:]] == [0, 0, 0]
    assert any("3 DSpark draft layer(s)" in n for n in spec.notes)
    preview = load_model("deepseek-v4-flash")
    assert [d.compression_ratio for d in spec.layers[:43]] == [d.compression_ratio for d in preview.layers[:43]]


def test_inventory_meets_the_published_tensor_list():
    inv = _inventory()
    assert (inv.num_main_layers, inv.num_mtp_layers) == (43, 3)
    assert sum(n for _, n in _tensors(inv, mtp_only=False)) == 72_317
    draft = collections.Counter()
    for t, n in _tensors(inv, mtp_only=True):
        draft[t.dtype.name] += n
    assert draft == {"I8": 2_304, "F8_E8M0": 2_329, "F8_E4M3": 25, "BF16": 20, "F32": 27}
    draft_bytes = sum(t.nbytes * n for t, n in _tensors(inv, mtp_only=True))
    assert draft_bytes == 10_862_838_300 and round(draft_bytes / 1e9, 3) == 10.863
    assert inv.nbytes == 166_878_536_440


def test_dspark_heads_shapes():
    inv = _inventory()
    shapes = {t.name: t.shape for t, _ in _tensors(inv, mtp_only=True)}
    assert shapes["mtp.0.main_proj.weight"] == (4096, 12288) and shapes["mtp.0.main_proj.scale"] == (32, 96)
    assert shapes["mtp.2.markov_w1.weight"] == (129280, 256)
    assert shapes["mtp.2.confidence_head.proj.weight"] == (1, 4352)
    assert not any(".compressor." in name or ".indexer." in name for name in shapes)  # sliding window only


def test_v41_dspark_layers_are_still_its_nextn_layers():
    spec = load_model("deepseek-v4.1-flash")
    assert (spec.num_main_layers, spec.num_mtp_layers) == (40, 3)


def _numel(inv) -> int:
    import math

    return sum(math.prod(t.shape) * n for t, n in _tensors(inv, mtp_only=False))


def _build(preset: str, **changes):
    config = {**json.loads(read_preset(f"{preset}.json")), **changes}
    return deepseek_v4.build(config, preset)


def test_pro_0813_drafter_is_the_one_pro_dspark_counts():
    """deepseek-ai/DeepSeek-V4-Pro-DSpark publishes 889,484,881,098 parameters (its stored tensors' elements,
    packed FP4 counted a byte each as the Pro preview's 861,608,274,846 are). Of every drafter of 1-4 stages,
    1-4 target layers and markov rank 128/256/512, only the preset's (3, 3, 512) gives that count."""
    assert _numel(_build("deepseek-v4-pro")) == 861_608_274_846
    assert _numel(_build("deepseek-v4-pro-0813")) == 889_484_881_098
    pro = json.loads(read_preset("deepseek-v4-pro.json"))
    n = pro["num_hidden_layers"]
    hits = []
    for stages in (1, 2, 3, 4):
        for targets in (1, 2, 3, 4):
            for rank in (128, 256, 512):
                inv = _build("deepseek-v4-pro", compress_ratios=pro["compress_ratios"][:n] + [0] * stages,
                             n_mtp_layers=stages, dspark_target_layer_ids=list(range(n - targets, n)),
                             dspark_markov_rank=rank)
                if _numel(inv) == 889_484_881_098:
                    hits.append((stages, targets, rank))
    assert hits == [(3, 3, 512)]
    spec = load_model("deepseek-ai/DeepSeek-V4-Pro-0813")
    assert (spec.name, spec.num_main_layers, spec.num_mtp_layers) == ("deepseek-v4-pro-0813", 61, 3)


def test_fp8_repacks_differ_from_the_previews_only_in_expert_bytes():
    for repack, base, hf in (("deepseek-v4-flash-fp8", "deepseek-v4-flash", "sgl-project/DeepSeek-V4-Flash-FP8"),
                             ("deepseek-v4-pro-fp8", "deepseek-v4-pro", "sgl-project/DeepSeek-V4-Pro-FP8")):
        assert preset_name(hf) == repack
        a, b = _build(repack), _build(base)
        experts = lambda inv: sum(  # noqa: E731
            sum(t.nbytes for t in (w.tensor, *w.scales)) * w.copies for blk, _, _ in inv.layout
            for w in inv.blocks[blk] if w.expert is not None)
        assert a.nbytes - experts(a) == b.nbytes - experts(b)
        # FP8 128x128: 1 B an element + a scale per 16,384; FP4: 0.5 B + a scale per 32
        assert 1.87 < experts(a) / experts(b) < 1.89


def test_launch_names_the_dspark_method_for_the_checkpoints_whose_drafter_is_planned():
    from csa_plan.planner.engines.launch import launch_argv
    from csa_plan.planner.engines.settings import EngineSettings

    s = EngineSettings(num_speculative_tokens=3)
    for model, method in (("deepseek-v4-flash-0731", "dspark"), ("deepseek-v4-pro-0813", "dspark"),
                          ("deepseek-v4-flash", "mtp"), ("deepseek-v4-flash-fp8", "mtp")):
        argv = launch_argv("vllm-0.33", model, 2, settings=s).argv
        assert json.loads(argv[argv.index("--speculative-config") + 1])["method"] == method, model
