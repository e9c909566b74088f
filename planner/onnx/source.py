"""An ONNX file as a random-access byte source read with bounded ``pread`` calls, not ``mmap``.

A memory map dies with SIGBUS when the file shrinks under it (a truncation while a
graph is being checked), and no message can be printed from a signal. ``FileBuffer``
reads the few regions the structure walk touches — field headers, names, shapes —
in 64 KiB blocks with a small cache; a read that comes back short because the file
shrank raises ``SourceChanged``, which becomes one line of bad input. Initializer
payloads are still skipped by offset, never read.
"""

from __future__ import annotations

import os

BLOCK = 1 << 16
CACHE_BLOCKS = 64  # 4 MiB of cached blocks at most


class SourceChanged(Exception):
    """The file is shorter than it was when it was opened."""

    def __init__(self, offset: int, size: int) -> None:
        super().__init__(f"the file changed while it was read (it ended before byte {offset:,} of {size:,})")


class FileBuffer:
    """``len()``, ``buf[i]`` and ``buf[a:b]`` over an open descriptor of a fixed, checked size."""

    def __init__(self, fd: int, size: int) -> None:
        self._fd = fd
        self._size = size
        self._blocks: dict[int, bytes] = {}

    def __len__(self) -> int:
        return self._size

    def _block(self, index: int) -> bytes:
        block = self._blocks.get(index)
        if block is None:
            start = index * BLOCK
            want = min(BLOCK, self._size - start)
            block = os.pread(self._fd, want, start)
            if len(block) < want:
                raise SourceChanged(start + len(block), self._size)
            if len(self._blocks) >= CACHE_BLOCKS:
                self._blocks.pop(next(iter(self._blocks)))
            self._blocks[index] = block
        return block

    def __getitem__(self, key: int | slice) -> int | bytes:
        if key.__class__ is slice:  # the hot path: a short run inside one cached block
            start, stop = key.start, key.stop
            if start is not None and stop is not None and 0 <= start < stop <= self._size:
                index = start >> 16
                if (stop - 1) >> 16 == index:
                    block = self._blocks.get(index)
                    if block is None:
                        block = self._block(index)
                    offset = index << 16
                    return block[start - offset:stop - offset]
        if isinstance(key, int):
            if not 0 <= key < self._size:
                raise IndexError(key)
            return self._block(key // BLOCK)[key % BLOCK]
        start, stop, _ = key.indices(self._size)
        if stop <= start:
            return b""
        first, last = start // BLOCK, (stop - 1) // BLOCK
        if first == last:
            offset = first * BLOCK
            return self._block(first)[start - offset:stop - offset]
        if stop - start > 2 * BLOCK:  # a long run: one direct read, not cached
            data = os.pread(self._fd, stop - start, start)
            if len(data) < stop - start:
                raise SourceChanged(start + len(data), self._size)
            return data
        return b"".join(self._block(i)[max(start - i * BLOCK, 0):stop - i * BLOCK] for i in range(first, last + 1))
