"""``check --from-log FILE``: a real start-up log calibrates the start-up terms; the terms it implies are
shown beside csa-plan's; a log of another model, release, GPU or TP is bad input naming the mismatch."""

from __future__ import annotations

from pathlib import Path

from csa_plan.planner.budget.from_log import read_startup_log

LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "startup_logs"
RTX_LOG = str(LOGS / "vllm-0.25-rtx-pro-6000-flash-tp2.log")
SGLANG_LOG = str(LOGS / "sglang-23933-pro-h20-tp16-dp2.log")
RTX = ("check", "deepseek-v4-flash", "--engine", "vllm-0.25", "--device-memory", "rtx-pro-6000", "--tp", "2",
       "--max-seq-len", "1M", "--max-num-seqs", "64", "--num-speculative-tokens", "2",
       "--gpu-memory-utilization", "0.95", "--kv-cache-dtype", "fp8")


def test_the_log_is_read():
    log = read_startup_log(RTX_LOG)
    assert (log.engine, log.version, log.capability, log.tp) == ("vllm", "0.25.0", (12, 0), 2)
    assert (log.model_loading_gib, log.util, log.util_eq, log.kv_gib, log.kv_tokens) == \
        (75.64, 0.95, 0.9334, 10.29, 1_993_100)
    assert log.args["max_num_batched_tokens"] == 4096 and log.args["num_speculative_tokens"] == 2


def test_from_log_is_exact_and_term_by_term(csa):
    r = csa(*RTX, "--max-num-batched-tokens", "4096", "--from-log", RTX_LOG, "--json")
    assert r.code == 0, r.err
    d = r.json()
    assert d["engine"]["pool"]["log_lines"] == ["GPU KV cache size: 1,993,100 tokens",
                                                "Maximum concurrency for 1,048,576 tokens per request: 1.90x"]
    cal = d["budget"]["calibration"]
    terms = {t["term"].split(" (")[0]: t for t in cal["terms"]}
    graphs = terms["CUDA graph estimate"]
    assert graphs["implied_bytes"] == round((0.95 - 0.9334) * 102_641_958_912)
    assert abs(graphs["implied_bytes"] - graphs["predicted_bytes"]) < 1 << 20
    assert terms["weights + buffers built with the model"]["implied_bytes"] == int(75.64 * (1 << 30))
    assert d["budget"]["kv_memory_bytes"] == cal["implied_kv_bytes"]
    text = csa(*RTX, "--max-num-batched-tokens", "4096", "--from-log", RTX_LOG)
    assert "what the log implies, what csa-plan predicts" in " ".join(text.out.split())


def test_from_log_rescales_when_the_flags_change(csa):
    """Doubling max_num_batched_tokens doubles the activation term; the calibration step stays the log's."""
    at_log = csa(*RTX, "--max-num-batched-tokens", "4096", "--from-log", RTX_LOG, "--json").json()["budget"]
    more = csa(*RTX, "--max-num-batched-tokens", "8192", "--from-log", RTX_LOG, "--json").json()["budget"]
    step = lambda b, p: next(s for s in b["stages"][0]["steps"] if s["label"].startswith(p))  # noqa: E731
    assert step(more, "calibration")["bytes"] == step(at_log, "calibration")["bytes"] == at_log["calibration"][
        "offset_bytes"]
    assert step(more, "other profile-run")["bytes"] == 2 * step(at_log, "other profile-run")["bytes"]
    assert more["kv_memory_bytes"] < at_log["kv_memory_bytes"]


def test_a_mismatched_log_is_bad_input_naming_the_mismatch(csa):
    for args, why in ((("--engine", "vllm-0.26", "--device-memory", "rtx-pro-6000", "--tp", "2"), "release: the log is vllm 0.25.0"),
                      (("--engine", "vllm-0.25", "--device-memory", "h200", "--tp", "2"), "GPU: the log's device is sm_120"),
                      (("--engine", "vllm-0.25", "--device-memory", "rtx-pro-6000", "--tp", "4"), "tensor parallel"),
                      (("--engine", "sglang-0.5.23", "--device-memory", "rtx-pro-6000", "--tp", "2"), "engine: the log is vllm's")):
        r = csa("check", "deepseek-v4-flash", *args, "--from-log", RTX_LOG)
        assert r.code == 2 and why in r.err and len(r.err.strip().splitlines()) == 1, r.err
    r = csa("check", "deepseek-v4-pro", "--engine", "vllm-0.25", "--device-memory", "rtx-pro-6000", "--tp", "2",
            "--from-log", RTX_LOG)
    assert r.code == 2 and "model: the log loads 'deepseek-ai/DeepSeek-V4-Flash'" in r.err
    for path, why in (("/nonexistent.log", "--from-log: no such file"), (SGLANG_LOG, "engine: the log is sglang's")):
        r = csa("check", "deepseek-v4-flash", "--engine", "vllm-0.25", "--device-memory", "rtx-pro-6000",
                "--tp", "2", "--from-log", path)
        assert r.code == 2 and why in r.err, r.err
    r = csa("check", "deepseek-v4-flash", "--engine", "vllm-0.25", "--from-log", RTX_LOG)
    assert r.code == 2 and "needs a device" in r.err
    r = csa(*RTX, "--from-log", RTX_LOG, "--kv-memory", "10GiB")
    assert r.code == 2 and "--from-log" in r.err


def test_not_a_log_is_bad_input(csa, tmp_path):
    p = tmp_path / "x.log"
    p.write_text("hello\n" * 10)
    r = csa(*RTX, "--from-log", str(p))
    assert r.code == 2 and "not a vLLM or SGLang start-up log" in r.err


def test_sglang_log_calibrates_the_pool(csa):
    """sglang#23933's max_total_num_tokens=1059584: 0.5.23's pool rules (16 // 2 = 8 requests a DP-attention
    worker) give it at 7.15-7.17 GiB; with the log
    the check answers the log's token count (the log has no weights line: those terms say so)."""
    r = csa("check", "deepseek-v4-pro", "--engine", "sglang-0.5.23", "--gpu", "h20", "--tp", "8", "--dp", "2",
            "--moe-runner-backend", "marlin", "--shared-expert-tp1", "--mem-fraction-static", "0.9",
            "--max-running-requests", "16", "--max-seq-len", "1M", "--from-log", SGLANG_LOG, "--json")
    assert r.code in (0, 3), r.err
    d = r.json()
    assert d["engine"]["pool"]["tokens"] == 1_059_584
    terms = d["budget"]["calibration"]["terms"]
    assert terms[0]["implied_bytes"] is None and 7.15 < terms[-1]["implied_bytes"] / (1 << 30) < 7.17


def test_after_capture_lines_are_read_and_the_card_is_checked(csa):
    """vllm#50576's "Free memory on device (46.93/47.4 GiB)" and "Actual usage is 40.33 GiB ..., 3.12 GiB for peak
    activation, and 2.51 GiB for CUDAGraph memory": read; against a 95.59 GiB card it is the wrong GPU."""
    path = str(LOGS / "vllm-fork-50576-sm8x.log")
    log = read_startup_log(path)
    assert log.total_gib == 47.4 and log.actual == (40.33, 3.12, 2.51)
    r = csa(*RTX, "--from-log", path)
    assert r.code == 2 and "GPU memory: the log's device has 47.4 GiB" in r.err
