"""Every launch command csa-plan emits parses under that engine release's own argument parser (issue 45 item 4).

The flag tables are what each release's parser registers (``tests/fixtures/engine_flags.json``, extracted by
``tools/extract_engine_flags.py`` from vLLM 0.25/0.26/0.27/0.28/0.33/0.34 ``vllm/engine/arg_utils.py`` and SGLang 0.5.23
``sglang/srt/server_args.py``, run on CPU). The test cannot import the engines, so it rebuilds an argparse
parser from the table: an unknown flag, a value outside the flag's choices, a value that is not the flag's
type, or a flag missing its value fails -- as ``vllm serve`` / ``sglang.launch_server`` would refuse it.
"""

from __future__ import annotations

import argparse
import itertools
import json
from functools import lru_cache
from pathlib import Path

import pytest

from csa_plan.planner.engines.launch import NEGATABLE, launch_argv
from csa_plan.planner.engines.registry import get_engine
from csa_plan.planner.engines.settings import EngineSettings

TABLE = Path(__file__).resolve().parents[1] / "fixtures" / "engine_flags.json"
RELEASES = ("vllm-0.25", "vllm-0.26", "vllm-0.27", "vllm-0.28", "vllm-0.33", "vllm-0.34", "sglang-0.5.23")


class Refused(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # argparse exits; the test wants the reason
        raise Refused(message)


@lru_cache(maxsize=None)
def table() -> dict:
    return json.loads(TABLE.read_text())


@lru_cache(maxsize=None)
def parser(engine: str) -> _Parser:
    t = table()[engine]
    p = _Parser(prog=engine, allow_abbrev=False, add_help=False)
    if engine.startswith("vllm"):
        p.add_argument("model")  # vllm serve MODEL
    for flag in t["switches"]:
        p.add_argument(flag, action="store_true", dest=flag)
    kinds = {"int": int, "float": float, "str": str}
    for flag, (kind, choices) in t["values"].items():
        nargs = "?" if flag in t["optional"] else "+" if flag in t["many"] else None
        p.add_argument(flag, type=kinds[kind], choices=choices if kind == "str" else None, nargs=nargs, dest=flag)
    return p


def check(engine: str, argv: tuple[str, ...]) -> argparse.Namespace:
    """Parse a launch argv as the release would (its program words first)."""
    if engine.startswith("vllm"):
        assert argv[:2] == ("vllm", "serve"), argv
        rest = argv[2:]
    else:
        assert argv[:3] == ("python", "-m", "sglang.launch_server"), argv
        rest = argv[3:]
    return parser(engine).parse_args(list(rest))


def test_the_table_is_each_release_s_own():
    t = table()
    assert set(RELEASES) <= set(t)
    for engine in RELEASES:
        assert len(t[engine]["values"]) + len(t[engine]["switches"]) > 250, engine  # the whole parser, not a list
    assert "--enable-expert-parallel" in t["vllm-0.33"]["switches"]
    assert "--no-enable-prefix-caching" in t["vllm-0.26"]["switches"]
    assert "--no-enable-prefix-caching" not in t["vllm-0.33"]["switches"]  # a plain switch from 0.33 on
    assert "--tp-size" in t["sglang-0.5.23"]["values"] and "--enable-dp-attention" in t["sglang-0.5.23"]["switches"]


@pytest.mark.parametrize("engine, argv, why", [
    ("vllm-0.33", ("vllm", "serve", "m", "--page-size", "64"), "unrecognized"),  # SGLang's word on vLLM
    ("vllm-0.33", ("vllm", "serve", "m", "--moe-backend", "no_such_backend"), "invalid choice"),
    ("vllm-0.33", ("vllm", "serve", "m", "--max-num-seqs"), "expected one argument"),
    ("vllm-0.33", ("vllm", "serve", "m", "--max-num-seqs", "lots"), "invalid int"),
    ("vllm-0.33", ("vllm", "serve", "m", "--no-enable-prefix-caching"), "unrecognized"),
    ("sglang-0.5.23", ("python", "-m", "sglang.launch_server", "--model-path", "m", "--tensor-parallel", "4"),
     "unrecognized"),
    ("sglang-0.5.23", ("python", "-m", "sglang.launch_server", "--model-path", "m", "--moe-runner-backend", "x"),
     "invalid choice"),
])
def test_the_check_refuses_what_the_engine_refuses(engine, argv, why):
    with pytest.raises(Refused, match=why):
        check(engine, argv)


def _settings_for(engine: str) -> list[EngineSettings | None]:
    """Deployments' settings over every option the engine model reads that a launch writes."""
    opts = get_engine(engine).options
    out: list[EngineSettings | None] = [None]
    if engine.startswith("vllm"):
        out += [EngineSettings(max_num_seqs=256, max_num_batched_tokens=8192, gpu_memory_utilization=0.9),
                EngineSettings(num_speculative_tokens=1, kv_cache_dtype="fp8", block_size=256),
                EngineSettings(num_speculative_tokens=3, async_scheduling=False, enforce_eager=True),
                EngineSettings(async_scheduling=True, enforce_eager=False, moe_backend="marlin"),
                EngineSettings(max_cudagraph_capture_size=512, estimate_cudagraphs=True),
                EngineSettings(cudagraph_capture_sizes=(1, 2, 4, 8),
                               compilation_config='{"cudagraph_mode": "PIECEWISE"}'),
                EngineSettings(moe_backend="flashinfer_cutlass", num_speculative_tokens=0,
                               all2all_backend="deepep_low_latency")]
    else:
        out += [EngineSettings(max_running_requests=128, chunked_prefill_size=8192, mem_fraction_static=0.85),
                EngineSettings(speculative_num_steps=3, speculative_eagle_topk=1, speculative_num_draft_tokens=4,
                               page_size=256, kv_cache_dtype="fp8_e4m3"),
                EngineSettings(moe_runner_backend="flashinfer_mxfp4", cuda_graph_max_bs=256, disable_cuda_graph=False),
                EngineSettings(moe_runner_backend="marlin", disable_cuda_graph=True, moe_a2a_backend="deepep",
                               shared_expert_tp1=True),
                EngineSettings(enable_encoder_swa_bounded_replay=True),
                EngineSettings(enable_encoder_swa_bounded_replay=False)]
    for s in out[1:]:
        assert set(s.given()) <= set(opts), (engine, set(s.given()) - set(opts))
    return out


@pytest.mark.parametrize("engine", RELEASES)
def test_every_launch_csa_plan_emits_parses_under_the_release_s_own_parser(engine):
    n = 0
    for (tp, dp, ep), settings, model in itertools.product(
            [(tp, dp, ep) for tp in (1, 2, 4, 8) for dp in (1, 2, 4, 8) for ep in (None, 1, tp * dp)],
            _settings_for(engine), ("deepseek-v4-flash", "deepseek-v4-pro", "deepseek-v4-flash-0731",
                                     "/models/v4/config.json")):
        launch = launch_argv(engine, model, tp, dp, 9216, settings, ep=ep)
        ns = vars(check(engine, launch.argv))
        n += 1
        if engine.startswith("vllm"):
            assert ns["--tensor-parallel-size"] == tp and (ns["--data-parallel-size"] or 1) == dp
            assert ns["--enable-expert-parallel"] == bool(ep and ep > 1)
        else:  # SGLang reads --tp-size as every GPU; dp attention splits it (planner/engines/flags.py)
            assert ns["--tp-size"] == tp * dp and (ns["--dp-size"] or 1) == dp
            assert ns["--enable-dp-attention"] == (dp > 1)
        assert ns["--max-model-len" if engine.startswith("vllm") else "--context-length"] == 9216
        # what is not written is said: nothing a flag carries is left unexpressed
        assert ("--speculative-config" in launch.argv) == bool(settings and settings.num_speculative_tokens)
        for name in launch.unexpressed:
            assert name in ("indexer_kv_dtype", "usage", "speculative_eagle_topk", "speculative_num_draft_tokens",
                            "num_speculative_tokens") or name not in get_engine(engine).options, name
    assert n > 400


@pytest.mark.parametrize("engine", [e for e in RELEASES if e.startswith("vllm")])
def test_a_false_boolean_is_written_only_where_the_release_has_its_no_form(engine):
    launch = launch_argv(engine, "deepseek-v4-flash", 4, settings=EngineSettings(async_scheduling=False,
                                                                                  enforce_eager=False))
    check(engine, launch.argv)
    assert "--no-async-scheduling" in launch.argv and "--no-enforce-eager" in launch.argv
    for name in NEGATABLE[engine]:
        assert "--no-" + name.replace("_", "-") in table()[engine]["switches"], (engine, name)


@pytest.mark.parametrize("engine", RELEASES)
def test_each_role_of_a_disaggregated_deployment_parses_under_the_release_s_own_parser(engine):
    """issue 46: the prefill and the decode command, each parsed by the release's table; vLLM's role in
    ``--kv-transfer-config`` JSON as KVTransferConfig reads it (kv_connector NixlConnector, kv_role
    kv_producer / kv_consumer: config/kv_transfer.py:60-73), SGLang's ``--disaggregation-mode`` among its choices
    and its transfer backend among ``--disaggregation-transfer-backend``'s."""
    from csa_plan.planner.engines.launch import disaggregated_launch
    from csa_plan.planner.serving.disaggregation import Disaggregation, Role

    for roles in (Disaggregation(Role(1, 8), Role(2, 8)), Disaggregation(Role(3, 4), Role(1, 8))):
        launches = disaggregated_launch(engine, "deepseek-v4-pro", roles, 33792, EngineSettings(max_num_seqs=128)
                                        if engine.startswith("vllm") else EngineSettings(max_running_requests=128))
        assert set(launches) == {"prefill", "decode"}
        for name, launch in launches.items():
            role = getattr(roles, name)
            ns = vars(check(engine, launch.argv))
            assert launch.replicas == role.workers
            if engine.startswith("vllm"):
                assert ns["--tensor-parallel-size"] == role.tp and ns["--max-num-seqs"] == 128
                config = json.loads(ns["--kv-transfer-config"])
                assert config == {"kv_connector": "NixlConnector",
                                  "kv_role": {"prefill": "kv_producer", "decode": "kv_consumer"}[name]}
            else:
                assert ns["--tp-size"] == role.tp and ns["--max-running-requests"] == 128
                assert ns["--disaggregation-mode"] == name
                assert ns["--disaggregation-transfer-backend"] == "mooncake"


@pytest.mark.parametrize("engine", RELEASES)
def test_a_role_s_data_and_expert_parallel_shape_parses_under_the_release_s_own_parser(engine):
    """issue 46: a role with dp and ep carries them as the release spells them, the aggregated shape's flags:
    vLLM ``--data-parallel-size dp --enable-expert-parallel`` (EP over tp x dp), SGLang ``--tp-size tp*dp
    --dp-size dp --enable-dp-attention --ep-size ep``; a role without them has none of those flags."""
    from csa_plan.planner.engines.launch import disaggregated_launch
    from csa_plan.planner.serving.disaggregation import Disaggregation, Role

    roles = Disaggregation(Role(1, 2, 8, 16), Role(2, 8))
    launches = disaggregated_launch(engine, "deepseek-v4-pro", roles, 33792, None)
    prefill = vars(check(engine, launches["prefill"].argv))
    decode = vars(check(engine, launches["decode"].argv))
    assert launches["prefill"].replicas == 1 and launches["decode"].replicas == 2
    if engine.startswith("vllm"):
        assert prefill["--tensor-parallel-size"] == 2 and prefill["--data-parallel-size"] == 8
        assert "--enable-expert-parallel" in launches["prefill"].argv
        assert "--enable-expert-parallel" not in launches["decode"].argv
        assert "--data-parallel-size" not in launches["decode"].argv
        assert json.loads(prefill["--kv-transfer-config"])["kv_role"] == "kv_producer"
    else:
        assert prefill["--tp-size"] == 16 and prefill["--dp-size"] == 8 and prefill["--ep-size"] == 16
        assert "--enable-dp-attention" in launches["prefill"].argv
        assert decode["--tp-size"] == 8 and "--enable-dp-attention" not in launches["decode"].argv
        assert prefill["--disaggregation-mode"] == "prefill"
