"""DeepEP's communication buffers, sized as DeepEP's own code sizes them, and when an engine allocates them.

A deployment that routes its MoE all-to-all through DeepEP holds two buffers on every GPU beside the
weights and the KV pool: an NVLink buffer (``num_nvl_bytes``, ``cudaMalloc``) and an RDMA buffer
(``num_rdma_bytes``, NVSHMEM). Both are outside torch's allocator, so vLLM's memory profile counts
them in its non-torch increase and the KV pool shrinks by exactly their size. Their sizes are
functions of the engine's arguments, written here from the source (deepseek-ai/DeepEP at
dd758caf451848bd150e1046af3d0a73e5fff38d, the legacy kernels the engines call):

* low-latency RDMA: ``csrc/legacy/config.hpp:131-188`` (``LowLatencyLayout``,
  ``get_low_latency_rdma_size_hint``): two send, two receive and two signalling buffers of
  ``num_experts x tokens x message`` bytes, rounded up to 128 B;
* normal (high-throughput) mode: ``csrc/legacy/config.hpp:53-97`` (``Config.get_nvl_buffer_size_hint``,
  ``get_rdma_buffer_size_hint``; RDMA is 0 within one NVLink domain of 8) with the per-rank-count
  configs of ``deep_ep/buffers/legacy.py:233-290`` and ``Buffer.num_sms = 20`` (:31).

Which sizes an engine asks for (cited per engine below) is the other half: vLLM's high-throughput
manager takes ``VLLM_DEEPEP_BUFFER_SIZE_MB`` (1024) MiB of NVLink buffer and no RDMA within a node;
its low-latency manager the same NVLink buffer plus the low-latency RDMA hint for
``max_num_batched_tokens`` tokens a rank; SGLang the larger of the normal dispatch/combine hints and
the low-latency hint for ``SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK`` (128) tokens.
"""

from __future__ import annotations

from csa_plan.planner.record import record
from csa_plan.planner.units import MiB

DEEPEP_COMMIT = "deepseek-ai/DeepEP@dd758caf451848bd150e1046af3d0a73e5fff38d"
NUM_MAX_NVL_PEERS = 8          # csrc/kernels/legacy/compiled.cuh:5 LEGACY_NUM_MAX_NVL_PEERS
BUFFER_ALIGNMENT_BYTES = 128   # csrc/kernels/legacy/compiled.cuh:9 LEGACY_NUM_BUFFER_ALIGNMENT_BYTES
DEFAULT_NUM_SMS = 20           # deep_ep/buffers/legacy.py:31 Buffer.num_sms
SOURCE_META_BYTES = 8          # csrc/kernels/legacy/internode.cu:21-43 SourceMeta: two ints
TOPK_IDX_BYTES = 8             # deep_ep/include/deep_ep/common/compiled.cuh:54-72: EP_NUM_TOPK_IDX_BITS 64
MAX_TOPK = 128                 # config.hpp:56-57 kNumMaxTopK
MAX_SCALES = 128               # config.hpp:56-57 kNumMaxScales

# deep_ep/buffers/legacy.py:245-257 (dispatch) and :275-287 (combine): num_ranks ->
# (nvl send tokens, nvl recv tokens, rdma send tokens, rdma recv tokens)
DISPATCH_CONFIGS: dict[int, tuple[int, int, int, int]] = {
    2: (24, 256, 6, 128), 4: (6, 256, 6, 128), 8: (6, 256, 6, 128), 16: (36, 288, 20, 128),
    24: (32, 288, 8, 128), 32: (32, 288, 8, 128), 48: (32, 288, 8, 128), 64: (32, 288, 8, 128),
    96: (20, 480, 12, 128), 128: (20, 560, 12, 128), 144: (32, 720, 12, 128), 160: (28, 720, 12, 128)}
COMBINE_CONFIGS: dict[int, tuple[int, int, int, int]] = {
    2: (10, 256, 6, 128), 4: (9, 256, 6, 128), 8: (4, 256, 6, 128), 16: (4, 288, 12, 128),
    24: (1, 288, 8, 128), 32: (1, 288, 8, 128), 48: (1, 288, 8, 128), 64: (1, 288, 8, 128),
    96: (1, 480, 8, 128), 128: (1, 560, 8, 128), 144: (2, 720, 8, 128), 160: (2, 720, 8, 128)}


def _align_up(n: int, m: int) -> int:
    return -(-n // m) * m


def low_latency_rdma_bytes(num_max_dispatch_tokens_per_rank: int, hidden: int, num_ranks: int,
                           num_experts: int) -> int:
    """``Buffer.get_low_latency_rdma_size_hint`` (config.hpp:131-188): the layout's total rounded up.

    Every rank keeps a receive slot for every expert's every possible token, so the size grows with
    ``num_experts x tokens``, not with the rank count (which the layout does not read)."""
    del num_ranks  # config.hpp:131: the layout takes it and never reads it
    num_scales = hidden // 128
    dispatch_msg = 16 + max(hidden * 2, hidden + num_scales * 4)       # sizeof(int4) + max(bf16, fp8 + scales)
    combine_msg = num_scales * 4 + hidden * 2                           # nv_bfloat162 per 128 + bf16
    send = max(num_max_dispatch_tokens_per_rank * dispatch_msg,
               num_experts * num_max_dispatch_tokens_per_rank * combine_msg)
    recv = max(num_experts * num_max_dispatch_tokens_per_rank * dispatch_msg,
               num_experts * num_max_dispatch_tokens_per_rank * combine_msg)
    signalling = _align_up(num_experts * 4, 128)
    total = 2 * send + 2 * recv + 2 * signalling
    return (total + BUFFER_ALIGNMENT_BYTES) // BUFFER_ALIGNMENT_BYTES * BUFFER_ALIGNMENT_BYTES  # config.hpp:187


def _config(table: dict[int, tuple[int, int, int, int]], num_ranks: int) -> tuple[int, int, int, int]:
    if num_ranks not in table:
        raise ValueError(f"DeepEP has no normal-mode config for {num_ranks} ranks (legacy.py:259)")
    nvl_send, nvl_recv, rdma_send, rdma_recv = table[num_ranks]
    return nvl_send, nvl_recv, rdma_send, _align_up(rdma_recv, rdma_send)  # Config(): recv aligned to send


def normal_nvl_bytes(hidden_bytes: int, num_ranks: int, *, num_sms: int = DEFAULT_NUM_SMS) -> int:
    """The larger of the dispatch and combine configs' ``get_nvl_buffer_size_hint`` (config.hpp:53-73)."""
    out = 0
    for table in (DISPATCH_CONFIGS, COMBINE_CONFIGS):
        _, recv, _, _ = _config(table, num_ranks)
        rdma_ranks = max(num_ranks // NUM_MAX_NVL_PEERS, 1)
        nvl_ranks = min(num_ranks, NUM_MAX_NVL_PEERS)
        per = num_sms // 2 * nvl_ranks
        n = per * (2 * rdma_ranks + 3) * 4
        n += per * recv * (hidden_bytes + SOURCE_META_BYTES + MAX_TOPK * TOPK_IDX_BYTES + MAX_TOPK * 4
                           + MAX_SCALES * 4)
        out = max(out, _align_up(n, 128))
    return out


def normal_rdma_bytes(hidden_bytes: int, num_ranks: int, *, num_sms: int = DEFAULT_NUM_SMS) -> int:
    """The larger of the two configs' ``get_rdma_buffer_size_hint`` (config.hpp:75-97): 0 within 8 ranks."""
    if num_ranks <= NUM_MAX_NVL_PEERS:
        return 0
    out = 0
    for table in (DISPATCH_CONFIGS, COMBINE_CONFIGS):
        _, _, _, recv = _config(table, num_ranks)
        per = num_sms // 2 * (num_ranks // NUM_MAX_NVL_PEERS)
        n = per * (NUM_MAX_NVL_PEERS * 2 + 2) * 2 * 4
        n += per * recv * 2 * (hidden_bytes + SOURCE_META_BYTES + MAX_TOPK * TOPK_IDX_BYTES + MAX_TOPK * 4
                               + MAX_SCALES * 4 + 16)
        out = max(out, _align_up(n, 128))
    return out


@record
class DeepEpBuffers:
    """What one GPU holds for DeepEP, why, and from which lines."""

    nvl_bytes: int
    rdma_bytes: int
    allocated: bool      # False: the engine never builds the all-to-all for this deployment
    why: str             # the engine's rule (file:line) and the sizes' source

    @property
    def total_bytes(self) -> int:
        return self.nvl_bytes + self.rdma_bytes if self.allocated else 0


# Backends whose buffers csa-plan sizes (the rest, under EP with DP > 1, are refused: their buffers are not modelled)
VLLM_SIZED_A2A = ("allgather_reducescatter", "deepep_high_throughput", "deepep_low_latency")
VLLM_DEEPEP_BUFFER_MIB = 1024  # envs.py VLLM_DEEPEP_BUFFER_SIZE_MB (vllm-0.26.0 envs.py:255, :1826-1828)

# vLLM's all-to-all kernels run only when ``use_ep and (dp_size > 1 or pcp_size > 1 or
# is_sequence_parallel)`` (vllm-0.26.0 model_executor/layers/fused_moe/config.py:1052-1055; 0.25.0
# :1040-1041 without pcp; 0.33.0 :1035-1038; 0.34.0 :1066-1069), and sequence-parallel MoE itself needs
# data_parallel_size > 1 (vllm-0.26.0 config/parallel.py:654-668). The managers: 0.26.0
# distributed/device_communicators/all2all.py:217-231 (high throughput: num_nvl_bytes =
# VLLM_DEEPEP_BUFFER_SIZE_MB MiB, num_rdma_bytes 0 within a node) and :283-310 (low latency: the same
# NVLink buffer and get_low_latency_rdma_size_hint(moe.max_num_tokens, ...)); moe.max_num_tokens is the
# scheduler's max_num_batched_tokens (fused_moe/layer.py:262, :346; all2all_utils.py:184).
VLLM_RULE = ("vllm-0.26.0 fused_moe/config.py:1052-1055 (all-to-all only with EP and DP > 1), "
             "device_communicators/all2all.py:217-231 / :283-310, fused_moe/layer.py:262")


def vllm_deepep_buffers(backend: str | None, *, ep: int, dp: int, internode: bool, max_num_batched_tokens: int,
                        hidden: int, num_experts: int) -> DeepEpBuffers | None:
    """The DeepEP buffers vLLM allocates per GPU for ``--all2all-backend backend``; None when no DeepEP backend."""
    if backend not in ("deepep_high_throughput", "deepep_low_latency"):
        return None
    used = ep > 1 and dp > 1
    nvl = VLLM_DEEPEP_BUFFER_MIB * MiB
    if backend == "deepep_high_throughput":
        rdma = nvl if internode else 0
        sized = f"num_nvl_bytes = {VLLM_DEEPEP_BUFFER_MIB} MiB" + (", num_rdma_bytes the same (internode)"
                                                                   if internode else ", num_rdma_bytes 0 (one node)")
    else:
        rdma = low_latency_rdma_bytes(max_num_batched_tokens, hidden, ep, num_experts)
        sized = (f"num_nvl_bytes = {VLLM_DEEPEP_BUFFER_MIB} MiB + get_low_latency_rdma_size_hint("
                 f"{max_num_batched_tokens}, {hidden}, {ep}, {num_experts}) = {rdma:,} B ({DEEPEP_COMMIT} "
                 "csrc/legacy/config.hpp:131-188)")
    why = (f"{backend}: {sized}; {VLLM_RULE}" if used else
           f"{backend} is not used: vLLM runs its all-to-all kernels only with expert parallelism and DP > 1 "
           f"(ep {ep}, dp {dp}); {VLLM_RULE}")
    return DeepEpBuffers(nvl, rdma, used, why)


SGLANG_LL_TOKENS = 128  # sglang-0.5.23 srt/environ.py:1439 SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK


def sglang_deepep_buffers(mode: str, *, ep: int, hidden: int, num_experts: int,
                          ll_tokens: int = SGLANG_LL_TOKENS) -> DeepEpBuffers:
    """SGLang's ``DeepEPBuffer.get_deepep_buffer`` (sglang-0.5.23 layers/moe/token_dispatcher/deepep.py:205-250):
    mode ``normal``, ``low_latency`` or ``auto`` (both); the normal hints at bf16 (``params_bytes = 2``,
    :401), the low-latency one at ``ll_tokens`` a rank."""
    nvl = rdma = 0
    if mode in ("normal", "auto"):
        nvl = normal_nvl_bytes(hidden * 2, ep)
        rdma = normal_rdma_bytes(hidden * 2, ep)
    if mode in ("low_latency", "auto"):
        rdma = max(rdma, low_latency_rdma_bytes(ll_tokens, hidden, ep, num_experts))
    why = (f"--moe-a2a-backend deepep ({mode}): sglang-0.5.23 token_dispatcher/deepep.py:221-250 with "
           f"{DEEPEP_COMMIT} csrc/legacy/config.hpp:53-97, :131-188 and deep_ep/buffers/legacy.py:233-290")
    return DeepEpBuffers(nvl, rdma, True, why)
