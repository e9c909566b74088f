"""``csa-plan run-gpu``: run the decode path on a GPU (or the CPU emulator) and prove the plan."""

from __future__ import annotations

import json

import click

from csa_plan.cli.exit_codes import EXIT_CHECK_FAILED, EXIT_CODES_HELP, EXIT_NO_GPU, EXIT_OK, EXIT_REFUSED
from csa_plan.cli.options import COUNT, SIZE, bad_input_exits

MIN_STEPS = 16
TINY = {"num_heads": 4, "window": 16, "index_num_heads": 4, "index_topk": 8}
TINY_MAX_SEQ_LEN = 256
DEFAULT_MAX_SEQ_LEN = 1024


@click.command(epilog=EXIT_CODES_HELP)
@click.argument("model", default="deepseek-v4-pro")
@click.option("--layers", default=None, metavar="IDS",
              help="Comma-separated layer ids [default: the first CSA and the first HCA layer].")
@click.option("--requests", type=COUNT, default=2, show_default=True, help="Concurrent requests (own groups each).")
@click.option("--max-seq-len", type=COUNT, default=None,
              help=f"Tokens reserved per group [default: {DEFAULT_MAX_SEQ_LEN}; {TINY_MAX_SEQ_LEN} with --tiny].")
@click.option("--steps", type=COUNT, default=MIN_STEPS, show_default=True, help=f"Decode steps (at least {MIN_STEPS}).")
@click.option("--limit", type=SIZE, default=None, help="Ledger limit for the device: bytes, GB, GiB or a GPU name.")
@click.option("--tp", type=COUNT, default=1, show_default=True, help="Tensor-parallel ranks (heads per device).")
@click.option("--seed", type=COUNT, default=0, show_default=True, help="Seed of the random weights and inputs.")
@click.option("--tiny", is_flag=True, help="Scaled-down geometry: 4 heads, window 16, 4 index heads, top-8.")
@click.option("--backend", type=click.Choice(["cupy", "emulate"]), default="cupy", show_default=True,
              help="cupy: the GPU; emulate: the same CUDA C on the CPU (device-memory checks n/a).")
@click.option("--json", "as_json", is_flag=True, help="Print the csa-plan/run-gpu/v1 JSON document.")
@bad_input_exits
def run_gpu(model: str, layers: str | None, requests: int, max_seq_len: int | None, steps: int, limit: int | None,
            tp: int, seed: int, tiny: bool, backend: str, as_json: bool) -> int:
    """Run prefill and STEPS decode steps of CSA/HCA layers of MODEL and check them against the
    NumPy oracle and the plan."""
    from csa_plan.planner.errors import BadInput

    if steps < MIN_STEPS:
        raise BadInput("options", "--steps", f"must be at least {MIN_STEPS}, got {steps}")
    if requests < 1:
        raise BadInput("options", "--requests", "must be at least 1")
    if limit is not None and limit <= 0:
        raise BadInput("options", "--limit", "must be positive (omit it for an unlimited ledger)")

    if backend == "cupy":
        from csa_plan.kernels.gpu_env import gpu_unavailable_reason

        reason = gpu_unavailable_reason()
        if reason:
            click.echo(f"csa-plan: {reason}", err=True)
            return EXIT_NO_GPU

    descriptors, refusals = _descriptors(model, layers, max_seq_len, tp, tiny, requests, steps)
    if refusals:
        for line in refusals:
            click.echo(f"csa-plan: refused: {line}", err=True)
        return EXIT_REFUSED

    from csa_plan.planner.layout import ZERO, group_bytes

    need = sum((group_bytes(d, 1) for d in descriptors), ZERO).total_bytes * (requests + 1)
    if limit is not None and need > limit:
        click.echo(f"csa-plan: refused: OutOfMemory: {requests} request(s) plus the recompute request need "
                   f"{need:,} bytes on device 0, the limit is {limit:,} bytes; raise --limit or lower "
                   f"--max-seq-len/--requests", err=True)
        return EXIT_REFUSED

    from csa_plan.kernels.backends import CupyBackend, EmulatedBackend
    from csa_plan.kernels.run_checks import run_checks

    be = CupyBackend() if backend == "cupy" else EmulatedBackend()
    result = run_checks(be, descriptors, requests=requests, steps=steps, limit=limit or 0, seed=seed)
    code = EXIT_CHECK_FAILED if result["failed"] else EXIT_OK
    report = {
        "schema": "csa-plan/run-gpu/v1",
        "model": model,
        "backend": backend,
        "device": _device_name(be),
        "options": {"layers": [d.layer_id for d in descriptors], "requests": requests,
                    "max_seq_len": descriptors[0].max_seq_len, "steps": steps, "limit_bytes": limit or 0,
                    "tp": tp, "seed": seed, "tiny": tiny},
        "layers": [{"layer_id": d.layer_id, "ratio": d.compression_ratio, "num_heads": d.num_heads,
                    "window": d.window, "index_num_heads": d.index_num_heads, "index_topk": d.index_topk,
                    "planned": group_bytes(d, 1).as_dict()} for d in descriptors],
        **result,
        "exit_code": code,
    }
    if as_json:
        click.echo(json.dumps(report, indent=2))
    else:
        from csa_plan.cli.console import make_consoles
        from csa_plan.cli.render_run_gpu import render_run_gpu

        render_run_gpu(make_consoles().out, report)
    return code


def _device_name(be) -> str:
    if getattr(be, "cupy", None) is None:
        return "CPU emulation (g++, one fiber per CUDA thread)"
    cp = be.cupy
    props = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
    name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    return f"{name} ({props['totalGlobalMem']:,} B)"


def _descriptors(model, layers, max_seq_len, tp, tiny, requests, steps):
    from csa_plan.planner.errors import BadInput
    from csa_plan.planner.gate import Gate
    from csa_plan.planner.loaders.model_files import load_model
    from csa_plan.planner.plan import PlanOptions, apply_options, plan_layer

    L = max_seq_len or (TINY_MAX_SEQ_LEN if tiny else DEFAULT_MAX_SEQ_LEN)
    if L < steps + 1:
        raise BadInput("options", "--max-seq-len", f"must exceed --steps ({steps}), got {L}")
    spec = load_model(model, max_seq_len=L)
    descs = [d for d in apply_options(spec, PlanOptions(max_seq_len=L, tp=tp)) if d.compression_ratio != 0]
    by_id = {d.layer_id: d for d in descs}
    if layers:
        try:
            ids = [int(x) for x in layers.split(",") if x.strip()]
        except ValueError:
            raise BadInput("options", "--layers", f"{layers!r} is not a comma-separated list of layer ids") from None
        missing = [i for i in ids if i not in by_id]
        if missing:
            raise BadInput("options", "--layers", f"no CSA/HCA layer with id {missing[0]} in {model}")
        chosen = [by_id[i] for i in ids]
    else:
        chosen = []
        for ratio in (4, 128):
            first = next((d for d in descs if d.compression_ratio == ratio), None)
            if first is not None:
                chosen.append(first)
    if not chosen:
        raise BadInput("options", "--layers", f"{model} has no CSA or HCA layer")
    if tiny:
        chosen = [d.with_(num_heads=TINY["num_heads"], window=min(TINY["window"], L),
                          **({"index_num_heads": TINY["index_num_heads"], "index_topk": TINY["index_topk"]}
                             if d.compression_ratio == 4 else {})) for d in chosen]
    chosen = [d.with_(batch=1) for d in chosen]
    refusals = []
    for d in chosen:
        plan = plan_layer(d, Gate.OP, 1)
        refusals += [r.message for r in plan.refusals]
        if d.compression_ratio == 4 and d.index_num_heads > 64:
            raise BadInput("options", "--tp", f"layer {d.layer_id}: the indexer kernel takes at most 64 index heads "
                           f"per device, got {d.index_num_heads}")
    return chosen, refusals
