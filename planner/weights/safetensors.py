"""Safetensors headers of a local model directory: the 8-byte length and the JSON header only.

A header is read with a stated cap and checked against its file (dtype, shape and data
offsets must agree and stay inside the file); the tensor data is never read. With no
shard files present, ``model.safetensors.index.json`` gives the total (its
``metadata.total_size``) and the tensor count (its ``weight_map``).
"""

from __future__ import annotations

import json
import os
import struct
from collections import OrderedDict
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

from csa_plan.planner.errors import I63_LIMIT, U64_LIMIT, BadInput
from csa_plan.planner.files import decode_utf8, open_regular, path_kind, read_text
from csa_plan.planner.text import excerpt
from csa_plan.planner.weights.tensors import StoredDType, TensorSpec

MAX_HEADER_BYTES = 100_000_000   # the safetensors library's own MAX_HEADER_SIZE
MAX_SHARDS = 10_000
MAX_SHARD_BYTES = 1 << 44  # 16 TiB: one shard file (only its header is read)
MAX_INDEX_BYTES = 64 << 20  # an index file (a 91,280-tensor index is about 8 MB)
MAX_CHECKPOINT_HEADER_BYTES = 32 << 20  # every shard's JSON header together (a 163-shard checkpoint: ~16 MB)
MAX_CHECKPOINT_TENSORS = 200_000  # tensors in every header together (DeepSeek-V3: 91,280)
MAX_TENSOR_DIMS = 64  # dimensions of one tensor (20,000 gave a 6,000-digit element count in a message)
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


def _pread_exactly(fd: int, count: int, offset: int, source: str, field: str) -> bytes:
    """``count`` bytes at ``offset`` (bounded reads; a file that shrinks meanwhile is truncated input)."""
    chunks: list[bytes] = []
    got = 0
    try:
        while got < count:
            chunk = os.pread(fd, min(count - got, 1 << 20), offset + got)
            if not chunk:
                break
            chunks.append(chunk)
            got += len(chunk)
    except OSError as exc:
        raise BadInput(source, None, f"cannot read: {exc.strerror or exc}") from None
    if got < count:
        raise BadInput(source, field, f"truncated: {got:,} of {count:,} bytes")
    return b"".join(chunks)


def read_header(path: Path, max_header_bytes: int = MAX_HEADER_BYTES,
                limit_name: str = "MAX_HEADER_BYTES") -> ShardHeader:
    """One shard's header, read through the input boundary (one non-blocking open, ``fstat`` of the
    descriptor, reads capped at the header length); a header that is truncated, oversized, not
    strict JSON (a duplicate tensor name is one) or inconsistent is bad input naming the file."""
    name = str(path)
    with open_regular(path, MAX_SHARD_BYTES, "MAX_SHARD_BYTES") as (fd, size):
        prefix = _pread_exactly(fd, 8, 0, name, "header length")
        (length,) = struct.unpack("<Q", prefix)
        if length > max_header_bytes:
            raise BadInput(name, "header length", f"{length:,} bytes is over the {max_header_bytes:,}-byte cap "
                                                  f"({limit_name})")
        if length > size - 8:
            raise BadInput(name, "header", f"truncated: the length says {length:,} bytes, "
                           f"the file has {size - 8:,} after it")
        raw = _pread_exactly(fd, length, 8, name, "header")
    header = _strict_json(decode_utf8(raw, name), name)  # a tensor named twice: bad input
    if not isinstance(header, dict):
        raise BadInput(name, "header", f"expected a JSON object, got {type(header).__name__}")
    data_size = size - 8 - length
    entries = [(key, value) for key, value in header.items() if key != "__metadata__"]
    spans = [_tensor(name, key, value, data_size) for key, value in entries]
    _check_tiling(name, spans, data_size)
    return ShardHeader(name, size, length, tuple(spec for spec, _, _ in spans))


class _Duplicate(Exception):
    pass


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):  # rare: find the key given twice, for the message
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _Duplicate(key)
            seen.add(key)
    return out


def _strict_json(text: str, source: str, what: str = "header") -> Any:
    """A header's JSON at the C parser's speed (a header holds up to a few hundred thousand objects):
    a key given twice in any object is bad input (it would silently take the last value); the
    entries are then checked field by field, so no tree walk is needed."""
    try:
        return json.loads(text, object_pairs_hook=_no_duplicates)
    except _Duplicate as exc:
        raise BadInput(source, f"{what}[{excerpt(str(exc.args[0]), 80)}]",
                       f"duplicate key (the {what} names it twice)") from None
    except (RecursionError, ValueError) as exc:
        raise BadInput(source, what, f"malformed JSON: {str(exc).splitlines()[0][:120]}") from None


def _check_tiling(source: str, spans: list[tuple[TensorSpec, int, int]], data_size: int) -> None:
    """The tensors' byte ranges tile the data area exactly, as the safetensors format requires
    (sorted, contiguous, no overlap, no gap, ending at the file's end): overlapping ranges
    would count the same bytes twice as "measured" weights."""
    at = 0
    for spec, begin, end in sorted(spans, key=lambda s: (s[1], s[2])):
        if begin != at:
            what = "overlaps the tensor before it" if begin < at else f"leaves a gap of {begin - at:,} bytes"
            raise BadInput(source, f"header[{excerpt(spec.name, 80)}].data_offsets",
                           f"[{begin:,}, {end:,}] {what} (the tensors must tile the data area exactly; the previous "
                           f"one ends at {at:,})")
        at = end
    if at != data_size:
        raise BadInput(source, "header", f"the tensors cover {at:,} of the {data_size:,} data bytes after the header "
                                         "(they must tile the data area exactly)")


_DTYPES = {d.value: d for d in StoredDType}


def _tensor(source: str, key: str, entry: Any, data_size: int) -> tuple[TensorSpec, int, int]:
    """One entry, checked field by field (the message's field is built only on a problem)."""
    field = lambda: f"header[{excerpt(key, 80)}]"  # noqa: E731
    if type(entry) is not dict:
        raise BadInput(source, field(), "expected an object with dtype, shape and data_offsets")
    dtype = _DTYPES.get(entry.get("dtype")) if isinstance(entry.get("dtype"), str) else None
    if dtype is None:
        raise BadInput(source, f"{field()}.dtype", f"unknown dtype {excerpt(str(entry.get('dtype')), 20)}")
    shape = entry.get("shape")
    if type(shape) is not list or not all(type(s) is int and 0 <= s < I63_LIMIT for s in shape[:MAX_TENSOR_DIMS + 1]):
        raise BadInput(source, f"{field()}.shape", "expected a list of non-negative integers below 2^63")
    if len(shape) > MAX_TENSOR_DIMS:
        raise BadInput(source, f"{field()}.shape", f"{len(shape):,} dimensions (at most {MAX_TENSOR_DIMS}, "
                                                   "MAX_TENSOR_DIMS)")
    offsets = entry.get("data_offsets")
    if type(offsets) is not list or len(offsets) != 2 or not all(type(o) is int for o in offsets):
        raise BadInput(source, f"{field()}.data_offsets", "expected [begin, end]")
    begin, end = offsets
    spec = TensorSpec(key, tuple(shape), dtype)
    if not 0 <= begin <= end <= data_size:
        raise BadInput(source, f"{field()}.data_offsets", f"[{begin}, {end}] is outside the {data_size} data bytes")
    nbytes = spec.nbytes
    if end - begin != nbytes:
        size = f"{nbytes}" if nbytes < U64_LIMIT else "more than 2^64"  # never a thousand-digit number
        raise BadInput(source, f"{field()}.data_offsets",
                       f"{end - begin} bytes for a {dtype.value} {list(shape)} tensor of {size} bytes")
    return spec, begin, end


_CACHE: "OrderedDict[tuple, Checkpoint | None]" = OrderedDict()
_CACHE_ENTRIES = 4


def read_checkpoint(directory: Path) -> Checkpoint | None:
    """The weight files of ``directory``: every ``*.safetensors`` header, else the index total, else None.

    Read once per process: a device budget's smallest-TP search asks for the same directory once
    per candidate (up to 512 times), and a 163-shard checkpoint's headers are tens of megabytes of
    JSON. The cache key is the directory's identity and modification time (adding, removing or
    renaming a shard changes it)."""
    if path_kind(directory) != "dir":
        return None
    try:
        info = os.stat(directory)
    except OSError as exc:
        raise BadInput(str(directory), None, f"cannot access: {exc.strerror or exc}") from None
    key = (os.path.realpath(directory), info.st_dev, info.st_ino, info.st_mtime_ns)
    if key in _CACHE:
        _CACHE.move_to_end(key)
        return _CACHE[key]
    checkpoint = _read_checkpoint(directory)
    _CACHE[key] = checkpoint
    while len(_CACHE) > _CACHE_ENTRIES:
        _CACHE.popitem(last=False)
    return checkpoint


def _read_checkpoint(directory: Path) -> Checkpoint | None:
    try:
        shards = sorted(p for p in directory.iterdir() if p.name.endswith(".safetensors"))
    except OSError as exc:
        raise BadInput(str(directory), None, f"cannot list: {exc.strerror or exc}") from None
    if len(shards) > MAX_SHARDS:
        raise BadInput(str(directory), None, f"{len(shards):,} safetensors files (at most {MAX_SHARDS:,} are read, "
                                             "MAX_SHARDS)")
    if shards:
        headers: list[ShardHeader] = []
        header_bytes = tensors = 0
        for p in shards:
            left = MAX_CHECKPOINT_HEADER_BYTES - header_bytes
            h = read_header(p, *((MAX_HEADER_BYTES, "MAX_HEADER_BYTES") if left >= MAX_HEADER_BYTES else
                                 (left, f"MAX_CHECKPOINT_HEADER_BYTES = {MAX_CHECKPOINT_HEADER_BYTES:,} for every "
                                        "header together")))
            header_bytes += h.header_bytes
            tensors += len(h.tensors)
            if tensors > MAX_CHECKPOINT_TENSORS:
                raise BadInput(str(directory), None, f"more than {MAX_CHECKPOINT_TENSORS:,} tensors in its headers "
                                                     "(MAX_CHECKPOINT_TENSORS)")
            headers.append(h)
        seen: dict[str, str] = {}
        for h in headers:
            for t in h.tensors:
                if t.name in seen:
                    raise BadInput(h.path, f"header[{excerpt(t.name, 80)}]", f"tensor also in {seen[t.name]}")
                seen[t.name] = h.path
        return Checkpoint(CheckpointSource.HEADERS, str(directory), len(headers),
                          sum(len(h.tensors) for h in headers), sum(h.data_bytes for h in headers),
                          sum(t.elements for h in headers for t in h.tensors),
                          sum(h.file_bytes for h in headers), tuple(headers))
    index = directory / INDEX_NAME
    kind = path_kind(index)
    if kind == "file":
        return read_index(index)
    if kind is not None:  # a directory, FIFO or device named like the index: read_text says which
        read_text(index, MAX_INDEX_BYTES, "MAX_INDEX_BYTES")
    return None


def read_index(path: Path) -> Checkpoint:
    """``metadata.total_size`` (bytes of tensor data) and the ``weight_map`` of an index file."""
    name = str(path)
    data = _strict_json(read_text(path, MAX_INDEX_BYTES, "MAX_INDEX_BYTES"), name, "index")
    if not isinstance(data, dict):
        raise BadInput(name, None, "expected a JSON object")
    meta = data.get("metadata")
    total = meta.get("total_size") if isinstance(meta, dict) else None
    if isinstance(total, bool) or not isinstance(total, int) or total < 0:
        raise BadInput(name, "metadata.total_size", "missing or not a non-negative integer")
    if total >= U64_LIMIT:  # bytes are below 2^64 everywhere (10^4000 overflowed a float later)
        raise BadInput(name, "metadata.total_size", "above 2^64 - 1 bytes")
    weight_map = data.get("weight_map")
    if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
        raise BadInput(name, "weight_map", "missing or not a mapping of tensor name to file")
    return Checkpoint(CheckpointSource.INDEX, str(path.parent), len(set(weight_map.values())), len(weight_map),
                      total, None, None)
