"""What the step-time roofline reads from a card: HBM bandwidth, dense tensor throughput, the
scale-up link. One row per card of ``planner/cards.py`` that has published figures, each with
its source (the vendor's datasheet); a card without a row has no physics step time (the caller
says so and offers ``--step-time fixed``).

Figures are the datasheets' dense (not 2:4 sparse) peaks and the per-direction NVLink
bandwidth (half the bidirectional figure NVIDIA quotes). The fitted coefficients of
``physics.py`` absorb how far real kernels stay from them.
"""

from __future__ import annotations

from csa_plan.planner.record import record

TB = 1e12
GB = 1e9


@record
class CardPerf:
    name: str               # the card table's name
    family: str             # the GPU generation a fit is shared across: "hopper", "blackwell", "ampere", ...
    hbm_bytes_s: float
    bf16_flops: float       # dense
    fp8_flops: float        # dense; 0 where the card has no FP8 tensor cores (the BF16 figure is used)
    link_bytes_s: float     # scale-up link, one direction, per GPU
    source: str

    @property
    def gemm_flops(self) -> float:
        """The GEMM peak the step's FP8 linears run at (BF16 where the card has no FP8)."""
        return self.fp8_flops or self.bf16_flops


_H100 = "NVIDIA H100 Tensor Core GPU datasheet (SXM: 3.35 TB/s, 989 TF BF16 / 1,979 TF FP8 dense, NVLink 900 GB/s)"
_H200 = "NVIDIA H200 Tensor Core GPU datasheet (SXM: 4.8 TB/s, 989 TF BF16 / 1,979 TF FP8 dense, NVLink 900 GB/s)"
_B200 = "NVIDIA DGX B200 / HGX B200 datasheet (per GPU: 8 TB/s, 2.25 PF BF16 / 4.5 PF FP8 dense, NVLink 1.8 TB/s)"

_TABLE: tuple[CardPerf, ...] = (
    CardPerf("h100", "hopper", 3.35 * TB, 989 * TB, 1979 * TB, 450 * GB, _H100),
    CardPerf("h800", "hopper", 3.35 * TB, 989 * TB, 1979 * TB, 200 * GB,
             _H100 + "; H800: NVLink 400 GB/s (NVIDIA's China SKU listing)"),
    CardPerf("h200", "hopper", 4.8 * TB, 989 * TB, 1979 * TB, 450 * GB, _H200),
    CardPerf("h20", "hopper", 4.0 * TB, 148 * TB, 296 * TB, 450 * GB,
             "NVIDIA H20 product brief (96 GB HBM3 4.0 TB/s, 148 TF BF16 / 296 TF FP8 dense, NVLink 900 GB/s)"),
    CardPerf("gh200", "hopper", 4.0 * TB, 989 * TB, 1979 * TB, 450 * GB,
             "NVIDIA GH200 Grace Hopper datasheet (96 GB HBM3 4 TB/s; H100 tensor cores)"),
    CardPerf("gh200-144gb", "hopper", 4.9 * TB, 989 * TB, 1979 * TB, 450 * GB,
             "NVIDIA GH200 Grace Hopper datasheet (144 GB HBM3e 4.9 TB/s; H100 tensor cores)"),
    CardPerf("b200", "blackwell", 8.0 * TB, 2250 * TB, 4500 * TB, 900 * GB, _B200),
    CardPerf("a100-80gb", "ampere", 2.039 * TB, 312 * TB, 0.0, 300 * GB,
             "NVIDIA A100 datasheet (80 GB SXM: 2,039 GB/s, 312 TF BF16 dense, NVLink 600 GB/s)"),
    CardPerf("a100-40gb", "ampere", 1.555 * TB, 312 * TB, 0.0, 300 * GB,
             "NVIDIA A100 datasheet (40 GB SXM: 1,555 GB/s, 312 TF BF16 dense, NVLink 600 GB/s)"),
    CardPerf("l40s", "ada", 0.864 * TB, 362 * TB, 733 * TB, 32 * GB,
             "NVIDIA L40S datasheet (864 GB/s, 362 TF BF16 / 733 TF FP8 dense; PCIe Gen4 x16 64 GB/s)"),
)

PERF: dict[str, CardPerf] = {c.name: c for c in _TABLE}


def card_perf(name: str) -> CardPerf | None:
    return PERF.get(name)
