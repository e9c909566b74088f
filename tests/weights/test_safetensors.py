"""The safetensors header reader, on files this test writes: never the data, bounded, bad input named."""

from __future__ import annotations

import json
import shutil
import struct
import time

import pytest

from csa_plan.planner.errors import BadInput
from csa_plan.planner.weights.measured import WeightsSource, model_weights
from csa_plan.planner.weights.safetensors import (MAX_HEADER_BYTES, CheckpointSource, read_checkpoint,
                                                  read_header)

from helpers import ROOT
from helpers.safetensors_files import write_shard


def test_several_shards_are_summed_exactly(tmp_path):
    a = write_shard(tmp_path / "model-00001-of-00002.safetensors",
                    {"embed.weight": ("BF16", (10, 8)), "layers.0.attn.wq_a.weight": ("F8_E4M3", (128, 256)),
                     "layers.0.attn.wq_a.scale": ("F8_E8M0", (1, 2))})
    b = write_shard(tmp_path / "model-00002-of-00002.safetensors",
                    {"layers.0.ffn.gate.tid2eid": ("I64", (10, 6)), "head.weight": ("BF16", (10, 8))},
                    metadata=False)
    ckpt = read_checkpoint(tmp_path)
    assert ckpt.source is CheckpointSource.HEADERS and ckpt.files == 2 and ckpt.tensor_count == 5
    assert ckpt.data_bytes == a + b == 160 + 128 * 256 + 2 + 480 + 160
    assert ckpt.element_count == 80 + 128 * 256 + 2 + 60 + 80
    assert ckpt.file_bytes == sum(p.stat().st_size for p in tmp_path.iterdir())


def test_huge_sparse_data_is_never_read(tmp_path):
    path = tmp_path / "big.safetensors"
    write_shard(path, {"w": ("BF16", (1 << 20, 1 << 14))})  # 32 GiB of (sparse) data
    start = time.perf_counter()
    header = read_header(path)
    assert header.data_bytes == 1 << 35 and time.perf_counter() - start < 1.0


def test_index_file_alone_gives_its_total(tmp_path):
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({
        "metadata": {"total_size": 123_456_789},
        "weight_map": {"a.weight": "model-00001-of-00002.safetensors", "b.weight": "model-00002-of-00002.safetensors",
                       "b.scale": "model-00002-of-00002.safetensors"}}))
    ckpt = read_checkpoint(tmp_path)
    assert ckpt.source is CheckpointSource.INDEX and ckpt.data_bytes == 123_456_789
    assert ckpt.tensor_count == 3 and ckpt.files == 2 and ckpt.element_count is None


def test_shards_win_over_the_index(tmp_path):
    n = write_shard(tmp_path / "model-00001-of-00001.safetensors", {"a.weight": ("F32", (3, 3))})
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({
        "metadata": {"total_size": 1}, "weight_map": {"a.weight": "model-00001-of-00001.safetensors"}}))
    assert read_checkpoint(tmp_path).data_bytes == n == 36


def raw_file(path, payload: bytes):
    path.write_bytes(payload)
    return path


@pytest.mark.parametrize("payload, needle", [
    (b"\x10\x00\x00", "truncated: 3 of 8 bytes"),
    (struct.pack("<Q", 500) + b"{}", "truncated: the length says 500 bytes"),
    (struct.pack("<Q", MAX_HEADER_BYTES + 1) + b"{}", "100,000,001 bytes is over the 33,554,432-byte cap .MAX_CHECKPOINT_HEADER_BYTES"),
    (struct.pack("<Q", 1 << 63) + b"{}", "cap"),
    (struct.pack("<Q", 9) + b"not json!", "malformed JSON"),
    (struct.pack("<Q", 2) + b"[]", "expected a JSON object"),
    (struct.pack("<Q", 4) + b"\xff\xfe{}", "not UTF-8"),
])
def test_malformed_headers_are_bad_input_naming_the_file(tmp_path, payload, needle):
    path = raw_file(tmp_path / "model-00001-of-00001.safetensors", payload)
    with pytest.raises(BadInput, match=needle) as err:
        read_checkpoint(tmp_path)
    assert err.value.source == str(path)


def header_with(entry, data_bytes: int = 0) -> bytes:
    raw = json.dumps({"t": entry}).encode()
    return struct.pack("<Q", len(raw)) + raw + bytes(data_bytes)


@pytest.mark.parametrize("entry, data, needle", [
    ({"dtype": "F4", "shape": [2], "data_offsets": [0, 1]}, 8, "unknown dtype"),
    ({"dtype": "F32", "shape": [2.0], "data_offsets": [0, 8]}, 8, "list of non-negative integers"),
    ({"dtype": "F32", "shape": [2], "data_offsets": [0, 7]}, 8, r"7 bytes for a F32 \[2\] tensor of 8 bytes"),
    ({"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}, 0, "outside the 0 data bytes"),
    ({"dtype": "F32", "shape": [2], "data_offsets": [4, 2]}, 8, "outside the 8 data bytes"),
    ({"dtype": "F32", "shape": [2]}, 8, r"expected \[begin, end\]"),
    ("F32", 0, "expected an object"),
])
def test_inconsistent_entries_are_bad_input(tmp_path, entry, data, needle):
    raw_file(tmp_path / "x.safetensors", header_with(entry, data))
    with pytest.raises(BadInput, match=needle):
        read_checkpoint(tmp_path)


def test_a_tensor_in_two_shards_is_bad_input(tmp_path):
    write_shard(tmp_path / "a.safetensors", {"w": ("F32", (1,))})
    write_shard(tmp_path / "b.safetensors", {"w": ("F32", (1,))})
    with pytest.raises(BadInput, match="tensor also in"):
        read_checkpoint(tmp_path)


@pytest.mark.parametrize("doc, needle", [
    ({"weight_map": {}}, "metadata.total_size"),
    ({"metadata": {"total_size": -1}, "weight_map": {}}, "metadata.total_size"),
    ({"metadata": {"total_size": 5}, "weight_map": []}, "weight_map"),
])
def test_bad_index_is_bad_input(tmp_path, doc, needle):
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(doc))
    with pytest.raises(BadInput, match=needle):
        read_checkpoint(tmp_path)


def test_measured_figure_wins_and_says_how_far_the_inventory_was(tmp_path):
    shutil.copy(ROOT / "planner" / "presets" / "deepseek-v4-flash.json", tmp_path / "config.json")
    write_shard(tmp_path / "model-00001-of-00001.safetensors", {"embed.weight": ("BF16", (129280, 4096))})
    w = model_weights(str(tmp_path))
    assert w.source is WeightsSource.HEADERS and w.total_bytes == 129280 * 4096 * 2
    assert w.inventory_delta_bytes == 159_609_485_896 - 129280 * 4096 * 2
    assert "safetensors headers" in w.note and f"{w.inventory_delta_bytes:+,} B off" in w.note
    (tmp_path / "model-00001-of-00001.safetensors").unlink()
    assert model_weights(str(tmp_path)).source is WeightsSource.INVENTORY


def test_checkpoint_of_an_unknown_architecture_still_measures(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["SomethingNew"]}))
    write_shard(tmp_path / "m.safetensors", {"w": ("BF16", (4, 4))})
    w = model_weights(str(tmp_path))
    assert w.total_bytes == 32 and w.inventory is None and "no inventory" in w.note
    (tmp_path / "m.safetensors").unlink()
    with pytest.raises(BadInput, match="no tensor inventory for 'SomethingNew'"):
        model_weights(str(tmp_path))
    assert model_weights(str(tmp_path), required=False) is None


# -- issue 24: the tensors tile the data area; duplicates; the input boundary; read once --------------


def _raw_header(entries: dict, data: int) -> bytes:
    raw = json.dumps(entries).encode()
    return struct.pack("<Q", len(raw)) + raw + bytes(data)


@pytest.mark.parametrize("entries, data, needle", [
    ({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
      "b": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}, 8, "overlaps the tensor before it"),
    ({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
      "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}}, 12, "overlaps"),
    ({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
      "b": {"dtype": "F32", "shape": [2], "data_offsets": [16, 24]}}, 24, "leaves a gap of 8 bytes"),
    ({"a": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}}, 16, "leaves a gap of 8 bytes"),
    ({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}, 12, "cover 8 of the 12 data bytes"),
])
def test_offsets_must_tile_the_data_area(tmp_path, entries, data, needle):
    """Overlapping ranges counted the same bytes twice (200 x 1 GiB of 'measured' weights from 1 GiB)."""
    raw_file(tmp_path / "x.safetensors", _raw_header(entries, data))
    with pytest.raises(BadInput, match=needle):
        read_checkpoint(tmp_path)


def test_out_of_order_ranges_that_tile_are_accepted(tmp_path):
    entries = {"b": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]},
               "a": {"dtype": "BF16", "shape": [4], "data_offsets": [0, 8]},
               "empty": {"dtype": "F32", "shape": [0], "data_offsets": [16, 16]}}
    raw_file(tmp_path / "x.safetensors", _raw_header(entries, 16))
    assert read_checkpoint(tmp_path).data_bytes == 16


def test_a_tensor_named_twice_in_one_header_is_bad_input(tmp_path):
    entry = '{"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}'
    raw = ('{"w": ' + entry + ', "w": ' + entry + '}').encode()
    raw_file(tmp_path / "x.safetensors", struct.pack("<Q", len(raw)) + raw + bytes(8))
    with pytest.raises(BadInput, match=r"header\['w'\]: duplicate key"):
        read_checkpoint(tmp_path)


@pytest.mark.parametrize("kind, needle", [("fifo", "FIFO"), ("dir", "a directory"), ("zero", "character device")])
@pytest.mark.parametrize("name", ["model-00001-of-00001.safetensors", "model.safetensors.index.json"])
def test_a_shard_or_index_that_is_not_a_file_is_bad_input(tmp_path, kind, needle, name):
    """Opened once, non-blocking, the descriptor fstat-ed: a FIFO never blocks (the index was ignored
    before, leaving a refusal, exit 3)."""
    import os

    target = tmp_path / name
    {"fifo": lambda: os.mkfifo(target), "dir": target.mkdir,
     "zero": lambda: os.symlink("/dev/zero", target)}[kind]()
    with pytest.raises(BadInput, match=needle) as err:
        read_checkpoint(tmp_path)
    assert err.value.source == str(target)


def test_headers_are_read_once_per_process(tmp_path, monkeypatch):
    """The smallest-TP search asks for the same directory once per candidate: one read of each header.
    A change to the directory (a shard added) is seen."""
    from csa_plan.planner.weights import safetensors

    write_shard(tmp_path / "a.safetensors", {"w": ("F32", (4,))})
    reads = []
    real = safetensors.read_header
    monkeypatch.setattr(safetensors, "read_header", lambda *a, **k: reads.append(a[0]) or real(*a, **k))
    first = read_checkpoint(tmp_path)
    for _ in range(50):
        assert read_checkpoint(tmp_path) is first
    assert len(reads) == 1
    import os
    import time

    time.sleep(0.01)
    write_shard(tmp_path / "b.safetensors", {"v": ("F32", (1,))})
    os.utime(tmp_path, ns=(time.time_ns(), time.time_ns()))
    assert read_checkpoint(tmp_path).data_bytes == 20 and len(reads) == 3


def test_the_checkpoint_caps_bound_the_headers_read_together(tmp_path, monkeypatch):
    from csa_plan.planner.weights import safetensors

    for i in range(3):
        write_shard(tmp_path / f"s{i}.safetensors", {f"t{i}.{k}": ("F32", (1,)) for k in range(10)})
    monkeypatch.setattr(safetensors, "MAX_CHECKPOINT_TENSORS", 25)
    with pytest.raises(BadInput, match="more than 25 tensors .*MAX_CHECKPOINT_TENSORS"):
        read_checkpoint(tmp_path)
