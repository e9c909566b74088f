"""A model as a stack of layer descriptors, independent of where it was read from."""

from __future__ import annotations


from csa_plan.planner.descriptor import Descriptor
from csa_plan.planner.record import record
from csa_plan.planner.refusals import Refusal


@record
class ModelSpec:
    """Every attention layer of a model, main layers first, then MTP layers.

    ``notes`` records where defaulted or derived values came from (for example the
    ONNX reader says which source gave max_seq_len), so output can show provenance.
    """

    name: str
    source: str
    layers: tuple[Descriptor, ...]
    num_main_layers: int
    num_mtp_layers: int
    notes: tuple[str, ...] = ()
    graph_refusals: tuple[Refusal, ...] = ()  # model-level findings, e.g. the ONNX record-axis lint
    gate: str | None = None  # the gate a spec asks for (``gate: c1``); ``check --gate`` overrides it

    @property
    def compress_ratios(self) -> tuple[int, ...]:
        return tuple(d.compression_ratio for d in self.layers)
