"""The deletion-vector codec (engine/protocol/deletion_vectors.py).

1. Decoding: Z85, UUID paths, array/bitmap/run containers, both bitmap formats, corruption
   (bitmaps written by hand in tests/engine/protocol/dv_helpers.py).
2. Encoding: round trips over random row sets (hypothesis: empty sets, values above 2**32),
   the bytes CRoaring (pyroaring) reads and writes, the DV file frame and the descriptors.
"""

from __future__ import annotations

import struct
import uuid
import zlib

import numpy as np
import pyroaring
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_delta.engine.errors import CorruptLogError, DeltaProtocolError
from airflow_delta.engine.protocol import deletion_vectors as dvs
from tests.engine.protocol.dv_helpers import portable_bitmap, roaring32, z85


def test_z85_and_uuid_paths() -> None:
    assert dvs.relative_dv_path("ab^-aqEH.-t@S}K{vb[*k^") == (
        "ab/deletion_vector_d2c639aa-8816-431a-aaf6-d3fe2512ff61.bin"
    )
    assert dvs.relative_dv_path("^-aqEH.-t@S}K{vb[*k^") == (
        "deletion_vector_d2c639aa-8816-431a-aaf6-d3fe2512ff61.bin"
    )
    payload = bytes(range(40))
    assert dvs.z85_decode(z85(payload)) == payload
    with pytest.raises(CorruptLogError):
        dvs.z85_decode("abc")
    with pytest.raises(CorruptLogError):
        dvs.z85_decode("abc~~")
    with pytest.raises(CorruptLogError):
        dvs.z85_decode("abcdé")


def test_inline_dv_of_the_delta_kernels() -> None:
    inline = "^Bg9^0rr910000000000iXQKl0rr91000f55c8Xg0@@D72lkbi5=-{L"
    rows = dvs.deleted_row_indexes(dvs.inline_dv_bytes(inline, 44))
    assert rows.tolist() == [3, 4, 7, 11, 18, 29]


@pytest.mark.parametrize("runs", [False, True])
def test_bitmap_containers_and_buckets(runs: bool) -> None:
    values = sorted(
        {
            *range(0, 5000),  # a bitmap container (over 4096 values)
            *range(70000, 70010),  # an array container
            *range(200000, 200003),
            *range(300000, 300100, 7),
            (5 << 32) + 17,  # a second 32-bit bucket
            (5 << 32) + (3 << 16),
        }
    )
    rows = dvs.deleted_row_indexes(portable_bitmap(values, runs=runs))
    assert rows.dtype == np.uint64
    assert rows.tolist() == values


def test_native_format_and_corruption() -> None:
    body = roaring32({0: [1, 5]}, runs=False)
    native = struct.pack("<III", dvs.NATIVE_MAGIC_NUMBER, 1, len(body)) + body
    assert dvs.deleted_row_indexes(native).tolist() == [1, 5]
    portable = portable_bitmap([1, 5])
    with pytest.raises(CorruptLogError, match="truncated"):
        dvs.deleted_row_indexes(portable[:-1])
    with pytest.raises(CorruptLogError, match="trailing"):
        dvs.deleted_row_indexes(portable + b"\0")
    with pytest.raises(DeltaProtocolError, match="magic"):
        dvs.deleted_row_indexes(b"\0" * 12)
    framed = b"\x01" + struct.pack(">i", len(portable)) + portable + b"\0\0\0\0"
    with pytest.raises(CorruptLogError, match="checksum"):
        dvs.dv_bytes_from_file(framed, 1, len(portable), "f.bin")
    with pytest.raises(CorruptLogError, match="outside"):
        dvs.dv_bytes_from_file(framed, 1, len(portable) + 10, "f.bin")


# --------------------------------------------------------------------------- DV encoder

ROWS = st.lists(
    st.one_of(
        st.integers(0, 70_000),  # a few containers of the first bucket
        st.integers(0, 2**63 - 1),  # anywhere, most above 2**32
        st.integers(2**32 - 5, 2**32 + 5),  # either side of a bucket edge
    ),
    max_size=300,
)


@settings(max_examples=200, derandomize=True, deadline=None)
@given(rows=ROWS, dense=st.sampled_from([0, 5000, 65536]))
def test_round_trip(rows: list[int], dense: int) -> None:
    values = sorted({*rows, *range(dense)})  # dense adds a bitmap container (over 4096)
    data = dvs.serialize_row_indexes(np.array(rows + list(range(dense)), dtype=np.uint64))
    decoded = dvs.deleted_row_indexes(data)
    assert decoded.dtype == np.uint64
    assert decoded.tolist() == values
    # CRoaring reads the same set from the bytes after the magic number
    assert struct.unpack_from("<I", data)[0] == dvs.MAGIC_NUMBER
    assert list(pyroaring.BitMap64.deserialize(data[4:])) == values


@settings(max_examples=50, derandomize=True, deadline=None)
@given(rows=st.sets(st.integers(0, 2**40), max_size=200))
def test_bytes_are_croarings(rows: set[int]) -> None:
    """Without runs, the bytes are CRoaring's portable serialization, and ours read its runs."""
    theirs = pyroaring.BitMap64(rows)
    assert dvs.serialize_row_indexes(sorted(rows))[4:] == theirs.serialize()
    theirs.run_optimize()
    magic = struct.pack("<I", dvs.MAGIC_NUMBER)
    assert dvs.deleted_row_indexes(magic + theirs.serialize()).tolist() == sorted(rows)


def test_empty_and_edge_values() -> None:
    empty = dvs.serialize_row_indexes(np.empty(0, dtype=np.uint64))
    assert empty == struct.pack("<IQ", dvs.MAGIC_NUMBER, 0)
    assert dvs.deleted_row_indexes(empty).tolist() == []
    assert dvs.deleted_row_indexes(dvs.serialize_row_indexes([2**63 - 1])).tolist() == [2**63 - 1]
    with pytest.raises(ValueError, match="below 2"):
        dvs.serialize_row_indexes(np.array([2**63], dtype=np.uint64))
    # the same bytes as the hand-written encoder for array and bitmap containers
    values = sorted({*range(0, 5000), *range(70000, 70010), (5 << 32) + 17})
    assert dvs.serialize_row_indexes(values) == portable_bitmap(values)


@settings(max_examples=100, derandomize=True)
@given(data=st.binary(max_size=64))
def test_z85_round_trip(data: bytes) -> None:
    text = dvs.z85_encode(data)
    assert len(text) == 5 * ((len(data) + 3) // 4)
    assert dvs.z85_decode(text)[: len(data)] == data
    assert text == z85(data)
    assert dvs.z85_encode(b"\x86\x4f\xd2\x6f\xb5\x59\xf7\x5b") == "HelloWorld"  # Z85's own vector


def test_descriptors_and_file_frames() -> None:
    bitmap = dvs.serialize_row_indexes([3, 4, 7, 11, 18, 29])
    inline = dvs.inline_descriptor(bitmap, 6)
    assert (inline.storage_type, inline.size_in_bytes, inline.offset) == ("i", 44, None)
    # the inline DV of the Delta kernels' tests decodes to the same rows
    expected = "^Bg9^0rr910000000000iXQKl0rr91000f55c8Xg0@@D72lkbi5=-{L"
    assert dvs.deleted_row_indexes(dvs.inline_dv_bytes(expected, 44)).tolist() == [
        3,
        4,
        7,
        11,
        18,
        29,
    ]
    assert dvs.inline_dv_bytes(inline.path_or_inline_dv, 44) == bitmap
    dv_uuid = uuid.UUID("d2c639aa-8816-431a-aaf6-d3fe2512ff61")
    on_disk = dvs.file_descriptor(dv_uuid, 1, bitmap, 6, prefix="ab")
    assert on_disk.path_or_inline_dv == "ab^-aqEH.-t@S}K{vb[*k^"
    assert dvs.relative_dv_path(on_disk.path_or_inline_dv) == f"ab/{dvs.dv_file_name(dv_uuid)}"
    frame = dvs.frame_dv(bitmap)
    assert frame == struct.pack(">i", 44) + bitmap + struct.pack(">I", zlib.crc32(bitmap))
    second = dvs.serialize_row_indexes([2**33])
    content = bytes([dvs.FILE_FORMAT_VERSION]) + frame + dvs.frame_dv(second)
    assert dvs.dv_bytes_from_file(content, 1, 44, "f.bin") == bitmap
    assert dvs.dv_bytes_from_file(content, 1 + len(frame), len(second), "f.bin") == second
