"""The physics clock of DeepSeek-V4.1 costs each layer by its role (planner/steptime/roles.py): readers run
no compressor and no indexer, the indexers inside layer 20's candidates are flat beyond 16,384 positions,
the Engram tables are lookups (not dense weights), V4's figures are untouched, and a V4.1 replay names its
step-time source and its carried band."""

from __future__ import annotations

from functools import lru_cache

import pytest

from csa_plan.planner.loaders.model_files import load_model
from csa_plan.planner.placement import Placement
from csa_plan.planner.serving.step_source import model_inputs
from csa_plan.planner.steptime import roles
from csa_plan.planner.steptime.breakdown import decode_breakdown
from csa_plan.planner.steptime.physics import model_cost, physics_step_time
from csa_plan.planner.weights.rules import RULES
from csa_plan.planner.weights.tensors import Role

from helpers import EXAMPLES

TRACE = str(EXAMPLES / "traces" / "mooncake_conversation_head200.jsonl")
HOPPER = roles.ReadFormats(584, 584, 68, "sglang-0.5.23 V4 records on Hopper")


@lru_cache(maxsize=None)
def _model(name: str):
    spec = load_model(name)
    data, inv = model_inputs(spec)
    return spec, data, inv


def _terms():
    spec, _, _ = _model("deepseek-v4.1-flash")
    return {t.layer: t for t in roles.shared_terms([d for d in spec.layers if not d.is_mtp], HOPPER)}


def test_readers_run_no_compressor_and_no_indexer():
    spec, _, inv = _model("deepseek-v4.1-flash")
    t = _terms()
    for reader in (3, 7, 19, 21, 25, 39):
        assert (t[reader].position_flops, t[reader].bounded_flops, t[reader].context_read_bytes) == (0, 0, 0)
        # window (128 x 64 heads x 512 x 4) + gathered top-k 512 of the source's records, same at ratio 1 and 2
        assert t[reader].attn_flops == (128 + 512) * 64 * 512 * 4
        assert t[reader].request_read_bytes == 128 * 584 + 512 * 584
    for window_only in (0, 1):
        assert t[window_only].attn_flops == 128 * 64 * 512 * 4 and t[window_only].request_read_bytes == 128 * 584
    # the compressor and indexer linears exist on their owners only (the weight inventory the budget reads)
    owners = {Role.COMPRESSOR_LINEAR: set(), Role.INDEXER_WQ_B: set(), Role.INDEXER_WK: set()}
    for w in inv.weights:
        if w.role in owners and not w.is_mtp:
            owners[w.role].add(w.layer)
    assert owners == {Role.COMPRESSOR_LINEAR: {2, 8, 14, 20}, Role.INDEXER_WK: {2, 8, 14, 20},
                      Role.INDEXER_WQ_B: {2, 8, 14, 20, 24, 28, 32, 36}}
    # ratio 2 compresses with a gate (wkv + wgate), ratio 1 without (wkv alone): half the compressor's FLOPs
    comp = {layer: sum(w.elements for w in inv.weights if w.role is Role.COMPRESSOR_LINEAR and w.layer == layer)
            for layer in (2, 20)}
    assert comp[2] == 2 * comp[20] == 2 * 512 * 5120
    # so a reader's step share has fewer FLOPs than its source's, and all readers of a ratio cost alike
    rows = {r.layer: r for r in _breakdown("deepseek-v4.1-flash", 131072)}
    assert rows[3].flops < rows[2].flops and rows[3].flops == rows[19].flops == rows[21].flops
    assert rows[3].weight_bytes < rows[2].weight_bytes


def test_index_sources_own_or_bounded():
    t = _terms()
    score = 32 * 128 * 2
    assert t[2].position_flops == score / 2 and t[2].context_read_bytes == 68 / 2  # ratio 2: one key per 2 tokens
    assert t[20].position_flops == score and t[20].context_read_bytes == 68  # ratio 1: a key per token
    for layer in (24, 28, 32, 36):
        assert t[layer].bound_positions == 2048 * 8 == 16384
        assert t[layer].position_flops == 0 and t[layer].bounded_flops == score * 16384
        assert t[layer].request_read_bytes == 128 * 584 + 512 * 584 + 16384 * 68


def test_candidate_bounded_indexer_flat_beyond_the_bound():
    t = _terms()
    assert t[24].decode(16384) == t[24].decode(131072) == t[24].decode(1_048_576)
    assert t[20].decode(131072)[0] > t[20].decode(16384)[0]  # the candidate stage scores the whole context
    a, b = (_breakdown("deepseek-v4.1-flash", n) for n in (65536, 1_048_576))
    by = lambda rows: {r.layer: r for r in rows}  # noqa: E731
    assert by(a)[24].seconds == by(b)[24].seconds and by(a)[20].seconds < by(b)[20].seconds


def _breakdown(name: str, context: int):
    spec, data, inv = _model(name)
    return decode_breakdown(spec, data, inv, "h200", Placement(tp=8, ep=8), "sglang", RULES["sglang-0.5.23"],
                            context, formats=HOPPER if roles.is_shared(spec.layers) else None)


def test_breakdown_sums_to_the_step():
    from csa_plan.planner.steptime.model import linear_seconds

    spec, data, inv = _model("deepseek-v4.1-flash")
    rows = _breakdown("deepseek-v4.1-flash", 131072)
    st = physics_step_time(spec, data, inv, "h200", Placement(tp=8, ep=8), "sglang", "SGLang 0.5.23",
                           RULES["sglang-0.5.23"], formats=HOPPER)
    assert sum(r.seconds for r in rows) == pytest.approx(linear_seconds(st.linear, 1, 0, 0.0, 1, 131072), rel=1e-12)
    assert len(rows) == 41 and rows[-1].layer is None


def test_engram_is_a_lookup_not_a_dense_weight():
    spec, data, inv = _model("deepseek-v4.1-flash")
    flat = roles.flat_config(data)
    from csa_plan.planner.cards import HOSTS

    gpu = roles.engram_read(flat, "sglang-0.5.23", 8, 1, HOSTS["h200"])
    assert gpu.link_bytes_s is None and gpu.bytes_per_token == 2 * 3 * 264  # 24 columns over TP 8, two tables
    host = roles.engram_read(flat, "vllm-0.33", 8, 1, HOSTS["h200"])  # vLLM keeps them pinned on the host
    assert host.link_bytes_s == 64e9 and host.bytes_per_token == 2 * 3 * 264
    with_tables = model_cost(spec, data, inv, RULES["sglang-0.5.23"], Placement(tp=8, ep=8), HOPPER, gpu)
    engram_bytes = sum(w.nbytes for w in inv.weights if w.role is Role.ENGRAM)
    assert engram_bytes > 180 * 2**30 and with_tables.dense_bytes < 3 * 2**30  # the 188.8 GiB are not read a step
    assert with_tables.engram_bytes_per_token == 1584


def test_v4_is_costed_as_before():
    spec, data, inv = _model("deepseek-v4-flash")
    assert not roles.is_shared(spec.layers)
    cost = model_cost(spec, data, inv, RULES["sglang-0.5.23"], Placement(tp=8, ep=8))
    assert (cost.token_index_flops, cost.engram_bytes_per_token, cost.engram_bytes_s) == (0.0, 0.0, 0.0)
    st = physics_step_time(spec, data, inv, "h200", 8, "sglang", "SGLang 0.5.23")
    assert "role" not in st.provenance and "carried" not in st.band


def test_v41_physics_replay_names_its_source_and_band(csa):
    r = csa("simulate", TRACE, "--model", "deepseek-v4.1-flash", "--device-memory", "h200", "--tp", "8", "--ep", "8",
            "--engine", "sglang-0.5.23", "--json")
    assert r.code == 0, r.err
    doc = r.json()
    st = doc["time"]["step_time"]
    assert st["source"] == "physics" and "each layer costed by its role" in st["label"]
    assert "V4 records" in st["label"] and "Engram in HBM: 1,584 B" in st["label"]
    assert st["band"].startswith("V4's band, carried, not measured")
    rt = doc["runtime"]
    assert rt["tpot"]["p50_s"] > 0 and rt["ttft"]["p50_s"] > 0


def test_v41_held_out_rows_are_published_rows_and_replay(capsys):
    """The V4.1 rows found (never fitted) keep the published table's columns and are timed by the tool
    docs/steptime.md quotes."""
    import csv
    import runpy

    root = EXAMPLES.parent
    with (root / "benchmarks" / "published_serving.csv").open(encoding="utf-8") as f:
        header = next(csv.reader(f))
    with (root / "benchmarks" / "published_serving_v41_heldout.csv").open(encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == header and {r["model"] for r in rows} == {"deepseek-v4.1-flash"}
    assert all(r["strategy"] == "held-out" and r["source_id"] and r["tpot_ms"] for r in rows)
    runpy.run_path(str(root / "tools" / "v41_heldout.py"), run_name="not_main")["main"]([])
    table = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| vllm") or
             line.startswith("| sglang")]
    assert len(table) == len(rows)
    doc = (root / "docs" / "steptime.md").read_text(encoding="utf-8")
    assert all(line in doc for line in table), "docs/steptime.md: paste python tools/v41_heldout.py's table"
    # the band every V4.1 output prints quotes these errors: it stays true when the clock changes
    cells = [[c.strip() for c in line.split("|")] for line in table]
    for tpot_err, ttft_err in ((c[9], c[12]) for c in cells):
        assert tpot_err in roles.SHARED_BAND and ttft_err in roles.SHARED_BAND


def test_without_the_engine_widths_the_records_say_whose_they_are():
    spec, data, inv = _model("deepseek-v4.1-flash")
    st = physics_step_time(spec, data, inv, "b200", 8, "vllm", "vLLM 0.33")
    assert "records: the model's formats (nvfp4 records, mxfp8 windows, mxfp4 keys), the engine's own widths " \
           "not modelled" in st.provenance
    with_widths = physics_step_time(spec, data, inv, "b200", 8, "vllm", "vLLM 0.33", formats=HOPPER)
    assert "records: sglang-0.5.23 V4 records on Hopper" in with_widths.provenance
    assert with_widths.linear != st.linear  # 584 B records read more than 288 B ones


@pytest.mark.parametrize("card, widths", [("h200", "584 B records, 584 B windows, 132 B keys"),
                                          ("b200", "288 B records, 528 B windows, 132 B keys")])
def test_vllm_v41_replay_reads_its_release_widths(csa, card, widths):
    """vLLM 0.33's own KV specs give the widths (DEEPSEEK_V41.md §5: fp8_ds_mla 584 B off SM100, nvfp4_ds_mla
    288 B with 528 B windows on SM100, FP8 132 B index keys), and its Engram tables sit on the host."""
    r = csa("simulate", TRACE, "--model", "deepseek-v4.1-flash", "--device-memory", card, "--tp", "8", "--ep", "8",
            "--engine", "vllm-0.33", "--json")
    assert r.code == 0, r.err
    label = r.json()["time"]["step_time"]["label"]
    assert f"records: vllm-0.33's KV specs ({widths})" in label and "Engram on the host: 1,584 B" in label
