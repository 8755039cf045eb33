"""cs.compress: a structured-sparse matrix into the layout of the kernel family that will
run it. The sm80 layout is encoded on the host side (formats.sm80_layout, NumPy or CuPy);
the sm90 layout by CUTLASS's compressor on the GPU (launch.sm90_compress), and read back
by a GEMM against the identity, which is why its codec is registered from here."""
from __future__ import annotations

import numpy as np

from ..describe import dtypes
from ..formats import sm80_layout
from ..formats.matrices import Codec, SparseBatch, SparseMatrix, register_codec
from ..formats.patterns import LAYOUT_SM80, LAYOUT_SM90, LAYOUTS, _check_matrix
from ..launch import sm90_compress
from .matmul import matmul


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
    1:2. layout: "sm80" (numpy or cupy; any shape; every type) or "sm90" (fp16/bf16
    cupy on an sm_90 GPU, K a multiple of 16). Default: "sm90" where that applies, else
    "sm80". Raises ValueError naming the first row and group with too many non-zeros.
    """
    if getattr(dense, "ndim", None) == 3:
        return _compress_batch(dense, layout)
    xp, element = _check_matrix(dense, "dense")
    layout = layout or default_layout(dense)
    if layout not in LAYOUTS:
        raise ValueError(f"layout {layout!r} must be one of {LAYOUTS}")
    m, k = dense.shape
    if m == 0 or k == 0:
        raise ValueError(f"dense must be non-empty, got shape {(m, k)}")
    if layout == LAYOUT_SM90:
        if element not in dtypes.INPUT_NAMES:
            raise TypeError(f"layout 'sm90' takes fp16/bf16; an {element} matrix compresses for layout='sm80'")
        if xp is np:
            raise TypeError("layout 'sm90' compresses on the GPU: pass a cupy array")
        sm80_layout.grouped(dense, element)   # the 2:4 check, with the same message as sm80's
        values, metadata = sm90_compress.compress(dense, element)
    else:
        values, metadata = sm80_layout.encode(dense, element)
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


def _sm90_to_dense(matrix: SparseMatrix):
    """Computed on the GPU as the matrix times the identity (exact: every output is one
    stored value times 1), so it reads the layout the way the kernel does."""
    import cupy

    eye = dtypes.from_float32(cupy.eye(matrix.shape[1], dtype=cupy.float32), matrix.dtype)
    return dtypes.from_float32(matmul(matrix, eye, out_dtype="f32"), matrix.dtype)


register_codec(LAYOUT_SM80, Codec(compress, lambda matrix: matrix.to_dense()))
register_codec(LAYOUT_SM90, Codec(compress, _sm90_to_dense))
