"""Operand checks shared by every launch path: device arrays, layouts, output types,
epilogue and split-K options. Each rule a kernel relies on is checked here and reported
as a Python exception that names the argument (never a kernel fault or a silent wrong
answer)."""
from __future__ import annotations

import functools

import numpy as np

from . import dtypes
from .description import ACTIVATIONS

SPLIT_K_MODES = {"sm80": ("serial", "parallel"), "sm90": ("serial",)}


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


def matrix_layout(x, what: str) -> tuple[str, int]:
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


def check_same_device(array, what: str, device_id: int) -> None:
    if array.device.id != device_id:
        raise ValueError(f"{what} is on device {array.device.id}, but x is on device {device_id}")


def check_output_like(array, what: str, m: int, n: int, np_out, device_id: int):
    array = as_device_array(array, what)
    if array.shape != (m, n) or array.dtype != np_out:
        raise ValueError(f"{what} must be [{m}, {n}] of dtype {np_out}, got {array.shape} {array.dtype}")
    check_same_device(array, what, device_id)
    item = array.dtype.itemsize
    unit_columns = array.strides[1] == item or n == 1
    if not (unit_columns and (array.strides[0] >= n * item or m == 1) and array.strides[0] % item == 0):
        raise ValueError(f"{what} must be row-major: CUTLASS 2.x sparse kernels read C and write D row-major")
    return array


@functools.cache
def device_facts(device_id: int) -> tuple[str, int]:
    """(arch, SM count) of a device, asked once per device."""
    import cupy

    runtime = cupy.cuda.runtime
    cc = cupy.cuda.Device(device_id).compute_capability
    return f"sm_{cc}", runtime.deviceGetAttribute(runtime.cudaDevAttrMultiProcessorCount, device_id)


def row_stride(array, cols: int) -> int:
    """Leading dimension of a row-major 2-D array (single-row arrays may report any stride)."""
    return max(array.strides[0] // array.dtype.itemsize, cols)


def output_type(element: str, out_dtype) -> str:
    """D's element: the input type by default (int32 for int8), or one the kernels offer."""
    allowed = dtypes.outputs_for(element)
    element_out = allowed[0] if out_dtype is None else dtypes.parse(out_dtype)
    if element_out not in allowed:
        raise ValueError(f"out_dtype {out_dtype!r}: {element} inputs give one of {allowed}")
    return element_out


def check_activation(activation, leaky_slope) -> None:
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation {activation!r} is not one of {sorted(ACTIVATIONS)}")
    if not np.isfinite(leaky_slope):
        raise ValueError(f"leaky_slope must be finite, got {leaky_slope!r}")


def check_split_k(split_k, split_k_mode, family):
    if split_k is not None and (isinstance(split_k, bool) or not isinstance(split_k, (int, np.integer))
                                or split_k < 1):
        raise ValueError(f"split_k must be an integer >= 1, got {split_k!r}")
    if split_k_mode is not None and split_k_mode not in ("serial", "parallel"):
        raise ValueError(f"split_k_mode {split_k_mode!r} must be 'serial' or 'parallel'")
    if split_k_mode is not None and split_k_mode not in SPLIT_K_MODES[family]:
        raise ValueError(f"split_k_mode {split_k_mode!r} is not offered by the {family} family (it has "
                         f"{SPLIT_K_MODES[family]}: CUTLASS 3.x reduces K slices inside the GEMM kernel)")
    return (None if split_k is None else int(split_k)), split_k_mode


def check_int8(layout_b: str, n: int, element_out: str, activation: str, split_k, split_k_mode) -> None:
    if layout_b != "col":
        raise ValueError("x is row-major; int8 tensor cores read B K-major: pass a column-major x "
                         "(cupy.asfortranarray(x), or the transpose of a row-major [N, K] array)")
    if activation != "identity":
        raise ValueError(f"activation {activation!r} needs a floating-point output; int8 GEMMs give int32 "
                         f"or int8 (scaled by alpha and clamped)")
    if (split_k or 1) > 1 and (split_k_mode == "parallel" or element_out == "s8"):
        raise ValueError("int8 split-K: serial with an int32 output only (an int8 D would clamp the partial "
                         "sums; the parallel reduction sums float32 partials)")


def with_bias(bias, c, beta, m, n, np_out, device_id):
    """C for the epilogue with a bias folded in: bias broadcast to [M, N] (+ beta * c)."""
    import cupy

    bias = as_device_array(bias, "bias")
    check_same_device(bias, "bias", device_id)
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


def check_config_fits(config, element, element_out, layout_b, alignment_b, alignment_c) -> None:
    wanted = (element, element_out, layout_b)
    if (config.element, config.element_out, config.layout_b) != wanted:
        raise ValueError(f"config {config.name} is for {config.element}->{config.element_out} with "
                         f"B {config.layout_b}-major; the problem needs {wanted}")
    if config.alignment_b > alignment_b or config.alignment_c > alignment_c:
        raise ValueError(f"config {config.name} needs alignment B {config.alignment_b} / C "
                         f"{config.alignment_c}; the operands allow {alignment_b} / {alignment_c}")
