"""Record vLLM's own MoE workspace request for DeepSeek-V4's MXFP4 experts (outside CI).

Run it in a virtualenv that imports the vLLM release (``PYTHONPATH`` at an unpacked wheel works: the
modules read here are pure Python; docs/engines.md, "Cross-checking the engine models"). Nothing here is a
csa-plan dependency. For each case (GPU architecture, ``--moe-backend``, TP / EP, model sizes) it

1. answers as that GPU: ``current_platform``'s capability checks, ``has_flashinfer`` and ``has_humming``
   (vLLM's CUDA wheels require ``flashinfer-python`` and ``humming-kernels``) and ``has_deep_gemm`` (vendored
   in the wheel; ``--no-deep-gemm`` records the other answer);
2. runs the release's own oracle, ``select_deepseek_v4_mxfp4_moe_backend`` (``oracle/mxfp4.py``), on a real
   ``FusedMoEConfig`` built as ``FusedMoE`` builds it for DeepSeek-V4 (sqrtsoftplus routing with
   renormalisation: ``RoutingMethodType.DeepseekV4``; SiLU; the clamp in ``swiglu_limit``);
3. rounds the sizes with the release's ``mxfp4_round_up_hidden_size_and_intermediate_size`` and lets the
   modular kernel's own ``_allocate_buffers`` (``modular_kernel.py``) call the picked class's
   ``workspace_shapes`` at ``M = max_num_batched_tokens`` (the profile run), with the workspace manager
   replaced by a recorder of the ``get_simultaneous`` parts (shape, dtype) it asks for.

It prints one JSON object: the release and, per case, the backend, the class and the parts' bytes before the
256-byte rounding (``tests/fixtures/vllm_moe_workspace.json`` holds its output per release;
``tests/budget/test_vllm_moe_workspace.py`` compares csa-plan's ``moe_request`` with it byte for byte).

    PYTHONPATH=<unpacked vllm-0.26.0> <venv>/bin/python tools/crosscheck_moe_workspace.py
"""

from __future__ import annotations

import contextlib
import inspect
import json
import sys
from math import prod
from unittest import mock

# (name, hidden, moe_intermediate, routed experts, top-k): the presets' MoE sizes
MODELS = (("deepseek-v4-flash", 4096, 2048, 256, 6), ("deepseek-v4-pro", 7168, 3072, 384, 6))
CAPS = {"sm90": (9, 0), "sm100": (10, 0), "sm120": (12, 0)}
BACKENDS = ("auto", "marlin", "humming", "flashinfer_trtllm", "deep_gemm", "triton")
SPLITS = ((2, 1, False), (8, 1, False), (8, 1, True))  # (tp, dp, ep)
MNBT = (8192,)
# DeepGEMM is vendored in every modelled wheel (vllm/third_party/deep_gemm; utils/import_utils.py has_deep_gemm)
# and VLLM_USE_DEEP_GEMM defaults to 1 (envs.py): has_deep_gemm answers True. --no-deep-gemm records the other way.
DEEP_GEMM = (False,) if "--no-deep-gemm" in sys.argv else (True,)


@contextlib.contextmanager
def as_gpu(cap: tuple[int, int], deep_gemm: bool):
    """current_platform answering as a CUDA GPU of capability cap."""
    from vllm.platforms import current_platform as p
    from vllm.platforms.interface import DeviceCapability

    major, minor = cap
    value = major * 10 + minor

    def family(c: int) -> bool:
        return value // 10 == c // 10

    def has(c) -> bool:
        c = c[0] * 10 + c[1] if isinstance(c, tuple) else c
        return value >= c

    patches = [mock.patch.object(p, name, fn) for name, fn in (
                   ("is_cuda", lambda: True), ("is_rocm", lambda: False), ("is_xpu", lambda: False),
                   ("is_cpu", lambda: False), ("is_device_capability_family", family),
                   ("get_device_capability", lambda device_id=0: DeviceCapability(major, minor)),
                   ("is_device_capability", lambda c: value == (c[0] * 10 + c[1] if isinstance(c, tuple) else c)),
                   ("has_device_capability", has), ("support_deep_gemm", lambda: value == 90 or family(100)
                                                   or family(120)))]
    import vllm.utils.deep_gemm as dg
    import vllm.utils.flashinfer as fi

    patches += [mock.patch.object(dg, "has_deep_gemm", lambda: deep_gemm),
                mock.patch.object(dg, "is_deep_gemm_supported", lambda: deep_gemm and (value == 90 or family(100)
                                                                                        or family(120)))]
    import vllm.utils.import_utils as iu

    # vLLM's CUDA wheels require flashinfer-python and humming-kernels (the wheels' METADATA Requires-Dist)
    patches += [mock.patch.object(fi, "has_flashinfer", lambda: True)]
    patches += [mock.patch.object(iu, attr, lambda: True) for attr in ("has_humming",) if hasattr(iu, attr)]
    # modules that imported the helpers by name
    for mod in list(sys.modules.values()):
        name = getattr(mod, "__name__", "") or ""
        if not name.startswith("vllm.model_executor.layers.fused_moe"):
            continue
        for attr, val in (("has_flashinfer", lambda: True), ("has_humming", lambda: True),
                          ("has_deep_gemm", lambda: deep_gemm),
                          ("is_deep_gemm_supported",
                           lambda: deep_gemm and (value == 90 or family(100) or family(120)))):
            if attr in vars(mod):
                patches.append(mock.patch.object(mod, attr, val))
    with contextlib.ExitStack() as stack:
        for q in patches:
            stack.enter_context(q)
        yield


def moe_config(hidden: int, inter: int, experts: int, topk: int, tp: int, dp: int, ep: bool, backend: str,
               mnbt: int):
    """The FusedMoEConfig FusedMoE builds for DeepSeek-V4's routed experts on one rank."""
    import torch
    from vllm.model_executor.layers.fused_moe import config as cfg
    from vllm.model_executor.layers.fused_moe.activation import MoEActivation

    fields = {f for f in inspect.signature(cfg.FusedMoEParallelConfig).parameters}
    par = dict(tp_size=1 if ep else tp * dp, pcp_size=1, dp_size=dp, ep_size=tp * dp if ep else 1, tp_rank=0,
               pcp_rank=0, dp_rank=0, ep_rank=0, sp_size=1, use_ep=ep, all2all_backend="allgather_reducescatter",
               enable_eplb=False)
    par = {k: v for k, v in par.items() if k in fields}
    for k in fields - set(par):
        par[k] = False if "use" in k or "enable" in k else 1
    pc = cfg.FusedMoEParallelConfig(**par)
    local = experts // (tp * dp) if ep else experts
    moe_tp = 1 if ep else tp * dp
    kw = dict(num_experts=experts, experts_per_token=topk, hidden_dim=hidden, intermediate_size=inter,
              num_local_experts=local, num_logical_experts=experts, activation=MoEActivation.SILU,
              device="cuda", routing_method=cfg.RoutingMethodType.DeepseekV4, moe_parallel_config=pc,
              in_dtype=torch.bfloat16, router_logits_dtype=torch.float32, moe_backend=backend,
              max_num_tokens=mnbt, swiglu_limit=10.0, intermediate_size_per_partition=inter // moe_tp,
              hidden_dim_unpadded=hidden, intermediate_size_per_partition_unpadded=inter // moe_tp)
    params = inspect.signature(cfg.FusedMoEConfig).parameters
    return cfg.FusedMoEConfig(**{k: v for k, v in kw.items() if k in params})


class Recorder:
    """Stands in for the WorkspaceManager: records the (shape, dtype) parts of get_simultaneous."""

    def __init__(self):
        self.parts: list[tuple[tuple[int, ...], object]] = []

    def get_simultaneous(self, *specs):
        import torch

        self.parts = [(tuple(shape), dtype) for shape, dtype in specs]
        return tuple(torch.empty(shape, dtype=dtype, device="meta") for shape, dtype in specs)


def request_of(k_cls, conf, m: int, hidden: int, inter_pp: int, topk: int, experts: int, local: int):
    """The modular kernel's workspace request for k_cls at M tokens (its own _allocate_buffers)."""
    import torch
    from vllm.model_executor.layers.fused_moe import modular_kernel as mk
    from vllm.model_executor.layers.fused_moe.activation import MoEActivation

    experts_obj = object.__new__(k_cls)
    experts_obj.moe_config = conf
    for attr, val in (("hidden_dim_unpadded", conf.hidden_dim_unpadded), ("max_num_tokens", None),
                      ("num_dispatchers", None), ("quant_config", None)):
        if attr not in vars(experts_obj):
            with contextlib.suppress(Exception):
                setattr(experts_obj, attr, val)
    host = next(c for c in vars(mk).values() if isinstance(c, type) and "_allocate_buffers" in vars(c))
    kernel = object.__new__(host)
    kernel.fused_experts = experts_obj
    # DP 1: the no-DP/EP prepare/finalize (prepare_finalize/no_dp_ep.py) vLLM pairs the experts with; 0.33 on
    # ask it for an output buffer (allocate_fused_expert_output: None, the workspace keeps the output)
    from vllm.model_executor.layers.fused_moe.prepare_finalize import no_dp_ep

    kernel.prepare_finalize = object.__new__(no_dp_ep.MoEPrepareAndFinalizeNoDPEPModular)
    rec = Recorder()
    sig = inspect.signature(host._allocate_buffers).parameters
    args = dict(out_dtype=torch.bfloat16, device=torch.device("meta"), M_chunk=m, M_full=m, N=inter_pp, K=hidden,
                top_k=topk, global_num_experts=experts, local_num_experts=local, expert_tokens_meta=None,
                activation=MoEActivation.SILU)
    with mock.patch.object(mk, "current_workspace_manager", lambda: rec):
        host._allocate_buffers(kernel, **{k: v for k, v in args.items() if k in sig})
    return [prod(shape) * dtype.itemsize for shape, dtype in rec.parts], [list(s) for s, _ in rec.parts]


def main() -> int:
    import logging

    logging.disable(logging.WARNING)
    import vllm
    from vllm.model_executor.layers.fused_moe.oracle import mxfp4 as oracle

    rel = ".".join(vllm.__version__.split(".")[:2])
    cases = []
    for (model, hidden, inter, experts, topk), (arch, cap), backend, (tp, dp, ep), mnbt, dg in (
            (m, c, b, s, n, d) for m in MODELS for c in CAPS.items() for b in BACKENDS for s in SPLITS
            for n in MNBT for d in DEEP_GEMM):
        case = dict(model=model, arch=arch, moe_backend=backend, tp=tp, dp=dp, ep=ep, mnbt=mnbt)
        with as_gpu(cap, dg):
            conf = moe_config(hidden, inter, experts, topk, tp, dp, ep, backend, mnbt)
            try:
                chosen, k_cls = oracle.select_deepseek_v4_mxfp4_moe_backend(conf)
            except (ValueError, NotImplementedError) as e:
                cases.append({**case, "refused": str(e).splitlines()[0][:100]})
                continue
            except ImportError as e:  # a Humming candidate passed the generic checks; its gemm type needs humming
                cases.append({**case, "experts_class": "Humming", "unresolved": f"{type(e).__name__}: {e}"[:100]})
                continue
            h, i = oracle.mxfp4_round_up_hidden_size_and_intermediate_size(chosen, hidden,
                                                                          inter // (1 if ep else tp * dp))
            local = experts // (tp * dp) if ep else experts
            try:
                parts, shapes = (([], []) if "Monolithic" in k_cls.__name__  # no modular kernel, no request
                                 else request_of(k_cls, conf, mnbt, h, i, topk, experts, local))
            except RuntimeError as e:  # e.g. DeepGEMM's alignment comes from its compiled library
                cases.append({**case, "backend": chosen.value, "experts_class": k_cls.__name__,
                              "unresolved": str(e).splitlines()[0][:100]})
                continue
        cases.append({**case, "backend": chosen.value, "experts_class": k_cls.__name__,
                      "N": i, "K": h, "parts_bytes": parts})
    print("{" + f'"release": "vllm-{rel}", "vllm_version": "{vllm.__version__}", "command": "PYTHONPATH=<unpacked '
          f'vllm-{vllm.__version__}> python tools/crosscheck_moe_workspace.py", "cases": [')
    print(",\n".join(json.dumps(c) for c in cases) + "]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
