"""Safetensors headers of a local model directory: the 8-byte length and the JSON header only.

A header is read with a stated cap and checked against its file (dtype, shape and data
offsets must agree and stay inside the file); the tensor data is never read. With no
shard files present, ``model.safetensors.index.json`` gives the total (its
``metadata.total_size``) and the tensor count (its ``weight_map``).
"""

from __future__ import annotations

import json
import stat
import struct
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

from csa_plan.planner.errors import BadInput
from csa_plan.planner.files import path_kind, read_text
from csa_plan.planner.weights.tensors import StoredDType, TensorSpec

MAX_HEADER_BYTES = 100_000_000   # the safetensors library's own MAX_HEADER_SIZE
MAX_SHARDS = 10_000
MAX_INDEX_BYTES = 256 << 20
INDEX_NAME = "model.safetensors.index.json"


class CheckpointSource(str, Enum):
    HEADERS = "safetensors headers"
    INDEX = "model.safetensors.index.json"


@dataclass(frozen=True)
class ShardHeader:
    path: str
    file_bytes: int
    header_bytes: int          # the JSON header (the 8-byte length not included)
    tensors: tuple[TensorSpec, ...]

    @property
    def data_bytes(self) -> int:
        return sum(t.nbytes for t in self.tensors)


@dataclass(frozen=True)
class Checkpoint:
    """What a model directory's weight files hold; ``element_count`` and ``file_bytes`` need headers."""

    source: CheckpointSource
    directory: str
    files: int
    tensor_count: int
    data_bytes: int
    element_count: int | None
    file_bytes: int | None
    shards: tuple[ShardHeader, ...] = ()


def read_header(path: Path, max_header_bytes: int = MAX_HEADER_BYTES) -> ShardHeader:
    """One shard's header; a header that is truncated, oversized, not JSON or inconsistent is bad input."""
    name = str(path)
    try:
        info = path.stat()
        if not stat.S_ISREG(info.st_mode):
            raise BadInput(name, None, "not a regular file")
        size = info.st_size
        with path.open("rb") as f:
            prefix = f.read(8)
            if len(prefix) < 8:
                raise BadInput(name, "header length", f"truncated: {len(prefix)} of 8 bytes")
            (length,) = struct.unpack("<Q", prefix)
            if length > max_header_bytes:
                raise BadInput(name, "header length", f"{length} bytes is over the {max_header_bytes}-byte cap")
            if length > size - 8:
                raise BadInput(name, "header", f"truncated: the length says {length} bytes, "
                               f"the file has {size - 8} after it")
            raw = f.read(length)
    except OSError as exc:
        raise BadInput(name, None, f"cannot read: {exc.strerror or exc}") from None
    if len(raw) < length:
        raise BadInput(name, "header", f"truncated: {len(raw)} of {length} bytes")
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, RecursionError, ValueError) as exc:
        raise BadInput(name, "header", f"not JSON: {str(exc).splitlines()[0][:120]}") from None
    if not isinstance(header, dict):
        raise BadInput(name, "header", f"expected a JSON object, got {type(header).__name__}")
    data_size = size - 8 - length
    tensors = tuple(_tensor(name, key, value, data_size) for key, value in header.items() if key != "__metadata__")
    return ShardHeader(name, size, length, tensors)


def _tensor(source: str, key: str, entry: Any, data_size: int) -> TensorSpec:
    field = f"header[{key[:80]!r}]"
    if not isinstance(entry, dict):
        raise BadInput(source, field, "expected an object with dtype, shape and data_offsets")
    try:
        dtype = StoredDType(entry.get("dtype"))
    except ValueError:
        raise BadInput(source, f"{field}.dtype", f"unknown dtype {str(entry.get('dtype'))[:20]!r}") from None
    shape = entry.get("shape")
    if not isinstance(shape, list) or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0
                                              for s in shape):
        raise BadInput(source, f"{field}.shape", "expected a list of non-negative integers")
    offsets = entry.get("data_offsets")
    if (not isinstance(offsets, list) or len(offsets) != 2
            or not all(isinstance(o, int) and not isinstance(o, bool) for o in offsets)):
        raise BadInput(source, f"{field}.data_offsets", "expected [begin, end]")
    begin, end = offsets
    spec = TensorSpec(key, tuple(shape), dtype)
    if not 0 <= begin <= end <= data_size:
        raise BadInput(source, f"{field}.data_offsets", f"[{begin}, {end}] is outside the {data_size} data bytes")
    if end - begin != spec.nbytes:
        raise BadInput(source, f"{field}.data_offsets",
                       f"{end - begin} bytes for a {dtype.value} {list(shape)} tensor of {spec.nbytes} bytes")
    return spec


def read_checkpoint(directory: Path) -> Checkpoint | None:
    """The weight files of ``directory``: every ``*.safetensors`` header, else the index total, else None."""
    if path_kind(directory) != "dir":
        return None
    try:
        shards = sorted(p for p in directory.iterdir() if p.name.endswith(".safetensors"))
    except OSError as exc:
        raise BadInput(str(directory), None, f"cannot list: {exc.strerror or exc}") from None
    if len(shards) > MAX_SHARDS:
        raise BadInput(str(directory), None, f"{len(shards)} safetensors files (at most {MAX_SHARDS} are read)")
    if shards:
        headers = tuple(read_header(p) for p in shards)
        seen: dict[str, str] = {}
        for h in headers:
            for t in h.tensors:
                if t.name in seen:
                    raise BadInput(h.path, f"header[{t.name[:80]!r}]", f"tensor also in {seen[t.name]}")
                seen[t.name] = h.path
        return Checkpoint(CheckpointSource.HEADERS, str(directory), len(headers),
                          sum(len(h.tensors) for h in headers), sum(h.data_bytes for h in headers),
                          sum(t.elements for h in headers for t in h.tensors),
                          sum(h.file_bytes for h in headers), headers)
    index = directory / INDEX_NAME
    if path_kind(index) == "file":
        return read_index(index)
    return None


def read_index(path: Path) -> Checkpoint:
    """``metadata.total_size`` (bytes of tensor data) and the ``weight_map`` of an index file."""
    name = str(path)
    try:
        data = json.loads(read_text(path, MAX_INDEX_BYTES))
    except (RecursionError, ValueError) as exc:
        raise BadInput(name, None, f"not JSON: {str(exc).splitlines()[0][:120]}") from None
    if not isinstance(data, dict):
        raise BadInput(name, None, "expected a JSON object")
    meta = data.get("metadata")
    total = meta.get("total_size") if isinstance(meta, dict) else None
    if isinstance(total, bool) or not isinstance(total, int) or total < 0:
        raise BadInput(name, "metadata.total_size", "missing or not a non-negative integer")
    weight_map = data.get("weight_map")
    if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
        raise BadInput(name, "weight_map", "missing or not a mapping of tensor name to file")
    return Checkpoint(CheckpointSource.INDEX, str(path.parent), len(set(weight_map.values())), len(weight_map),
                      total, None, None)
