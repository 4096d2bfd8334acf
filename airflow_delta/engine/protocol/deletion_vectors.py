"""Deletion vectors: the row indexes a DV marks as deleted, read and written (PROTOCOL.md,
Deletion Vectors). Values and codecs only, no I/O: `commands/deletion_vector_files.py` reads
and writes the bytes.

A DV descriptor (`DeletionVectorDescriptor`) points at a serialized `RoaringBitmapArray`:
inline in the log (`storageType` 'i', Z85-encoded), in a file next to the data (`'u'`, a
Z85-encoded UUID with an optional random prefix) or in a file at an absolute path (`'p'`). The
bitmap is Delta's magic number followed by a 64-bit RoaringBitmap in the portable format (the
64-bit "treemap" of CRoaring and RoaringBitmap): a count of 32-bit buckets (int64), then for
each bucket its high 32 bits (int32) and a standard 32-bit RoaringBitmap (RoaringFormatSpec)
whose containers are arrays, bitmaps or runs. All integers are little endian.

A DV file is a version byte (1), then per DV: its size (int32 big endian), the bitmap, and a
CRC-32 of the bitmap (int32 big endian); a descriptor's `offset` points at the size field.

Writing (`serialize_row_indexes`) emits array containers for up to 4096 values and bitmap
containers above (no runs, which readers accept but need not get), only non-empty buckets,
in the same bytes as CRoaring's `roaring64_bitmap_portable_serialize` without run
optimisation. Everything is numpy.
"""

from __future__ import annotations

import struct
import uuid
import zlib

import numpy as np
import numpy.typing as npt

from airflow_delta.engine.errors import CorruptLogError, DeltaProtocolError
from airflow_delta.engine.protocol.actions import DeletionVectorDescriptor

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
_CONTAINER_VALUES = 1 << 16
#: Largest serialized bitmap (bytes) a writer stores inline in the log rather than in a file.
MAX_INLINE_BYTES = 64


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
    return bytes(words.astype(">u4").tobytes())


def relative_dv_path(path_or_inline_dv: str) -> str:
    """The table-relative file of a `'u'` DV: `[<prefix>/]deletion_vector_<uuid>.bin`."""
    if len(path_or_inline_dv) < _UUID_CHARS:
        raise CorruptLogError(
            f"deletion vector pathOrInlineDv {path_or_inline_dv!r} is shorter than a UUID"
        )
    prefix = path_or_inline_dv[:-_UUID_CHARS]
    dv_uuid = uuid.UUID(bytes=z85_decode(path_or_inline_dv[-_UUID_CHARS:]))
    name = dv_file_name(dv_uuid)
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
        value: int = struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]
        return value

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


# --------------------------------------------------------------------------- writing


def z85_encode(data: bytes) -> str:
    """The Z85 text of `data`, zero-padded to a multiple of 4 bytes (Delta's Base85Codec)."""
    padded = data + b"\0" * (-len(data) % 4)
    words = np.frombuffer(padded, dtype=">u4").astype(np.uint64)
    digits = (words[:, None] // _Z85_POWERS) % np.uint64(85)
    alphabet = np.frombuffer(Z85_ALPHABET, dtype=np.uint8)
    return alphabet[digits.astype(np.intp)].tobytes().decode("ascii")


def encode_dv_path(dv_uuid: uuid.UUID, prefix: str = "") -> str:
    """The `pathOrInlineDv` of a `'u'` DV stored in `[<prefix>/]deletion_vector_<uuid>.bin`."""
    return prefix + z85_encode(dv_uuid.bytes)


def dv_file_name(dv_uuid: uuid.UUID) -> str:
    """The name of the DV file of `dv_uuid`: `deletion_vector_<uuid>.bin`."""
    return f"deletion_vector_{dv_uuid}.bin"


def serialize_row_indexes(rows: npt.ArrayLike) -> bytes:
    """The Delta `RoaringBitmapArray` (portable format, magic number first) of the row indexes
    `rows` (any order, repeats allowed; each below 2**63).

    >>> deleted_row_indexes(serialize_row_indexes([7, 3, 2**40])).tolist()
    [3, 7, 1099511627776]
    """
    values = np.unique(np.asarray(rows, dtype=np.uint64))
    if len(values) and values[-1] >> np.uint64(63):
        raise ValueError(f"row index {int(values[-1])} is not below 2**63")
    highs = (values >> np.uint64(32)).astype(np.uint32)
    keys, starts = np.unique(highs, return_index=True)
    ends = [*starts[1:].tolist(), len(values)][: len(keys)]
    parts = [struct.pack("<IQ", MAGIC_NUMBER, len(keys))]
    for key, start, end in zip(keys.tolist(), starts.tolist(), ends, strict=True):
        lows = (values[start:end] & np.uint64(0xFFFFFFFF)).astype(np.uint32)
        parts.append(struct.pack("<I", key))
        parts.append(_serialize_roaring32(lows))
    return b"".join(parts)


def _serialize_roaring32(values: npt.NDArray[np.uint32]) -> bytes:
    """A standard 32-bit RoaringBitmap (no run containers) of sorted distinct `values`."""
    keys, starts, counts = np.unique(values >> np.uint32(16), return_index=True, return_counts=True)
    size = len(keys)
    header = np.empty((size, 2), dtype="<u2")
    header[:, 0] = keys
    header[:, 1] = counts - 1
    bodies = []
    for start, count in zip(starts.tolist(), counts.tolist(), strict=True):
        low = (values[start : start + count] & np.uint32(0xFFFF)).astype("<u2")
        if count <= _MAX_ARRAY_CARDINALITY:
            bodies.append(low.tobytes())
        else:
            bits = np.zeros(_CONTAINER_VALUES, dtype=bool)
            bits[low] = True
            bodies.append(np.packbits(bits, bitorder="little").tobytes())
    first = 8 + 4 * size + 4 * size  # cookie and count, descriptive header, offsets
    sizes = np.array([len(b) for b in bodies], dtype=np.int64)
    offsets = (first + np.concatenate([[0], np.cumsum(sizes)[:-1]])).astype("<u4")
    return b"".join(
        [
            struct.pack("<II", _SERIAL_COOKIE_NO_RUNS, size),
            header.tobytes(),
            offsets[:size].tobytes(),
            *bodies,
        ]
    )


def frame_dv(bitmap: bytes) -> bytes:
    """One DV as a DV file holds it: size (int32 big endian), `bitmap`, CRC-32 (big endian).
    A file is `bytes([FILE_FORMAT_VERSION])` followed by such frames."""
    return struct.pack(">i", len(bitmap)) + bitmap + struct.pack(">I", zlib.crc32(bitmap))


def inline_descriptor(bitmap: bytes, cardinality: int) -> DeletionVectorDescriptor:
    """The descriptor of a DV stored inline in the log (`'i'`, the bitmap in Z85)."""
    return DeletionVectorDescriptor(
        storage_type="i",
        path_or_inline_dv=z85_encode(bitmap),
        size_in_bytes=len(bitmap),
        cardinality=cardinality,
    )


def file_descriptor(
    dv_uuid: uuid.UUID, offset: int, bitmap: bytes, cardinality: int, prefix: str = ""
) -> DeletionVectorDescriptor:
    """The descriptor of a DV whose frame starts at `offset` of the file of `dv_uuid` (`'u'`)."""
    return DeletionVectorDescriptor(
        storage_type="u",
        path_or_inline_dv=encode_dv_path(dv_uuid, prefix),
        size_in_bytes=len(bitmap),
        cardinality=cardinality,
        offset=offset,
    )
