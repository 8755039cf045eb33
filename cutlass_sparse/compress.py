"""2:4 pruning and compression into the layout the sm80 sparse kernels read.

One implementation serves NumPy and CuPy: it is written against the array module of
its input (elementwise integer logic and gathers only, no sorts), so the two agree bit
for bit.

Layout (family "sm80", CUTLASS 2.x; fp16/bf16, and int8):
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

from dataclasses import dataclass

import numpy as np

from . import dtypes
from .selection import round_up

ROW_GROUP = 32      # metadata rows are interleaved within groups of 32
K_MULTIPLE = 128    # stored K: a multiple of every threadblock K (and of two int8 metadata words)
LAYOUT_SM80 = "sm80"
LAYOUT_SM90 = "sm90"
LAYOUTS = (LAYOUT_SM80, LAYOUT_SM90)


@dataclass(frozen=True)
class Pattern:
    """How an element type is pruned and described to the sm80 sparse tensor cores."""

    group: int          # logical values per group along K: 4 (2:4) or 2 (1:2, 32-bit types)
    keep: int           # values kept per group
    word: type          # metadata word (CUTLASS's ElementE): uint16, or uint32 for 8-bit types

    @property
    def nibbles_per_word(self) -> int:
        return 2 * np.dtype(self.word).itemsize

    @property
    def logical_per_word(self) -> int:
        return self.nibbles_per_word * self.group

    @property
    def stored_per_word(self) -> int:
        return self.nibbles_per_word * self.keep

    @property
    def name(self) -> str:
        return f"{self.keep}:{self.group}"


# tf32: fp32 arrays; the tensor cores keep one of each pair (1:2) and read its nibble as
# the pair of 16-bit halves it occupies (0x4 for the first, 0xE for the second).
PATTERNS = {"f16": Pattern(4, 2, np.uint16), "bf16": Pattern(4, 2, np.uint16),
            "s8": Pattern(4, 2, np.uint32), "tf32": Pattern(2, 1, np.uint16)}
_SIGNLESS = {1: 0xFF, 2: 0x7FFF, 4: 0x7FFFFFFF}


def _check_matrix(dense, what: str):
    xp = dtypes.array_module(dense)
    if xp is np and not isinstance(dense, np.ndarray):
        raise TypeError(f"{what} must be a numpy or cupy array, got {type(dense).__name__}")
    if dense.ndim != 2:
        raise ValueError(f"{what} must be 2-D [M, K], got shape {tuple(dense.shape)}")
    name = dtypes.operand_name(dense.dtype)
    if name not in dtypes.SM80_INPUT_NAMES:
        raise TypeError(f"{what} must be float16, bfloat16 (ml_dtypes.bfloat16), int8 or float32 (tf32), "
                        f"got {dense.dtype}")
    return xp, name


def _bits(array):
    """The bit patterns as unsigned integers: all logic runs on these, so bf16 needs no
    float support from CuPy."""
    xp = dtypes.array_module(array)
    return array.view({1: xp.uint8, 2: xp.uint16, 4: xp.uint32}[array.dtype.itemsize])


def _magnitude(xp, bits, dtype_name: str):
    """|x| as float32 from the bit patterns (exact for every operand type)."""
    if dtype_name == "bf16":
        return ((bits & 0x7FFF).astype(xp.uint32) << 16).view(xp.float32)
    if dtype_name == "s8":
        return xp.abs(bits.view(xp.int8).astype(xp.float32))
    if dtype_name == "tf32":
        return (bits & 0x7FFFFFFF).view(xp.float32)
    return (bits & 0x7FFF).view(xp.float16).astype(xp.float32)


def _nonzero(xp, bits):
    """1 where a value is non-zero (-0.0 counts as zero)."""
    return ((bits & _SIGNLESS[bits.dtype.itemsize]) != 0).astype(xp.int32)


def prune_2to4(dense):
    """Keep the largest magnitudes the sparse tensor cores allow, along K (ties: lower index
    wins): two of each group of four (fp16, bf16, int8), one of each pair for float32
    (tf32 runs 1:2, which is also 2:4).

    numpy or cupy [M, K] in, the same type out. K need not be a multiple of the group.
    """
    if getattr(dense, "ndim", None) == 3:   # a batch: the same rule for every matrix
        return prune_2to4(dense.reshape(-1, dense.shape[-1])).reshape(dense.shape)
    xp, name = _check_matrix(dense, "dense")
    pattern = PATTERNS[name]
    m, k = dense.shape
    kg = round_up(k, pattern.group)
    source = _bits(xp.ascontiguousarray(dense))
    padded = xp.zeros((m, kg), dtype=source.dtype)
    padded[:, :k] = source
    groups = padded.reshape(m, kg // pattern.group, pattern.group)
    mag = _magnitude(xp, groups, name)
    a = mag[..., :, None]   # element i
    b = mag[..., None, :]   # element j
    index = xp.arange(pattern.group)
    beats = (b > a) | ((b == a) & (index[None, :] < index[:, None]))
    rank = beats.sum(axis=-1)
    kept = xp.where(rank < pattern.keep, groups, groups.dtype.type(0))
    return kept.reshape(m, kg)[:, :k].copy().view(dense.dtype)


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


@dataclass
class SparseMatrix:
    """A structured-sparse [M, K] matrix (2:4; 1:2 for tf32), compressed for one kernel family's
    metadata layout."""

    shape: tuple[int, int]          # logical (M, K)
    dtype: np.dtype
    values: object                  # [M_pad, K_pad/2], numpy or cupy
    metadata: object                # words [K_pad/(2*16 or 2*32), 2*M_pad] (ColumnMajorInterleaved<2>)
    layout: str = LAYOUT_SM80       # which kernel family's metadata layout this is

    def _require_sm80(self, what: str) -> None:
        if self.layout != LAYOUT_SM80:
            raise ValueError(f"{what} reads the sm80 layout; this matrix is {self.layout!r}")

    @property
    def padded_shape(self) -> tuple[int, int]:
        """(M, K) of the stored sm80 operand, padding included."""
        self._require_sm80("padded_shape")
        return self.values.shape[0], self.values.shape[1] * 2

    @property
    def is_device(self) -> bool:
        return dtypes.array_module(self.values) is not np

    @property
    def metadata_ld(self) -> int:
        """Leading dimension of the metadata in words (ColumnMajorInterleaved<2>)."""
        return 2 * self.padded_shape[0]

    @property
    def element(self) -> str:
        """The operand type the kernels see ("tf32" for float32)."""
        return dtypes.operand_name(self.dtype)

    def to_device(self) -> "SparseMatrix":
        import cupy

        return SparseMatrix(self.shape, self.dtype, cupy.asarray(self.values),
                            cupy.asarray(self.metadata), self.layout)

    def to_host(self) -> "SparseMatrix":
        if not self.is_device:
            return self
        return SparseMatrix(self.shape, self.dtype, self.values.get(), self.metadata.get(), self.layout)

    def plain_metadata(self):
        """The [M_pad, words] metadata before CUTLASS's reorder."""
        self._require_sm80("plain_metadata")
        xp = dtypes.array_module(self.metadata)
        m_pad, k_pad = self.padded_shape
        pattern = PATTERNS[self.element]
        offsets = _reorder_offsets(xp, m_pad, k_pad // pattern.logical_per_word, np.dtype(pattern.word).itemsize)
        return self.metadata.reshape(-1)[offsets]

    def to_layout(self, layout: str) -> "SparseMatrix":
        """The same matrix compressed for another kernel family (an explicit conversion)."""
        if layout == self.layout:
            return self
        dense = self.to_dense()
        if layout == LAYOUT_SM90 and dtypes.array_module(dense) is np:
            import cupy

            dense = cupy.asarray(dense)
        return compress(dense, layout)

    def to_dense(self):
        """The [M, K] matrix this represents (numpy or cupy, like the stored values).

        sm90: computed on the GPU as this matrix times the identity (exact: every output
        is one stored value times 1), so it reads the layout the way the kernel does.
        """
        if self.layout == LAYOUT_SM90:
            import cupy

            from .matmul import matmul

            eye = dtypes.from_float32(cupy.eye(self.shape[1], dtype=cupy.float32), self.dtype)
            return dtypes.from_float32(matmul(self, eye, out_dtype="f32"), self.dtype)
        xp = dtypes.array_module(self.values)
        m_pad, k_pad = self.padded_shape
        pattern = PATTERNS[self.element]
        words = self.plain_metadata().astype(xp.int64)
        shifts = xp.arange(pattern.nibbles_per_word, dtype=xp.int64) * 4
        nibbles = (words[:, :, None] >> shifts) & 0xF                       # [M_pad, words, nibbles]
        nibbles = nibbles.reshape(m_pad, k_pad // pattern.group)
        kept = _bits(self.values).reshape(m_pad, k_pad // pattern.group, pattern.keep)
        lane = xp.arange(pattern.group, dtype=xp.int64)
        if pattern.keep == 1:   # the nibble names the kept value's two 16-bit halves
            dense = xp.where(lane == (nibbles & 0x3)[..., None] // 2, kept[..., 0:1], kept.dtype.type(0))
        else:
            first, second = nibbles & 0x3, nibbles >> 2
            dense = xp.where(lane == first[..., None], kept[..., 0:1], kept.dtype.type(0))
            dense = xp.where(lane == second[..., None], kept[..., 1:2], dense)
        m, k = self.shape
        return dense.reshape(m_pad, k_pad)[:m, :k].copy().view(self.dtype)


@dataclass
class SparseBatch:
    """A batch of structured-sparse [M, K] matrices of one shape, compressed (sm80 layout)
    into stacked arrays with one stride per matrix, as CUTLASS's batched mode reads them."""

    shape: tuple[int, int]          # logical (M, K) of each matrix
    dtype: np.dtype
    values: object                  # [batch, M_pad, K_pad/2]
    metadata: object                # [batch, words/2, 2*M_pad]
    layout: str = LAYOUT_SM80

    @property
    def batch(self) -> int:
        return self.values.shape[0]

    def __getitem__(self, i: int) -> SparseMatrix:
        return SparseMatrix(self.shape, self.dtype, self.values[i], self.metadata[i], self.layout)

    @property
    def padded_shape(self) -> tuple[int, int]:
        return self[0].padded_shape

    @property
    def metadata_ld(self) -> int:
        return self[0].metadata_ld

    @property
    def element(self) -> str:
        return dtypes.operand_name(self.dtype)

    @property
    def is_device(self) -> bool:
        return dtypes.array_module(self.values) is not np

    def to_dense(self):
        xp = dtypes.array_module(self.values)
        return xp.stack([self[i].to_dense() for i in range(self.batch)])


def default_layout(dense) -> str:
    """The metadata layout of the kernel family that will run on dense's device: sm90 for a
    cupy fp16/bf16 matrix on an sm_90 GPU whose K that family takes (a multiple of 16),
    else sm80 (which also takes int8)."""
    if dtypes.array_module(dense) is np or dense.ndim != 2 or dense.shape[1] % 16 or \
            dtypes.name_of(dense.dtype) not in dtypes.INPUT_NAMES:
        return LAYOUT_SM80
    return LAYOUT_SM90 if dense.device.compute_capability == "90" else LAYOUT_SM80


def compress(dense, layout: str | None = None) -> SparseMatrix:
    """Compress a structured-sparse [M, K] matrix for one kernel family's layout.

    A 3-D [batch, M, K] array gives a SparseBatch (sm80 layout; cs.matmul runs it in
    CUTLASS's batched mode). fp16/bf16/int8 must be 2:4 along K; float32 (run as tf32)
    1:2. layout: "sm80" (numpy
    or cupy; any shape; every type) or "sm90" (fp16/bf16 cupy on an sm_90 GPU, K a
    multiple of 16). Default: "sm90" where that applies, else "sm80".
    Raises ValueError naming the first row and group with too many non-zeros.
    """
    if getattr(dense, "ndim", None) == 3:
        return _compress_batch(dense, layout)
    xp, element = _check_matrix(dense, "dense")
    pattern = PATTERNS[element]
    layout = layout or default_layout(dense)
    if layout not in LAYOUTS:
        raise ValueError(f"layout {layout!r} must be one of {LAYOUTS}")
    m, k = dense.shape
    if m == 0 or k == 0:
        raise ValueError(f"dense must be non-empty, got shape {(m, k)}")
    m_pad, k_pad = round_up(m, ROW_GROUP), round_up(k, K_MULTIPLE)
    source = _bits(xp.ascontiguousarray(dense))
    padded = xp.zeros((m_pad, k_pad), dtype=source.dtype)
    padded[:m, :k] = source
    g = pattern.group
    groups = padded.reshape(m_pad, k_pad // g, g)

    nonzero = _nonzero(xp, groups)
    counts = nonzero.sum(axis=-1)
    if bool((counts > pattern.keep).any()):
        row, group = (int(v) for v in xp.argwhere(counts > pattern.keep)[0])
        raise ValueError(
            f"dense is not {pattern.name} sparse: row {row}, columns {g * group}..{g * group + g - 1} hold "
            f"{int(counts[row, group])} non-zeros (at most {pattern.keep} per group of {g} along K for "
            f"{dense.dtype}); use cutlass_sparse.prune_2to4 first")
    if layout == LAYOUT_SM90:
        if element not in dtypes.INPUT_NAMES:
            raise TypeError(f"layout 'sm90' takes fp16/bf16; an {element} matrix compresses for layout='sm80'")
        if xp is np:
            raise TypeError("layout 'sm90' compresses on the GPU: pass a cupy array")
        from . import sm90

        values, metadata = sm90.compress(dense, element)
        return SparseMatrix((m, k), np.dtype(dense.dtype), values, metadata, layout)

    # Indices of the first and second non-zero (-1 if absent), without sorting.
    seen = xp.cumsum(nonzero, axis=-1)
    first = xp.where(counts > 0, ((seen == 1) & (nonzero == 1)).astype(xp.int32).argmax(axis=-1), -1)
    if pattern.keep == 1:
        # 1:2: the kept value (or the first of an empty pair); its nibble names the two
        # 16-bit halves it occupies: (0, 1) or (2, 3).
        kept = xp.maximum(first, 0).astype(xp.int32)
        values = xp.take_along_axis(groups, kept[..., None], axis=-1)[..., 0]
        idx0, idx1 = 2 * kept, 2 * kept + 1
    else:
        second = xp.where(counts > 1, ((seen == 2) & (nonzero == 1)).astype(xp.int32).argmax(axis=-1), -1)
        # Fewer than two non-zeros: complete to a valid ascending pair that covers them.
        # (p) -> (0, 1) for p < 2, (0, p) otherwise; nothing -> (0, 1).
        idx0 = xp.where(counts == 2, first, 0).astype(xp.int32)
        idx1 = xp.where(counts == 2, second, xp.where((counts == 1) & (first >= 2), first, 1)).astype(xp.int32)
        values = xp.stack([xp.take_along_axis(groups, idx0[..., None], axis=-1)[..., 0],
                           xp.take_along_axis(groups, idx1[..., None], axis=-1)[..., 0]], axis=-1)
    values = values.reshape(m_pad, k_pad // 2).view(dense.dtype)

    per_word, word = pattern.nibbles_per_word, pattern.word
    words_per_row = k_pad // pattern.logical_per_word
    nibbles = (idx0 | (idx1 << 2)).astype(xp.int64).reshape(m_pad, words_per_row, per_word)
    words = (nibbles << (4 * xp.arange(per_word, dtype=xp.int64))).sum(axis=-1).astype(word)
    stored = xp.empty(m_pad * words_per_row, dtype=word)
    stored[_reorder_offsets(xp, m_pad, words_per_row, np.dtype(word).itemsize).reshape(-1)] = words.reshape(-1)
    metadata = stored.reshape(words_per_row // 2, 2 * m_pad)
    return SparseMatrix((m, k), np.dtype(dense.dtype), values, metadata, layout)


def _compress_batch(dense, layout):
    xp = dtypes.array_module(dense)
    if layout not in (None, LAYOUT_SM80):
        raise ValueError(f"a batch of matrices compresses for layout 'sm80' (CUTLASS 2.x batched mode), not {layout!r}")
    if dense.shape[0] == 0:
        raise ValueError("dense has a batch of 0 matrices")
    parts = []
    for i in range(dense.shape[0]):
        try:
            parts.append(compress(dense[i], LAYOUT_SM80))
        except ValueError as exc:
            raise ValueError(f"matrix {i} of the batch: {exc}") from None
    return SparseBatch(parts[0].shape, parts[0].dtype, xp.stack([p.values for p in parts]),
                       xp.stack([p.metadata for p in parts]), LAYOUT_SM80)
