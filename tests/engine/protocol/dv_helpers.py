"""Deletion vectors written by hand, independently of the engine's encoder: a Delta
RoaringBitmapArray in the portable format (array, bitmap or run containers) and Z85 text."""

from __future__ import annotations

import struct

import numpy as np

from airflow_delta.engine.protocol.deletion_vectors import MAGIC_NUMBER, Z85_ALPHABET


def portable_bitmap(values: list[int], runs: bool = False) -> bytes:
    """A Delta RoaringBitmapArray (portable format): array or bitmap containers, or runs."""
    by_bucket: dict[int, list[int]] = {}
    for v in sorted(set(values)):
        by_bucket.setdefault(v >> 32, []).append(v & 0xFFFFFFFF)
    out = struct.pack("<IQ", MAGIC_NUMBER, len(by_bucket))
    for high, lows in sorted(by_bucket.items()):
        containers: dict[int, list[int]] = {}
        for low in lows:
            containers.setdefault(low >> 16, []).append(low & 0xFFFF)
        out += struct.pack("<I", high) + roaring32(containers, runs)
    return out


def roaring32(containers: dict[int, list[int]], runs: bool) -> bytes:
    keys = sorted(containers)
    n = len(keys)
    if runs:
        header = struct.pack("<I", 12347 | ((n - 1) << 16)) + bytes([0xFF] * ((n + 7) // 8))
    else:
        header = struct.pack("<II", 12346, n)
    header += b"".join(struct.pack("<HH", k, len(containers[k]) - 1) for k in keys)
    bodies = []
    for k in keys:
        lows = containers[k]
        if runs:
            starts = [v for i, v in enumerate(lows) if i == 0 or lows[i - 1] != v - 1]
            ends = [v for i, v in enumerate(lows) if i == len(lows) - 1 or lows[i + 1] != v + 1]
            pairs = b"".join(
                struct.pack("<HH", s, e - s) for s, e in zip(starts, ends, strict=True)
            )
            bodies.append(struct.pack("<H", len(starts)) + pairs)
        elif len(lows) <= 4096:
            bodies.append(struct.pack(f"<{len(lows)}H", *lows))
        else:
            bits = np.zeros(1 << 16, dtype=np.uint8)
            bits[lows] = 1
            bodies.append(np.packbits(bits, bitorder="little").tobytes())
    if not runs or n >= 4:
        offset = len(header) + 4 * n
        for body in bodies:
            header += struct.pack("<I", offset)
            offset += len(body)
    return header + b"".join(bodies)


def z85(data: bytes) -> str:
    data += b"\0" * (-len(data) % 4)
    out = []
    for (word,) in struct.iter_unpack(">I", data):
        chunk = ""
        for _ in range(5):
            word, digit = divmod(word, 85)
            chunk = chr(Z85_ALPHABET[digit]) + chunk
        out.append(chunk)
    return "".join(out)
