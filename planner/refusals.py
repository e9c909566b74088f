"""Typed refusals: one record per (layer, type), listing every violated clause."""

from __future__ import annotations

from enum import Enum

from csa_plan.planner.record import record


class RefusalType(str, Enum):
    UNSUPPORTED_RATIO = "UnsupportedRatio"
    UNKNOWN_CACHE_FORMAT = "UnknownCacheFormat"
    RATIO4_REQUIRES_FP8_CACHE = "Ratio4RequiresFp8Cache"
    RATIO4_REQUIRES_INDEX_HEAD_DIM_128 = "Ratio4RequiresIndexHeadDim128"
    RATIO128_REJECTS_FP4 = "Ratio128RejectsFp4"
    INVALID_HEAD_GEOMETRY = "InvalidHeadGeometry"
    ROPE_EXCEEDS_HEAD_DIM = "RopeExceedsHeadDim"
    MULTI_DEVICE_AMBIGUITY = "MultiDeviceAmbiguity"
    MISSING_STATE_EDGE = "MissingStateEdge"
    OUT_OF_MEMORY = "OutOfMemory"
    UNSUPPORTED_C1_RATIO = "UnsupportedC1Ratio"
    REQUEST_EXCEEDS_CAPACITY = "RequestExceedsCapacity"  # simulate: prompt + output > max_seq_len
    NEVER_FITS = "NeverFits"  # simulate: the request's bundle exceeds an empty device's limit
    RUNNING_REQUEST_CAP = "RunningRequestCap"  # simulate --engine: the engine's max_num_seqs / max_running_requests
    # ONNX graph refusals (CONTRACT §4)
    ARITY_MISMATCH = "ArityMismatch"
    UNSUPPORTED_OP_VERSION = "UnsupportedOpVersion"
    SHARED_RECORD_AXIS = "SharedRecordAxis"
    INDEX_AXIS_MISMATCH = "IndexAxisMismatch"
    PRESENT_PAST_AXIS_MISMATCH = "PresentPastAxisMismatch"
    # Cross-layer shared compressed state (ratios 1 and 2 with a source topology; docs/deepseek-v41.md)
    NO_KV_SOURCE = "NoKvSource"  # a ratio-1/2 layer with no kv source at or below it
    KV_SOURCE_RATIO_MISMATCH = "KvSourceRatioMismatch"  # a reader whose nearest source has another ratio
    KV_SOURCE_NOT_INDEX_SOURCE = "KvSourceNotIndexSource"  # a kv source that runs no indexer
    INVALID_SOURCE_TOPOLOGY = "InvalidSourceTopology"  # a source id on a window-only layer, outside the stack, ...
    CANDIDATE_STAGE_TOO_SMALL = "CandidateStageTooSmall"  # candidate blocks x block size < index_topk
    MIXED_RATIO_FAMILIES = "MixedRatioFamilies"  # V4 ratios (4, 128) in a model with a source topology
    DOUBLE_COUNT = "DoubleCount"  # a source's state charged twice for one (request, device)
    UNACCOUNTED_READER = "UnaccountedReader"  # a reader attached to a source state nobody charged
    LAYOUT_NOT_MODELLED = "LayoutNotModelled"  # a layout or engine release whose shared-state layout is not modelled
    ENGINE_RELEASE_UNSUPPORTED = "EngineReleaseUnsupported"  # an engine release before the one that added the model
    SHARING_GROUP_SPLIT = "SharingGroupSplit"
    HOST_MEMORY_SHORT = "HostMemoryShort"  # a node's host memory cannot hold what the engine keeps there (Engram)
    READER_OWN_RECORD_AXIS = "ReaderOwnRecordAxis"  # ONNX: a reader of shared state with a cache tensor of its own  # a pipeline stage boundary between a source and its readers


@record
class Clause:
    """One violated condition: which field, what was expected, what was found."""

    field: str
    expected: str
    actual: str
    text: str


@record
class Refusal:
    """One reason the gate refuses a layer: which field, what was expected and what was found."""

    type: RefusalType
    layer: int | None
    field: str
    expected: str
    actual: str
    message: str

    @classmethod
    def from_clauses(cls, type_: RefusalType, layer: int | None, clauses: list[Clause]) -> "Refusal":
        where = f"layer {layer}" if layer is not None else "model"
        return cls(
            type=type_,
            layer=layer,
            field=", ".join(dict.fromkeys(c.field for c in clauses)),
            expected="; ".join(c.expected for c in clauses),
            actual="; ".join(c.actual for c in clauses),
            message=f"{where}: {type_.value}: " + "; ".join(c.text for c in clauses),
        )

    def as_dict(self) -> dict[str, object]:
        return {
            "type": self.type.value,
            "layer": self.layer,
            "field": self.field,
            "expected": self.expected,
            "actual": self.actual,
            "message": self.message,
        }
