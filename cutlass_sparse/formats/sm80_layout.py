"""The sm80 compressed layout (CUTLASS 2.x sparse kernels): encode a checked 2:4 matrix
into it and decode it back, on NumPy or CuPy alike.

Layout (fp16/bf16, int8; tf32 as 1:2):
- values: [M_pad, K_pad/2], row-major; per group of four along K, the two kept values
  in ascending index order.
- metadata: one 4-bit nibble per group, low two bits = index of the first kept value,
  high two bits = index of the second, first group in the lowest nibble; four groups per
  uint16 word (16-bit types) or eight per uint32 word (int8: CUTLASS's ElementE is 32-bit
  when the instruction's kMaxID2 is 1). The [M_pad, words] matrix is then reordered as
  CUTLASS's reorder_meta (tools/util/include/cutlass/util/host_reorder.h: rows
  interleaved in groups of 32 for 16-bit words, 16 for 32-bit ones) and stored in
  ColumnMajorInterleaved<2>, the layout the kernel's metadata iterator reads.
- M is padded to a multiple of 32 (the row-reorder group) and K to a multiple of 128
  (the largest threadblock K): padding holds zero values with valid metadata, so a
  kernel may run over it without reading memory it does not own.
"""
from __future__ import annotations

import functools

import numpy as np

from ..describe import dtypes
from ..describe.arith import round_up
from .patterns import K_MULTIPLE, PATTERNS, ROW_GROUP, _bits, _nonzero


def padded_shape(m: int, k: int) -> tuple[int, int]:
    """(M_pad, K_pad) of the stored operand for a logical [M, K] matrix."""
    return round_up(m, ROW_GROUP), round_up(k, K_MULTIPLE)


def stored_bytes(m: int, k: int, element: str) -> int:
    """Bytes of one compressed [M, K] matrix: values and metadata."""
    pattern = PATTERNS[element]
    m_pad, k_pad = padded_shape(m, k)
    itemsize = 1 if element == "s8" else 4 if element == "tf32" else 2
    return m_pad * k_pad // pattern.group * pattern.keep * itemsize + \
        m_pad * k_pad // pattern.logical_per_word * np.dtype(pattern.word).itemsize


def work_bytes(m: int, k: int, element: str, batch: int = 1) -> int:
    """About the most memory encode holds at once beyond its input (a batch: the stacked
    results and one matrix's work). Per padded element: 6 bytes per input byte (copies of
    the bits, the kept values) and 10 for the indices, counts and metadata words (checked
    against tracemalloc's peak in tests/test_bad_inputs.py)."""
    m_pad, k_pad = padded_shape(m, k)
    itemsize = 1 if element == "s8" else 4 if element == "tf32" else 2
    return m_pad * k_pad * (6 * itemsize + 10) + batch * stored_bytes(m, k, element)


def grouped(dense, element: str, padded_to: tuple[int, int] | None = None):
    """dense's bit patterns zero-padded to [M_pad, K_pad] (this layout's, or padded_to),
    seen as [M_pad, groups, group], after checking that no group holds more non-zeros
    than the pattern keeps."""
    xp = dtypes.array_module(dense)
    pattern = PATTERNS[element]
    m, k = dense.shape
    m_pad, k_pad = padded_to or padded_shape(m, k)
    source = _bits(xp.ascontiguousarray(dense))
    padded = xp.zeros((m_pad, k_pad), dtype=source.dtype)
    padded[:m, :k] = source
    g = pattern.group
    groups = padded.reshape(m_pad, k_pad // g, g)
    nonzero = _nonzero(xp, groups)
    counts = nonzero.sum(axis=-1, dtype=xp.int8)
    if bool((counts > pattern.keep).any()):
        row, group = (int(v) for v in xp.argwhere(counts > pattern.keep)[0])
        raise ValueError(
            f"dense is not {pattern.name} sparse: row {row}, columns {g * group}..{g * group + g - 1} hold "
            f"{int(counts[row, group])} non-zeros (at most {pattern.keep} per group of {g} along K for "
            f"{dense.dtype}); use cutlass_sparse.prune_2to4 first")
    return groups, nonzero, counts


def _reorder_offsets(xp, m_pad: int, words_per_row: int, word_bytes: int = 2):
    """Flat offset, in the stored metadata, of word (row, col) of the plain [M, words] matrix.

    CUTLASS reorder_meta: rows are interleaved within groups of 32 (16-bit words; 16 for
    32-bit words), then 2x2 blocks are transposed; the result is laid out
    ColumnMajorInterleaved<2> with leading dimension 2 * M_pad.
    """
    group, interweave = (32, 4) if word_bytes == 2 else (16, 2)
    rows = xp.arange(m_pad)[:, None]
    cols = xp.arange(words_per_row)[None, :]
    dest_row = rows // group * group + (rows % 8) * interweave + (rows % group) // 8
    dest_col = cols + xp.zeros_like(rows)
    dest_row = dest_row + xp.zeros_like(cols)
    swap_down = (dest_row % 2 == 0) & (dest_col % 2 == 1)
    swap_up = (dest_row % 2 == 1) & (dest_col % 2 == 0)
    dest_row = dest_row + swap_down - swap_up
    dest_col = dest_col - swap_down + swap_up
    return (dest_col // 2) * (2 * m_pad) + dest_row * 2 + dest_col % 2

def nonzero_positions(xp, nonzero, counts):
    """Indices of each group's first and second non-zero (-1 where absent), without sorting."""
    seen = xp.cumsum(nonzero, axis=-1, dtype=xp.int8)
    first = xp.where(counts > 0, ((seen == 1) & (nonzero == 1)).astype(xp.int8).argmax(axis=-1), -1)
    second = xp.where(counts > 1, ((seen == 2) & (nonzero == 1)).astype(xp.int8).argmax(axis=-1), -1)
    return first, second


def take_pairs(xp, groups, idx0, idx1):
    """[..., groups, 2]: each group's values at idx0 and idx1."""
    return xp.stack([xp.take_along_axis(groups, idx0[..., None], axis=-1)[..., 0],
                     xp.take_along_axis(groups, idx1[..., None], axis=-1)[..., 0]], axis=-1)


def expand_pairs(xp, kept, first, second, group: int):
    """[..., groups, group]: each pair of kept values back at its indices, zeros elsewhere."""
    lane = xp.arange(group, dtype=xp.int64)
    dense = xp.where(lane == first[..., None], kept[..., 0:1], kept.dtype.type(0))
    return xp.where(lane == second[..., None], kept[..., 1:2], dense)


def encode(dense, element: str):
    """(values, metadata) of a 2:4 [M, K] numpy or cupy matrix in the sm80 layout."""
    xp = dtypes.array_module(dense)
    pattern = PATTERNS[element]
    if xp is not np and dense.dtype.itemsize == 2 and pattern.keep == 2:
        encoded = _fused_encode(dense)
        if encoded is not None:
            return encoded
    groups, nonzero, counts = grouped(dense, element)
    m_pad, n_groups, _ = groups.shape
    k_pad = n_groups * pattern.group
    first, second = nonzero_positions(xp, nonzero, counts)
    if pattern.keep == 1:
        # 1:2: the kept value (or the first of an empty pair); its nibble names the two
        # 16-bit halves it occupies: (0, 1) or (2, 3).
        kept = xp.maximum(first, 0).astype(xp.int32)
        values = xp.take_along_axis(groups, kept[..., None], axis=-1)[..., 0]
        idx0, idx1 = 2 * kept, 2 * kept + 1
    else:
        # Fewer than two non-zeros: complete to a valid ascending pair that covers them.
        # (p) -> (0, 1) for p < 2, (0, p) otherwise; nothing -> (0, 1).
        idx0 = xp.where(counts == 2, first, 0).astype(xp.int32)
        idx1 = xp.where(counts == 2, second, xp.where((counts == 1) & (first >= 2), first, 1)).astype(xp.int32)
        values = take_pairs(xp, groups, idx0, idx1)
    values = values.reshape(m_pad, k_pad // 2).view(dense.dtype)

    per_word, word = pattern.nibbles_per_word, pattern.word
    words_per_row = k_pad // pattern.logical_per_word
    nibbles = (idx0 | (idx1 << 2)).astype(xp.int64).reshape(m_pad, words_per_row, per_word)
    words = (nibbles << (4 * xp.arange(per_word, dtype=xp.int64))).sum(axis=-1).astype(word)
    stored = xp.empty(m_pad * words_per_row, dtype=word)
    stored[_reorder_offsets(xp, m_pad, words_per_row, np.dtype(word).itemsize).reshape(-1)] = words.reshape(-1)
    return values, stored.reshape(words_per_row // 2, 2 * m_pad)


def plain_metadata(metadata, element: str, m_pad: int, k_pad: int):
    """The [M_pad, words] metadata before CUTLASS's reorder."""
    xp = dtypes.array_module(metadata)
    pattern = PATTERNS[element]
    offsets = _reorder_offsets(xp, m_pad, k_pad // pattern.logical_per_word, np.dtype(pattern.word).itemsize)
    return metadata.reshape(-1)[offsets]


def decode(values, metadata, element: str, shape: tuple[int, int], dtype):
    """The [M, K] matrix that sm80-layout values and metadata represent."""
    xp = dtypes.array_module(values)
    m_pad, k_pad = values.shape[0], values.shape[1] * 2
    pattern = PATTERNS[element]
    words = plain_metadata(metadata, element, m_pad, k_pad).astype(xp.int64)
    shifts = xp.arange(pattern.nibbles_per_word, dtype=xp.int64) * 4
    nibbles = (words[:, :, None] >> shifts) & 0xF                       # [M_pad, words, nibbles]
    nibbles = nibbles.reshape(m_pad, k_pad // pattern.group)
    kept = _bits(values).reshape(m_pad, k_pad // pattern.group, pattern.keep)
    lane = xp.arange(pattern.group, dtype=xp.int64)
    if pattern.keep == 1:   # the nibble names the kept value's two 16-bit halves
        dense = xp.where(lane == (nibbles & 0x3)[..., None] // 2, kept[..., 0:1], kept.dtype.type(0))
    else:
        dense = expand_pairs(xp, kept, nibbles & 0x3, nibbles >> 2, pattern.group)
    m, k = shape
    return dense.reshape(m_pad, k_pad)[:m, :k].copy().view(dtype)


# The 16-bit encode as one CuPy kernel, one thread per metadata word (16 logical columns
# of a row): the array-at-a-time form above runs some 30 small kernels (which CuPy
# compiles on a machine's first use: seconds) and holds index arrays the size of the
# matrix. The tests check it against that form.
_ENCODE = """
long long words = k_pad / 16, row = i / words, word = i % words;
unsigned int bits = 0;
for (int g = 0; g < 4; ++g) {
  long long col = word * 16 + g * 4;
  unsigned short v[4];
  int count = 0, first = -1, second = -1;
  for (int j = 0; j < 4; ++j) {
    v[j] = (row < m && col + j < k) ? dense[row * k + col + j] : 0;
    if (v[j] & 0x7fff) {                      // -0.0 counts as zero
      ++count;
      if (first < 0) first = j; else if (second < 0) second = j;
    }
  }
  if (count > 2) bad[0] = 1;
  // fewer than two non-zeros: a valid ascending pair that covers them, as encode above
  int i0 = count >= 2 ? first : 0;
  int i1 = count >= 2 ? second : (count == 1 && first >= 2 ? first : 1);
  values[row * (k_pad / 2) + col / 2] = v[i0];
  values[row * (k_pad / 2) + col / 2 + 1] = v[i1];
  bits |= (unsigned int)(i0 | (i1 << 2)) << (4 * g);
}
// CUTLASS's reorder_meta, as _reorder_offsets
long long dest_row = row / 32 * 32 + (row % 8) * 4 + (row % 32) / 8, dest_col = word;
int down = dest_row % 2 == 0 && dest_col % 2 == 1, up = dest_row % 2 == 1 && dest_col % 2 == 0;
dest_row += down - up;
dest_col += up - down;
metadata[(dest_col / 2) * (2 * m_pad) + dest_row * 2 + dest_col % 2] = (unsigned short)bits;
"""


@functools.lru_cache(maxsize=1)
def _encode_kernel():
    import cupy

    return cupy.ElementwiseKernel("raw uint16 dense, int64 m, int64 k, int64 m_pad, int64 k_pad",
                                  "raw uint16 values, raw uint16 metadata, raw int32 bad", _ENCODE,
                                  "cutlass_sparse_sm80_encode16")


def _fused_encode(dense):
    """encode of a 16-bit cupy matrix in one kernel; None where a group breaks 2:4 (the
    array-at-a-time form then names it)."""
    import cupy

    m, k = dense.shape
    m_pad, k_pad = padded_shape(m, k)
    values = cupy.empty((m_pad, k_pad // 2), dtype=cupy.uint16)
    metadata = cupy.empty((k_pad // 32, 2 * m_pad), dtype=cupy.uint16)
    bad = cupy.zeros(1, dtype=cupy.int32)
    _encode_kernel()(_bits(cupy.ascontiguousarray(dense)), m, k, m_pad, k_pad, values, metadata, bad,
                     size=m_pad * (k_pad // 16))
    if int(bad.get()[0]):
        return None
    return values.view(dense.dtype), metadata
