"""The sm90 layout of a 16-bit 2:4 matrix: encode it, decode it, and re-lay its metadata
for another atom, on NumPy or CuPy alike (no compiled kernel: a matrix compresses on the
host or on a GPU whose sm90 kernels are not compiled yet).

CUTLASS's sm90 mainloop reads metadata laid out in atoms of 64 rows by `atom_k` logical
columns (Sm90GemmSparseConfig, 16-bit types), atom_k = min(tile K, 128): a tile of K 64
and a tile of K 128 read different layouts of the same metadata. A byte holds the
metadata of 8 consecutive logical elements of one row in both (the first group of four
in its low nibble; a nibble is the first kept index | the second << 2, as in sm80), so
converting between them is a byte gather from the two layouts' index functions.

Values are [M, K/2] row-major (row pitch K/2 whatever the atoms), per group of four the
two kept values in index order, in a buffer of whole atoms (M to 64 rows, K to 128
columns) whose tail is zero. Incomplete groups take the indices CUTLASS's compressor
(SM90StructuredSparseCompressor) gives them, so encode matches it byte for byte
(tests/data/sm90_layout.npz, written by that compressor on an H100): one non-zero at
p < 3 -> (p, 3), at 3 -> (0, 3); none -> (0, 0).
"""
from __future__ import annotations

import functools

import numpy as np

from ..describe import dtypes
from ..describe.arith import round_up
from . import sm80_layout
from .patterns import PATTERNS, _bits

ATOM_M = 64
ATOMS_K = (64, 128)
# The atom cs.compress stores; kernels of the other atom get a conversion, made once.
STORED_ATOM_K = 128


def metadata_bytes(m: int, k: int, atom_k: int) -> int:
    """Size of the metadata of an [m, k] matrix (whole atoms, as the compressor writes it)."""
    return round_up(m, ATOM_M) * round_up(k, atom_k) // 8


def byte_index(rows, groups, m: int, atom_k: int):
    """Byte offsets of the metadata of (row, 8-column group) in the atom_k layout of an
    [m, *] matrix: CuTe's fill_layoutE with the 16-bit atom
    ((8,2,4),(16,2,atom_k/32)) ordered ((3,1,5),(0,4,2)), one byte per 8 logical elements."""
    if atom_k not in ATOMS_K:
        raise ValueError(f"atom_k {atom_k} must be one of {ATOMS_K}")
    num_k = atom_k // 32
    k = groups * 8
    m_in, m_block = rows % ATOM_M, rows // ATOM_M
    k_in, k_block = k % atom_k, k // atom_k
    offset = ((k_in % 16) + 16 * ((m_in // 8) % 2) + 32 * (k_in // 32) + 32 * num_k * (m_in % 8)
              + 256 * num_k * ((k_in // 16) % 2) + 512 * num_k * (m_in // 16)
              + ATOM_M * atom_k * m_block + round_up(m, ATOM_M) * atom_k * k_block)
    return offset // 8


def convert(metadata, m: int, k: int, from_atom: int, to_atom: int, out=None):
    """The metadata of an [m, k] matrix re-laid for another atom (cupy in, cupy out), on
    the current stream; into `out` (uint8, metadata_bytes(m, k, to_atom)) if given."""
    import cupy

    if from_atom == to_atom:
        return metadata
    if from_atom not in ATOMS_K or to_atom not in ATOMS_K:
        raise ValueError(f"atoms {from_atom}, {to_atom} must be among {ATOMS_K}")
    if out is None:
        out = cupy.zeros(metadata_bytes(m, k, to_atom), dtype=cupy.uint8)
    else:
        out.fill(0)   # the kernel writes the bytes of K; the atoms' tail stays zero
    groups = round_up(k, 16) // 8          # K is a multiple of 16; one thread per byte
    _kernels()[2](metadata.reshape(-1), groups, round_up(m, ATOM_M), from_atom, to_atom, out,
                  size=round_up(m, ATOM_M) * groups)
    return out


def buffer_shape(m: int, k: int) -> tuple[int, int]:
    """[M, K] in whole atoms of the stored layout: what the value and metadata buffers cover."""
    return round_up(m, ATOM_M), round_up(k, STORED_ATOM_K)


def check_k(k: int, name: str = "dense") -> None:
    if k % 16:
        raise ValueError(f"{name} has K = {k}: the sm90 layout needs K a multiple of 16 "
                         f"(pad K, or use layout='sm80', which takes any K)")


def _metadata_positions(xp, m: int, k: int, atom_k: int):
    """byte_index over every (row, 8-column group) of the [m, k] matrix's atoms."""
    m_pad, k_pad = round_up(m, ATOM_M), round_up(k, atom_k)
    rows = xp.arange(m_pad, dtype=xp.int64)[:, None]
    groups = xp.arange(k_pad // 8, dtype=xp.int64)[None, :]
    return byte_index(rows, groups, m, atom_k)


def encode(dense, element: str):
    """(values, metadata) of a 2:4 16-bit [M, K] numpy or cupy matrix in the sm90 layout
    (metadata in atoms of STORED_ATOM_K), as flat arrays of whole atoms."""
    if PATTERNS[element].keep != 2 or dense.dtype.itemsize != 2:
        raise TypeError(f"the sm90 layout is encoded here for 16-bit types; got {element}")
    xp = dtypes.array_module(dense)
    m, k = dense.shape
    check_k(k)
    m_pad, k_pad = buffer_shape(m, k)
    if xp is not np:
        encoded = _fused_encode(dense, m, k, m_pad, k_pad)
        if encoded is not None:
            return encoded   # else a group breaks 2:4: grouped below names it
    groups, nonzero, counts = sm80_layout.grouped(dense, element, (m_pad, k_pad))
    first, second = sm80_layout.nonzero_positions(xp, nonzero, counts)
    idx0 = xp.where((counts == 2) | ((counts == 1) & (first < 3)), first, 0).astype(xp.int32)
    idx1 = xp.where(counts == 2, second, xp.where(counts == 1, 3, 0)).astype(xp.int32)
    kept = sm80_layout.take_pairs(xp, groups[:m, : k // 4], idx0[:m, : k // 4], idx1[:m, : k // 4])
    values = xp.zeros(m_pad * k_pad // 2, dtype=groups.dtype)
    values[: m * k // 2] = kept.reshape(-1)
    nibbles = (idx0 | (idx1 << 2)).astype(xp.uint8).reshape(m_pad, k_pad // 8, 2)
    metadata = xp.empty(metadata_bytes(m, k, STORED_ATOM_K), dtype=xp.uint8)
    metadata[_metadata_positions(xp, m, k, STORED_ATOM_K)] = nibbles[..., 0] | (nibbles[..., 1] << 4)
    return values.view(dense.dtype), metadata


def decode(values, metadata, shape: tuple[int, int], atom_k: int, dtype):
    """The [M, K] matrix that sm90-layout values and metadata (in atoms of atom_k) represent."""
    xp = dtypes.array_module(values)
    m, k = shape
    if xp is not np:
        dense = xp.empty((m, k), dtype=xp.uint16)
        _kernels()[1](values.reshape(-1).view(xp.uint16), metadata.reshape(-1), m, k, round_up(m, ATOM_M), atom_k,
                      dense, size=m * (k // 8))
        return dense.view(dtype)
    kept = _bits(values.reshape(-1)[: m * k // 2]).reshape(m, k // 4, 2)
    positions = _metadata_positions(xp, m, k, atom_k)[:m, : k // 8]
    stored = metadata.reshape(-1)[positions].astype(xp.int64)
    nibbles = xp.stack([stored & 0xF, stored >> 4], axis=-1).reshape(m, k // 4)
    dense = sm80_layout.expand_pairs(xp, kept, nibbles & 0x3, nibbles >> 2, 4)
    return dense.reshape(m, k).view(dtype)


# The same layout as one CuPy kernel each way, one thread per metadata byte (8 logical
# columns of a row): the array-at-a-time form above would run (and, on a machine's first
# use, have CuPy compile) some 30 small kernels and hold int64 index arrays the size of the
# matrix. Checked against it and against CUTLASS's compressor in the tests.
_BYTE_INDEX = """
__device__ long long sm90_byte_index(long long row, long long group, long long m_pad, long long atom_k) {
  long long num_k = atom_k / 32, col = group * 8;
  long long m_in = row % 64, m_block = row / 64, k_in = col % atom_k, k_block = col / atom_k;
  return ((k_in % 16) + 16 * ((m_in / 8) % 2) + 32 * (k_in / 32) + 32 * num_k * (m_in % 8)
          + 256 * num_k * ((k_in / 16) % 2) + 512 * num_k * (m_in / 16) + 64 * atom_k * m_block
          + m_pad * atom_k * k_block) / 8;
}
"""

_ENCODE = """
long long per_row = k_pad / 8, row = i / per_row, group = i % per_row;
unsigned char byte = 0;
for (int part = 0; part < 2; ++part) {
  long long col = group * 8 + part * 4;
  bool inside = row < m && col < k;           // K is a multiple of 16: a group is all in or all out
  unsigned short v[4];
  int count = 0, first = -1, second = -1;
  for (int j = 0; j < 4; ++j) {
    v[j] = inside ? dense[row * k + col + j] : 0;
    if (v[j] & 0x7fff) {                      // -0.0 counts as zero
      ++count;
      if (first < 0) first = j; else if (second < 0) second = j;
    }
  }
  if (count > 2) bad[0] = 1;
  int i0 = count >= 2 ? first : (count == 1 && first < 3 ? first : 0);
  int i1 = count >= 2 ? second : (count == 1 ? 3 : 0);
  if (inside) {
    values[row * (k / 2) + col / 2] = v[i0];
    values[row * (k / 2) + col / 2 + 1] = v[i1];
  }
  byte |= (unsigned char)((i0 | (i1 << 2)) << (4 * part));
}
metadata[sm90_byte_index(row, group, m_pad, 128)] = byte;
"""

_DECODE = """
long long per_row = k / 8, row = i / per_row, group = i % per_row;
unsigned char byte = metadata[sm90_byte_index(row, group, m_pad, atom_k)];
for (int part = 0; part < 2; ++part) {
  long long col = group * 8 + part * 4;
  int nibble = (byte >> (4 * part)) & 0xf, i0 = nibble & 3, i1 = nibble >> 2;
  unsigned short a = values[row * (k / 2) + col / 2], b = values[row * (k / 2) + col / 2 + 1];
  for (int j = 0; j < 4; ++j) dense[row * k + col + j] = j == i1 ? b : (j == i0 ? a : 0);
}
"""


_CONVERT = """
long long row = i / groups, group = i % groups;
out[sm90_byte_index(row, group, m_pad, to_atom)] = metadata[sm90_byte_index(row, group, m_pad, from_atom)];
"""


@functools.lru_cache(maxsize=1)
def _kernels():
    import cupy

    encode = cupy.ElementwiseKernel("raw uint16 dense, int64 m, int64 k, int64 m_pad, int64 k_pad",
                                    "raw uint16 values, raw uint8 metadata, raw int32 bad", _ENCODE,
                                    "cutlass_sparse_sm90_encode", preamble=_BYTE_INDEX)
    decode = cupy.ElementwiseKernel("raw uint16 values, raw uint8 metadata, int64 m, int64 k, int64 m_pad, "
                                    "int64 atom_k", "raw uint16 dense", _DECODE, "cutlass_sparse_sm90_decode",
                                    preamble=_BYTE_INDEX)
    convert = cupy.ElementwiseKernel("raw uint8 metadata, int64 groups, int64 m_pad, int64 from_atom, int64 to_atom",
                                     "raw uint8 out", _CONVERT, "cutlass_sparse_sm90_convert", preamble=_BYTE_INDEX)
    return encode, decode, convert


def _fused_encode(dense, m: int, k: int, m_pad: int, k_pad: int):
    """encode on the GPU in one kernel; None where a group holds more than two non-zeros."""
    import cupy

    values = cupy.zeros(m_pad * k_pad // 2, dtype=cupy.uint16)
    metadata = cupy.empty(metadata_bytes(m, k, STORED_ATOM_K), dtype=cupy.uint8)
    bad = cupy.zeros(1, dtype=cupy.int32)
    _kernels()[0](_bits(cupy.ascontiguousarray(dense)), m, k, m_pad, k_pad, values, metadata, bad,
                  size=m_pad * k_pad // 8)
    if int(bad.get()[0]):
        return None
    return values.view(dense.dtype), metadata
