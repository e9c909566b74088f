"""A minimal protobuf wire-format reader over a buffer (bytes or a read-only mmap).

The ONNX reader uses it to walk a model's structure field by field and to *skip*
everything it does not need (initializers, function bodies, doc strings) by
arithmetic on offsets, so tensor payloads are never copied or even paged in.

Only the four wire types ONNX uses are accepted; groups (3, 4), the reserved types
(6, 7), field number 0, an over-long varint or a length that runs past the end of
its enclosing message raise ``WireError`` with the byte offset.
"""

from __future__ import annotations

from typing import Iterator, NamedTuple, Union

from csa_plan.planner.errors import CsaPlanError

Buffer = Union[bytes, bytearray, memoryview, "mmap.mmap"]  # noqa: F821 - only for the annotation

VARINT = 0
FIXED64 = 1
LENGTH = 2
FIXED32 = 5

_MAX_VARINT_BYTES = 10
_U64 = 1 << 64
_I64_SIGN = 1 << 63


class WireError(CsaPlanError):
    """The bytes are not a well-formed protobuf message (or end too early)."""

    def __init__(self, offset: int, problem: str, *, truncated: bool = False) -> None:
        self.offset = offset
        self.problem = problem
        self.truncated = truncated
        super().__init__(f"at byte {offset}: {problem}")


class LimitError(Exception):
    """A well-formed message that is larger than csa-plan reads (a named limit)."""


class Field(NamedTuple):
    """One field occurrence. For LENGTH fields ``value`` is unused and ``start:end`` is the payload."""

    number: int
    wire_type: int
    value: int  # varint / fixed value; payload length for LENGTH fields
    start: int  # payload start (LENGTH) or the offset of the value
    end: int  # offset just past this field


def read_varint(buf: Buffer, pos: int, end: int) -> tuple[int, int]:
    result = 0
    shift = 0
    start = pos
    chunk = buf[pos:min(pos + _MAX_VARINT_BYTES, end)]  # one bounded read per varint
    for i, byte in enumerate(chunk):
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, start + i + 1
        shift += 7
    if len(chunk) >= _MAX_VARINT_BYTES:
        raise WireError(start, "varint longer than 10 bytes")
    raise WireError(start, "varint runs past the end of its message", truncated=True)


def as_int64(value: int) -> int:
    """A varint read as a signed 64-bit integer (protobuf int64 / int32 encoding)."""
    value %= _U64
    return value - _U64 if value >= _I64_SIGN else value


_LOCAL_BYTES = 1 << 20  # a message this small is read once and walked in memory


def iter_fields(buf: Buffer, start: int, end: int) -> Iterator[Field]:
    """Every field of the message occupying ``buf[start:end]``, in file order (offsets absolute)."""
    if end - start <= _LOCAL_BYTES and not isinstance(buf, (bytes, bytearray)):
        data = buf[start:end]  # one bounded read instead of one per varint
        base = start
    else:
        data, base = buf, 0
    pos, stop = start - base, end - base
    while pos < stop:
        tag_at = pos
        key = data[pos]
        if key < 0x80:
            pos += 1
        else:
            key, pos = _varint(data, pos, stop, base)
        number, wire_type = key >> 3, key & 7
        if number == 0:
            raise WireError(tag_at + base, "field number 0 is invalid")
        if wire_type == LENGTH:
            if pos >= stop:
                raise WireError(pos + base, "varint runs past the end of its message", truncated=True)
            length = data[pos]
            if length < 0x80:
                pos += 1
            else:
                length, pos = _varint(data, pos, stop, base)
            if length > stop - pos:
                raise WireError(tag_at + base, f"field {number} declares {length} bytes but only {stop - pos} remain",
                                truncated=True)
            yield Field(number, wire_type, length, pos + base, pos + base + length)
            pos += length
        elif wire_type == VARINT:
            value, pos = _varint(data, pos, stop, base)
            yield Field(number, wire_type, value, tag_at + base, pos + base)
        elif wire_type in (FIXED64, FIXED32):
            width = 8 if wire_type == FIXED64 else 4
            if width > stop - pos:
                raise WireError(tag_at + base, f"field {number} needs {width} bytes but only {stop - pos} remain",
                                truncated=True)
            value = int.from_bytes(bytes(data[pos:pos + width]), "little")
            yield Field(number, wire_type, value, pos + base, pos + base + width)
            pos += width
        else:
            raise WireError(tag_at + base, f"wire type {wire_type} (field {number}) is not used by ONNX")


def _varint(data: Buffer, pos: int, end: int, base: int) -> tuple[int, int]:
    try:
        return read_varint(data, pos, end)
    except WireError as exc:
        raise WireError(exc.offset + base, exc.problem, truncated=exc.truncated) from None


def text(buf: Buffer, f: Field, what: str) -> str:
    """A LENGTH field decoded as UTF-8, at most MAX_ONNX_STRING_BYTES long."""
    from csa_plan.planner.limits import MAX_ONNX_STRING_BYTES

    if f.wire_type != LENGTH:
        raise WireError(f.start, f"{what} should be a string (wire type 2), got wire type {f.wire_type}")
    if f.end - f.start > MAX_ONNX_STRING_BYTES:
        raise LimitError(f"{what} at byte {f.start:,} is {f.end - f.start:,} bytes long "
                         f"(limit MAX_ONNX_STRING_BYTES = {MAX_ONNX_STRING_BYTES:,})")
    try:
        return bytes(buf[f.start:f.end]).decode("utf-8")
    except UnicodeDecodeError:
        raise WireError(f.start, f"{what} is not valid UTF-8") from None
