"""Safetensors files written by the tests: an 8-byte length, a JSON header, and sparse zero data."""

from __future__ import annotations

import json
import struct

from csa_plan.planner.weights.tensors import StoredDType


def write_shard(path, tensors, *, data=True, metadata=True) -> int:
    """tensors: name -> (dtype name, shape). Writes the header and (sparse, zero) data; returns the
    data byte count. ``data=False`` leaves the data out (a truncated shard)."""
    header, offset = {}, 0
    if metadata:
        header["__metadata__"] = {"format": "pt"}
    for name, (dtype, shape) in tensors.items():
        n = StoredDType(dtype).itemsize
        for s in shape:
            n *= s
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + n]}
        offset += n
    raw = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw)
        if data:
            f.truncate(8 + len(raw) + offset)  # sparse: the reader must never need these bytes
    return offset
