"""The winner as its engine is started (issue 45 item 4): the launch command in the engine's own flags."""

from __future__ import annotations

import pytest

from csa_plan.planner.engines.launch import FLAGS, family, launch_argv
from csa_plan.planner.engines.settings import OPTION_SPELLING, OWNER, EngineSettings


def test_vllm_serve_in_vllm_s_words():
    launch = launch_argv("vllm-0.33", "deepseek-v4-flash", tp=4, dp=2, max_seq_len=16384,
                         settings=EngineSettings(max_num_seqs=256, async_scheduling=False))
    assert launch.argv == ("vllm", "serve", "deepseek-ai/DeepSeek-V4-Flash", "--tensor-parallel-size", "4",
                           "--data-parallel-size", "2", "--max-model-len", "16384", "--max-num-seqs", "256",
                           "--no-async-scheduling")
    assert launch.text.startswith("vllm serve deepseek-ai/DeepSeek-V4-Flash --tensor-parallel-size 4")


def test_sglang_launch_server_in_sglang_s_words():
    launch = launch_argv("sglang-0.5.23", "deepseek-v4-pro", tp=8, dp=1, max_seq_len=65536,
                         settings=EngineSettings(mem_fraction_static=0.85, max_running_requests=128,
                                                 num_speculative_tokens=2))
    assert launch.argv == ("python", "-m", "sglang.launch_server", "--model-path", "deepseek-ai/DeepSeek-V4-Pro",
                           "--tp-size", "8", "--context-length", "65536", "--max-running-requests", "128",
                           "--mem-fraction-static", "0.85")  # in the settings' own order
    assert launch.unexpressed == ("num_speculative_tokens",)  # vLLM's setting: never guessed into SGLang's words


def test_a_model_file_is_launched_by_its_path_and_onnx_genai_is_no_server():
    assert launch_argv("vllm-0.33", "/models/v4/config.json", tp=1).argv[2] == "/models/v4/config.json"
    assert launch_argv("onnx-genai", "deepseek-v4-flash", tp=1) is None and family("onnx-genai") is None


@pytest.mark.parametrize("fam, owner", [("vllm", "vLLM"), ("sglang", "SGLang")])
def test_each_setting_flag_is_the_one_spelling_csa_plan_takes_it_by(fam, owner):
    """One spelling: every setting a launch writes is written as csa-plan's own option for it (the engines'
    spelling), and it is that engine's setting or a shared one, never the other engine's."""
    for name, flag in FLAGS[fam].items():
        if name in ("tp", "dp", "max_seq_len", "enable_prefix_caching", "num_speculative_tokens",
                    "cuda_graph_max_bs"):  # SGLang 0.5.23's own flag is --cuda-graph-max-bs-decode (test_launch_flags)
            continue
        assert OPTION_SPELLING[name].split("/")[0] == flag, name
        assert OWNER.get(name, owner) == owner, name


def test_vllm_s_mtp_draft_count_is_its_speculative_config():
    argv = launch_argv("vllm-0.33", "deepseek-v4-flash", tp=4, settings=EngineSettings(num_speculative_tokens=2)).argv
    assert argv[-2:] == ("--speculative-config", '{"method": "mtp", "num_speculative_tokens": 2}')
    off = launch_argv("vllm-0.33", "deepseek-v4-flash", tp=4, settings=EngineSettings(num_speculative_tokens=0))
    assert "--speculative-config" not in off.argv and not off.unexpressed
