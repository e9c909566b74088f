"""``csa-plan run-gpu``: run the decode path on a GPU (or the CPU emulator) and prove the plan."""

from __future__ import annotations


from csa_plan.cli.error_doc import bad_input_exits, tell_failure
from csa_plan.cli.exit_codes import EXIT_CHECK_FAILED, EXIT_NO_GPU, EXIT_OK, EXIT_REFUSED
from csa_plan.cli.params import Arg, CommandSpec, Kind, Opt
from csa_plan.kernels.run_plan import (DEFAULT_MAX_SEQ_LEN, EMULATE_DEFAULT_MAX_SEQ_LEN, MAX_REQUESTS, MAX_STEPS,
                                      MIN_STEPS, TINY_MAX_SEQ_LEN)

PARAMS = (
    Arg("model", default="deepseek-v4-pro", required=False),
    Opt(("--layers",), "layers", metavar="IDS",
        help="Comma-separated layer ids [default: the first CSA and the first HCA layer]."),
    Opt(("--requests",), "requests", Kind.COUNT, default=2, show_default=True,
        help=f"Concurrent requests, own groups each (at most {MAX_REQUESTS}); one more request's groups "
             "are reserved for the recompute check."),
    Opt(("--max-seq-len", "--max-model-len"), "max_seq_len", Kind.COUNT,
        help=f"Tokens reserved per group, up to 1,048,576 [default: {DEFAULT_MAX_SEQ_LEN:,}; "
             f"{EMULATE_DEFAULT_MAX_SEQ_LEN:,} with --backend emulate; {TINY_MAX_SEQ_LEN} with --tiny]."),
    Opt(("--steps",), "steps", Kind.COUNT, default=MIN_STEPS, show_default=True,
        help=f"Decode steps ({MIN_STEPS}..{MAX_STEPS})."),
    Opt(("--limit",), "limit", Kind.SIZE, help="Ledger limit for the device: bytes, GB, GiB or a GPU name."),
    Opt(("--tp",), "tp", Kind.COUNT, default=1, show_default=True, help="Tensor-parallel ranks (heads per device)."),
    Opt(("--seed",), "seed", Kind.COUNT, default=0, show_default=True, help="Seed of the random weights and inputs."),
    Opt(("--tiny",), "tiny", Kind.FLAG, default=False,
        help="Scaled-down geometry: 4 heads, window 16, 4 index heads, top-8."),
    Opt(("--backend",), "backend", Kind.NAME, choices=("cupy", "emulate"), default="cupy", show_default=True,
        help="cupy: the GPU; emulate: the same CUDA C on the CPU (device-memory checks n/a)."),
    Opt(("--json",), "as_json", Kind.FLAG, default=False, help="Print the csa-plan/run-gpu/v1 JSON document."),
)


@bad_input_exits
def run_gpu(model: str, layers: str | None, requests: int, max_seq_len: int | None, steps: int, limit: int | None,
            tp: int, seed: int, tiny: bool, backend: str, as_json: bool) -> int:
    """Run prefill and STEPS decode steps of CSA/HCA layers of MODEL and check them against the
    NumPy oracle and the plan."""
    from csa_plan.cli.stream import echo
    from csa_plan.kernels.run_plan import check_counts, plan_run
    from csa_plan.planner.text import printable

    check_counts(requests, steps, limit)
    if backend == "cupy":
        from csa_plan.kernels.gpu_env import gpu_unavailable_reason

        reason = gpu_unavailable_reason()
        if reason:  # with --json, the error document on stdout too (docs/json-schemas.md)
            tell_failure(printable(reason), EXIT_NO_GPU, as_json)
            return EXIT_NO_GPU

    plan, refusals = plan_run(model, layers, requests, max_seq_len, steps, tp, tiny, backend)
    refusal = refusals[0] if refusals else plan.limit_refusal(limit)
    if refusal:
        lines = [printable(f"refused: {line}") for line in refusals or [refusal]]
        for line in lines[:-1]:
            echo(f"csa-plan: {line}", err=True)
        tell_failure(lines[-1] if len(lines) == 1 else f"{lines[-1]} ({len(lines)} refusals; stderr lists each)",
                     EXIT_REFUSED, as_json)
        return EXIT_REFUSED

    from csa_plan.kernels.backends import make_backend
    from csa_plan.kernels.run_checks import run_report

    def told(check) -> None:  # the CPU emulator takes minutes: a line per check as it is decided
        layer = "" if check.layer is None else f" (layer {check.layer})"
        echo(printable(f"csa-plan: check {check.name}{layer}: {check.status}"), err=True)

    report = run_report(make_backend(backend), plan, model=model, limit=limit or 0, tp=tp, seed=seed, tiny=tiny,
                        on_check=told if backend == "emulate" else None)
    code = EXIT_CHECK_FAILED if report["failed"] else EXIT_OK
    report["exit_code"] = code
    from csa_plan.cli.console import make_consoles
    from csa_plan.cli.emit import emit

    def render(out, r):  # rich and the renderer are imported for tables only
        from csa_plan.cli.render_run_gpu import render_run_gpu

        render_run_gpu(out, r)

    emit(make_consoles(), report, as_json, render)
    return code


COMMAND = CommandSpec("run-gpu", PARAMS, run_gpu)
