"""Batched sparse GEMM on the sm80 family: one launch of GemmSparseUniversal's kBatched
mode, one weight shared by the batch (its batch strides 0) or a SparseBatch of weights.
(The sm90 family runs a shared weight as one wide GEMM: api.matmul.)
"""
from __future__ import annotations

from ..describe import catalog, dtypes, selection
from ..describe.arith import cdiv
from ..describe.problem import Split
from ..formats.matrices import SparseBatch
from ..launch import device, sm80
from . import operands, options


def matmul(sw, x, *, out, alpha, beta, c, bias, activation, leaky_slope, out_dtype, config, split_k, info):
    """sw [M, K] times each x[i] [K, N] (A and E shared: batch stride 0), or each matrix of
    a SparseBatch times its x[i] (or one shared x): CUTLASS's batched mode, one launch.
    Reached through cs.matmul, which has checked sw, family (a SparseBatch is sm80) and config."""
    import cupy

    weights = sw.batch if isinstance(sw, SparseBatch) else None
    if weights is not None:
        if x.ndim == 2:      # one x for every matrix: batch stride 0
            x = cupy.broadcast_to(x, (weights,) + x.shape)
        elif x.ndim != 3 or x.shape[0] != weights:
            raise ValueError(f"x of shape {x.shape} must be [{weights}, K, N] (one per matrix of sw) or [K, N]")
    if split_k not in (None, 1):
        raise ValueError("split_k cannot be combined with a batched x (the batch takes the grid's third dimension)")
    batch, k_rows, n = x.shape
    m, k = sw.shape
    if batch == 0:
        raise ValueError("x has a batch of 0")
    if k_rows != k:
        raise ValueError(f"x has {k_rows} rows per batch, but sw has K = {k} columns (x must be [batch, {k}, N])")
    if x.dtype != sw.dtype:
        raise TypeError(f"x has dtype {x.dtype}, but sw is {sw.dtype}: both operands must have the same dtype")
    device_id = x.device.id
    operands.check_same_device(sw.values, "sw", device_id)
    element = dtypes.operand_name(sw.dtype)
    element_out = options.output_type(element, out_dtype)
    np_out = dtypes.numpy_dtype(element_out)
    options.check_activation(activation, leaky_slope)
    item = x.dtype.itemsize
    if x.strides[0] % item:
        raise ValueError(f"x's batch stride {x.strides[0]} is not a whole number of elements")
    layout = operands.matrix_layout(x[0])
    if element == "s8":
        options.check_int8(element_out, activation, None, None)
    if layout is None or (element == "s8" and layout[0] == "row"):
        # int8 reads B K-major; an x with no unit stride is copied: each x[i] column-major
        x = cupy.ascontiguousarray(x.transpose(0, 2, 1)).transpose(0, 2, 1)
        layout = operands.matrix_layout(x[0])
    layout_b, ldb = layout
    m_pad, k_stored = sw.padded_shape
    with cupy.cuda.Device(device_id):
        c_eff, beta_eff = c, beta
        if bias is not None:
            c_eff, beta_eff = operands.with_bias(bias, None, 0.0, m, n, np_out, device_id), 1.0
        arch, sm_count = device.facts(device_id)
        cat = catalog.for_element(sm80.FAMILY, element)
        tile = config.threadblock if config else selection.choose_tile(cat, m_pad, n, k, sm_count)[0]
        k_eff = cdiv(k, tile[2]) * tile[2]
        if k_eff != k:   # whole K tiles (see sm80.run): zero rows appended to every x[i]
            x_full = cupy.zeros((batch, k_eff, n), dtype=x.dtype)
            if layout_b == "col":
                x_full = cupy.zeros((batch, n, k_eff), dtype=x.dtype).transpose(0, 2, 1)
            x_full[:, :k] = x
            x = x_full
            ldb = n if layout_b == "row" else k_eff
        # D (and C) as [batch, M_pad, N] row-major; y is a view of the top M rows of each.
        d = cupy.empty((batch, m_pad, n), dtype=np_out)
        if beta_eff != 0.0:
            if c_eff is None:
                raise ValueError("beta is non-zero but c is None")
            c_eff = operands.as_device_array(c_eff, "c")
            shared_c = c_eff.ndim == 2
            want = (m, n) if shared_c else (batch, m, n)
            if c_eff.shape != want or c_eff.dtype != np_out:
                raise ValueError(f"c must be {list(want)} of dtype {np_out}, got {c_eff.shape} {c_eff.dtype}")
            if bias is not None and c is not None and beta != 0.0:
                raise ValueError("bias with c and beta on a batched x: fold the bias into c")
            c_full = cupy.zeros((m_pad, n) if shared_c else (batch, m_pad, n), dtype=np_out)
            c_full[..., :m, :] = c_eff
            stride_c = 0 if shared_c else m_pad * n
        else:
            c_full, stride_c = d, m_pad * n
        fam = catalog.load(cat)
        alignment_b = sm80.widest_alignment(fam.alignments_b, x.data.ptr, item, ldb, x.strides[0] // item,
                                            n if layout_b == "row" else k_eff)
        if alignment_b is None:
            raise ValueError(f"x (shape {x.shape}, strides {x.strides}) is not aligned for the sparse kernels: "
                             f"each x[i] needs an even N and leading dimension and a 4-byte aligned start")
        alignment_c = sm80.widest_alignment(selection.output_alignments(cat, element_out), 0, 1, n)
        if config is None:
            config = fam.config(selection.choose_tile(cat, m_pad, n, k, sm_count), element, element_out, layout_b,
                                alignment_b, alignment_c)
        else:
            sm80.check_config_fits(config, element, element_out, layout_b, alignment_b, alignment_c)
        config = selection.gemm_variant(config, Split(), activation)
        launch = sm80.resolve(config, arch, m_pad, n, k_eff, Split())
        block = sm80.gemm_block(launch, sw, (x.data.ptr, c_full.data.ptr, d.data.ptr), (ldb, n, n),
                                (alpha, beta_eff, leaky_slope), slice_stride=m_pad * n)
        f = block[0]
        f["mode"], f["batch_count"] = sm80.MODE_BATCHED, batch
        f["batch_stride_b"], f["batch_stride_c"] = x.strides[0] // item, stride_c
        if weights is not None:   # CUTLASS steps A and E by stride / kSparse: twice the stored sizes
            f["batch_stride_a"], f["batch_stride_e"] = 2 * sw.values[0].size, 2 * sw.metadata[0].size
        launch.kernel.launch(device_id, (launch.grid[0], launch.grid[1], batch), block)
        if info is not None:
            info.update(config=launch.kernel.compiled.config.name, arch=arch, batch=batch, k_padded=k_eff != k)
        y = d[:, :m]
        if out is None:
            return y if m_pad == m else cupy.ascontiguousarray(y)
        out = operands.as_device_array(out, "out")
        if out.shape != (batch, m, n) or out.dtype != np_out:
            raise ValueError(f"out must be [{batch}, {m}, {n}] of dtype {np_out}, got {out.shape} {out.dtype}")
        out[...] = y
        return out

