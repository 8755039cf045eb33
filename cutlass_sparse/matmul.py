"""cs.matmul: validate a problem, pick and load a kernel, fill its argument block, launch.

Every rule a kernel relies on is checked here and reported as a Python exception that
names the argument (never a kernel fault or a silent wrong answer).
"""
from __future__ import annotations

import functools
import numpy as np

from . import arguments, catalog, dtypes, kernels, runtime, selection
from .compress import SparseMatrix
from .description import SparseGemmConfig

FAMILY = "sm80"


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


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


def _matrix_layout(x, what: str, rows: int, cols: int) -> tuple[str, int]:
    """('row', ld) or ('col', ld) in elements for a 2-D device array with one unit stride."""
    item = x.dtype.itemsize
    s0, s1 = x.strides
    if s1 == item and s0 % item == 0 and (s0 // item >= cols or rows == 1):
        return "row", max(s0 // item, cols)
    if s0 == item and s1 % item == 0 and (s1 // item >= rows or cols == 1):
        return "col", max(s1 // item, rows)
    raise ValueError(f"{what} of shape {x.shape} with strides {x.strides} has no unit stride along "
                     f"either dimension; pass a row- or column-major array (e.g. cupy.ascontiguousarray)")


def _row_stride(array, cols: int) -> int:
    """Leading dimension of a row-major 2-D array (single-row arrays may report any stride)."""
    return max(array.strides[0] // array.dtype.itemsize, cols)


def _widest_alignment(candidates, ptr: int, itemsize: int, *multiples: int) -> int | None:
    for a in candidates:
        if ptr % (a * itemsize) == 0 and all(v % a == 0 for v in multiples):
            return a
    return None


@functools.cache
def _device_facts(device_id: int) -> tuple[str, int]:
    import cupy

    device = cupy.cuda.Device(device_id)
    major, minor = device.compute_capability[:-1], device.compute_capability[-1]
    return f"sm_{major}{minor}", device.attributes["MultiProcessorCount"]


def matmul(sw: SparseMatrix, x, *, out=None, alpha: float = 1.0, beta: float = 0.0, c=None,
           out_dtype=None, config: str | SparseGemmConfig | None = None, info: dict | None = None):
    """y = alpha * (sw @ x) + beta * c, computed by a CUTLASS 2:4 sparse tensor-core kernel.

    sw: SparseMatrix [M, K] (from cs.compress, on the device). x: device array [K, N],
    row- or column-major, same dtype as sw. Returns a CuPy [M, N] row-major array
    (`out` if given). Runs on the current CuPy stream without synchronizing.
    `info`, if a dict, receives what was chosen (config name, cache hit, compile time).
    """
    import cupy

    if not isinstance(sw, SparseMatrix):
        raise TypeError(f"sw must be a cutlass_sparse.SparseMatrix (from cs.compress), got {type(sw).__name__}")
    if sw.layout != FAMILY:
        raise ValueError(f"sw has metadata layout {sw.layout!r}; the {FAMILY} kernels read {FAMILY!r} metadata")
    if not sw.is_device:
        raise TypeError("sw holds host (numpy) arrays; call sw.to_device() or compress a cupy array")
    x = as_device_array(x, "x")
    if x.ndim != 2:
        raise ValueError(f"x must be 2-D [K, N], got shape {x.shape}")
    element = dtypes.name_of(sw.dtype)
    if x.dtype != sw.dtype:
        raise TypeError(f"x has dtype {x.dtype}, but sw is {sw.dtype}: both operands must have the same dtype")
    m, k = sw.shape
    if x.shape[0] != k:
        raise ValueError(f"x has {x.shape[0]} rows, but sw has K = {k} columns (x must be [K, N] = [{k}, N])")
    n = x.shape[1]
    device_id = x.device.id
    if sw.values.device.id != device_id:
        raise ValueError(f"x is on device {device_id} but sw is on device {sw.values.device.id}")
    element_out = element if out_dtype is None else dtypes.parse(out_dtype)
    if element_out not in (element, "f32"):
        raise ValueError(f"out_dtype {out_dtype!r} must be {element!r} (the input type) or 'f32'")
    np_out = dtypes.numpy_dtype(element_out)
    if n == 0:
        raise ValueError("x has N = 0 columns")

    fam = catalog.load(FAMILY)
    layout_b, ldb = _matrix_layout(x, "x", k, n)
    m_pad, k_stored = sw.padded_shape

    with cupy.cuda.Device(device_id):
        arch, sm_count = _device_facts(device_id)
        # -- output and source operands -------------------------------------------
        if out is not None:
            out = as_device_array(out, "out")
            if out.shape != (m, n) or out.dtype != np_out:
                raise ValueError(f"out must be [{m}, {n}] of dtype {np_out}, got {out.shape} {out.dtype}")
            if out.device.id != device_id:
                raise ValueError(f"out is on device {out.device.id}, x on device {device_id}")
            if _matrix_layout(out, "out", m, n)[0] != "row" and m > 1:
                raise ValueError("out must be row-major (C-contiguous rows); CUTLASS 2.x sparse kernels write row-major D")
        use_c = beta != 0.0
        if use_c:
            if c is None:
                raise ValueError("beta is non-zero but c is None")
            c = as_device_array(c, "c")
            if c.shape != (m, n) or c.dtype != np_out:
                raise ValueError(f"c must be [{m}, {n}] of dtype {np_out}, got {c.shape} {c.dtype}")
            if c.device.id != device_id:
                raise ValueError(f"c is on device {c.device.id}, x on device {device_id}")
        # Rows past M only exist in the padded buffers; the kernel runs on M_pad rows.
        direct_out = out is not None and m_pad == m and out.strides[1] == np_out.itemsize
        d = out if direct_out else cupy.empty((m_pad, n), dtype=np_out)
        ldd = _row_stride(d, n)
        if use_c:
            if m_pad != m or c.strides[1] != np_out.itemsize:
                c_full = cupy.zeros((m_pad, n), dtype=np_out)
                c_full[:m] = c
            else:
                c_full = c
            ldc = _row_stride(c_full, n)
        else:
            c_full, ldc = d, ldd

        # -- kernel choice --------------------------------------------------------
        item_out = np_out.itemsize
        aligns_c = [a for a in fam.alignments_c if a * item_out <= 16]
        alignment_c = min(
            _widest_alignment(aligns_c, d.data.ptr, item_out, ldd, n),
            _widest_alignment(aligns_c, c_full.data.ptr, item_out, ldc, n))
        if isinstance(config, str):
            config = catalog.find(config, FAMILY)
        tile_k = config.threadblock[2] if config is not None else None
        if tile_k is None:
            # choose() wants B's alignment; K padding may change x, so pick the tile first.
            probe = selection.choose(FAMILY, element, element_out, layout_b, fam.alignments_b[0],
                                     alignment_c, m_pad, n, k, sm_count)
            tile_k = probe.threadblock[2]
        k_eff = _cdiv(k, tile_k) * tile_k
        if k_eff != k:
            # mma.sp needs valid metadata for every K step, so the kernel runs over whole
            # tiles; the stored sparse operand is padded already, x gets zero rows.
            order = "C" if layout_b == "row" else "F"
            x_full = cupy.zeros((k_eff, n), dtype=x.dtype, order=order)
            x_full[:k] = x
            x, ldb = x_full, (n if layout_b == "row" else k_eff)
        contiguous_extent = n if layout_b == "row" else k_eff
        alignment_b = _widest_alignment(fam.alignments_b, x.data.ptr, x.dtype.itemsize, ldb, contiguous_extent)
        if alignment_b is None:
            raise ValueError(
                f"x (row-major [K, N] = {tuple(x.shape)}, leading dimension {ldb}, address "
                f"{x.data.ptr:#x}) is not aligned for the sparse kernels: a row-major x needs N and its "
                f"leading dimension even and a 4-byte aligned address; pass a column-major x "
                f"(e.g. cupy.asfortranarray(x)) or pad N")
        if config is None:
            config = selection.choose(FAMILY, element, element_out, layout_b, alignment_b,
                                      alignment_c, m_pad, n, k, sm_count)
        else:
            wanted = (element, element_out, layout_b)
            if (config.element, config.element_out, config.layout_b) != wanted:
                raise ValueError(f"config {config.name} is for {config.element}->{config.element_out} "
                                 f"with B {config.layout_b}, the problem needs {wanted}")
            if config.alignment_b > alignment_b or config.alignment_c > alignment_c:
                raise ValueError(f"config {config.name} needs alignment B {config.alignment_b} / C "
                                 f"{config.alignment_c}; the operands allow {alignment_b} / {alignment_c}")
        if k_stored < k_eff:
            raise ValueError(f"sw stores K = {k_stored}, less than the {k_eff} this kernel runs over")

        compiled = kernels.get(config, arch)
        loaded = runtime.load(compiled)

        # -- arguments and launch -------------------------------------------------
        tm, tn, _ = config.threadblock
        tiled = (_cdiv(m_pad, tm), _cdiv(n, tn), 1)
        log_tile = swizzle_log_tile(config.swizzle, tiled[1])
        tile = 1 << log_tile
        grid = (tiled[0] * tile, _cdiv(tiled[1], tile), tiled[2])
        block = arguments.new_block()
        fields = block[0]
        fields["a"], fields["e"] = sw.values.data.ptr, sw.metadata.data.ptr
        fields["b"], fields["c"], fields["d"] = x.data.ptr, c_full.data.ptr, d.data.ptr
        fields["lda"], fields["lde"] = k_stored // 2, sw.metadata_ld
        fields["ldb"], fields["ldc"], fields["ldd"] = ldb, ldc, ldd
        fields["m"], fields["n"], fields["k"] = m_pad, n, k_eff
        fields["grid_m"], fields["grid_n"], fields["grid_k"] = tiled
        fields["alpha"], fields["beta"] = alpha, beta
        loaded.launch(device_id, grid, block, cupy.cuda.get_current_stream().ptr)

        if info is not None:
            info.update(config=config.name, arch=arch, from_cache=compiled.from_cache,
                        compile_seconds=compiled.compile_seconds, grid=grid, k_padded=k_eff != k)
        if direct_out:
            return out
        if out is not None:
            out[...] = d[:m]
            return out
        return d[:m]


def swizzle_log_tile(swizzle: int, tiles_n: int) -> int:
    """GemmIdentityThreadblockSwizzle<N>::get_log_tile: the host must launch the grid it implies."""
    if swizzle >= 8 and tiles_n >= 6:
        return 3
    if swizzle >= 4 and tiles_n >= 3:
        return 2
    if swizzle >= 2 and tiles_n >= 2:
        return 1
    return 0
