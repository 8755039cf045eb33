"""cs.matmul: validate a problem, pick and load a kernel, fill its argument block, launch.

Every rule a kernel relies on is checked here and reported as a Python exception that
names the argument (never a kernel fault or a silent wrong answer).
"""
from __future__ import annotations

import dataclasses
import functools

import numpy as np

from . import catalog, dtypes, selection, sm80
from .compress import SparseMatrix
from .description import ACTIVATIONS, SparseGemmConfig
from .selection import cdiv



def as_device_array(x, what: str):
    """A CuPy view of `x` (cupy array, __cuda_array_interface__ or DLPack object); never a copy."""
    import cupy

    if isinstance(x, cupy.ndarray):
        return x
    if isinstance(x, np.ndarray):
        raise TypeError(f"{what} is a numpy array in host memory; matmul needs a device array "
                        f"(cupy.ndarray, or any __cuda_array_interface__ / DLPack GPU array): "
                        f"use cupy.asarray({what})")
    if hasattr(x, "__cuda_array_interface__"):
        return cupy.asarray(x)
    if hasattr(x, "__dlpack__"):
        return cupy.from_dlpack(x)
    raise TypeError(f"{what} must be a device array (cupy.ndarray or __cuda_array_interface__), "
                    f"got {type(x).__name__}")


def _matrix_layout(x, what: str) -> tuple[str, int]:
    """('row', ld) or ('col', ld) in elements for a 2-D device array with one unit stride."""
    rows, cols = x.shape
    item = x.dtype.itemsize
    s0, s1 = x.strides
    if cols == 1 and s0 == item and rows > 1:
        return "col", rows      # a single column is both; column-major aligns on K
    if (s1 == item or cols == 1) and s0 % item == 0 and (s0 // item >= cols or rows == 1):
        return "row", max(s0 // item, cols)
    if (s0 == item or rows == 1) and s1 % item == 0 and (s1 // item >= rows or cols == 1):
        return "col", max(s1 // item, rows)
    raise ValueError(f"{what} of shape {x.shape} with strides {x.strides} has no unit stride along "
                     f"either dimension; pass a row- or column-major array (e.g. cupy.ascontiguousarray)")


def _check_same_device(array, what: str, device_id: int) -> None:
    if array.device.id != device_id:
        raise ValueError(f"{what} is on device {array.device.id}, but x is on device {device_id}")


def _check_output_like(array, what: str, m: int, n: int, np_out, device_id: int):
    array = as_device_array(array, what)
    if array.shape != (m, n) or array.dtype != np_out:
        raise ValueError(f"{what} must be [{m}, {n}] of dtype {np_out}, got {array.shape} {array.dtype}")
    _check_same_device(array, what, device_id)
    item = array.dtype.itemsize
    unit_columns = array.strides[1] == item or n == 1
    if not (unit_columns and (array.strides[0] >= n * item or m == 1) and array.strides[0] % item == 0):
        raise ValueError(f"{what} must be row-major: CUTLASS 2.x sparse kernels read C and write D row-major")
    return array


@functools.cache
def _device_facts(device_id: int) -> tuple[str, int]:
    import cupy

    device = cupy.cuda.Device(device_id)
    cc = device.compute_capability
    return f"sm_{cc}", device.attributes["MultiProcessorCount"]


def _row_stride(array, cols: int) -> int:
    """Leading dimension of a row-major 2-D array (single-row arrays may report any stride)."""
    return max(array.strides[0] // array.dtype.itemsize, cols)


def matmul(sw: SparseMatrix, x, *, out=None, alpha: float = 1.0, beta: float = 0.0, c=None, bias=None,
           activation: str = "identity", leaky_slope: float = 0.01, out_dtype=None,
           config: str | SparseGemmConfig | None = None, family: str | None = None,
           split_k: int | None = None, split_k_mode: str | None = None, workspace=None,
           autotune: bool = False, force_profile: bool = False,
           info: dict | None = None, _record: dict | None = None, _tile: tuple | None = None):
    """y = activation(alpha * (sw @ x) + beta * c + bias), by a CUTLASS 2:4 sparse tensor-core kernel.

    sw: SparseMatrix [M, K] (from cs.compress, on the device). x: device array [K, N],
    row- or column-major, same dtype as sw; or [batch, K, N] (sm80: one launch of the
    kernel's batched mode, sw shared by the batch; out and c are then [batch, M, N]). c (read when beta != 0) and out: [M, N]
    row-major of the output dtype (x's dtype, or f32 with out_dtype="f32"). Returns a
    CuPy [M, N] row-major array (`out` if given). Runs on the current CuPy stream and
    never synchronizes. `info`, if a dict, receives what was chosen.

    bias: [M] or [M, 1] (one value per output row, as a Linear layer's bias) or [1, N]
    (one per column), of the output dtype. activation: "identity", "relu", "leaky_relu"
    (negative slope leaky_slope), "gelu" (erf), "gelu_tanh", "silu", "sigmoid", "tanh"
    or "hardswish", applied in the kernel's epilogue.

    family: "sm80" (CUTLASS 2.x, mma.sp, any shape) or "sm90" (CUTLASS 3.x, wgmma.sp +
    TMA, sm_90 GPUs). Default: the family sw was compressed for (cs.compress picks sm90
    on an sm_90 GPU). A matrix compressed for one family is refused by the other:
    convert it with sw.to_layout(family).

    split_k: K slices. split_k_mode "serial" (default): slices add into D in order, in
    the GEMM kernel (sm80: semaphores; sm90: CUTLASS 3.x's stream-K scheduler). "parallel"
    (sm80 only): slices write fp32 partials to a workspace that a reduction kernel sums,
    applying the epilogue. workspace: a device buffer of at least cs.workspace_size(...)
    bytes; default: one from CuPy's memory pool.

    Kernel choice: `config` if given; else the profiler's recorded winner for this
    problem's signature (cs.tune); else a heuristic. autotune=True profiles on a miss;
    force_profile=True profiles again. Profiling synchronizes and takes seconds to minutes.
    """
    import cupy

    # -- operands ---------------------------------------------------------------
    if not isinstance(sw, SparseMatrix):
        raise TypeError(f"sw must be a cutlass_sparse.SparseMatrix (from cs.compress), got {type(sw).__name__}")
    family = family or sw.layout
    if family not in ("sm80", "sm90"):
        raise ValueError(f"family {family!r} must be 'sm80' or 'sm90'")
    if sw.layout != family:
        raise ValueError(f"sw is compressed in the {sw.layout!r} layout; the {family} kernels read "
                         f"{family!r} metadata: convert with sw.to_layout({family!r}) or pass family={sw.layout!r}")
    if isinstance(config, str):
        config = catalog.find(config, family)
    if not sw.is_device:
        raise TypeError("sw holds host (numpy) arrays; call sw.to_device() or compress a cupy array")
    x = as_device_array(x, "x")
    if x.ndim == 3:
        return _matmul_batched(sw, x, out=out, alpha=alpha, beta=beta, c=c, bias=bias, activation=activation,
                               leaky_slope=leaky_slope, out_dtype=out_dtype, config=config, family=family,
                               split_k=split_k, info=info)
    if x.ndim != 2:
        raise ValueError(f"x must be 2-D [K, N] (or 3-D [batch, K, N]), got shape {x.shape}")
    if x.dtype != sw.dtype:
        raise TypeError(f"x has dtype {x.dtype}, but sw is {sw.dtype}: both operands must have the same dtype")
    m, k = sw.shape
    k_rows, n = x.shape
    if k_rows != k:
        raise ValueError(f"x has {k_rows} rows, but sw has K = {k} columns (x must be [K, N] = [{k}, N])")
    if n == 0:
        raise ValueError("x has N = 0 columns")
    device_id = x.device.id
    _check_same_device(sw.values, "sw", device_id)
    element = dtypes.operand_name(sw.dtype)
    element_out = _output_type(element, out_dtype)
    np_out = dtypes.numpy_dtype(element_out)
    if out is not None:
        out = _check_output_like(out, "out", m, n, np_out, device_id)
    if beta != 0.0:
        if c is None:
            raise ValueError("beta is non-zero but c is None")
        c = _check_output_like(c, "c", m, n, np_out, device_id)
    check_activation(activation, leaky_slope)
    layout_b, ldb = _matrix_layout(x, "x")
    split_k, split_k_mode = _check_split_k(split_k, split_k_mode, family)
    if element == "s8":
        _check_int8(layout_b, n, element_out, activation, split_k, split_k_mode)
    if workspace is not None:
        workspace = as_device_array(workspace, "workspace")
        _check_same_device(workspace, "workspace", device_id)
    with cupy.cuda.Device(device_id):
        if config is None and _tile is None and split_k is None and split_k_mode is None:
            from . import profiler

            choice = profiler.choice_for(sw, x, family, element, element_out, layout_b, activation, out_dtype,
                                         autotune, force_profile)
            if choice is not None:
                _tile, split_k, split_k_mode = choice.tile, choice.split_k, choice.split_k_mode
        if bias is not None:
            c, beta = _with_bias(bias, c, beta, m, n, np_out, device_id), 1.0
        if family == "sm90":
            return _matmul_sm90(sw, x, layout_b, ldb, out, c, alpha, beta, element, element_out, config, info,
                                split_k, workspace, activation, leaky_slope, _tile)
        split = sm80.Split(split_k or 1, split_k_mode or "serial")
        return _matmul_sm80(sw, x, layout_b, ldb, out, c, alpha, beta, element, element_out, np_out, config, info,
                            split, workspace, activation, leaky_slope, _record, _tile)


def _matmul_batched(sw, x, *, out, alpha, beta, c, bias, activation, leaky_slope, out_dtype, config, family,
                    split_k, info):
    """sw [M, K] times each x[i] [K, N]: CUTLASS's batched mode, A and E shared (stride 0)."""
    import cupy

    family = family or sw.layout
    if family != "sm80" or sw.layout != "sm80":
        raise ValueError("a batched x ([batch, K, N]) runs on the sm80 family: compress with layout='sm80' "
                         "(or sw.to_layout('sm80')); the sm90 path takes 2-D x")
    if split_k not in (None, 1):
        raise ValueError("split_k cannot be combined with a batched x (the batch takes the grid's third dimension)")
    if isinstance(config, str):
        config = catalog.find(config, family)
    batch, k_rows, n = x.shape
    m, k = sw.shape
    if batch == 0:
        raise ValueError("x has a batch of 0")
    if k_rows != k:
        raise ValueError(f"x has {k_rows} rows per batch, but sw has K = {k} columns (x must be [batch, {k}, N])")
    if x.dtype != sw.dtype:
        raise TypeError(f"x has dtype {x.dtype}, but sw is {sw.dtype}: both operands must have the same dtype")
    device_id = x.device.id
    _check_same_device(sw.values, "sw", device_id)
    element = dtypes.operand_name(sw.dtype)
    element_out = _output_type(element, out_dtype)
    np_out = dtypes.numpy_dtype(element_out)
    check_activation(activation, leaky_slope)
    item = x.dtype.itemsize
    if x.strides[0] % item:
        raise ValueError(f"x's batch stride {x.strides[0]} is not a whole number of elements")
    layout_b, ldb = _matrix_layout(x[0], "x[0]")
    m_pad, k_stored = sw.padded_shape
    arch, sm_count = _device_facts(device_id)
    with cupy.cuda.Device(device_id):
        cat = catalog.for_element(sm80.FAMILY, element)
        tile = config.threadblock if config else selection.choose_tile(cat, m_pad, n, k, sm_count)[0]
        k_eff = cdiv(k, tile[2]) * tile[2]
        if k_eff != k:   # whole K tiles (see _matmul_sm80): zero rows appended to every x[i]
            x_full = cupy.zeros((batch, k_eff, n), dtype=x.dtype)
            if layout_b == "col":
                x_full = cupy.zeros((batch, n, k_eff), dtype=x.dtype).transpose(0, 2, 1)
            x_full[:, :k] = x
            x = x_full
            layout_b, ldb = _matrix_layout(x[0], "x[0]")
        # D (and C) as [batch, M_pad, N] row-major; y is a view of the top M rows of each.
        d = cupy.empty((batch, m_pad, n), dtype=np_out)
        c_eff, beta_eff = c, beta
        if bias is not None:
            c_eff, beta_eff = _with_bias(bias, None, 0.0, m, n, np_out, device_id), 1.0
        if beta_eff != 0.0:
            if c_eff is None:
                raise ValueError("beta is non-zero but c is None")
            c_eff = as_device_array(c_eff, "c")
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
        launch = sm80.resolve(element, element_out, layout_b, alignment_b, alignment_c, m_pad, n, k, k_eff,
                              arch, sm_count, config, sm80.Split(), activation)
        block = launch.block.copy()
        f = block[0]
        f["mode"], f["batch_count"] = sm80.MODE_BATCHED, batch
        f["batch_stride_b"], f["batch_stride_c"], f["batch_stride_d"] = x.strides[0] // item, stride_c, m_pad * n
        f["a"], f["e"] = sw.values.data.ptr, sw.metadata.data.ptr    # batch strides of A and E stay 0
        f["b"], f["c"], f["d"] = x.data.ptr, c_full.data.ptr, d.data.ptr
        f["lda"], f["lde"] = k_stored // 2, sw.metadata_ld
        f["ldb"], f["ldc"], f["ldd"] = ldb, n, n
        f["alpha"], f["beta"], f["activation_arg"] = alpha, beta_eff, leaky_slope
        launch.kernel.launch(device_id, (launch.grid[0], launch.grid[1], batch), block)
        if info is not None:
            info.update(config=launch.kernel.compiled.config.name, arch=arch, batch=batch, k_padded=k_eff != k)
        y = d[:, :m]
        if out is None:
            return y if m_pad == m else cupy.ascontiguousarray(y)
        out = as_device_array(out, "out")
        if out.shape != (batch, m, n) or out.dtype != np_out:
            raise ValueError(f"out must be [{batch}, {m}, {n}] of dtype {np_out}, got {out.shape} {out.dtype}")
        out[...] = y
        return out


def _output_type(element: str, out_dtype) -> str:
    """D's element: the input type by default (int32 for int8), or one the kernels offer."""
    allowed = dtypes.outputs_for(element)
    element_out = allowed[0] if out_dtype is None else dtypes.parse(out_dtype)
    if element_out not in allowed:
        raise ValueError(f"out_dtype {out_dtype!r}: {element} inputs give one of {allowed}")
    return element_out


def _check_int8(layout_b: str, n: int, element_out: str, activation: str, split_k, split_k_mode) -> None:
    if layout_b != "col":
        raise ValueError("x is row-major; int8 tensor cores read B K-major: pass a column-major x "
                         "(cupy.asfortranarray(x), or the transpose of a row-major [N, K] array)")
    if activation != "identity":
        raise ValueError(f"activation {activation!r} needs a floating-point output; int8 GEMMs give int32 "
                         f"or int8 (scaled by alpha and clamped)")
    if (split_k or 1) > 1 and (split_k_mode == "parallel" or element_out == "s8"):
        raise ValueError("int8 split-K: serial with an int32 output only (an int8 D would clamp the partial "
                         "sums; the parallel reduction sums float32 partials)")


def check_activation(activation, leaky_slope) -> None:
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation {activation!r} is not one of {sorted(ACTIVATIONS)}")
    if not np.isfinite(leaky_slope):
        raise ValueError(f"leaky_slope must be finite, got {leaky_slope!r}")


def _with_bias(bias, c, beta, m, n, np_out, device_id):
    """C for the epilogue with a bias folded in: bias broadcast to [M, N] (+ beta * c)."""
    import cupy

    bias = as_device_array(bias, "bias")
    _check_same_device(bias, "bias", device_id)
    if bias.dtype != np_out:
        raise TypeError(f"bias has dtype {bias.dtype}; it must have the output dtype {np_out}")
    if bias.shape in ((m,), (m, 1)):
        rows = bias.reshape(m, 1)
    elif bias.shape == (1, n):
        rows = bias
    else:
        raise ValueError(f"bias of shape {bias.shape} must be [{m}] or [{m}, 1] (one per output row) "
                         f"or [1, {n}] (one per column)")
    # A bit copy, so it works for bf16, which CuPy cannot compute in.
    bits = np.dtype(f"u{np_out.itemsize}")
    full = cupy.empty((m, n), dtype=np_out)
    full.view(bits)[...] = rows.view(bits)
    if c is None or beta == 0.0:
        return full
    from .reference import to_float32

    return dtypes.from_float32(to_float32(full) + float(beta) * to_float32(c), np_out)


def _matmul_sm80(sw, x, layout_b, ldb, out, c, alpha, beta, element, element_out, np_out, config, info,
                 split, workspace, activation, leaky_slope, record=None, tile=None):
    import cupy

    device_id = x.device.id
    m, k = sw.shape
    n = x.shape[1]
    m_pad, k_stored = sw.padded_shape
    cat = catalog.for_element(sm80.FAMILY, element)
    fam = catalog.load(cat)
    arch, sm_count = _device_facts(device_id)
    # The kernel runs on M_pad rows (the metadata reorder works in groups of 32), so a
    # ragged M computes into a padded buffer; y is a contiguous view of its top rows. A
    # parallel split-K writes D with the reduction, over M rows: no padding needed.
    padded = m_pad != m and not split.parallel
    d = out if (out is not None and not padded) else cupy.empty((m_pad if padded else m, n), dtype=np_out)
    ldd = _row_stride(d, n)
    if beta == 0.0:
        c_full, ldc = d, ldd
    elif padded:
        c_full = cupy.zeros((m_pad, n), dtype=np_out)
        c_full[:m] = c
        ldc = n
    else:
        c_full, ldc = c, _row_stride(c, n)

    # -- kernel choice --------------------------------------------------------
    if config is None and tile is None:
        tile = selection.choose_tile(cat, m_pad, n, k, sm_count)
    tile_k = config.threadblock[2] if config else tile[0][2]
    k_eff = cdiv(k, tile_k) * tile_k
    if k_eff != k:
        # mma.sp needs valid metadata on every K step, so the kernel runs over whole
        # tiles: the stored sparse operand is padded already, x gets zero rows.
        x_full = cupy.zeros((k_eff, n), dtype=x.dtype, order="C" if layout_b == "row" else "F")
        x_full[:k] = x
        x, ldb = x_full, (n if layout_b == "row" else k_eff)
    alignment_b = sm80.widest_alignment(fam.alignments_b, x.data.ptr, x.dtype.itemsize, ldb,
                                        n if layout_b == "row" else k_eff)
    if alignment_b is None:
        raise ValueError(
            f"x (row-major, shape {tuple(x.shape)}, leading dimension {ldb}, address {x.data.ptr:#x}) "
            f"is not aligned for the sparse kernels: a row-major x needs an even N, an even leading "
            f"dimension and a 4-byte aligned address; pass a column-major x (cupy.asfortranarray) or pad N")
    aligns_c = selection.output_alignments(cat, element_out)
    if split.parallel:   # the GEMM writes fp32 partials; the configuration keeps D's own width
        alignment_c = sm80.widest_alignment(aligns_c, 0, 1, n)
    else:
        widths = (sm80.widest_alignment(aligns_c, d.data.ptr, np_out.itemsize, ldd, n),
                  sm80.widest_alignment(aligns_c, c_full.data.ptr, np_out.itemsize, ldc, n))
        if None in widths:
            raise ValueError(f"out/c (N = {n}, leading dimensions {ldd}/{ldc}) cannot be written {min(aligns_c)} "
                             f"{element_out} at a time, which this output type needs: make N a multiple of "
                             f"{min(aligns_c)} or use out_dtype='s32'")
        alignment_c = min(widths)
    if k_stored < k_eff:
        raise ValueError(f"sw stores K = {k_stored}, less than the {k_eff} this kernel runs over")
    launch = sm80.resolve(element, element_out, layout_b, alignment_b, alignment_c, m_pad, n, k, k_eff,
                          arch, sm_count, config, split, activation, tile)

    # -- workspace and launches -----------------------------------------------
    semaphore_bytes, partial_bytes = sm80.workspace_parts(m_pad, n, launch.kernel.compiled.config.threadblock,
                                                          split)
    space = sm80.take_workspace(workspace, semaphore_bytes + partial_bytes)
    if split.parallel:
        partials, ld_partials = space.data.ptr, sm80.partial_ld(n)
        sm80.launch_gemm(launch, device_id, sw, x, partials, partials, ldb, ld_partials, ld_partials,
                         1.0, 0.0, 0.0, slice_stride=m_pad * ld_partials)
        c_src, ld_src = (c, _row_stride(c, n)) if beta != 0.0 else (d, ldd)
        ra = sm80.reduction_alignment(element_out, n, (d.data.ptr, ldd, np_out.itemsize),
                                      (c_src.data.ptr, ld_src, np_out.itemsize))
        reduce = sm80.resolve_reduction(element_out, ra, activation, arch, m, n)
        sm80.launch_reduction(reduce, device_id, partials, launch, m, n, c_src.data.ptr, ld_src,
                              d.data.ptr, ldd, alpha, beta, leaky_slope, m_pad)
    else:
        semaphore = 0
        if split.serial:
            semaphore = space.data.ptr
            cupy.cuda.runtime.memsetAsync(semaphore, 0, semaphore_bytes, cupy.cuda.get_current_stream().ptr)
        sm80.launch_gemm(launch, device_id, sw, x, c_full.data.ptr, d.data.ptr, ldb, ldc, ldd, alpha, beta,
                         leaky_slope, semaphore_ptr=semaphore)

    if info is not None:
        compiled = launch.kernel.compiled
        info.update(config=compiled.config.name, arch=arch, from_cache=compiled.from_cache,
                    compile_seconds=compiled.compile_seconds, grid=launch.grid, k_padded=k_eff != k,
                    split_k=split.slices, split_k_mode=split.mode, workspace_bytes=semaphore_bytes + partial_bytes)
    if record is not None:   # what a Plan needs to repeat this launch with new pointers
        record.update(launch=launch, direct=not (padded or k_eff != k or split.slices > 1), layout_b=layout_b,
                      ldb=ldb, ldc=ldc, ldd=ldd, alignment_b=alignment_b, alignment_c=alignment_c)
    if out is None:
        return d[:m]
    if d is not out:
        out[...] = d[:m]
    return out


SPLIT_K_MODES = {"sm80": ("serial", "parallel"), "sm90": ("serial",)}


def _check_split_k(split_k, split_k_mode, family):
    if split_k is not None and (isinstance(split_k, bool) or not isinstance(split_k, (int, np.integer))
                                or split_k < 1):
        raise ValueError(f"split_k must be an integer >= 1, got {split_k!r}")
    if split_k_mode is not None and split_k_mode not in ("serial", "parallel"):
        raise ValueError(f"split_k_mode {split_k_mode!r} must be 'serial' or 'parallel'")
    if split_k_mode is not None and split_k_mode not in SPLIT_K_MODES[family]:
        raise ValueError(f"split_k_mode {split_k_mode!r} is not offered by the {family} family (it has "
                         f"{SPLIT_K_MODES[family]}: CUTLASS 3.x reduces K slices inside the GEMM kernel)")
    return (None if split_k is None else int(split_k)), split_k_mode


def _matmul_sm90(sw, x, layout_b, ldb, out, c, alpha, beta, element, element_out, config, info, split_k,
                 workspace, activation, leaky_slope, tile=None):
    import cupy

    from . import sm90

    m, k = sw.shape
    n = x.shape[1]
    np_out = dtypes.numpy_dtype(element_out)
    with cupy.cuda.Device(x.device.id):
        d = out if out is not None else cupy.empty((m, n), dtype=np_out)
        c_full = c if beta != 0.0 else d
        ldd, ldc = _row_stride(d, n), _row_stride(c_full, n)
        # TMA: 16-byte aligned bases and leading dimensions.
        for what, array, ld in (("x", x, ldb), ("out", d, ldd), ("c", c_full, ldc)):
            item = array.dtype.itemsize
            if array.data.ptr % 16 or (ld * item) % 16:
                raise ValueError(
                    f"{what} (leading dimension {ld}, address {array.data.ptr:#x}) breaks the sm90 kernels' "
                    f"TMA rule: 16-byte aligned address and leading dimension a multiple of {16 // item} "
                    f"elements; pad it, or use family='sm80' (sw.to_layout('sm80')), which takes any shape")
        config, scheduling = _resolve_sm90(m, n, k, x.device.id, element, element_out, layout_b, config, split_k,
                                           activation, tile)
        sm90.matmul(sw, x, d, c_full, alpha, beta, config, ldb, ldc, ldd, info, scheduling, workspace, leaky_slope)
        return d


def _resolve_sm90(m, n, k, device_id, element, element_out, layout_b, config, split_k, activation="identity",
                  tile=None):
    """The sm90 kernel and K decomposition for a problem (the caller's config, a profiled
    tile, or the catalog's choice)."""
    from . import sm90

    alignment_c = 16 // dtypes.numpy_dtype(element_out).itemsize
    if config is None and tile is not None:
        splits = split_k or 1
        config = catalog.load("sm90").config(tile, element, element_out, layout_b, 8, alignment_c)
    elif config is None:
        tile, splits = selection.choose_sm90(m, n, k, _device_facts(device_id)[1], split_k)
        config = catalog.load("sm90").config(tile, element, element_out, layout_b, 8, alignment_c)
    else:
        sm80.check_config_fits(config, element, element_out, layout_b, 8, alignment_c)
        splits = split_k or 1
    config = dataclasses.replace(config, activation=activation)
    if splits > 1 and config.tile_scheduler != "streamk":
        raise ValueError(f"split_k={splits} needs an sm90 stream-K kernel; {config.name} is not one")
    if splits > cdiv(k, config.threadblock[2]):
        raise ValueError(f"split_k={splits} exceeds the {cdiv(k, config.threadblock[2])} K tiles of "
                         f"K = {k} with {config.name}")
    return config, sm90.Scheduling.split_k(splits)


def workspace_size(sw: SparseMatrix, x, *, out_dtype=None, config: str | SparseGemmConfig | None = None,
                   family: str | None = None, split_k: int | None = None, split_k_mode: str | None = None) -> int:
    """Bytes of workspace cs.matmul needs for these operands and options (0 when none).

    Pass a buffer at least this large as matmul(..., workspace=buf) to keep a call free of
    allocation (CUDA graph capture); the result is the same for any data of these shapes.
    """
    family = family or sw.layout
    x = as_device_array(x, "x")
    split_k, split_k_mode = _check_split_k(split_k, split_k_mode, family)
    if isinstance(config, str):
        config = catalog.find(config, family)
    m, k = sw.shape
    n = x.shape[1]
    if family == "sm80":
        split = sm80.Split(split_k or 1, split_k_mode or "serial")
        m_pad = sw.padded_shape[0]
        tile = config.threadblock if config else \
            selection.choose_tile(catalog.for_element(sm80.FAMILY, dtypes.operand_name(sw.dtype)), m_pad, n, k,
                                  _device_facts(x.device.id)[1])[0]
        return sum(sm80.workspace_parts(m_pad, n, tile, split))
    from . import sm90

    element = dtypes.operand_name(sw.dtype)
    element_out = _output_type(element, out_dtype)
    layout_b, _ = _matrix_layout(x, "x")
    config, scheduling = _resolve_sm90(m, n, k, x.device.id, element, element_out, layout_b, config, split_k)
    return sm90.workspace_size(config, x.device.id, m, n, k, scheduling)


def linear(x, sw: SparseMatrix, bias=None, activation: str = "identity", **options):
    """A Linear layer with a 2:4 sparse weight: activation(x @ w.T + bias).

    x: [tokens, K] device array; sw: the compressed weight [features, K]; bias: [features].
    Computed as w @ x.T, which reads x in place (x.T is column-major) and writes
    [features, tokens] row-major: the result is its transpose, a [tokens, features] view
    with no copy (Fortran-ordered; its .T is contiguous, and a following cs.linear reads
    it as it is). Other options go to cs.matmul.
    """
    x = as_device_array(x, "x")
    if x.ndim != 2:
        raise ValueError(f"x must be 2-D [tokens, K], got shape {x.shape}")
    return matmul(sw, x.T, bias=bias, activation=activation, **options).T
