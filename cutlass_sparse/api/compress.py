"""cs.compress: a structured-sparse matrix into the layout of the kernel family that will
run it. Both layouts are encoded on the host side of the array module (formats.sm80_layout,
formats.sm90_layout: NumPy or CuPy), so compressing compiles nothing."""
from __future__ import annotations

import numpy as np

from ..describe import dtypes
from ..formats import prune, sm80_layout, sm90_layout
from ..formats.matrices import Codec, SparseBatch, SparseMatrix, register_codec
from ..formats.patterns import LAYOUT_SM80, LAYOUT_SM90, LAYOUTS, _check_matrix, check_fits, is_broadcast_batch
from .interop import torch_io
from .matmul import matmul


def default_layout(dense) -> str:
    """The metadata layout of the kernel family that will run on dense's device: sm90 for a
    cupy fp16/bf16 matrix on an sm_90 GPU whose K that family takes (a multiple of 16),
    else sm80 (which also takes int8)."""
    if dtypes.array_module(dense) is np or dense.ndim != 2 or dense.shape[1] % 16 or \
            dtypes.name_of(dense.dtype) not in dtypes.INPUT_NAMES:
        return LAYOUT_SM80
    return LAYOUT_SM90 if dense.device.compute_capability == "90" else LAYOUT_SM80


@torch_io
def compress(dense, layout: str | None = None) -> SparseMatrix:
    """Compress a structured-sparse [M, K] matrix for one kernel family's layout.

    A 3-D [batch, M, K] array gives a SparseBatch (sm80 layout; cs.matmul runs it in
    CUTLASS's batched mode). fp16/bf16/int8 must be 2:4 along K; float32 (run as tf32)
    1:2. layout: "sm80" (numpy or cupy; any shape; every type) or "sm90" (fp16/bf16,
    numpy or cupy, K a multiple of 16; run on an sm_90 GPU). Default: "sm90" where that applies, else
    "sm80". Raises ValueError naming the first row and group with too many non-zeros,
    TypeError/ValueError for an input it cannot take (a batch broadcast from one matrix
    among them: compress that matrix), and TooLarge (a ValueError) before allocating when
    the work cannot fit in the memory available.
    """
    xp, element = _check_matrix(dense, "dense", batch=True)
    if layout is not None and (not isinstance(layout, str) or layout not in LAYOUTS):
        raise ValueError(f"layout {layout!r} must be one of {LAYOUTS}, or None for the default")
    if dense.ndim == 3:
        return _compress_batch(dense, layout, element)
    if layout is None:
        layout = default_layout(dense)
    m, k = dense.shape
    if m == 0 or k == 0:
        raise ValueError(f"dense must be non-empty, got shape {(m, k)}")
    check_fits(dense, sm80_layout.work_bytes(m, k, element), "dense", "compress")
    if layout == LAYOUT_SM90:
        if element not in dtypes.INPUT_NAMES:
            raise TypeError(f"layout 'sm90' takes fp16/bf16, not {element} ({np.dtype(dense.dtype)}): compress "
                            f"this matrix for layout='sm80'")
        values, metadata = sm90_layout.encode(dense, element)
        return SparseMatrix((m, k), np.dtype(dense.dtype), values, metadata, layout, sm90_layout.STORED_ATOM_K)
    values, metadata = sm80_layout.encode(dense, element)
    return SparseMatrix((m, k), np.dtype(dense.dtype), values, metadata, layout)


def _compress_batch(dense, layout, element):
    xp = dtypes.array_module(dense)
    if layout not in (None, LAYOUT_SM80):
        raise ValueError(f"a batch of matrices compresses for layout 'sm80' (CUTLASS 2.x batched mode), not {layout!r}")
    batch, m, k = dense.shape
    if batch == 0 or m == 0 or k == 0:
        raise ValueError(f"dense must be a non-empty [batch, M, K] batch, got shape {tuple(dense.shape)}")
    if is_broadcast_batch(dense):
        # A SparseBatch of broadcast views would mislead the batched kernel (its batch
        # strides are the matrices' sizes), and stacking copies would fill memory.
        raise ValueError(f"dense of shape {tuple(dense.shape)} is one [M, K] matrix broadcast to a batch of "
                         f"{batch} (batch stride 0): compress that matrix once, sw = cs.compress(dense[0]), and "
                         f"pass the 3-D x to cs.matmul(sw, x), which shares one weight across the batch")
    check_fits(dense, sm80_layout.work_bytes(m, k, element, batch), "dense", "compress")
    values = metadata = None
    for i in range(batch):
        try:
            part = compress(dense[i], LAYOUT_SM80)
        except ValueError as exc:
            raise ValueError(f"matrix {i} of the batch: {exc}") from None
        if values is None:   # filled in place: no list of parts and a stacked copy of it
            values = xp.empty((batch,) + part.values.shape, dtype=part.values.dtype)
            metadata = xp.empty((batch,) + part.metadata.shape, dtype=part.metadata.dtype)
        values[i], metadata[i] = part.values, part.metadata
    return SparseBatch((m, k), np.dtype(dense.dtype), values, metadata, LAYOUT_SM80)


def _sm90_to_dense(matrix: SparseMatrix):
    """16-bit: decoded from the layout (formats.sm90_layout). 8-bit (cs.quantize_*): computed
    on the GPU as the matrix times the identity (exact: every output is one stored value
    times 1), reading the layout the way the kernel does."""
    if np.dtype(matrix.dtype).itemsize == 2:
        return sm90_layout.decode(matrix.values, matrix.metadata, matrix.shape, matrix.atom_k, matrix.dtype)
    import cupy

    eye = dtypes.from_float32(cupy.eye(matrix.shape[1], dtype=cupy.float32), matrix.dtype)
    return dtypes.from_float32(matmul(matrix, eye, out_dtype="f32"), matrix.dtype)


prune_2to4 = torch_io(prune.prune_2to4)   # torch in, torch out; NumPy and CuPy as they are


register_codec(LAYOUT_SM80, Codec(compress, lambda matrix: matrix.to_dense()))
register_codec(LAYOUT_SM90, Codec(compress, _sm90_to_dense))
