"""Issue 47, class 6: every option of every command either changes the answer or is refused where it cannot.

The tables below classify every option of ``check``, ``compare``, ``simulate`` and ``sweep``, enumerated from
the commands' own ``PARAMS``: an option added without a line here fails ``test_every_option_is_classified``.
``REFUSED`` gives a command line where the option cannot apply; each is run and must end in one line, exit
2, naming the option. ``APPLIES`` says why the option always bears on the answer or the output (its own
tests elsewhere show how)."""

from __future__ import annotations

import pytest

from helpers import EXAMPLES

MIX = str(EXAMPLES / "mixes" / "chat-h200.yaml")
TRACE = str(EXAMPLES / "traces" / "sample.jsonl")
SPEC = str(EXAMPLES / "sweeps" / "small.yaml")
ENGINE_RUN = ("--model", "deepseek-v4-flash", "--device-memory", "h200", "--tp", "2")

# An engine setting without --engine: refused by the engine group itself (cli/option_groups.py).
ENGINE_SAMPLES = {
    "--engine": None, "--kv-memory": "10GiB", "--gpu": "h200", "--block-size": "256", "--page-size": "256",
    "--kv-cache-dtype": "fp8", "--indexer-kv-dtype": "fp8", "--max-num-batched-tokens": "4096",
    "--chunked-prefill-size": "4096", "--max-num-seqs": "64", "--max-running-requests": "64",
    "--async-scheduling": "", "--num-speculative-tokens": "1", "--speculative-num-steps": "1",
    "--speculative-eagle-topk": "1", "--speculative-num-draft-tokens": "2", "--gpu-memory-utilization": "0.9",
    "--mem-fraction-static": "0.9", "--moe-runner-backend": "marlin", "--shared-expert-tp1": "",
    "--cudagraph-capture-sizes": "1,2,4", "--max-cudagraph-capture-size": "4", "--enforce-eager": "",
    "--compilation-config": '{"cudagraph_mode": "PIECEWISE"}', "--estimate-cudagraphs": "",
    "--moe-backend": "marlin", "--cuda-graph-max-bs": "8", "--disable-cuda-graph": "", "--moe-a2a-backend": "deepep",
    "--all2all-backend": "deepep_low_latency",
    "--usage": "serve", "--enable-encoder-swa-bounded-replay": "", "--load-balance-method": "total_requests",
}
# The engines' own spellings of the deployment (planner/engines/flags.py): without --engine none can be read.
SPELLINGS = ("--tensor-parallel-size", "-tp", "--tp-size", "--data-parallel-size", "-dp", "--dp-size",
             "--pipeline-parallel-size", "-pp", "--pp-size", "--enable-expert-parallel", "-ep",
             "--expert-parallel-size", "--ep-size", "--enable-dp-attention")
SPELLING_SAMPLES = {o: "" if o in ("--enable-expert-parallel", "-ep", "--enable-dp-attention") else "2" for o in SPELLINGS}
ENGINE_ALWAYS = {"--engine": "names the engine model (its own pool, refusals and replay)",
                 "--gpu": "names the target card (its memory and capability) for the engine and the budget"}

DEPLOYMENT_APPLIES = {
    "--tp": "shards the state and the weights", "--pp": "splits the layers into stages",
    "--dp": "replicas: devices and routing", "--ep": "expert placement in the weights budget (refused where "
                                                   "the reference layout fixes it)",
    "--weights": "replaces the weights term of the budget (refused without a device)",
    "--reserved": "set aside besides the pool (refused without a device)",
}

APPLIES: dict[str, dict[str, str]] = {
    "check": {
        "--gate": "which layers the gate admits", "--layout": "the layout profile sized",
        "--max-seq-len": "tokens reserved per request", "--batch": "sequences per state group",
        "--kv-format": "the cache format sized", "--window": "the sliding window sized",
        "--query-len": "the scratch workspaces sized", "--device-memory": "the budget and its verdict",
        "--concurrency": "the requests the longest-context answer holds", "--brief": "the text printed",
        "--json": "the document printed",
        "--from-log": "calibrates the budget on the log (refused without a device)",
        "--index-key-format": "the index-key format of shared compressed state (refused on V4 models)",
        **DEPLOYMENT_APPLIES, **ENGINE_ALWAYS},
    "compare": {
        "--max-seq-len": "tokens reserved per request", "--device-memory": "the budget compared against",
        "--layout": "the layouts compared", "--engine": "the engines compared", "--batch": "sequences per group",
        "--query-len": "scratch workspaces", "--brief": "the text printed", "--json": "the document printed",
        "--plot": "the chart written", **DEPLOYMENT_APPLIES},
    "simulate": {
        "--model": "the model replayed", "--layout": "the layout charged", "--max-seq-len": "the reservation",
        "--device-memory": "the pool", "--reserve": "the reservation rule (refused with a replayed engine)",
        "--policy": "refuse or queue (refused with a replayed engine)", "--prefill-tok-s": "the fixed clock",
        "--tpot-ms": "the fixed clock", "--rate-scale": "the arrival rate", "--format": "how the trace is read",
        "--find-capacity": "searches the rate (refused with a closed loop)", "--brief": "the text printed",
        "--verify": "cross-checks the ledger (refused with a replayed engine)", "--json": "the document printed",
        "--plot": "the chart written", "--budget-plot": "the waterfall written (said when no device)",
        "--max-ttft": "bounds the rate --find-capacity searches (refused without it)",
        "--max-tpot": "bounds the rate --find-capacity searches (refused without it)",
        **DEPLOYMENT_APPLIES, **ENGINE_ALWAYS},
    "sweep": {"--ray": "where the points run", "--resume": "the points kept and skipped", "--top": "rows shown",
              "--brief": "the text printed", "--json": "the document printed", "--plot": "the chart written",
              **DEPLOYMENT_APPLIES},
}

REFUSED: dict[str, dict[str, tuple[tuple[str, ...], str]]] = {
    "check": {
        "--at-length": (("check", "deepseek-v4-flash", "--at-length", "1000"), "--at-length"),
        "--per-layer": (("check", "deepseek-v4-flash", "--per-layer", "--json"), "--per-layer"),
        "--budget-plot": (("check", "deepseek-v4-flash", "--budget-plot", "b.png"), "--budget-plot"),
        "--load-balance-method": (("check", "deepseek-v4-flash", "--device-memory", "h200", "--engine",
                                   "sglang-0.5.23", "--load-balance-method", "total_requests"), "--load-balance-method"),
        "--host-memory": (("check", "deepseek-v4-flash", "--device-memory", "h200", "--host-memory", "1TiB"),
                          "--host-memory"),
        "--engram-config": (("check", "deepseek-v4-flash", "--device-memory", "h200", "--engine", "vllm-0.33",
                             "--engram-config", '{"cpu_offload": false}'), "--engram-config"),
        "--enable-dsv41-engram-host-table": (("check", "deepseek-v4.1-flash", "--enable-dsv41-engram-host-table"),
                                             "--enable-dsv41-engram-host-table"),
        "--prefill-workers": (("check", "deepseek-v4-flash", "--prefill-workers", "1"), "--decode-workers"),
        "--prefill-tp": (("check", "deepseek-v4-flash", "--prefill-tp", "2"), "--decode-workers"),
        "--decode-workers": (("check", "deepseek-v4-flash", "--decode-workers", "1"), "--prefill-workers"),
        "--decode-tp": (("check", "deepseek-v4-flash", "--decode-tp", "2"), "--prefill-workers"),
        "--prefill-dp": (("check", "deepseek-v4-flash", "--prefill-dp", "2"), "--prefill-dp"),
        "--prefill-ep": (("check", "deepseek-v4-flash", "--prefill-ep", "2"), "--prefill-ep"),
        "--decode-dp": (("check", "deepseek-v4-flash", "--decode-dp", "2"), "--decode-dp"),
        "--decode-ep": (("check", "deepseek-v4-flash", "--decode-ep", "2"), "--decode-ep"),
        "--kv-offloading-size": (("check", "deepseek-v4-flash", "--kv-offloading-size", "10"), "--kv-offloading-size"),
        "--enable-hierarchical-cache": (("check", "deepseek-v4-flash", "--enable-hierarchical-cache"),
                                        "--enable-hierarchical-cache"),
        "--hicache-size": (("check", "deepseek-v4-flash", "--engine", "sglang-0.5.23", "--device-memory", "h200",
                            "--tp", "2", "--hicache-size", "10"), "--hicache-size"),
        "--hicache-ratio": (("check", "deepseek-v4-flash", "--engine", "sglang-0.5.23", "--device-memory", "h200",
                             "--tp", "2", "--hicache-ratio", "2"), "--hicache-ratio"),
    },
    "compare": {"--budget-plot": (("compare", "deepseek-v4-flash", "--budget-plot", "b.png"), "--budget-plot")},
    "simulate": {
        "--step-time": (("simulate", MIX, "--step-time", "physics"), "--step-time"),
        "--max-concurrency": (("simulate", MIX, "--max-concurrency", "4"), "--max-concurrency"),
        "--spec-acceptance": (("simulate", TRACE, *ENGINE_RUN, "--engine", "vllm-0.33", "--spec-acceptance", "0.5"),
                              "--spec-acceptance"),
        "--enable-prefix-caching": (("simulate", MIX, "--enable-prefix-caching"), "--enable-prefix-caching"),
        "--disable-radix-cache": (("simulate", MIX, "--disable-radix-cache"), "--disable-radix-cache"),
        "--columns": (("simulate", MIX, "--columns", "arrival=a,prompt=b,output=c"), "--columns"),
        "--time-unit": (("simulate", MIX, "--time-unit", "ms"), "--time-unit"),
        "--where": (("simulate", MIX, "--where", "a=b"), "--where"),
        "--keep-failures": (("simulate", MIX, "--keep-failures"), "--keep-failures"),
        "--sort": (("simulate", MIX, "--sort"), "--sort"),
        "--max-wait": (("simulate", MIX, "--max-wait", "5"), "--max-wait"),
        "--prefill-workers": (("simulate", TRACE, "--prefill-workers", "1"), "--decode-workers"),
        "--prefill-tp": (("simulate", TRACE, "--prefill-tp", "2"), "--decode-workers"),
        "--decode-workers": (("simulate", TRACE, "--decode-workers", "1"), "--prefill-workers"),
        "--decode-tp": (("simulate", TRACE, "--decode-tp", "2"), "--prefill-workers"),
        "--prefill-dp": (("simulate", TRACE, "--prefill-dp", "2"), "--prefill-dp"),
        "--prefill-ep": (("simulate", TRACE, "--prefill-ep", "2"), "--prefill-ep"),
        "--decode-dp": (("simulate", TRACE, "--decode-dp", "2"), "--decode-dp"),
        "--decode-ep": (("simulate", TRACE, "--decode-ep", "2"), "--decode-ep"),
        "--transfer-link": (("simulate", TRACE, "--transfer-link", "ib-ndr"), "--transfer-link"),
        "--disaggregation-decode-enable-radix-cache": (("simulate", TRACE, "--disaggregation-decode-enable-radix-cache"),
                                                       "--disaggregation-decode-enable-radix-cache"),
        "--kv-offloading-size": (("simulate", TRACE, "--kv-offloading-size", "10"), "--kv-offloading-size"),
        "--enable-hierarchical-cache": (("simulate", TRACE, "--enable-hierarchical-cache"),
                                        "--enable-hierarchical-cache"),
        "--hicache-size": (("simulate", TRACE, *ENGINE_RUN, "--engine", "sglang-0.5.23", "--hicache-size", "10"),
                           "--hicache-size"),
        "--hicache-ratio": (("simulate", TRACE, *ENGINE_RUN, "--engine", "sglang-0.5.23", "--hicache-ratio", "2"),
                            "--hicache-ratio"),
        "--bucket": (("simulate", MIX, "--bucket", "8192"), "--bucket"),
        "--router": (("simulate", MIX, "--router", "least-loaded"), "--router"),
    },
    "sweep": {
        "--jobs": (("sweep", SPEC, "-j", "2", "--ray", "auto"), "--jobs"),
        "--step-time": (("sweep", SPEC, "--step-time", "physics"), "--step-time"),
        "--budget-plot": (("sweep", SPEC, "--budget-plot", "b.png"), "--budget-plot"),
    },
}


def _options(command: str) -> set[str]:
    import importlib

    params = importlib.import_module(f"csa_plan.cli.{command}").PARAMS
    return {p.decls[0] for p in params if hasattr(p, "decls")}


@pytest.mark.parametrize("command", sorted(APPLIES))
def test_every_option_is_classified(command):
    options = _options(command)
    engine = {o for o in options if o in ENGINE_SAMPLES or o in SPELLING_SAMPLES}
    classified = set(APPLIES[command]) | set(REFUSED[command]) | engine
    assert options - classified == set(), f"{command}: options neither shown to apply nor refused"
    assert classified - options == set(), f"{command}: the table names options the command lacks"


CASES = [(c, o, args, needle) for c, table in REFUSED.items() for o, (args, needle) in table.items()]


@pytest.mark.parametrize("command, option, args, needle", CASES, ids=[f"{c}{o}" for c, o, _, _ in CASES])
def test_an_option_that_cannot_apply_is_refused(csa, command, option, args, needle):
    r = csa(*args)
    assert r.code == 2 and needle in r.err and len(r.err.strip().splitlines()) == 1, (r.code, r.err)


ENGINE_CASES = [(c, o) for c in ("check", "simulate") for o in sorted(_options(c) & {*ENGINE_SAMPLES, *SPELLINGS})
                if ENGINE_SAMPLES.get(o, "") is not None and o != "--gpu"]


@pytest.mark.parametrize("command, option", ENGINE_CASES, ids=[f"{c}{o}" for c, o in ENGINE_CASES])
def test_an_engine_setting_without_an_engine_is_refused(csa, command, option):
    value = ENGINE_SAMPLES[option] if option in ENGINE_SAMPLES else SPELLING_SAMPLES[option]
    head = ("check", "deepseek-v4-flash", "--device-memory", "h200") if command == "check" else \
        ("simulate", TRACE, *ENGINE_RUN)
    r = csa(*head, option, *((value,) if value else ()))
    assert r.code == 2 and "--engine" in r.err and len(r.err.strip().splitlines()) == 1, (option, r.err)


@pytest.mark.parametrize("field, value", [("max_concurrency", "4"), ("spec_acceptance", "0.5")])
def test_a_mix_setting_a_sweep_cannot_honour_is_refused(csa, tmp_path, field, value):
    mix = tmp_path / "m.yaml"
    mix.write_text(f"name: m\nseed: 1\nrequests: 20\nmodel: deepseek-v4-flash\n{field}: {value}\nclasses:\n"
                   "  - name: a\n    rate: 1\n    prompt: {dist: fixed, value: 100}\n    output: {dist: fixed, value: 10}\n")
    spec = tmp_path / "s.yaml"
    spec.write_text("name: s\nworkload: m.yaml\ngrid:\n  model: deepseek-v4-flash\n  device: h200\n  tp: 2\n"
                    "  engine: vllm-0.33\nconstraints: {wait_p99_max_s: 10}\n")
    r = csa("sweep", str(spec), "-j", "1")
    assert r.code == 2 and f"m.yaml: {field}" in r.err and len(r.err.strip().splitlines()) == 1, r.err


@pytest.mark.parametrize("bound", ["ttft_p99_max_s: 0.000001", "tpot_p99_max_ms: 0.001"])
def test_latency_bounds_on_a_grid_with_no_engine_are_refused(csa, tmp_path, bound):
    spec = tmp_path / "s.yaml"
    spec.write_text(f"name: s\nworkload: {TRACE}\ngrid:\n  model: deepseek-v4-flash\n  device: h200\n"
                    f"constraints: {{{bound}}}\n")
    r = csa("sweep", str(spec), "-j", "1")
    assert r.code == 2 and "no engine point" in r.err and bound.split(":")[0] in r.err, r.err
    axis = tmp_path / "a.yaml"
    axis.write_text(f"name: s\nworkload: {TRACE}\ngrid:\n  model: deepseek-v4-flash\n  device: h200\n"
                    "  step_time: [physics, measured]\n")
    r = csa("sweep", str(axis), "-j", "1")
    assert r.code == 2 and "grid.step_time" in r.err and "no engine point" in r.err, r.err
