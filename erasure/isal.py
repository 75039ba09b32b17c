"""zfec's parity computed by ISA-L (Intel's erasure-code library), when it is installed.

zfec multiplies in GF(2^8) with a table lookup per byte: ~1.2 ms per 1 MiB stripe (4+2) on the
bench box, 15 % of a 1 MiB PUT's server CPU (bench/RESULTS.md). ISA-L does the same arithmetic
with SIMD, in the same field (polynomial 0x11d). Given zfec's own coefficients — read off once per
code by encoding the k unit vectors with zfec — it produces the very same parity bytes (checked
against zfec in tests/unit/test_erasure_isal.py), ~50x faster. So shards written either way are
interchangeable: decoding (degraded reads, heal) stays with zfec, and zfec encodes wherever the
library is missing (Debian/Ubuntu: `apt install libisal2`) or `TIERSTORE_ISAL=0` is set.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Sequence

import zfec

Buffer = bytes | memoryview
_SONAME = "libisal.so.2"  # ISA-L 2.x, the ABI of ec_init_tables / ec_encode_data used here


def _load() -> ctypes.CDLL | None:
    """The ISA-L shared library with the two calls used here; None if absent or switched off."""
    if os.environ.get("TIERSTORE_ISAL", "1") == "0":
        return None
    try:
        # By its soname, as the dynamic loader finds it: `ctypes.util.find_library` would run
        # `ldconfig -p` in a subprocess at every import (every worker, every CLI call).
        lib = ctypes.CDLL(_SONAME)  # CDLL: the calls release the GIL, as zfec's do
        init, encode = lib.ec_init_tables, lib.ec_encode_data
    except (OSError, AttributeError):
        return None
    init.restype = encode.restype = None
    init.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p]
    encode.argtypes = [
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_void_p,
        ctypes.c_void_p,
        ctypes.c_void_p,
    ]
    return lib


_LIB = _load()
AVAILABLE = _LIB is not None


class _PyBuffer(ctypes.Structure):
    """CPython's `Py_buffer`: how C code borrows the bytes of any buffer, read-only ones included
    (ctypes' own `from_buffer` takes only writable ones)."""

    _fields_ = [
        ("buf", ctypes.c_void_p),
        ("obj", ctypes.c_void_p),
        ("len", ctypes.c_ssize_t),
        ("itemsize", ctypes.c_ssize_t),
        ("readonly", ctypes.c_int),
        ("ndim", ctypes.c_int),
        ("format", ctypes.c_char_p),
        ("shape", ctypes.c_void_p),
        ("strides", ctypes.c_void_p),
        ("suboffsets", ctypes.c_void_p),
        ("internal", ctypes.c_void_p),
    ]


_get_buffer = ctypes.pythonapi.PyObject_GetBuffer
_get_buffer.argtypes = [ctypes.py_object, ctypes.POINTER(_PyBuffer), ctypes.c_int]
_get_buffer.restype = ctypes.c_int
_release_buffer = ctypes.pythonapi.PyBuffer_Release
_release_buffer.argtypes = [ctypes.POINTER(_PyBuffer)]
_release_buffer.restype = None
_PyBUF_SIMPLE = 0  # contiguous bytes, read-only allowed


def zfec_coefficients(encoder: zfec.Encoder, k: int, m: int) -> bytes:
    """zfec's m x k parity coefficients, row by row: parity p of the data unit vector j is the
    coefficient of data block j in parity block p (the code is linear)."""
    rows = bytearray(m * k)
    for j in range(k):
        unit = [b"\x00"] * k
        unit[j] = b"\x01"
        for p, parity in enumerate(encoder.encode(tuple(unit), tuple(range(k, k + m)))):
            rows[p * k + j] = parity[0]
    return bytes(rows)


class IsalEncoder:
    """The m parity blocks of k equal-length data blocks, as zfec's `Encoder(k, k+m)` computes them."""

    def __init__(self, k: int, m: int, encoder: zfec.Encoder) -> None:
        if _LIB is None:
            raise RuntimeError("ISA-L is not available")
        self.k, self.m = k, m
        self._tables = ctypes.create_string_buffer(32 * k * m)  # ISA-L's expanded multiply tables
        _LIB.ec_init_tables(k, m, zfec_coefficients(encoder, k, m), self._tables)

    def encode(self, blocks: Sequence[Buffer]) -> list[Buffer]:
        """Read-only views of new buffers (nobody else holds them): copying the parity into bytes
        would cost more than computing it."""
        assert _LIB is not None
        length = len(blocks[0])
        if any(len(b) != length for b in blocks):
            raise ValueError("data blocks must have equal lengths")
        if length == 0:
            return [b""] * self.m
        outputs = [bytearray(length) for _ in range(self.m)]
        out_ptrs = (ctypes.c_void_p * self.m)(
            *[ctypes.addressof((ctypes.c_char * length).from_buffer(o)) for o in outputs]
        )
        # The data blocks are borrowed in place, views included (a stripe's blocks are views of
        # the blob's bytes): no copy in, none out.
        borrowed: list[_PyBuffer] = []
        try:
            for block in blocks:
                view = _PyBuffer()
                _get_buffer(block, ctypes.byref(view), _PyBUF_SIMPLE)  # raises if not contiguous
                borrowed.append(view)
            data_ptrs = (ctypes.c_void_p * self.k)(*[v.buf for v in borrowed])
            _LIB.ec_encode_data(length, self.k, self.m, self._tables, data_ptrs, out_ptrs)
        finally:
            for view in borrowed:
                _release_buffer(ctypes.byref(view))
        return [memoryview(o).toreadonly() for o in outputs]
