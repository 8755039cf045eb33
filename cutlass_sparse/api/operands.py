"""Operand checks shared by every launch path: device arrays, layouts, shapes, bias and C
(the call's options: options.py). Each rule a kernel relies on is checked here and reported
as a Python exception that names the argument (never a kernel fault or a silent wrong
answer)."""
from __future__ import annotations

from collections.abc import MutableMapping
from dataclasses import dataclass

import numpy as np

from .. import reference
from ..describe import dtypes
from ..describe.problem import Epilogue, Operand, Problem, alignment_class
from ..describe.problem import bias_by_vector, folded_c as folded_c_operand
from ..formats.matrices import SparseBatch, SparseMatrix
from ..launch import device
from . import interop
from .options import check_activation, check_int8, check_number, check_split_k, output_type

def as_device_array(x, what: str, caller: str = "matmul"):
    """A CuPy view of `x` (cupy array, __cuda_array_interface__ or DLPack object); never a copy.
    A host array (NumPy, a torch CPU tensor) or anything else is a TypeError naming `what`
    and the call (`caller`) that needs a device array."""
    import cupy

    if isinstance(x, cupy.ndarray):
        return x
    check_device_array(x, what, caller)
    if hasattr(x, "__cuda_array_interface__"):
        return cupy.asarray(x)
    return cupy.from_dlpack(x)


def check_device_array(x, what: str, caller: str = "matmul") -> None:
    """as_device_array's rule, without making a view: a TypeError naming `what` and
    `caller` for anything that is not a device array (nothing here touches CUDA)."""
    import cupy

    if isinstance(x, cupy.ndarray):
        return
    if isinstance(x, np.ndarray):
        raise TypeError(f"{what} is a numpy array in host memory; {caller} needs a device array "
                        f"(cupy.ndarray, or any __cuda_array_interface__ / DLPack GPU array): "
                        f"use cupy.asarray({what})")
    if interop.is_torch(x) and getattr(x, "is_cuda", None) is False:
        raise TypeError(f"{what} is a torch tensor on the CPU; {caller} needs a device array (a torch CUDA "
                        f"tensor, a cupy.ndarray, or any __cuda_array_interface__ / DLPack GPU array): "
                        f"use {what}.cuda()")
    if not (hasattr(x, "__cuda_array_interface__") or hasattr(x, "__dlpack__")) or isinstance(x, type):
        raise TypeError(f"{what} must be a device array (cupy.ndarray, a torch CUDA tensor or any "
                        f"__cuda_array_interface__ / DLPack GPU array), got {type(x).__name__}")


def matrix_layout(x) -> tuple[str, int] | None:
    """('row', ld) or ('col', ld) in elements for a 2-D device array with one unit stride;
    None for an array with none (the caller stages a copy)."""
    rows, cols = x.shape
    item = x.dtype.itemsize
    s0, s1 = x.strides
    if cols == 1 and s0 == item and rows > 1:
        return "col", rows      # a single column is both; column-major aligns on K
    if (s1 == item or cols == 1) and s0 % item == 0 and (s0 // item >= cols or rows == 1):
        return "row", max(s0 // item, cols)
    if (s0 == item or rows == 1) and s1 % item == 0 and (s1 // item >= rows or cols == 1):
        return "col", max(s1 // item, rows)
    return None


def _contiguous(array):
    """A row-major copy (a bit copy, so bf16 needs no CuPy arithmetic)."""
    import cupy

    return cupy.ascontiguousarray(array)


def _fortran(array):
    """A column-major copy (a bit copy)."""
    import cupy

    return cupy.asfortranarray(array)


def output_layout(array, family: str, n: int) -> tuple[str, int] | None:
    """How the kernels can write (or read, for C) an [M, N] array in place, as (layout,
    leading dimension): row-major; for sm90 also column-major (M contiguous), taken where
    the row-major reading of the array would not suit TMA (an [M, 1] column reads both
    ways). None: neither (the library computes into its own buffer and copies)."""
    item = array.dtype.itemsize
    layout = matrix_layout(array)
    if is_row_major(array):
        ld = row_stride(array, n)
        if family != "sm90" or layout is None or layout[0] == "row" or (ld * item) % 16 == 0 == (n * item) % 16:
            return "row", ld
    if family == "sm90" and layout is not None and layout[0] == "col":
        return layout
    return None


def output_operand(array, family: str, n: int) -> Operand | None:
    layout = output_layout(array, family, n)
    return None if layout is None else _operand(array, *layout)


def check_same_device(array, what: str, device_id: int) -> None:
    if array.device.id != device_id:
        raise ValueError(f"{what} is on device {array.device.id}, but x is on device {device_id}")


def check_output_like(array, what: str, m: int, n: int, np_out, device_id: int):
    array = as_device_array(array, what)
    if array.shape != (m, n) or array.dtype != np_out:
        raise ValueError(f"{what} must be [{m}, {n}] of dtype {np_out}, got {array.shape} {array.dtype}")
    check_same_device(array, what, device_id)
    return array


def is_row_major(array) -> bool:
    """Whether the kernels can read or write a 2-D array in place as row-major (C and D
    are row-major in both families); others are staged by the library."""
    m, n = array.shape
    item = array.dtype.itemsize
    s0, s1 = array.strides
    return (s1 == item or n == 1) and (s0 >= n * item or m == 1) and s0 % item == 0 and s0 > 0


def row_stride(array, cols: int) -> int:
    """Leading dimension of a row-major 2-D array (single-row arrays may report any stride)."""
    return max(array.strides[0] // array.dtype.itemsize, cols)


def with_bias(bias, c, beta, m, n, np_out, device_id, layout: str = "row"):
    """C for the epilogue with a bias folded in: bias broadcast to [M, N] (+ beta * c), in
    D's layout."""
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
    full = cupy.empty((m, n), dtype=np_out) if layout == "row" else cupy.empty((n, m), dtype=np_out).T
    full.view(bits)[...] = rows.view(bits)
    if c is None or beta == 0.0:
        return full
    summed = dtypes.from_float32(reference.to_float32(full) + float(beta) * reference.to_float32(c), np_out)
    return _contiguous(summed) if layout == "row" else _fortran(summed)


def bias_vector(bias, m: int, np_out, device_id: int):
    """A row bias ([M] or [M, 1], of the output dtype, as with_bias takes it) as the
    contiguous float32 [M] vector the sm90 scaled epilogue adds (converted on the current
    stream where it is not float32 already)."""
    import cupy

    rows = check_row_bias(bias, m, np_out, device_id).reshape(m)
    return cupy.ascontiguousarray(rows) if rows.dtype == np.float32 else dtypes.to_float32(rows)


def check_row_bias(bias, m: int, np_out, device_id: int):
    """A row bias as bias_vector takes it: [M] or [M, 1], of the output dtype, on the device."""
    bias = as_device_array(bias, "bias")
    check_same_device(bias, "bias", device_id)
    if bias.dtype != np_out:
        raise TypeError(f"bias has dtype {bias.dtype}; it must have the output dtype {np_out}")
    if bias.shape not in ((m,), (m, 1)):
        raise ValueError(f"bias of shape {bias.shape} must be [{m}] or [{m}, 1] (one per output row)")
    return bias


def bias_vector_of(call: GemmCall):
    """The float32 bias vector of a call whose bias rides as one; None for any other call."""
    p = call.problem
    if call.bias is None or p.epilogue.scales == "none":
        return None
    return bias_vector(call.bias, p.m, dtypes.numpy_dtype(p.element_out), p.device_id)


def row_bias_scales(vector) -> tuple[int, int, int]:
    """The scaled epilogue's (row scales, column scales, row bias) pointers for a bias
    vector alone (a null scale reads as 1)."""
    return 0, 0, vector.data.ptr


def check_sparse(sw, family):
    """sw and the family that runs it (default: the one sw was compressed for)."""
    if not isinstance(sw, (SparseMatrix, SparseBatch)):
        raise TypeError(f"sw must be a cutlass_sparse.SparseMatrix (from cs.compress), got {type(sw).__name__}")
    family = family or sw.layout
    if family not in ("sm80", "sm90"):
        raise ValueError(f"family {family!r} must be 'sm80' or 'sm90'")
    if sw.layout != family:
        raise ValueError(f"sw is compressed in the {sw.layout!r} layout; the {family} kernels read "
                         f"{family!r} metadata: convert with sw.to_layout({family!r}) or pass family={sw.layout!r}")
    if not sw.is_device:
        raise TypeError("sw holds host (numpy) arrays; call sw.to_device() or compress a cupy array")
    return family


def check_x(sw, x, out_dtype, dims: tuple[int, ...] = (2,)) -> tuple[int, int, str, str]:
    """x against sw (its dimensions, dtype, K, N, device) and the output type: (M, N, element,
    element_out). dims: 2 for one GEMM; (2, 3) where a batch of x is taken."""
    if x.ndim not in dims:
        raise ValueError(f"x must be 2-D [K, N] (or 3-D [batch, K, N]), got shape {x.shape}")
    if x.dtype != sw.dtype:
        raise TypeError(f"x has dtype {x.dtype}, but sw is {sw.dtype}: both operands must have the same dtype")
    m, k = sw.shape
    k_rows, n = x.shape[-2:]
    weights = sw.batch if isinstance(sw, SparseBatch) else None
    if x.ndim == 3 and weights is not None and x.shape[0] != weights:
        raise ValueError(f"x of shape {x.shape} must be [{weights}, K, N] (one per matrix of sw) or [K, N]")
    if (x.shape[0] if x.ndim == 3 else weights) == 0:
        raise ValueError("x has a batch of 0")
    if k_rows != k:
        if x.ndim == 2:
            raise ValueError(f"x has {k_rows} rows, but sw has K = {k} columns (x must be [K, N] = [{k}, N])")
        raise ValueError(f"x has {k_rows} rows per batch, but sw has K = {k} columns (x must be [batch, {k}, N])")
    if n == 0:
        raise ValueError("x has N = 0 columns")
    check_same_device(sw.values, "sw", x.device.id)
    element = dtypes.operand_name(sw.dtype)
    return m, n, element, output_type(element, out_dtype)


def check_call(sw, x, *, family: str, out=None, alpha=1.0, beta=0.0, c=None, bias=None, activation="identity",
               leaky_slope=0.01, out_dtype=None, split_k=None, split_k_mode=None, workspace=None,
               info=None) -> None:
    """cs.matmul's rules that need no GPU, checked before anything touches CUDA (sw and
    family by check_sparse, x made a device array, before this): x's shape and dtype
    against sw's, the options, and the types and shapes of out, c, bias and workspace.
    gemm_call checks x the same way (check_x) with what needs the device."""
    m, n, element, element_out = check_x(sw, x, out_dtype, dims=(2, 3))
    np_out = dtypes.numpy_dtype(element_out)
    weights = sw.batch if isinstance(sw, SparseBatch) else None
    batch = x.shape[0] if x.ndim == 3 else weights
    check_number(alpha, "alpha")
    check_number(beta, "beta")
    check_activation(activation, leaky_slope)
    split_k, split_k_mode = check_split_k(split_k, split_k_mode, family)
    if batch is not None and family == "sm80" and split_k not in (None, 1):
        raise ValueError("split_k cannot be combined with a batched x (the batch takes the grid's third dimension)")
    if element == "s8":
        check_int8(element_out, activation, split_k, split_k_mode)
    if info is not None and not isinstance(info, MutableMapping):
        raise TypeError(f"info must be a dict (it receives what was chosen) or None, got {type(info).__name__}")
    if beta != 0.0 and c is None:
        raise ValueError("beta is non-zero but c is None")
    if out is None and c is None and bias is None and workspace is None:
        return
    shape = (m, n) if batch is None else (batch, m, n)
    for what, array, shapes in (("out", out, (shape,)), ("c", c if beta != 0.0 else None, tuple({(m, n): 0, shape: 0})),
                                ("bias", bias, ((m,), (m, 1), (1, n))), ("workspace", workspace, None)):
        if array is None:
            continue
        check_device_array(array, what)
        if shapes is None or not hasattr(array, "shape") or not hasattr(array, "dtype"):
            continue   # a device array of another kind: checked once it is a CuPy view
        if what == "bias":   # with_bias's rules and messages
            if array.dtype != np_out:
                raise TypeError(f"bias has dtype {array.dtype}; it must have the output dtype {np_out}")
            if tuple(array.shape) not in shapes:
                raise ValueError(f"bias of shape {tuple(array.shape)} must be [{m}] or [{m}, 1] (one per output row) "
                                 f"or [1, {n}] (one per column)")
        elif tuple(array.shape) not in shapes or array.dtype != np_out:
            wanted = " or ".join(str(list(s)) for s in shapes)
            raise ValueError(f"{what} must be {wanted} of dtype {np_out}, got {tuple(array.shape)} {array.dtype}")


@dataclass(frozen=True)
class GemmCall:
    """One checked 2-D call: its Problem and the arrays it runs on (C with a bias folded in)."""

    problem: Problem
    x: object                    # the caller's x, or a contiguous copy when it has no unit stride
    out: object                  # what the kernel writes: the caller's out, or None (library allocates)
    c: object
    bias: object = None
    beta_c: float = 0.0          # the caller's beta on c, when a bias is folded in with it
    out_target: object = None    # a caller's out the kernel cannot write in place: copied into

    def finish(self, result):
        """The call's answer: the result, copied into the caller's out where it was staged."""
        if self.out_target is None:
            return result
        self.out_target[...] = result
        return self.out_target


def _operand(array, layout: str, ld: int) -> Operand:
    return Operand(layout, ld, alignment_class(array.data.ptr))


def gemm_call(sw, x, *, family: str, out=None, alpha=1.0, beta=0.0, c=None, bias=None, activation="identity",
              leaky_slope=0.01, out_dtype=None, split_k=None, split_k_mode=None, bias_in_c: bool = False) -> GemmCall:
    """Check a 2-D call's operands and describe it as a Problem. x is a device array.
    bias_in_c: fold a bias into C even where it could ride as a vector (cs.plan folds
    once and launches with C)."""
    m, n, element, element_out = check_x(sw, x, out_dtype)
    k = sw.shape[1]
    device_id = x.device.id
    np_out = dtypes.numpy_dtype(element_out)
    out_operand = c_operand = out_target = None
    if out is not None:
        out = check_output_like(out, "out", m, n, np_out, device_id)
        out_operand = output_operand(out, family, n)
        if out_operand is None:   # strided, or column-major for sm80: a library buffer, then copied in
            out, out_target = None, out
    layout_c = "row" if out_operand is None else out_operand.layout
    if beta != 0.0:
        if c is None:
            raise ValueError("beta is non-zero but c is None")
        c = check_output_like(c, "c", m, n, np_out, device_id)
        c_operand = output_operand(c, family, n)
        if c_operand is None or c_operand.layout != layout_c:   # C is read in D's layout
            c = _contiguous(c) if layout_c == "row" else _fortran(c)
            c_operand = output_operand(c, family, n)
    check_activation(activation, leaky_slope)
    layout = matrix_layout(x)
    if layout is None:   # no unit stride along either dimension: one contiguous copy
        x = _contiguous(x)
        layout = matrix_layout(x)
    layout_b, ldb = layout
    split_k, split_k_mode = check_split_k(split_k, split_k_mode, family)
    if element == "s8":
        check_int8(element_out, activation, split_k, split_k_mode)
    bias_kind, beta_c, scales = "none", beta, "none"
    if bias is not None:
        bias = as_device_array(bias, "bias")
        bias_kind = "columns" if bias.shape == (1, n) and m != 1 else "rows"
        if bias_kind == "rows" and not bias_in_c and bias_by_vector(
                family, element, Epilogue(beta=float(beta), activation=activation), split_k):
            scales = "row_col"   # a float32 vector the epilogue adds: no C (bias_vector)
            check_row_bias(bias, m, np_out, device_id)
        else:   # folded into a C the library allocates: [M, N], ld N
            c_operand, beta = folded_c_operand(layout_c, m, n), 1.0
    x_operand = _operand(x, layout_b, ldb)
    arch, sm_count = device.facts(device_id)
    problem = Problem(family, m, n, k, element, element_out, x_operand, out_operand, c_operand,
                      Epilogue(float(alpha), float(beta), activation, float(leaky_slope), bias_kind, scales),
                      split_k, split_k_mode, device_id, arch, sm_count)
    return GemmCall(problem, x, out, c, bias, beta_c, out_target)


def folded_c(call: GemmCall):
    """The C a call runs with: the caller's, or the bias broadcast to [M, N] (+ beta * c);
    None where the bias rides as a vector (bias_vector_of)."""
    if call.bias is None or call.problem.epilogue.scales != "none":
        return call.c
    p = call.problem
    return with_bias(call.bias, call.c, call.beta_c, p.m, p.n, dtypes.numpy_dtype(p.element_out), p.device_id,
                     p.c.layout)
