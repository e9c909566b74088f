"""Where a request's state groups live: tensor, pipeline and data parallelism.

Device ids are ``replica * (pp * tp) + stage * tp + rank``. Every tensor-parallel
rank of a stage keeps the same groups (the latent is copied, only scratch shrinks,
which ``plan_model`` already accounts), so one bundle per stage describes all of
its ranks. Pipeline stages are contiguous layer ranges, as equal as possible, with
the MTP layers on the last stage (CONTRACT §2).
"""

from __future__ import annotations

from enum import Enum

from csa_plan.planner.errors import BadInput
from csa_plan.planner.layout import ZERO, GroupBytes
from csa_plan.planner.limits import MAX_DEVICES, MAX_DP, MAX_PP, MAX_TP
from csa_plan.planner.plan import ModelPlan
from csa_plan.planner.record import record


class Router(str, Enum):
    ROUND_ROBIN = "round-robin"
    LEAST_LOADED = "least-loaded"


@record
class Placement:
    """How a deployment spreads over GPUs: tensor, pipeline, data and expert parallel sizes."""

    tp: int = 1
    pp: int = 1
    dp: int = 1
    router: Router = Router.ROUND_ROBIN
    ep: int | None = None  # expert-parallel ranks over the tp x dp GPUs; None: the engine's default

    def __post_init__(self) -> None:
        for name in ("tp", "pp", "dp", "ep"):
            value = getattr(self, name)
            if name == "ep" and value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise BadInput("options", f"--{name}", f"must be a positive integer, got {value!r}")
            cap, cap_name = {"tp": (MAX_TP, "MAX_TP"), "pp": (MAX_PP, "MAX_PP"), "dp": (MAX_DP, "MAX_DP"),
                             "ep": (MAX_DEVICES, "MAX_DEVICES")}[name]
            if value > cap:
                raise BadInput("options", f"--{name}", f"{value:,} is more than {cap:,} ({cap_name})")
        if self.tp * self.pp * self.dp > MAX_DEVICES:
            raise BadInput("options", "--dp", f"tp x pp x dp = {self.tp * self.pp * self.dp:,} devices, more than "
                                              f"{MAX_DEVICES:,} (MAX_DEVICES)")

    @property
    def devices_per_replica(self) -> int:
        return self.tp * self.pp

    @property
    def device_count(self) -> int:
        return self.dp * self.tp * self.pp

    def device(self, replica: int, stage: int, rank: int) -> int:
        return replica * self.devices_per_replica + stage * self.tp + rank

    def replica_devices(self, replica: int) -> tuple[int, ...]:
        base = replica * self.devices_per_replica
        return tuple(range(base, base + self.devices_per_replica))

    def stage_of(self, device: int) -> int:
        return (device % self.devices_per_replica) // self.tp


@record
class StageSplit:
    """Layer positions (in stack order) per pipeline stage; ``main_counts`` excludes the MTP layers."""

    layers: tuple[tuple[int, ...], ...]
    main_counts: tuple[int, ...]
    mtp_count: int

    def describe(self) -> str:
        parts = []
        for s, count in enumerate(self.main_counts):
            extra = f"+{self.mtp_count} MTP" if s == len(self.main_counts) - 1 and self.mtp_count else ""
            parts.append(f"{count}{extra}")
        return " / ".join(parts)


def split_stages(num_main: int, num_mtp: int, pp: int) -> StageSplit:
    """Contiguous main-layer ranges, sizes differing by at most one; the extra layers go
    to the earlier stages because the last one also carries the MTP layers."""
    if pp > num_main:
        raise BadInput("options", "--pp", f"{pp} stages for {num_main} main layers: every stage needs a layer")
    base, extra = divmod(num_main, pp)
    counts = tuple(base + (1 if s < extra else 0) for s in range(pp))
    layers, start = [], 0
    for s, count in enumerate(counts):
        ids = list(range(start, start + count))
        if s == pp - 1:
            ids += list(range(num_main, num_main + num_mtp))
        layers.append(tuple(ids))
        start += count
    return StageSplit(tuple(layers), counts, num_mtp)


def stage_bundles(plan: ModelPlan, split: StageSplit) -> tuple[GroupBytes, ...]:
    """Per stage, the bytes one request keeps on each device of that stage (refused layers excluded).
    A split inside a sharing group (shared compressed state) is refused, typed: ``sharing.require_whole_groups``."""
    if len(split.layers) > 1 and any(layer.descriptor.sharing is not None for layer in plan.layers):
        from csa_plan.planner.sharing import require_whole_groups

        require_whole_groups([layer.descriptor for layer in plan.layers], split.layers)
    out = []
    for positions in split.layers:  # positions in the stack, main layers first, then MTP
        total = ZERO
        for i in positions:
            layer = plan.layers[i]
            if layer.bytes is not None:
                total = total + layer.bytes
        out.append(total.checked("plan", "stage bundle"))
    return tuple(out)
