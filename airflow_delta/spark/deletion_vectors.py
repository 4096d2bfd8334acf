"""Deletion vectors: decode the row indexes a DV marks as deleted (PROTOCOL.md, Deletion Vectors).

A DV descriptor points at a serialized `RoaringBitmapArray`: inline in the log (`storageType`
'i', Z85-encoded), in a file next to the data (`'u'`, a Z85-encoded UUID with an optional random
prefix) or in a file at an absolute path (`'p'`). The bitmap is Delta's magic number followed by
a 64-bit RoaringBitmap in the portable format: a count of 32-bit buckets, then for each bucket its
high 32 bits and a standard 32-bit RoaringBitmap whose containers are arrays, bitmaps or runs.

Everything here is numpy on the driver; nothing depends on Spark.
"""

from __future__ import annotations

import struct
import uuid
import zlib

import numpy as np

from airflow_delta.engine.errors import CorruptLogError, DeltaProtocolError

Z85_ALPHABET = (
    b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"
)
_Z85_DIGITS = np.full(256, 255, dtype=np.uint8)
_Z85_DIGITS[np.frombuffer(Z85_ALPHABET, dtype=np.uint8)] = np.arange(85, dtype=np.uint8)
_Z85_POWERS = np.array([85**4, 85**3, 85**2, 85, 1], dtype=np.uint64)

#: The first four bytes (little endian) of a Delta `RoaringBitmapArray` in the portable format.
MAGIC_NUMBER = 1681511377
#: The same for Delta's older native format (an int32 count, then size-prefixed bitmaps).
NATIVE_MAGIC_NUMBER = 1681511376
#: Version byte at the start of a deletion vector file.
FILE_FORMAT_VERSION = 1
_UUID_CHARS = 20  # a Z85-encoded 16-byte UUID

_SERIAL_COOKIE_NO_RUNS = 12346
_SERIAL_COOKIE = 12347
_NO_OFFSET_THRESHOLD = 4
_MAX_ARRAY_CARDINALITY = 4096
_BITMAP_WORDS = 1024


def z85_decode(text: str) -> bytes:
    """The bytes of a Z85 text (its length a multiple of 5)."""
    if not text.isascii():
        raise CorruptLogError(f"not a Z85 text: {text!r}")
    raw = np.frombuffer(text.encode("ascii"), dtype=np.uint8)
    if len(raw) % 5:
        raise CorruptLogError(f"Z85 text of length {len(raw)} is not a multiple of 5: {text!r}")
    digits = _Z85_DIGITS[raw]
    if (digits == 255).any():
        raise CorruptLogError(f"not a Z85 text: {text!r}")
    words = (digits.reshape(-1, 5).astype(np.uint64) * _Z85_POWERS).sum(axis=1)
    if (words > 0xFFFFFFFF).any():
        raise CorruptLogError(f"Z85 text overflows 32 bits: {text!r}")
    return words.astype(">u4").tobytes()


def relative_dv_path(path_or_inline_dv: str) -> str:
    """The table-relative file of a `'u'` DV: `[<prefix>/]deletion_vector_<uuid>.bin`."""
    if len(path_or_inline_dv) < _UUID_CHARS:
        raise CorruptLogError(
            f"deletion vector pathOrInlineDv {path_or_inline_dv!r} is shorter than a UUID"
        )
    prefix = path_or_inline_dv[:-_UUID_CHARS]
    dv_uuid = uuid.UUID(bytes=z85_decode(path_or_inline_dv[-_UUID_CHARS:]))
    name = f"deletion_vector_{dv_uuid}.bin"
    return f"{prefix}/{name}" if prefix else name


def inline_dv_bytes(path_or_inline_dv: str, size_in_bytes: int) -> bytes:
    """The serialized bitmap of an inline (`'i'`) DV."""
    data = z85_decode(path_or_inline_dv)
    if len(data) < size_in_bytes:
        raise CorruptLogError(
            f"inline deletion vector holds {len(data)} bytes, sizeInBytes says {size_in_bytes}"
        )
    return data[:size_in_bytes]


def dv_bytes_from_file(content: bytes, offset: int, size_in_bytes: int, where: str) -> bytes:
    """The serialized bitmap stored at `offset` of a DV file's `content`, checksum verified.

    The file is a version byte (1), then for each DV: its size (int32 big endian), the bitmap,
    and a CRC-32 of the bitmap (big endian). `offset` points at the size field.
    """
    if not content or content[0] != FILE_FORMAT_VERSION:
        version = content[0] if content else None
        raise DeltaProtocolError(f"deletion vector file {where} has unsupported version {version}")
    end = offset + 4 + size_in_bytes + 4
    if offset < 1 or end > len(content):
        raise CorruptLogError(
            f"deletion vector at offset {offset} (size {size_in_bytes}) lies outside "
            f"{where} ({len(content)} bytes)"
        )
    (stored_size,) = struct.unpack_from(">i", content, offset)
    if stored_size != size_in_bytes:
        raise CorruptLogError(
            f"deletion vector at offset {offset} of {where} has {stored_size} bytes, "
            f"the log says {size_in_bytes}"
        )
    data = content[offset + 4 : offset + 4 + size_in_bytes]
    (checksum,) = struct.unpack_from(">I", content, offset + 4 + size_in_bytes)
    if zlib.crc32(data) != checksum:
        raise CorruptLogError(f"deletion vector at offset {offset} of {where}: checksum mismatch")
    return data


def deleted_row_indexes(data: bytes) -> np.ndarray:
    """The sorted row indexes (uint64) of a serialized Delta `RoaringBitmapArray`."""
    reader = _Reader(data)
    magic = reader.unpack("<I")
    if magic == MAGIC_NUMBER:
        buckets = [(reader.unpack("<I"), _read_roaring32(reader)) for _ in _count(reader, "<Q")]
    elif magic == NATIVE_MAGIC_NUMBER:
        buckets = []
        for key in _count(reader, "<I"):
            reader.take(4)  # the bitmap's serialized size
            buckets.append((key, _read_roaring32(reader)))
    else:
        raise DeltaProtocolError(
            f"deletion vector has magic number {magic}; supported are {MAGIC_NUMBER} "
            f"(RoaringBitmapArray, portable format) and {NATIVE_MAGIC_NUMBER} (native format)"
        )
    if reader.pos != len(data):
        raise CorruptLogError(
            f"deletion vector has {len(data) - reader.pos} trailing bytes after its bitmap"
        )
    parts = []
    for high, low in buckets:
        if high >> 31:
            raise CorruptLogError(f"deletion vector bucket key {high} has its top bit set")
        parts.append((np.uint64(high) << np.uint64(32)) | low.astype(np.uint64))
    return np.concatenate(parts) if parts else np.empty(0, dtype=np.uint64)


def _count(reader: _Reader, fmt: str) -> range:
    """`range(n)` for a count `n` read with `fmt`, which must fit what is left of the data."""
    count = reader.unpack(fmt)
    if count > len(reader.data) - reader.pos:
        raise CorruptLogError(f"deletion vector claims {count} bitmaps in {len(reader.data)} bytes")
    return range(count)


class _Reader:
    """A cursor over little-endian serialized data that reports truncation as corruption."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def take(self, size: int) -> memoryview:
        if self.pos + size > len(self.data):
            raise CorruptLogError(
                f"deletion vector bitmap is truncated: needs {self.pos + size} bytes, "
                f"has {len(self.data)}"
            )
        view = memoryview(self.data)[self.pos : self.pos + size]
        self.pos += size
        return view

    def unpack(self, fmt: str) -> int:
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]

    def array(self, dtype: str, count: int) -> np.ndarray:
        return np.frombuffer(self.take(np.dtype(dtype).itemsize * count), dtype=dtype)


def _read_roaring32(reader: _Reader) -> np.ndarray:
    """The values (uint32) of one standard 32-bit RoaringBitmap (RoaringFormatSpec)."""
    cookie = reader.unpack("<I")
    if cookie & 0xFFFF == _SERIAL_COOKIE:
        size = (cookie >> 16) + 1
        run_flags = np.unpackbits(reader.array("u1", (size + 7) // 8), bitorder="little")
        has_offsets = size >= _NO_OFFSET_THRESHOLD
    elif cookie == _SERIAL_COOKIE_NO_RUNS:
        size = reader.unpack("<I")
        run_flags = np.zeros(size, dtype=np.uint8)
        has_offsets = True
    else:
        raise CorruptLogError(f"deletion vector holds an unknown RoaringBitmap cookie {cookie}")
    header = reader.array("<u2", 2 * size).reshape(size, 2)
    if has_offsets:
        reader.take(4 * size)  # container offsets: the containers follow in order anyway
    containers = []
    for i in range(size):
        key = np.uint32(header[i, 0]) << np.uint32(16)
        cardinality = int(header[i, 1]) + 1
        if run_flags[i]:
            num_runs = reader.unpack("<H")
            runs = reader.array("<u2", 2 * num_runs).reshape(num_runs, 2).astype(np.int64)
            lengths = runs[:, 1] + 1
            starts = np.repeat(runs[:, 0] - np.cumsum(lengths) + lengths, lengths)
            low = starts + np.arange(int(lengths.sum()))
        elif cardinality <= _MAX_ARRAY_CARDINALITY:
            low = reader.array("<u2", cardinality)
        else:
            words = reader.array("<u8", _BITMAP_WORDS)
            low = np.flatnonzero(np.unpackbits(words.view(np.uint8), bitorder="little"))
        if len(low) != cardinality:
            raise CorruptLogError(
                f"deletion vector container holds {len(low)} values, its header says {cardinality}"
            )
        containers.append(key | low.astype(np.uint32))
    return np.concatenate(containers) if containers else np.empty(0, dtype=np.uint32)
